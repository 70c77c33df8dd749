"""A page's desk: what one session asks of the server's job manager, through its page model.

A page holds a :class:`Desk` (the server's one job manager and this session's owner id) and calls its
methods; it never calls the manager itself, so what a page may do to the queue is read in one place.
Every method that changes a run names the session's owner, and the manager checks it: a student stops
or deletes their own runs, the teacher any.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Desk:
    jm: Any  # lab.jobs.manager.JobManager
    owner: str

    def submit(self, sc: Any, name: str) -> list:
        """Queue one run of ``sc``: [its job]."""
        return [self.jm.submit(sc, name=name, owner=self.owner)]

    def submit_many(self, items: Sequence) -> list:
        """Queue (scenario, name) items at once, in the fair queue's turn: their jobs."""
        return self.jm.submit_many(items, owner=self.owner)

    def stop(self, run_id: str) -> None:
        self.jm.stop(run_id, self.owner)

    def delete(self, run_ids: Sequence[str]) -> None:
        self.jm.delete(run_ids, self.owner)

    def running(self) -> int:
        """How many jobs run on the server now (anyone's)."""
        return len(self.jm.jobs.ids())


__all__ = ["Desk"]
