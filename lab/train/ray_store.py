"""The run store of a job's ranks on a Ray cluster: ranks on other machines cannot open the server's SQLite file, so
their writes and heartbeats go to a :class:`StoreWriter` actor on the launcher's node, which owns the run store for
the job; a rank holds a :class:`RemoteStore` in its place."""
from __future__ import annotations

import os

import ray

from lab.errors import LabError
from lab.store.runs import RunStore

#: What a rank may do to the run store through its writer: the calls the rank code makes, nothing that
#: deletes a run or changes who owns it.
RANK_CALLS = frozenset({"add_metric_rows", "add_metrics", "job_records.add_plan_events", "job_records.add_event",
                        "checkpoint_dir", "discard_after", "merge_info", "set_status", "update_run", "get_run",
                        "find_run", "create_run", "status", "job_records.last_event"})
#: The run store's small stores a rank reaches through its writer (``store.job_records.add_event``).
_PARTS = frozenset(name.split(".")[0] for name in RANK_CALLS if "." in name)

@ray.remote(num_cpus=0, max_restarts=0)
class StoreWriter:
    """The run store for a job's ranks, on the launcher's node, one call at a time (SQLite's own rule);
    also the latest heartbeat of every rank, which the launcher reads. A spare one of the pool is started
    before its job, with no store, and :meth:`open` gives it the job's."""

    def __init__(self, db: str | None = None):
        self.store = RunStore(db) if db else None
        self.beats: dict[int, dict] = {}

    def open(self, db: str) -> bool:
        self.store, self.beats = RunStore(db), {}
        return True

    def where(self) -> dict:
        return {"pid": os.getpid()}

    def call(self, name: str, args: tuple, kwargs: dict):
        if name not in RANK_CALLS:
            raise LabError(f"a rank may not call {name} on the run store", where="ray")
        target = self.store
        for part in name.split("."):
            target = getattr(target, part)
        return target(*args, **kwargs)

    def beat(self, rank: int, doc: dict) -> None:
        self.beats[rank] = doc

    def latest(self) -> dict[int, dict]:
        return dict(self.beats)


class RemoteStore:
    """What a rank holds instead of a :class:`RunStore`: every call goes to the job's writer and waits
    for its answer (the order of a rank's writes is kept)."""

    def __init__(self, writer, part: str = ""):
        self._writer, self._part = writer, part

    def __getattr__(self, name: str):
        if not self._part and name in _PARTS:
            return RemoteStore(self._writer, name + ".")
        name = self._part + name
        if name not in RANK_CALLS:
            raise AttributeError(name)
        return lambda *args, **kwargs: ray.get(self._writer.call.remote(name, args, kwargs))


__all__ = ["RANK_CALLS", "StoreWriter", "RemoteStore"]
