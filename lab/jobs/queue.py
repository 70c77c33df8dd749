"""The class's queue: submitting (the per-student cap, checked under the manager's lock), the fair order across
students, a long job yielding its slice, and starting a job's launcher where its ranks fit."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Iterable

from lab import settings
from lab.errors import LabError
from lab.jobs.access import ANONYMOUS
from lab.jobs.actions import LIMIT
from lab.jobs.lifecycle import Starting, this_process
from lab.jobs.slots import rank_cpus
from lab.modelled.scheduling import fair_order, place
from lab.scenario.document import Scenario
from lab.scenario.text import RUN_NAME_MAX, check_name
from lab.settings import ROOT, job_nice
from lab.store.runs import ACTIVE
from lab.train.launcher import (
    JobSpec,
    parse_job,
    preflight,
    world_size,
)

log = logging.getLogger("lab.jobs")


@dataclass(frozen=True)
class Job:
    """A handle on a submitted job: its run id, and its launcher's pid once it started."""

    run_id: str
    pid: int | None = None


#: Seconds a job handed to the Ray cluster may wait there before no further job is handed over until it started.
CLUSTER_PATIENCE_S = 5.0


class FairQueue:
    """Submitting and scheduling, part of :class:`lab.jobs.manager.JobManager`."""

    # ----- submitting --------------------------------------------------------------------------
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
            sc = preflight(sc)  # every check a worker would fail, before anything is queued
            self.limits.check(sc.training.steps, world_size(sc))
            if world_size(sc) > self.book.total:
                raise LabError(f"the job needs {world_size(sc)} processes but this machine offers "
                               f"{self.book.total} worker slots", where="training.workers")
            checked.append((sc, name))
        jobs = []
        ids = self.store.create_runs(checked, status="queued", info={"owner": owner, "queued_by": this_process()},
                                     cap=cap)
        for rid, (sc, name) in zip(ids, checked):
            self.store.add_event(rid, "submitted", detail={"owner": owner, "by": "job manager"})
            self.store.add_event(rid, "parsed", detail=parse_job(sc))
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
            orphans = len(self.orphans()) if self._orphans else 0
            while self._queue:
                fresh = [r for r in self._running if r not in self._yielded]
                if len(fresh) + orphans >= self.capacity or len(self._running) + orphans >= 2 * self.capacity:
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
                if self.store.last_event(rid, "started") is None:
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
            self.store.add_event(rid, "yielded", detail={"after_s": round(now - self._started[rid], 1),
                                                          "slice_s": slice_s, "nice": 19})

    def _take(self, rid: str, run: dict, tasks: int, where: dict) -> JobSpec:
        """Under the lock: the job's slots and cores, its ``scheduled`` event, and its spec."""
        self._tasks.pop(rid, None)
        held = self.book.take(rid, where, self._yielded)
        cpus = rank_cpus(held, tasks)
        self.store.add_event(rid, "scheduled", detail={
            "policy": self.policy, "groups": {g: len(ds) for g, ds in held.items()}, "slots": held,
            "rank_cpus": cpus, "queued_s": time.time() - run["created"], "nice": job_nice()})
        self._running[rid] = Starting()
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

    def _warming(self) -> bool:
        """The starter is loading (started, alive, not yet ready, within its time): jobs wait for it."""
        st = self.starter
        return st is not None and st.alive() and not st.ready() and st.loading_for() < st.ready_timeout
