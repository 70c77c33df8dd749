"""Training jobs as OS processes: submit, queue fairly, place on this machine's cores, watch, stop,
release, and notice the ones that vanished -- the task-level design's job lifecycle, for real.

A job is a launcher (:mod:`lab.train.launcher`) started in a new session with the job's
:class:`lab.train.launcher.JobSpec` (forked by the warm starter, or ``python -m lab.train --spec -``
when the starter is not ready), so the launcher leads a process group holding every worker: one
``killpg`` ends all of it, and the group recorded in the run store names the job's processes. Its lifecycle goes to the run store's ``job_events`` table:

``submitted`` (queued, with its owner) -> ``parsed`` (task manager, parameter server, compute workers,
the topology's resource groups; :func:`lab.train.launcher.parse_job`) -> ``scheduled`` (which local
cores hold which rank, after how long in the queue) -> ``started`` (the launcher created the worker
processes) -> ``data`` (split and shipped) -> ``running`` -> [``fault`` / ``alarm`` / ``restart``]
-> ``ended`` -> ``released`` (processes reaped, slots freed).

Job processes (launcher and workers) run as background work (LAB_JOB_NICE, LAB_JOB_IDLE), so the
app's pages stay responsive while the cores train.

A :class:`JobManager` keeps one queue for every session of the app (pages share one manager per
run store through :func:`shared`). It starts at most ``capacity`` jobs at a time (default 1, for a
2-core server), and only where its ranks fit on the local resource groups (one per core,
:func:`lab.jobs.slots.local_groups`) under the placement policy (uniform or resource-state). The
queue is fair across owners (one browser session = one owner): round-robin over owners, first
come first served within one, so a session that queues ten jobs cannot starve the others.

Thirty students share one server, so a job belongs to the student who submitted it (its owner id,
kept in the run's info; :mod:`lab.jobs.access` says how a browser keeps it across reloads):
:meth:`JobManager.stop`, :meth:`JobManager.release` and :meth:`JobManager.delete` take the acting
owner and refuse another's run with a LabError, unless the actor is the teacher (an owner that signed
in with LAB_TEACHER_TOKEN, :meth:`JobManager.sign_in_teacher`). One student has at most
LAB_MAX_ACTIVE_PER_OWNER jobs queued or running. The store records who stopped what: the owner id,
or "teacher".

A job's end is known from its launcher's process (its pid and start time), whoever started it: the
warm starter reports the exit code of a launcher it forked, and when that starter died before it
could, the launcher's process being gone is enough. Queued jobs are in the store with the process
that queued them; a manager that starts after that process ended (a server restart) queues them
again, in their order.

A launcher killed with SIGKILL can record nothing, so :meth:`JobManager.sweep` (run from the pages'
polling and every LAB_SWEEP_S seconds on a timer) finds runs marked running whose launcher is gone
(its pid, creation time, host and boot in the store; :func:`lab.train.launcher_record.launcher_gone`), marks
them interrupted, waits for the rest of its process group to exit, then removes their scratch folder.

Nothing here waits for a child while holding the manager's lock: a job's slots are taken under it,
and its launcher is started after it is let go.
"""
from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterable

from lab import settings
from lab.errors import LabError
from lab.jobs.access import (
    TEACHER,
    Roster,
    can_manage,
    is_teacher,
    teacher_token,
)
from lab.jobs.actions import Actions
from lab.jobs.classroom import Classroom
from lab.jobs.lifecycle import Lifecycle
from lab.jobs.limits import Limits
from lab.jobs.queue import FairQueue, Job
from lab.jobs.slots import SlotBook, cluster_group, local_groups
from lab.modelled.scheduling import POLICIES, fair_order
from lab.processes import as_pid
from lab.store.runs import FINISHED, RunStore
from lab.train.warm import shared_starter

log = logging.getLogger("lab.jobs")


