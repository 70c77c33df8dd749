"""The jobs a manager started and follows, a part of the job manager with its own state: each one's launcher
handle, its student, when it started, whether it yielded its slice to a waiting student, and on a Ray cluster
whether its ranks have started there."""

from __future__ import annotations

import logging
import os
import time

from lab.jobs.launch import Launched

log = logging.getLogger("lab.jobs")

#: Seconds a job handed to the Ray cluster may wait there before no further job is handed over until it started.
CLUSTER_PATIENCE_S = 5.0


class RunningJobs:
    """run id -> its :class:`lab.jobs.launch.Launched` handle, with what the queue's turns need to know of it."""

    def __init__(self):
        self.handles: dict[str, Launched] = {}
        self.since: dict[str, float] = {}  # when it started (time.monotonic)
        self.yielded: set[str] = set()  # past their slice, yielding to another student's job
        self.owners: dict[str, str] = {}
        self.placed: set[str] = set()  # cluster jobs whose ranks have started

    def __contains__(self, run_id: str) -> bool:
        return run_id in self.handles

    def __len__(self) -> int:
        return len(self.handles)

    def ids(self) -> list[str]:
        return list(self.handles)

    def get(self, run_id: str) -> Launched | None:
        return self.handles.get(run_id)

    def begin(self, run_id: str, owner: str, handle: Launched) -> None:
        """``run_id`` of ``owner`` holds its slots from now (its launcher is still being started)."""
        self.handles[run_id], self.owners[run_id], self.since[run_id] = handle, owner, time.monotonic()

    def forget(self, run_id: str) -> None:
        self.handles.pop(run_id, None)
        self.since.pop(run_id, None)
        self.yielded.discard(run_id)
        self.owners.pop(run_id, None)
        self.placed.discard(run_id)

    def fresh(self) -> list[str]:
        """The running jobs that have not yielded their slice."""
        return [r for r in self.handles if r not in self.yielded]

    def students(self) -> set[str]:
        return {self.owners.get(r) for r in self.handles}

    def overtime(self, over_time, now: float) -> list[str]:
        """The jobs past the teacher's time limit (``over_time(seconds)``), each returned once."""
        out = [rid for rid, t0 in self.since.items() if over_time(now - t0)]
        for rid in out:
            self.since.pop(rid, None)
        return out

    def yield_long(self, store, waiting: set[str], now: float, slice_s: float) -> None:
        """A job that has run longer than its slice while a student with no job running waits (``waiting``: the
        queued jobs' students) yields: it drops to the lowest priority (nice 19, its whole process group) and the
        waiting job may start beside it."""
        if not waiting - self.students():
            return
        for rid, p in self.handles.items():
            if rid in self.yielded or p.pid is None or now - self.since.get(rid, now) < slice_s:
                continue
            self.yielded.add(rid)
            try:
                os.setpriority(os.PRIO_PGRP, p.pid, 19)
            except OSError as exc:  # gone meanwhile, or not ours to renice: it still shares the cores
                log.info("could not lower the priority of job %s: %s", rid, exc)
            store.job_records.add_event(rid, "yielded", detail={"after_s": round(now - self.since[rid], 1),
                                                     "slice_s": slice_s, "nice": 19})

    def cluster_is_behind(self, store, now: float, waiting_max: int) -> bool:
        """Whether the Ray cluster has ``waiting_max`` jobs handed over and not yet started, or one of them has
        waited there for CLUSTER_PATIENCE_S seconds. Ray places waiting placement groups in no fixed order (one
        that failed to fit retries later, and a newer one can take the room first), so a job that waits stops the
        hand-over until it started: no job waits behind an endless stream of later ones."""
        waiting = []
        for rid in self.handles:
            if rid not in self.placed:
                if store.job_records.last_event(rid, "started") is None:
                    waiting.append(now - self.since.get(rid, now))
                else:
                    self.placed.add(rid)
        return len(waiting) >= max(1, waiting_max) or max(waiting, default=0) > CLUSTER_PATIENCE_S

    def seen_by(self, owner: str | None, now: float) -> list[dict]:
        """The running jobs as a queued job's student sees them: whether each is theirs (no other id is given
        out), how long it has run and whether it yields."""
        return [{"run_id": r, "yours": self.owners.get(r) == owner, "elapsed": now - self.since.get(r, now),
                 "yielded": r in self.yielded} for r in self.handles]
