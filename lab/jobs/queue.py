"""The class's queue, a part of the job manager with its own state: queued jobs in submission order and whose turn
is next, fair across students. Round-robin over students (in the order each first submitted), first come first
served within one (:func:`lab.modelled.scheduling.fair_order`), so a student who queues ten jobs cannot starve the
others. It starts nothing and reads no store: the manager asks it, under the manager's lock, which job is next."""

from __future__ import annotations

from dataclasses import dataclass

from lab.modelled.scheduling import fair_order


@dataclass(frozen=True)
class Job:
    """A handle on a submitted job: its run id, and its launcher's pid once it started."""

    run_id: str
    pid: int | None = None


class FairQueue:
    """Queued (run id, student) pairs, the student whose job started last, every student in the order of their
    first job (whose turn is next), and how many processes each queued job needs (known since its submit)."""

    def __init__(self):
        self.items: list[tuple[str, str]] = []
        self.last_owner: str | None = None
        self.ring: list[str] = []
        self.tasks: dict[str, int] = {}

    def add(self, run_id: str, owner: str, tasks: int | None = None) -> None:
        self.items.append((run_id, owner))
        if tasks is not None:
            self.tasks[run_id] = tasks
        if owner not in self.ring:
            self.ring.append(owner)

    def order(self) -> list[tuple[str, str]]:
        """The queued (run id, student) pairs in the order they will be considered."""
        return fair_order(self.items, owner_of=lambda q: q[1], after=self.last_owner, ring=self.ring)

    def owner(self, run_id: str) -> str | None:
        return next((o for r, o in self.items if r == run_id), None)

    def owners(self) -> set[str]:
        return {o for _, o in self.items}

    def remove(self, run_id: str) -> bool:
        """Take ``run_id`` out of the queue (stopped, deleted, or no longer queued); whether it was in it."""
        before = len(self.items)
        self.items = [q for q in self.items if q[0] != run_id]
        self.tasks.pop(run_id, None)
        return len(self.items) < before

    def take(self, run_id: str, owner: str) -> None:
        """``run_id`` of ``owner`` starts now: out of the queue, and the next turn is the next student's."""
        self.remove(run_id)
        self.last_owner = owner

    def __contains__(self, run_id: str) -> bool:
        return any(r == run_id for r, _ in self.items)

    def __len__(self) -> int:
        return len(self.items)