class JobManager(FairQueue, Lifecycle, Actions):
    """The class server's jobs: the queue (:class:`lab.jobs.queue.FairQueue`), their lifecycle and recovery
    (:class:`lab.jobs.lifecycle.Lifecycle`) and who may act on them (:class:`lab.jobs.actions.Actions`); the class
    the teacher opens is its :attr:`classroom` (:class:`lab.jobs.classroom.Classroom`)."""

    def __init__(self, store_path: str | os.PathLike | None = None, capacity: int = 1, poll_s: float = 0.2,
                 policy: str = "uniform", cpus: Iterable[int] | None = None, slots_per_cpu: int | None = None,
                 warm: bool | None = None, cluster: str | None = None):
        if capacity < 1:
            raise LabError(f"capacity must be at least 1 (got {capacity})", where="jobs")
        if policy not in POLICIES:
            raise LabError(f"unknown placement policy {policy!r}; choose one of {list(POLICIES)}", where="jobs")
        self.store = RunStore(store_path)
        # With a Ray cluster (LAB_RAY_ADDRESS) the jobs' ranks run there: Ray's placement groups decide
        # where and hold a job until all of it fits, so the book only bounds how many jobs are handed over.
        self.cluster = settings.ray_address() if cluster is None else cluster
        self.capacity = max(1, settings.integer("LAB_RAY_JOBS")) if self.cluster else capacity
        self._placed: set[str] = set()  # cluster jobs whose ranks have started
        self.poll_s = poll_s
        self.policy = policy
        self.book = SlotBook([cluster_group(self.capacity, settings.integer("LAB_JOB_MAX_PROCS"))] if self.cluster
                             else local_groups(cpus, slots_per_cpu))
        self.started_at = time.time()
        self._queue: list[tuple[str, str]] = []  # (run id, owner), in submission order
        self._last_owner: str | None = None
        self._ring: list[str] = []  # every owner seen, in order of first submission: whose turn is next
        self._running: dict[str, subprocess.Popen] = {}
        self._started: dict[str, float] = {}  # run id -> when it started (time.monotonic)
        self._yielded: set[str] = set()  # running jobs past their slice that yield to another student's job
        self._owners: dict[str, str] = {}  # running run id -> its owner
        self.limits = Limits.from_settings()
        self._tasks: dict[str, int] = {}  # processes of each queued job, known since its submit
        self._logs: dict[str, object] = {}  # a cold launcher's log file, closed when it ends
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._closed = False
        # run id -> what waits until its last process is gone (slots, scratch folder, since when)
        self._draining: dict[str, dict] = {}
        self._suspects: dict[str, float] = {}  # run id -> first sweep that found its process gone
        self._last_sweep = 0.0
        self._sweeper: threading.Thread | None = None
        self.roster = Roster()  # the owners that signed in as the teacher
        self.classroom = Classroom(self.store, self.roster, self.stop)
        self._adopted: list[str] = []  # queued runs taken over at the start from a process that ended
        # Runs a dead manager left running, whose launcher lives on: they hold cores until they end, so they
        # count against the capacity as this manager's own do.
        self._orphans: set[str] = set()
        self.failures: list[tuple[float, str]] = []  # the scheduler's and the sweeper's last errors
        # The warm starter (lab.train.warm), one per process: the app starts it when it starts, and the
        # first submit or warm_up() otherwise; jobs fork from it once it has loaded torch and the data.
        self.starter = shared_starter() if (settings.warm_starts() if warm is None else warm) else None

    # ----- folders -----------------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        d = self.store.data_dir() / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def log_path(self, run_id: str) -> Path:
        """The launcher's log (the workers' logs are in :meth:`worker_logs`)."""
        return self.store.data_dir() / "logs" / f"{run_id}.log"

    def worker_logs(self, run_id: str) -> dict[int, Path]:
        """rank -> its log file (every attempt appended)."""
        folder = self.store.data_dir() / "logs" / run_id
        out = {}
        for f in folder.glob("rank*.log") if folder.exists() else []:
            k = f.stem[4:]
            if k.isdigit():
                out[int(k)] = f
        return dict(sorted(out.items()))

    # ----- watching ----------------------------------------------------------------------------
    def status(self, run_id: str) -> str:
        return self.store.status(run_id)

    def pid(self, run_id: str) -> int | None:
        with self._lock:
            p = self._running.get(run_id)
        if p is not None:
            return p.pid
        try:
            return as_pid(self.store.get_run(run_id)["pid"])
        except LabError:
            return None

    def queued(self) -> list[str]:
        """Queued run ids in the order they will be considered (fair across owners)."""
        with self._lock:
            return [rid for rid, _ in fair_order(self._queue, owner_of=lambda q: q[1], after=self._last_owner,
                                                 ring=self._ring)]

    def queue_position(self, run_id: str) -> int | None:
        """1 = next to start; None when the run is not waiting in this manager's queue."""
        order = self.queued()
        return order.index(run_id) + 1 if run_id in order else None

    def queue_info(self, run_id: str) -> dict | None:
        """Where a queued run stands, for its page: its place (1 = next), the queued jobs ahead and the running
        jobs, each with whether it is the same student's (no other id is given out), how long a running one
        has run and whether it yields; the slice after which a job yields, and whether this run's student has
        a job running (then this one waits its turn rather than start beside). None when it is not queued here."""
        with self._lock:
            order = fair_order(self._queue, owner_of=lambda q: q[1], after=self._last_owner, ring=self._ring)
            mine = next((o for r, o in order if r == run_id), None)
            if mine is None:
                return None
            pos = [r for r, _ in order].index(run_id) + 1
            now = time.monotonic()
            running = [{"run_id": r, "yours": self._owners.get(r) == mine, "elapsed": now - self._started.get(r, now),
                        "yielded": r in self._yielded} for r in self._running]
            return {"position": pos, "ahead": [{"run_id": r, "yours": o == mine} for r, o in order[:pos - 1]],
                    "running": running, "capacity": self.capacity, "slice_s": settings.number("LAB_SLICE_S"),
                    "student_running": any(x["yours"] for x in running)}

    def owner_of(self, run_id: str) -> str | None:
        with self._lock:
            for rid, owner in self._queue:
                if rid == run_id:
                    return owner
        try:
            return self.store.get_run(run_id)["info"].get("owner")
        except LabError:
            return None

    def running(self) -> list[str]:
        with self._lock:
            return list(self._running)

    def slots(self) -> dict[str, dict[str, list[str]]]:
        """run id -> local group -> slots it holds."""
        with self._lock:
            return {k: dict(v) for k, v in self.book.held.items()}

    def wait(self, run_id: str, timeout: float = 300.0) -> str:
        """Block until the run is finished (or ``timeout`` seconds pass); returns its status."""
        deadline = time.monotonic() + timeout
        while True:
            self._schedule()
            st = self.store.status(run_id)
            with self._lock:
                ours = run_id in self._running
            if st in FINISHED and not ours:
                return st
            if time.monotonic() > deadline:
                return st
            time.sleep(0.1)

    def adopted(self) -> list[str]:
        """The queued runs this manager took over at its start from a process that had ended."""
        return list(self._adopted)

    def shutdown(self, stop_running: bool = True) -> None:
        with self._lock:
            queued = [q[0] for q in self._queue]
            running = list(self._running)
        for rid in queued:
            self._stop(rid, "shutdown", {"by": "shutdown"})
        if stop_running:
            for rid in running:
                self._stop(rid, "shutdown", {"by": "shutdown"})
        self._closed = True  # the warm starter is the process's, not this manager's: it stays


# ----- the one manager of this process ----------------------------------------------------------


_SHARED: dict[str, JobManager] = {}
_SHARED_LOCK = threading.Lock()


def shared(store_path: str | os.PathLike | None = None, **kw) -> JobManager:
    """The one JobManager of this process for a run store (every browser session uses it; pages
    reach it through ``ui.job_manager``). The first call marks runs left by an earlier process as
    interrupted and starts its sweeper (dead launchers found every LAB_SWEEP_S seconds). Capacity
    from LAB_JOB_CAPACITY (default 1)."""
    key = str(Path(store_path if store_path is not None else settings.db_path()).resolve())
    with _SHARED_LOCK:
        jm = _SHARED.get(key)
        if jm is None:
            kw.setdefault("capacity", max(1, settings.integer("LAB_JOB_CAPACITY")))
            jm = _SHARED[key] = JobManager(key, **kw)
            jm.mark_interrupted()
            jm.start_sweeper()
            jm.warm_up()
        return jm


__all__ = ["Job", "JobManager", "shared",
           "TEACHER", "is_teacher", "can_manage", "teacher_token"]
