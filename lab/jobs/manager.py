"""Training jobs as OS processes: submit, queue fairly, place on this machine's cores, watch, stop,
release, and notice the ones that vanished -- the task-level design's job lifecycle, for real.

A job is a launcher (:mod:`lab.train.launcher`) started in a new session with the job's
:class:`lab.train.launcher.JobSpec` (forked by the warm starter, or ``python -m lab.train --spec -``
when the starter is not ready), so the launcher leads a process group holding every worker: one
``killpg`` ends all of it, and the group recorded in the run store names the job's processes. Its lifecycle goes to the run store's ``stages`` table:

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
(its pid, creation time, host and boot in the store; :func:`lab.train.launcher.launcher_gone`), marks
them interrupted, waits for the rest of its process group to exit, then removes their scratch folder.

Nothing here waits for a child while holding the manager's lock: a job's slots are taken under it,
and its launcher is started after it is let go.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from lab import processes, settings
from lab.errors import LabError
from lab.jobs.access import (
    ANONYMOUS,
    TEACHER,
    Roster,
    can_manage,
    check_manage,
    delete_runs,
    is_teacher,
    teacher_token,
)
from lab.jobs.limits import Limits
from lab.jobs.slots import SlotBook, cluster_group, local_groups, rank_cpus
from lab.modelled.scheduling import POLICIES, fair_order, place
from lab.processes import STOP_GRACE_S, as_pid, end_group, signal_name
from lab.scenario.document import Scenario
from lab.scenario.text import RUN_NAME_MAX, check_name
from lab.settings import ROOT, job_nice
from lab.store.runs import ACTIVE, FINISHED, RunStore
from lab.train.launcher import (
    JobSpec,
    launcher_gone,
    parse_job,
    preflight,
    processes_of,
    remove_scratch,
    stale_after,
    world_size,
)
from lab.train.fork import PopenLike
from lab.train.warm import shared_starter

DRAIN_S = 10.0  # workers of a dead launcher get this long to exit before they are killed
LIMIT = "limit"  # who stopped a job that ran past the time limit

log = logging.getLogger("lab.jobs")


def _this_process() -> dict:
    """This process as the store records it beside a queued run, so that a later manager can tell
    whether the one that queued it still runs."""
    return processes.identity()


def _gone(process: dict | None) -> bool:
    """Whether the process recorded by :func:`_this_process` has ended (after a reboot: every one)."""
    return not processes.still_runs(process)


def _alive_since(pid, t: float) -> bool:
    """The process of a run without a launcher record (rank 0 under torchrun, which created the
    run): alive while a process ``pid`` runs the lab's training code and was created no later than
    ``t`` (one created after the run got its pid from the kernel again)."""
    made = processes.created(pid)
    return (made is not None and made <= t + 1.0 and processes.running(pid)
            and "lab.train" in processes.command_line(pid))


class _Starting(PopenLike):
    """A job whose slots are taken and whose launcher is being started (outside the manager's lock)."""

    pid = None
    args: list = []
    returncode = None

    def poll(self) -> None:
        return None

    def send_signal(self, sig: int) -> None:  # nothing to signal yet: its claim finds it stopped
        pass


class _Adopted(PopenLike):
    """A launcher this manager did not start but follows: the one that claimed the run when the warm
    starter died between forking it and answering. It is judged by its process and the run store."""

    POLL_S = 0.05

    def __init__(self, record: dict):
        self.pid, self.args, self.returncode = int(record["pid"]), [], None
        self.record = record

    def poll(self) -> int | None:
        if self.returncode is None and launcher_gone(self.record) is not None:
            self.returncode = -signal.SIGKILL  # how it ended is not known here; the store says what it did
        return self.returncode


@dataclass(frozen=True)
class Job:
    """A handle on a submitted job: its run id, and its launcher's pid once it started."""

    run_id: str
    pid: int | None = None


#: Seconds a job handed to the Ray cluster may wait there before no further job is handed over until it started.
CLUSTER_PATIENCE_S = 5.0


class JobManager:
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
        self._adopted: list[str] = []  # queued runs taken over at the start from a process that ended
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

    # ----- submitting --------------------------------------------------------------------------
    def submit(self, scenario: Scenario, name: str | None = None, owner: str = ANONYMOUS) -> Job:
        """Queue a run of ``scenario`` for ``owner`` (a session id); it starts when its turn comes
        and its ranks fit on the free local slots."""
        return self.submit_many([(scenario, name)], owner=owner)[0]

    def submit_many(self, items: Iterable[tuple[Scenario, str | None]], owner: str = ANONYMOUS) -> list[Job]:
        """Queue several runs of one owner; they run in order (``capacity`` jobs at a time overall)."""


        owner = str(owner or ANONYMOUS)[:64]
        items = list(items)
        cap = settings.integer("LAB_MAX_ACTIVE_PER_OWNER")
        if owner != ANONYMOUS and cap > 0:
            active = len(self.store.list_runs(statuses=ACTIVE, owner=owner))
            if active + len(items) > cap:
                raise LabError(f"you have {active} job(s) queued or running and at most {cap} are allowed at once; "
                               f"these {len(items)} would make {active + len(items)}: wait for some to finish, or "
                               "stop some on the Jobs page", where="jobs")
        checked = []
        for sc, name in items:
            if not isinstance(sc, Scenario):
                raise LabError("a job needs a Scenario", where="jobs")
            if name is not None:  # the same rule as every name, and as --name on the command line
                name = check_name(name, "run name", max_len=RUN_NAME_MAX)
            sc = preflight(sc)  # every check a worker would fail, before anything is queued
            self.limits.check(sc.training.steps, world_size(sc))
            if world_size(sc) > self.book.total:
                raise LabError(f"the job needs {world_size(sc)} processes but this machine offers "
                               f"{self.book.total} worker slots", where="training.workers")
            checked.append((sc, name))
        jobs = []
        for sc, name in checked:
            rid = self.store.create_run(sc, name=name, status="queued",
                                        info={"owner": owner, "queued_by": _this_process()})
            self.store.add_stage(rid, "submitted", detail={"owner": owner, "by": "job manager"})
            self.store.add_stage(rid, "parsed", detail=parse_job(sc))
            with self._lock:
                self._queue.append((rid, owner))
                self._tasks[rid] = world_size(sc)
                if owner not in self._ring:
                    self._ring.append(owner)
            jobs.append(Job(rid))
        self.warm_up()
        self._ensure_thread()
        self._schedule()
        return [Job(j.run_id, self.pid(j.run_id)) for j in jobs]

    def warm_up(self) -> None:
        """Start the warm starter now, in the background, so that the first job does not wait for it."""
        if self.starter is not None:
            self.starter.start()

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(target=self._loop, name="lab-jobs", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while not self._closed:
            try:
                if self.starter is not None:
                    self.starter.check()  # restarted when it died or outgrew its bound
                    if self._queue and not self.starter.ready():
                        self.starter.wait_ready()  # outside the lock: pages keep answering meanwhile
                self._schedule()
            except Exception as exc:  # noqa: BLE001 - the scheduler must keep running, and says what it caught
                self._failed("the scheduler", exc)
            with self._lock:
                if not self._queue and not self._running and not self._draining:
                    # nothing to do: the thread ends and is started again by the next submit
                    self._thread = None
                    return
            time.sleep(self.poll_s)

    def _schedule(self) -> None:
        overtime, starts = [], []
        with self._lock:
            self._reap()
            if self._warming():
                return  # the scheduler thread starts the queue once the starter is ready
            now = time.monotonic()
            overtime = [rid for rid, t0 in self._started.items() if self.limits.over_time(now - t0)]
            self._yield_long_jobs(now)
            while self._queue:
                fresh = [r for r in self._running if r not in self._yielded]
                if len(fresh) >= self.capacity or len(self._running) >= 2 * self.capacity:
                    break
                if self.cluster and self._cluster_is_behind(now):
                    break  # the next job goes once those handed over started: the fair queue's order holds
                # Beside a job that yields, only a student with no job running may start one.
                busy = {self._owners.get(r) for r in self._running} if len(self._running) >= self.capacity else set()
                started = False
                for rid, owner in fair_order(self._queue, owner_of=lambda q: q[1], after=self._last_owner,
                                             ring=self._ring):
                    if owner in busy:
                        continue
                    try:
                        run = self.store.get_run(rid)
                    except LabError:  # deleted while it waited
                        self._queue.remove((rid, owner))
                        started = True
                        break
                    if run["status"] != "queued":  # stopped while it waited
                        self._queue.remove((rid, owner))
                        started = True
                        break
                    tasks = self._tasks.get(rid) or world_size(Scenario.from_dict(run["scenario"]))
                    where = place(tasks, self.book.free(self._yielded), self.policy)
                    if where is None:
                        continue  # first fit: a later job may fit
                    self._queue.remove((rid, owner))
                    self._last_owner = owner
                    self._owners[rid] = owner
                    starts.append(self._take(rid, run, tasks, where))
                    started = True
                    break
                if not started:
                    break
        for spec in starts:  # outside the lock: a start may wait for the warm starter's answer
            self._start(spec)
        for rid in overtime:  # outside the lock: a stop waits for the job's processes
            threading.Thread(target=self._stop, name="lab-jobs-limit", daemon=True, args=(rid, LIMIT, {
                "by": LIMIT, "limit_s": self.limits.max_seconds})).start()
            with self._lock:
                self._started.pop(rid, None)

    def _cluster_is_behind(self, now: float) -> bool:
        """Whether the Ray cluster has as many jobs handed over and not yet started as it may hold
        (LAB_RAY_WAITING), or one of them has waited there for CLUSTER_PATIENCE_S seconds. Ray places
        waiting placement groups in no fixed order (one that failed to fit retries later, and a newer one
        can take the room first), so a job that waits stops the hand-over until it started: no job
        waits behind an endless stream of later ones."""
        waiting = []
        for rid in self._running:
            if rid not in self._placed:
                if self.store.last_stage(rid, "started") is None:
                    waiting.append(now - self._started.get(rid, now))
                else:
                    self._placed.add(rid)
        self._placed &= set(self._running)
        return len(waiting) >= max(1, settings.integer("LAB_RAY_WAITING")) or max(waiting, default=0) > CLUSTER_PATIENCE_S

    def _yield_long_jobs(self, now: float) -> None:
        """A job that has run longer than its slice while a student with no job running waits yields: it drops
        to the lowest priority (nice 19, its whole process group) and the waiting job may start beside it."""
        slice_s = settings.number("LAB_SLICE_S")
        if self.cluster:  # the ranks are not on this machine: lowering the launcher's priority would change nothing
            return
        running_owners = {self._owners.get(r) for r in self._running}
        if not any(o not in running_owners for _, o in self._queue):
            return
        for rid, p in self._running.items():
            if rid in self._yielded or p.pid is None or now - self._started.get(rid, now) < slice_s:
                continue
            self._yielded.add(rid)
            try:
                os.setpriority(os.PRIO_PGRP, p.pid, 19)
            except OSError as exc:  # gone meanwhile, or not ours to renice: it still shares the cores
                log.info("could not lower the priority of job %s: %s", rid, exc)
            self.store.add_stage(rid, "yielded", detail={"after_s": round(now - self._started[rid], 1),
                                                          "slice_s": slice_s, "nice": 19})

    def _take(self, rid: str, run: dict, tasks: int, where: dict) -> JobSpec:
        """Under the lock: the job's slots and cores, its ``scheduled`` stage, and its spec."""
        self._tasks.pop(rid, None)
        held = self.book.take(rid, where, self._yielded)
        cpus = rank_cpus(held, tasks)
        self.store.add_stage(rid, "scheduled", detail={
            "policy": self.policy, "groups": {g: len(ds) for g, ds in held.items()}, "slots": held,
            "rank_cpus": cpus, "queued_s": time.time() - run["created"], "nice": job_nice()})
        self._running[rid] = _Starting()
        self._started[rid] = time.monotonic()
        return JobSpec(rid, run["scenario"], str(self.store.path.resolve()), tuple(cpus), job_nice(),
                       settings.job_idle(), self.cluster)

    def _start(self, spec: JobSpec) -> None:
        """Start the job's launcher: forked by the warm starter, or cold when the starter is not
        ready or fails (a launcher it forked before it failed and the cold one cannot both run the
        job: the first to claim the run in the store runs it, see :meth:`_finish`)."""
        rid = spec.run_id
        env = settings.child_env(LAB_DB=spec.db)
        log_path = self._dir("logs") / f"{rid}.log"
        p = None
        if self.starter is not None and self.starter.ready():
            try:
                p = self.starter.launch(spec, env, str(log_path))
            except LabError as exc:
                log.info("job %s starts cold: %s", rid, exc)
        log_file = None
        try:
            if p is None:
                log_file = open(log_path, "ab")
                p = subprocess.Popen([sys.executable, "-m", "lab.train", "--spec", "-"], cwd=str(ROOT), env=env,
                                     stdin=subprocess.PIPE, stdout=log_file, stderr=log_file, start_new_session=True)
                try:
                    p.stdin.write(json.dumps(spec.to_dict()).encode())
                    p.stdin.close()
                except OSError:  # it died at once: its exit code says so
                    pass
        except OSError as exc:
            if log_file is not None:
                log_file.close()
            with self._lock:
                self._running.pop(rid, None)
                self._started.pop(rid, None)
                self.book.release(rid)
            self.store.set_status(rid, "failed", error=f"could not start the job process: {exc}", only_from=ACTIVE)
            return
        self.store.update_run(rid, pid=p.pid)
        with self._lock:
            self._running[rid] = p
            self._logs[rid] = log_file

    def _reap(self) -> None:
        """Finish the jobs whose launcher ended; clean up after those whose workers have now exited."""
        with self._lock:
            for rid, p in list(self._running.items()):
                if p.poll() is not None:
                    self._finish(rid, p)
            for rid in list(self._draining):
                self._drain(rid)

    def _finish(self, rid: str, p: subprocess.Popen) -> None:
        """A job process ended: make sure its run does not stay 'running', then free its slots and
        remove its scratch once its last worker is gone (:meth:`_drain`)."""
        log_file = self._logs.pop(rid, None)
        if log_file is not None:
            log_file.close()
        code = p.returncode
        try:
            status = self.store.status(rid)
        except LabError:
            status = None
        rec = (self.store.launcher(rid) or {}) if status in ACTIVE else {}
        if rec.get("pid") not in (None, p.pid) and launcher_gone(rec) is None:
            # another launcher claimed the run first (forked by a starter that died before it could
            # answer): that one runs the job, and this manager follows it
            self._running[rid] = _Adopted(rec)
            return
        self._running.pop(rid, None)
        self._started.pop(rid, None)
        self._yielded.discard(rid)
        self._owners.pop(rid, None)
        if status is None:
            self.book.release(rid)
            return
        if status in ACTIVE:
            if code is not None and code < 0:  # killed from outside: it could not report
                why = f"killed by signal {signal_name(-code)}"
                self.store.set_status(rid, "interrupted", only_from=ACTIVE, error=(
                    f"the job's launcher (pid {p.pid}) was {why} and could not finish the run; "
                    f"see {self.log_path(rid)}"))
                new = "interrupted"
            else:
                why = f"exit code {code}"
                self.store.set_status(rid, "failed", error=f"the job process ended ({why}) without finishing the run; "
                                      f"see {self.log_path(rid)}", only_from=ACTIVE)
                new = "failed"
            self.store.set_heartbeats(rid, [])
            self.store.add_stage(rid, "ended", detail={"status": new, "by": "job manager", "why": why})
        self._begin_drain(rid, by="job manager")

    def _begin_drain(self, rid: str, by: str) -> None:
        rec = self.store.launcher(rid) or {}
        self._draining.setdefault(rid, {"since": time.monotonic(), "scratch": rec.get("scratch"), "by": by,
                                        "killed": []})
        self._drain(rid)

    def _drain(self, rid: str) -> bool:
        """Release a job whose launcher is gone once its last process is: workers still exiting
        are waited for (SIGKILL after DRAIN_S), then its slots are freed and its scratch folder goes.
        Returns whether it is released."""
        d = self._draining.get(rid)
        if d is None:
            return True
        left = processes_of(rid, self.store, exclude=(os.getpid(),))
        if left and time.monotonic() - d["since"] > DRAIN_S:
            d["killed"] += processes.kill_pids(left)
            return False
        if left:
            return False

        del self._draining[rid]
        slots = self.book.release(rid)
        scratch = remove_scratch(rid, d["scratch"])
        try:
            self.store.set_heartbeats(rid, [])
            self.store.add_stage(rid, "released", detail={
                "by": d["by"], "slots": slots, "worker_processes_left": 0, "killed": d["killed"],
                "waited_s": round(time.monotonic() - d["since"], 3), "scratch_folders_removed": scratch})
        except LabError:
            pass
        return True

    def draining(self) -> list[str]:
        """Jobs whose launcher is gone, waiting for their workers to exit before they are released."""
        with self._lock:
            return list(self._draining)

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

    # ----- stopping and releasing -------------------------------------------------------------
    def _failed(self, where: str, exc: BaseException) -> None:
        log.exception("%s failed", where)
        with self._lock:
            self.failures = (self.failures + [(time.time(), f"{where}: {type(exc).__name__}: {exc}")])[-20:]

    def sign_in_teacher(self, owner: str, claim) -> bool:
        """Make ``owner`` the teacher for this server when ``claim`` is LAB_TEACHER_TOKEN."""
        return self.roster.sign_in(owner, claim)

    def is_teacher(self, owner: str | None) -> bool:
        """Whether ``owner`` signed in as the teacher (and the server still has that token)."""
        return self.roster.is_teacher(owner)

    def set_limits(self, owner: str | None, limits: Limits) -> Limits:
        """The teacher sets what one job may ask of the server; anyone else is refused."""
        if not self.is_teacher(owner):
            raise LabError("only the teacher sets the job limits (sign in on the Jobs page)", where="job limits")
        self.limits = limits.checked()
        return self.limits

    def may_manage(self, run_owner: str | None, owner: str | None, teacher: bool = False) -> bool:
        return can_manage(run_owner, owner, teacher or self.is_teacher(owner))

    def _check_actor(self, run_id: str, owner: str | None, teacher: bool, what: str) -> dict:
        """The run, when ``owner`` (with the teacher flag, or signed in as the teacher) may act on it;
        else a LabError."""
        run = self.store.get_run(run_id)
        check_manage(run_id, self.owner_of(run_id), owner, teacher or self.is_teacher(owner), what)
        return run

    def _actor(self, owner: str | None, teacher: bool) -> str:
        return TEACHER if teacher or self.is_teacher(owner) else str(owner)

    def delete(self, run_ids: Iterable[str], owner: str | None, *, teacher: bool = False) -> list[str]:
        """Delete finished runs of ``owner`` (the teacher: anyone's) with their measurements and
        checkpoints; any run that is another's, or still queued or running, refuses the whole call."""
        with self._lock:
            busy = {q[0] for q in self._queue} | set(self._running)
        return delete_runs(self.store, run_ids, owner, teacher=teacher or self.is_teacher(owner), active=busy)

    def stop(self, run_id: str, owner: str | None, *, teacher: bool = False, via: str = "the Stop button") -> bool:
        """Stop a queued or running job for ``owner`` (the acting session's id; ``teacher``: the
        teacher acts and may stop any job). Another session's job is refused with a LabError. A
        queued one never starts; a running one's whole process group is ended (SIGTERM, then
        SIGKILL after a grace period). The stop stage and the run's info record who stopped it.
        Returns whether it was active."""
        self._check_actor(run_id, owner, teacher, "stop")
        by = self._actor(owner, teacher)
        return self._stop(run_id, by, {"by": by, "session": str(owner), "via": via})

    def _stop(self, run_id: str, by: str, detail: dict) -> bool:
        with self._lock:
            queued = [q for q in self._queue if q[0] == run_id]
            for q in queued:
                self._queue.remove(q)
            p = self._running.get(run_id)
        if queued:
            ok = self.store.set_status(run_id, "stopped", error=f"stopped by {_who(by)} before it started",
                                       only_from=("queued",))
            if ok:
                self.store.merge_info(run_id, {"stopped_by": by})
                self.store.add_stage(run_id, "stop", detail={**detail, "while": "queued"})
                self.store.add_stage(run_id, "ended", detail={"status": "stopped"})
            return ok
        try:
            run = self.store.get_run(run_id)
        except LabError:
            return False
        # marked first, so the launcher's own "stopped by SIGTERM" or a last "done" cannot overwrite it
        was_active = self.store.set_status(run_id, "stopped", error=f"stopped by {_who(by)}", only_from=ACTIVE)
        if was_active:
            self.store.merge_info(run_id, {"stopped_by": by})
            self.store.add_stage(run_id, "stop", detail={**detail, "while": run["status"]})
        if p is not None and p.pid is not None:  # a job still starting finds itself stopped when it claims the run
            end_group(p.pid, lambda: p.poll() is not None)
            try:
                p.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            with self._lock:
                if p.poll() is not None and run_id in self._running:
                    self._finish(run_id, p)
        elif p is None and run["status"] == "running" and self._launcher_alive(run_id, run):  # started elsewhere
            rec = self.store.launcher(run_id) or {}
            # a launcher that leads its group takes the job with it; one in a shell's group is signalled alone
            lead = rec.get("pgid") and rec.get("pgid") == rec.get("pid")
            end_group(as_pid(rec["pgid"] if lead else run["pid"]), lambda: not self._launcher_alive(run_id, run),
                      whole_group=bool(lead))
        return was_active

    def _launcher_alive(self, run_id: str, run: dict) -> bool:
        rec = self.store.launcher(run_id)
        if rec is not None:
            return launcher_gone(rec) is None
        return _alive_since(run["pid"], run["created"])

    def release(self, run_id: str, owner: str | None, *, teacher: bool = False) -> dict:
        """Release what a finished (or abandoned) job still holds, for ``owner`` (or the teacher;
        another session's job is refused with a LabError): processes still carrying its run id
        are killed and waited for, a run left 'running' by a vanished process becomes interrupted,
        its intermediate checkpoints, heartbeats, scratch and scenario file go (final.pt and the
        logs stay). A job that is queued or running must be stopped first. Returns what was released."""
        run = self._check_actor(run_id, owner, teacher, "release")
        by = self._actor(owner, teacher)
        with self._lock:
            ours = run_id in self._running or any(q[0] == run_id for q in self._queue)
        if ours or (run["status"] in ACTIVE and self._launcher_alive(run_id, run)):
            raise LabError(f"run {run_id} is {run['status']}: stop it before releasing its resources", where="jobs")
        killed = processes.kill_pids(processes_of(run_id, self.store, exclude=(os.getpid(),)))
        deadline = time.monotonic() + DRAIN_S  # the scratch folder goes once they are gone
        while killed and processes_of(run_id, self.store, exclude=(os.getpid(),)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if run["status"] in ACTIVE:
            self.store.set_status(run_id, "interrupted", only_from=ACTIVE,
                                  error="released: its process had ended without reporting")
        removed = 0
        ck = self.store.checkpoint_dir(run_id, create=False)
        if ck.exists():
            for f in ck.glob("step*.pt*"):
                f.unlink(missing_ok=True)
                removed += 1
        scratch = remove_scratch(run_id, (self.store.launcher(run_id) or {}).get("scratch"))
        self.store.set_heartbeats(run_id, [])
        with self._lock:
            self._draining.pop(run_id, None)
            slots = self.book.release(run_id)
        detail = {"by": "release button", "released_by": by, "killed": killed, "checkpoint_files_removed": removed,
                  "slots": slots, "scratch_folders_removed": scratch, "kept": "final.pt and the logs"}
        self.store.add_stage(run_id, "released", detail=detail)
        return detail

    # ----- finding dead launchers ---------------------------------------------------------------
    def sweep(self, min_interval: float = 1.0) -> list[str]:
        """Find jobs whose launcher died without a word (SIGKILL, a crash of the machine) while the
        app runs: this manager's own launchers that ended, and runs marked running elsewhere (the
        command line, another app) whose launcher is gone (:func:`lab.train.launcher.launcher_gone`;
        a run without a launcher record, e.g. under torchrun, once its process has been gone for
        LAB_LAUNCHER_STALE seconds). Their runs become interrupted; their scratch folders go once
        their last worker has exited. Cheap, and skipped when the last sweep was less than
        ``min_interval`` seconds ago (every polling page calls it). Returns the runs marked now."""

        now = time.monotonic()
        with self._lock:
            if now - self._last_sweep < min_interval:
                return []
            self._last_sweep = now
            before = set(self._running)
            self._reap()
            out = [rid for rid in before - set(self._running) if self._status_or(rid) == "interrupted"]
            ours = {q[0] for q in self._queue} | set(self._running) | set(self._draining)
        runs = self.store.list_runs(statuses=("running",))
        seen = set()
        for r in runs.itertuples():
            rid = r.id
            seen.add(rid)
            if rid in ours:
                continue
            rec = self.store.launcher(rid)
            if rec is not None:
                why = launcher_gone(rec)
            elif _alive_since(r.pid, r.created):
                why = None
            else:  # no launcher record (torchrun restarts its rank 0): only when gone for a while
                first = self._suspects.setdefault(rid, now)
                why = (f"its process (pid {as_pid(r.pid)}) has been gone for {now - first:.0f} s"
                       if now - first >= stale_after() else None)
            if why is None:
                continue
            if self._interrupt(rid, why, "job manager sweep"):
                out.append(rid)
        with self._lock:
            for rid in set(self._suspects) - seen:
                del self._suspects[rid]
            for rid in out:
                self._suspects.pop(rid, None)
        return out

    def _status_or(self, rid: str, default: str | None = None) -> str | None:
        try:
            return self.store.status(rid)
        except LabError:
            return default

    def _interrupt(self, rid: str, why: str, by: str) -> bool:
        changed = self.store.set_status(rid, "interrupted", only_from=("running",),
                                        error=f"the job ended without reporting: {why}")
        if changed:
            self.store.set_heartbeats(rid, [])
            self.store.add_stage(rid, "ended", detail={"status": "interrupted", "by": by, "why": why})
            with self._lock:
                self._begin_drain(rid, by=by)
                if rid in self._draining:  # its workers are still exiting: the loop finishes the release
                    self._ensure_thread()
        return changed

    def start_sweeper(self, every_s: float | None = None) -> None:
        """Sweep every ``every_s`` seconds (LAB_SWEEP_S, default 5) on a daemon thread, so dead
        launchers are found while no page polls."""
        every = every_s if every_s is not None else settings.number("LAB_SWEEP_S")
        with self._lock:
            if self._sweeper is not None and self._sweeper.is_alive():
                return

            def loop():
                while not self._closed:
                    time.sleep(every)
                    try:
                        self.sweep(min_interval=0.0)
                        with self._lock:
                            if self._draining:
                                self._ensure_thread()
                    except Exception as exc:  # noqa: BLE001 - the sweeper must keep running, and says what it caught
                        self._failed("the sweep", exc)

            self._sweeper = threading.Thread(target=loop, name="lab-jobs-sweep", daemon=True)
            self._sweeper.start()

    def mark_interrupted(self) -> list[str]:
        """At the start of a manager: runs marked running whose launcher is gone become
        'interrupted' (returned); queued runs whose queuing process has ended (a server restart) are
        queued here again, oldest first (:meth:`adopted`)."""

        out = []
        runs = self.store.list_runs(statuses=ACTIVE)
        with self._lock:
            ours = {q[0] for q in self._queue} | set(self._running)
        adopted = []
        for r in runs.iloc[::-1].itertuples():  # oldest first: the queue keeps their order
            if r.status != "queued" or r.id in ours:
                continue
            try:
                info = self.store.get_run(r.id)["info"]
            except LabError:
                continue
            if _gone(info.get("queued_by")):
                adopted.append((r.id, str(info.get("owner") or ANONYMOUS)))
        for rid, owner in adopted:
            self.store.merge_info(rid, {"queued_by": _this_process()})
            self.store.add_stage(rid, "requeued", detail={"owner": owner, "by": "job manager at start",
                                                          "why": "the process that queued it has ended"})
            with self._lock:
                self._queue.append((rid, owner))
                if owner not in self._ring:
                    self._ring.append(owner)
                ours.add(rid)
        self._adopted = [rid for rid, _ in adopted]
        if adopted:
            self._ensure_thread()
        for r in runs.itertuples():
            rid = r.id
            if rid in ours:
                continue
            pid = as_pid(r.pid)
            if r.status == "running":
                rec = self.store.launcher(rid)
                gone = launcher_gone(rec) if rec is not None else (
                    None if _alive_since(pid, r.created) else "its process is gone (killed, or the machine restarted)")
                if gone is not None and self._interrupt(rid, gone, "job manager at start"):
                    out.append(rid)
        return out

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

    def _warming(self) -> bool:
        """The starter is loading (started, alive, not yet ready, within its time): jobs wait for it."""
        st = self.starter
        return st is not None and st.alive() and not st.ready() and st.loading_for() < st.ready_timeout


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


def _who(by: str) -> str:
    """How a stop reads in the run's error: the teacher, its session, or the lab itself."""
    if by == TEACHER:
        return "the teacher"
    if by in ("shutdown",):
        return "the lab shutting down"
    if by == LIMIT:
        return "the time limit the teacher set for a job"
    return f"session {by}"


__all__ = ["Job", "JobManager", "shared",
           "TEACHER", "is_teacher", "can_manage", "teacher_token"]
