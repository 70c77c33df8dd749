"""Training jobs as OS processes: submit, queue fairly, place on this machine's cores, watch, stop,
release, and notice the ones that vanished -- the task-level design's job lifecycle, for real.

A job is a launcher (:mod:`lab.train.launcher`) started in a new session with the job's
:class:`lab.train.launcher.JobSpec`, so it leads a process group holding every worker: one ``killpg``
ends all of it, and the group recorded in the run store names the job's processes. Its lifecycle goes
to the run store's ``job_events`` table:

``submitted`` (queued, with its owner) -> ``parsed`` (task manager, parameter server, compute workers,
the topology's resource groups; :func:`lab.train.launcher.parse_job`) -> ``scheduled`` (which local
cores hold which rank, after how long in the queue) -> ``started`` (the launcher created the worker
processes) -> ``data`` (split and shipped) -> ``running`` -> [``fault`` / ``alarm`` / ``restart``]
-> ``ended`` -> ``released`` (processes reaped, slots freed).

A :class:`JobManager` keeps one queue for every session of the app (pages share one manager per run
store through :func:`shared`) and holds parts that own their state: the fair queue
(:class:`lab.jobs.queue.FairQueue`), the jobs it follows (:class:`lab.jobs.running.RunningJobs`), the
launcher seam (:class:`lab.jobs.launch.Launcher`: a job spec in, a :class:`lab.jobs.launch.Launched`
handle out), the drains and the sweeper (:mod:`lab.jobs.lifecycle`), who may act
(:class:`lab.jobs.actions.Access`) and the class (:class:`lab.jobs.classroom.Classroom`). It starts at
most ``capacity`` jobs at a time (default 1, for a 2-core server), and only where their ranks fit on the
local resource groups (one per core, :func:`lab.jobs.slots.local_groups`) under the placement policy
(uniform or resource-state). Job processes run as background work (LAB_JOB_NICE, LAB_JOB_IDLE), so the
app's pages stay responsive while the cores train.

Thirty students share one server, so a job belongs to the student who submitted it (its owner id, kept
in the run's info; :mod:`lab.jobs.access` says how a browser keeps it across reloads): :meth:`JobManager.stop`,
:meth:`JobManager.release` and :meth:`JobManager.delete` take the acting owner and refuse another's run
with a LabError, unless the actor is the teacher. One student has at most LAB_MAX_ACTIVE_PER_OWNER jobs
queued or running. The store records who stopped what: the owner id, or "teacher".

A job's end is known from its launcher's process, whoever started it; queued jobs are in the store with
the process that queued them, and a manager that starts after that process ended (a server restart)
queues them again, in their order. A launcher killed with SIGKILL can record nothing, so
:meth:`JobManager.sweep` (run from the pages' polling and every LAB_SWEEP_S seconds on a timer) marks
runs interrupted whose launcher is gone, waits for the rest of its process group to exit, then removes
their scratch folder.

Nothing here waits for a child while holding the manager's lock: a job's slots are taken under it,
and its launcher is started after it is let go.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Iterable

from lab import settings
from lab.errors import LabError
from lab.jobs.access import ANONYMOUS, TEACHER, can_manage, delete_runs, is_teacher, teacher_token
from lab.jobs.actions import LIMIT, Access, who
from lab.jobs.classroom import Classroom
from lab.jobs.launch import Launched, Launcher
from lab.jobs.nodes import ClusterNodes
from lab.jobs.lifecycle import Adopted, Drains, Sweeper, launcher_alive, mark_gone, status_or, this_process
from lab.jobs.queue import FairQueue, Job
from lab.jobs.running import RunningJobs
from lab.jobs.slots import SlotBook, cluster_group, local_groups, rank_cpus
from lab.modelled.scheduling import POLICIES, place
from lab.processes import as_pid, end_group, signal_name
from lab.scenario.document import Scenario
from lab.scenario.text import RUN_NAME_MAX, check_name
from lab.settings import job_nice
from lab.store.runs import ACTIVE, FINISHED, RunStore
from lab.train.launcher import JobSpec, parse_job, preflight, world_size
from lab.train.launcher_record import launcher_gone
from lab.train.warm import shared_starter

log = logging.getLogger("lab.jobs")


class JobManager:
    """The class server's jobs: submitting and the scheduler's turns, each job's end, stopping and releasing; what
    each part keeps is the part's."""

    def __init__(self, store_path: str | os.PathLike | None = None, capacity: int = 1, poll_s: float = 0.2,
                 policy: str = "uniform", cpus: Iterable[int] | None = None, slots_per_cpu: int | None = None,
                 warm: bool | None = None, ray_address: str | None = None):
        if capacity < 1:
            raise LabError(f"capacity must be at least 1 (got {capacity})", where="jobs")
        if policy not in POLICIES:
            raise LabError(f"unknown placement policy {policy!r}; choose one of {list(POLICIES)}", where="jobs")
        self.store = RunStore(store_path)
        # With a Ray cluster (LAB_RAY_ADDRESS) the jobs' ranks run there: Ray's placement groups decide
        # where and hold a job until all of it fits, so the book only bounds how many jobs are handed over.
        self.ray_address = settings.ray_address() if ray_address is None else ray_address
        self.capacity = max(1, settings.integer("LAB_RAY_JOBS")) if self.ray_address else capacity
        self.poll_s = poll_s
        self.policy = policy
        self.book = SlotBook([cluster_group(self.capacity, settings.integer("LAB_JOB_MAX_PROCS"))] if self.ray_address
                             else local_groups(cpus, slots_per_cpu))
        # The Ray cluster's nodes, which the teacher sees on the Jobs page (None on one machine)
        self.nodes = ClusterNodes(self.ray_address) if self.ray_address else None
        if self.nodes is not None:
            self.nodes.latest()  # the first look, now: it also starts the cluster's warm rank actors
        self.started_at = time.time()
        self._lock = threading.RLock()  # guards the queue, the running jobs and the slot book
        self.queue = FairQueue()
        self.jobs = RunningJobs()
        self.drains = Drains(self.store, self.book, self._lock)
        self.sweeper = Sweeper(self.store)
        self.access = Access(self.store, self._owner_of)
        self.classroom = Classroom(self.store, self.access.roster, self.stop)
        # The warm starter (lab.train.warm), one per process: the app starts it when it starts, and the
        # first submit or warm_up() otherwise; jobs fork from it once it has loaded torch and the data.
        self.launcher = Launcher(self.store, shared_starter() if (settings.warm_starts() if warm is None else warm)
                                 else None)
        self._thread: threading.Thread | None = None
        self._closed = False
        self.failures: list[tuple[float, str]] = []  # the scheduler's and the sweeper's last errors

    # ----- watching ----------------------------------------------------------------------------
    def _owner_of(self, run_id: str) -> str | None:
        with self._lock:
            owner = self.queue.owner(run_id)
        if owner is not None:
            return owner
        try:
            return self.store.get_run(run_id)["info"].get("owner")
        except LabError:
            return None

    def pid(self, run_id: str) -> int | None:
        with self._lock:
            p = self.jobs.get(run_id)
        if p is not None:
            return p.pid
        try:
            return as_pid(self.store.get_run(run_id)["pid"])
        except LabError:
            return None

    def queued(self) -> list[str]:
        """Queued run ids in the order they will be considered (fair across owners)."""
        with self._lock:
            return [rid for rid, _ in self.queue.order()]

    def queue_info(self, run_id: str) -> dict | None:
        """Where a queued run stands, for its page: its place (1 = next), the queued jobs ahead and the running
        jobs, each with whether it is the same student's (no other id is given out), how long a running one
        has run and whether it yields; the slice after which a job yields, and whether this run's student has
        a job running (then this one waits its turn rather than start beside). None when it is not queued here."""
        with self._lock:
            order = self.queue.order()
            mine = next((o for r, o in order if r == run_id), None)
            if mine is None:
                return None
            pos = [r for r, _ in order].index(run_id) + 1
            running = self.jobs.seen_by(mine, time.monotonic())
            return {"position": pos, "ahead": [{"run_id": r, "yours": o == mine} for r, o in order[:pos - 1]],
                    "running": running, "capacity": self.capacity, "slice_s": settings.number("LAB_SLICE_S"),
                    "student_running": any(x["yours"] for x in running)}

    def wait(self, run_id: str, timeout: float = 300.0) -> str:
        """Block until the run is finished (or ``timeout`` seconds pass); returns its status."""
        deadline = time.monotonic() + timeout
        while True:
            self._schedule()
            st = self.store.status(run_id)
            with self._lock:
                ours = run_id in self.jobs
            if st in FINISHED and not ours:
                return st
            if time.monotonic() > deadline:
                return st
            time.sleep(0.1)

    def shutdown(self, stop_running: bool = True) -> None:
        with self._lock:
            queued = [q[0] for q in self.queue.items]
            running = self.jobs.ids()
        for rid in queued:
            self._stop(rid, "shutdown", {"by": "shutdown"})
        if stop_running:
            for rid in running:
                self._stop(rid, "shutdown", {"by": "shutdown"})
        self._closed = True  # the warm starter is the process's, not this manager's: it stays

    # ----- submitting and the scheduler's turns ------------------------------------------------
    def submit(self, scenario: Scenario, name: str | None = None, owner: str = ANONYMOUS) -> Job:
        """Queue a run of ``scenario`` for ``owner`` (a session id); it starts when its turn comes
        and its ranks fit on the free local slots."""
        return self.submit_many([(scenario, name)], owner=owner)[0]

    def submit_many(self, items: Iterable[tuple[Scenario, str | None]], owner: str = ANONYMOUS) -> list[Job]:
        """Queue several runs of one owner, all or none; they run in order (``capacity`` jobs at a time overall).
        The per-student cap is counted and the runs written in one store transaction, so tabs racing Run cannot
        pass it together."""
        owner = str(owner or ANONYMOUS)[:64]
        items = list(items)
        refused = self.classroom.queue_refusal(owner)
        if refused:
            raise LabError(refused, where="jobs")
        cap = settings.integer("LAB_MAX_ACTIVE_PER_OWNER") if owner != ANONYMOUS else 0
        checked = []
        for sc, name in items:
            if not isinstance(sc, Scenario):
                raise LabError("a job needs a Scenario", where="jobs")
            if name is not None:  # the same rule as every name, and as --name on the command line
                name = check_name(name, "run name", max_len=RUN_NAME_MAX)
            sc, placed = preflight(sc)  # every check a worker would fail, before anything is queued
            self.access.limits.check(sc.training.steps, world_size(sc))
            if world_size(sc) > self.book.total:
                raise LabError(f"the job needs {world_size(sc)} processes but this machine offers "
                               f"{self.book.total} worker slots", where="training.workers")
            checked.append((sc, name, placed))
        # A placement run's ranks are decided once, here, and stored with the run: its launcher pins them from it.
        ids = self.store.create_runs([(sc, name, {"placed": placed.to_dict()} if placed else None)
                                      for sc, name, placed in checked], status="queued",
                                     info={"owner": owner, "queued_by": this_process()}, cap=cap)
        for rid, (sc, name, _) in zip(ids, checked):
            self.store.job_records.add_event(rid, "submitted", detail={"owner": owner, "by": "job manager"})
            self.store.job_records.add_event(rid, "parsed", detail=parse_job(sc))
            with self._lock:
                self.queue.add(rid, owner, world_size(sc))
        self.launcher.warm_up()
        self._ensure_thread()
        self._schedule()
        return [Job(rid, self.pid(rid)) for rid in ids]

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(target=self._loop, name="lab-jobs", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while not self._closed:
            try:
                self.launcher.keep_warm(jobs_waiting=bool(self.queue))
                self._schedule()
            except Exception as exc:  # noqa: BLE001 - the scheduler must keep running, and says what it caught
                self._failed("the scheduler", exc)
            with self._lock:
                if not self.queue and not self.jobs and not self.drains:
                    # nothing to do: the thread ends and is started again by the next submit
                    self._thread = None
                    return
            time.sleep(self.poll_s)

    def _schedule(self) -> None:
        overtime, starts = [], []
        with self._lock:
            self._reap()
            if self.launcher.warming():
                return  # the scheduler thread starts the queue once the starter is ready
            now = time.monotonic()
            overtime = self.jobs.overtime(self.access.limits.over_time, now)
            if not self.ray_address:  # on a Ray cluster lowering the launcher's priority would change nothing
                self.jobs.yield_long(self.store, self.queue.owners(), now, settings.number("LAB_SLICE_S"))
            orphans = len(self.sweeper.orphans()) if self.sweeper.orphan_ids else 0
            while self.queue:
                if len(self.jobs.fresh()) + orphans >= self.capacity or len(self.jobs) + orphans >= 2 * self.capacity:
                    break
                if self.ray_address and self.jobs.cluster_is_behind(self.store, now, settings.integer("LAB_RAY_WAITING")):
                    break  # the next job goes once those handed over started: the fair queue's order holds
                # Beside a job that yields, only a student with no job running may start one.
                busy = self.jobs.students() if len(self.jobs) >= self.capacity else set()
                spec = self._take(busy)
                if spec is None:
                    break
                if isinstance(spec, JobSpec):
                    starts.append(spec)
        for spec in starts:  # outside the lock: a start may wait for the warm starter's answer
            self._start(spec)
        for rid in overtime:  # outside the lock: a stop waits for the job's processes
            threading.Thread(target=self._stop, name="lab-jobs-limit", daemon=True, args=(rid, LIMIT, {
                "by": LIMIT, "limit_s": self.access.limits.max_seconds})).start()

    def _take(self, busy: set) -> JobSpec | bool | None:
        """Under the lock, the first queued job in the fair order that fits: its slots and cores, its ``scheduled``
        event, its spec. True when a job left the queue without starting (deleted or stopped while it waited),
        None when none can start now."""
        for rid, owner in self.queue.order():
            if owner in busy:
                continue
            try:
                run = self.store.get_run(rid)
            except LabError:  # deleted while it waited
                run = None
            if run is None or run["status"] != "queued":  # deleted or stopped while it waited
                self.queue.remove(rid)
                return True
            tasks = self.queue.tasks.get(rid) or world_size(Scenario.from_dict(run["scenario"]))
            where = place(tasks, self.book.free(self.jobs.yielded), self.policy)
            if where is None:
                continue  # first fit: a later job may fit
            self.queue.take(rid, owner)
            held = self.book.take(rid, where, self.jobs.yielded)
            cpus = rank_cpus(held, tasks)
            self.store.job_records.add_event(rid, "scheduled", detail={
                "policy": self.policy, "groups": {g: len(ds) for g, ds in held.items()}, "slots": held,
                "rank_cpus": cpus, "queued_s": time.time() - run["created"], "nice": job_nice()})
            self.jobs.begin(rid, owner, Launched(rid, self.store))
            return JobSpec(rid, run["scenario"], str(self.store.path.resolve()), tuple(cpus), job_nice(),
                           settings.job_idle(), self.ray_address, run["info"].get("placed"))
        return None

    def _start(self, spec: JobSpec) -> None:
        """Start the job's launcher (:meth:`lab.jobs.launch.Launcher.start`); a job that cannot start fails with why."""
        rid = spec.run_id
        try:
            handle = self.launcher.start(spec)
        except OSError as exc:
            with self._lock:
                self.jobs.forget(rid)
                self.book.release(rid)
            self.store.set_status(rid, "failed", error=f"could not start the job process: {exc}", only_from=ACTIVE)
            return
        self.store.update_run(rid, pid=handle.pid)
        with self._lock:
            self.jobs.handles[rid] = handle

    # ----- ends --------------------------------------------------------------------------------
    def _reap(self) -> None:
        """Finish the jobs whose launcher ended; clean up after those whose workers have now exited."""
        with self._lock:
            for rid in self.jobs.ids():
                if self.jobs.get(rid).gone():
                    self._finish(rid, self.jobs.get(rid))
            self.drains.step_all()

    def _finish(self, rid: str, p: Launched) -> None:
        """A job's launcher ended: make sure its run does not stay 'running', then free its slots and remove its
        scratch once its last worker is gone (:class:`lab.jobs.lifecycle.Drains`)."""
        p.close()
        code = p.returncode
        status = status_or(self.store, rid)
        rec = (self.store.job_records.launcher(rid) or {}) if status in ACTIVE else {}
        if rec.get("pid") not in (None, p.pid) and launcher_gone(rec) is None:
            # another launcher claimed the run first (forked by a starter that died before it could
            # answer): that one runs the job, and this manager follows it
            self.jobs.handles[rid] = Launched(rid, self.store, Adopted(rec))
            return
        self.jobs.forget(rid)
        if status is None:
            self.book.release(rid)
            return
        if status in ACTIVE:
            see = f"see {self.launcher.log_path(rid)}"
            if code is not None and code < 0:  # killed from outside: it could not report
                why, new = f"killed by signal {signal_name(-code)}", "interrupted"
                error = f"the job's launcher (pid {p.pid}) was {why} and could not finish the run; {see}"
            else:
                why, new = f"exit code {code}", "failed"
                error = f"the job process ended ({why}) without finishing the run; {see}"
            self.store.set_status(rid, new, only_from=ACTIVE, error=error)
            self.store.job_records.set_heartbeats(rid, [])
            self.store.job_records.add_event(rid, "ended", detail={"status": new, "by": "job manager", "why": why})
        self.drains.begin(rid, by="job manager")

    def _interrupt(self, rid: str, why: str, by: str) -> bool:
        changed = mark_gone(self.store, rid, why, by)
        if changed:
            self.drains.begin(rid, by=by)
            if rid in self.drains:  # its workers are still exiting: the loop finishes the release
                self._ensure_thread()
        return changed

    def sweep(self, min_interval: float = 1.0) -> list[str]:
        """Find jobs whose launcher died without a word (SIGKILL, a crash of the machine) while the app runs: this
        manager's own launchers that ended, and runs marked running elsewhere (the command line, another app) whose
        launcher is gone (:meth:`lab.jobs.lifecycle.Sweeper.gone_elsewhere`). Their runs become interrupted; their
        scratch folders go once their last worker has exited. Cheap, and skipped when the last sweep was less than
        ``min_interval`` seconds ago (every polling page calls it). Returns the runs marked now."""
        if not self.sweeper.due(min_interval):
            return []
        with self._lock:
            before = set(self.jobs.ids())
            self._reap()
            out = [rid for rid in before - set(self.jobs.ids()) if status_or(self.store, rid) == "interrupted"]
            ours = {q[0] for q in self.queue.items} | set(self.jobs.ids()) | set(self.drains.waiting)
        out += [rid for rid, why in self.sweeper.gone_elsewhere(ours) if self._interrupt(rid, why, "job manager sweep")]
        if self.drains:
            self._ensure_thread()
        return out

    def mark_interrupted(self) -> list[str]:
        """At the start of a manager: runs marked running whose launcher is gone become 'interrupted' (returned);
        queued runs whose queuing process has ended (a server restart) are queued here again, oldest first
        (``sweeper.adopted``); runs left running whose launcher lives on count against the capacity until they
        end (``sweeper.orphans()``)."""
        with self._lock:
            ours = {q[0] for q in self.queue.items} | set(self.jobs.ids())
        adopted, gone = self.sweeper.at_start(ours)
        with self._lock:
            for rid, owner in adopted:
                self.queue.add(rid, owner)
        out = [rid for rid, why in gone if self._interrupt(rid, why, "job manager at start")]
        if adopted:  # once the orphans are known: they count against the capacity from the first turn
            self._ensure_thread()
        return out

    # ----- acting on a job -----------------------------------------------------------------------
    def delete(self, run_ids: Iterable[str], owner: str | None, *, teacher: bool = False) -> list[str]:
        """Delete finished runs of ``owner`` (the teacher: anyone's) with their measurements and
        checkpoints; any run that is another's, or still queued or running, refuses the whole call."""
        with self._lock:
            busy = {q[0] for q in self.queue.items} | set(self.jobs.ids())
        return delete_runs(self.store, run_ids, owner, teacher=teacher or self.access.is_teacher(owner), active=busy)

    def stop(self, run_id: str, owner: str | None, *, teacher: bool = False, via: str = "the Stop button") -> bool:
        """Stop a queued or running job for ``owner`` (the acting session's id; ``teacher``: the teacher acts and
        may stop any job). Another session's job is refused with a LabError. A queued one never starts; a running
        one's whole process group is ended (SIGTERM, then SIGKILL after a grace period). The stop event and the
        run's info record who stopped it. Returns whether it was active."""
        self.access.check(run_id, owner, teacher, "stop")
        by = self.access.actor(owner, teacher)
        return self._stop(run_id, by, {"by": by, "session": str(owner), "via": via})

    def _stop(self, run_id: str, by: str, detail: dict) -> bool:
        with self._lock:
            queued = self.queue.remove(run_id)
            p = self.jobs.get(run_id)
        if queued:
            ok = self.store.set_status(run_id, "stopped", error=f"stopped by {who(by)} before it started",
                                       only_from=("queued",))
            if ok:
                self.store.merge_info(run_id, {"stopped_by": by})
                self.store.job_records.add_event(run_id, "stop", detail={**detail, "while": "queued"})
                self.store.job_records.add_event(run_id, "ended", detail={"status": "stopped"})
            return ok
        try:
            run = self.store.get_run(run_id)
        except LabError:
            return False
        # marked first, so the launcher's own "stopped by SIGTERM" or a last "done" cannot overwrite it
        was_active = self.store.set_status(run_id, "stopped", error=f"stopped by {who(by)}", only_from=ACTIVE)
        if was_active:
            self.store.merge_info(run_id, {"stopped_by": by})
            self.store.job_records.add_event(run_id, "stop", detail={**detail, "while": run["status"]})
        if p is not None:  # a job still starting finds itself stopped when it claims the run
            p.end()
            with self._lock:
                if p.gone() and self.jobs.get(run_id) is p:
                    self._finish(run_id, p)
        elif run["status"] == "running" and launcher_alive(self.store, run_id, run):  # started elsewhere
            rec = self.store.job_records.launcher(run_id) or {}
            # a launcher that leads its group takes the job with it; one in a shell's group is signalled alone
            lead = rec.get("pgid") and rec.get("pgid") == rec.get("pid")
            end_group(as_pid(rec["pgid"] if lead else run["pid"]), lambda: not launcher_alive(self.store, run_id, run),
                      whole_group=bool(lead))
        return was_active

    def release(self, run_id: str, owner: str | None, *, teacher: bool = False) -> dict:
        """Release what a finished (or abandoned) job still holds, for ``owner`` (or the teacher; another session's
        job is refused with a LabError): :meth:`lab.jobs.lifecycle.Drains.release`. A job that is queued or running
        must be stopped first. Returns what was released."""
        run = self.access.check(run_id, owner, teacher, "release")
        by = self.access.actor(owner, teacher)
        with self._lock:
            ours = run_id in self.jobs or run_id in self.queue
        if ours or (run["status"] in ACTIVE and launcher_alive(self.store, run_id, run)):
            raise LabError(f"run {run_id} is {run['status']}: stop it before releasing its resources", where="jobs")
        return self.drains.release(run_id, run, by)

    def _failed(self, where: str, exc: BaseException) -> None:
        log.exception("%s failed", where)
        with self._lock:
            self.failures = (self.failures + [(time.time(), f"{where}: {type(exc).__name__}: {exc}")])[-20:]


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
            jm.sweeper.start(lambda: jm.sweep(min_interval=0.0), lambda: jm._closed, jm._failed)
            jm.launcher.warm_up()
        return jm


__all__ = ["Job", "JobManager", "shared",
           "TEACHER", "is_teacher", "can_manage", "teacher_token"]
