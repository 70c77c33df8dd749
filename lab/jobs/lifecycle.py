"""A job's lifecycle after its start: its launcher's end, draining its last workers, freeing its slots and its
scratch folder, and finding launchers that vanished (killed, or a server that restarted)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time

from lab import processes, settings
from lab.errors import LabError
from lab.jobs.access import ANONYMOUS
from lab.processes import as_pid, signal_name
from lab.store.runs import ACTIVE
from lab.train.fork import PopenLike
from lab.train.launcher_record import launcher_gone, processes_of, remove_scratch, stale_after

log = logging.getLogger("lab.jobs")


DRAIN_S = 10.0  # workers of a dead launcher get this long to exit before they are killed


def this_process() -> dict:
    """This process as the store records it beside a queued run, so that a later manager can tell
    whether the one that queued it still runs."""
    return processes.identity()


def process_ended(process: dict | None) -> bool:
    """Whether the process recorded by :func:`this_process` has ended (after a reboot: every one)."""
    return not processes.still_runs(process)


def alive_since(pid, t: float) -> bool:
    """The process of a run without a launcher record (rank 0 under torchrun, which created the
    run): alive while a process ``pid`` runs the lab's training code and was created no later than
    ``t`` (one created after the run got its pid from the kernel again)."""
    made = processes.created(pid)
    return (made is not None and made <= t + 1.0 and processes.running(pid)
            and "lab.train" in processes.command_line(pid))


class Starting(PopenLike):
    """A job whose slots are taken and whose launcher is being started (outside the manager's lock)."""

    pid = None
    args: list = []
    returncode = None

    def poll(self) -> None:
        return None

    def send_signal(self, sig: int) -> None:  # nothing to signal yet: its claim finds it stopped
        pass


class Adopted(PopenLike):
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


class Lifecycle:
    """Ends, draining and recovery, part of :class:`lab.jobs.manager.JobManager`."""

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
            self._running[rid] = Adopted(rec)
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
            self.store.add_event(rid, "ended", detail={"status": new, "by": "job manager", "why": why})
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
            self.store.add_event(rid, "released", detail={
                "by": d["by"], "slots": slots, "worker_processes_left": 0, "killed": d["killed"],
                "waited_s": round(time.monotonic() - d["since"], 3), "scratch_folders_removed": scratch})
        except LabError:
            pass
        return True

    def draining(self) -> list[str]:
        """Jobs whose launcher is gone, waiting for their workers to exit before they are released."""
        with self._lock:
            return list(self._draining)

    # ----- finding dead launchers ---------------------------------------------------------------
    def sweep(self, min_interval: float = 1.0) -> list[str]:
        """Find jobs whose launcher died without a word (SIGKILL, a crash of the machine) while the
        app runs: this manager's own launchers that ended, and runs marked running elsewhere (the
        command line, another app) whose launcher is gone (:func:`lab.train.launcher_record.launcher_gone`;
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
            elif alive_since(r.pid, r.created):
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
            self.store.add_event(rid, "ended", detail={"status": "interrupted", "by": by, "why": why})
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
            if process_ended(info.get("queued_by")):
                adopted.append((r.id, str(info.get("owner") or ANONYMOUS)))
        for rid, owner in adopted:
            self.store.merge_info(rid, {"queued_by": this_process()})
            self.store.add_event(rid, "requeued", detail={"owner": owner, "by": "job manager at start",
                                                          "why": "the process that queued it has ended"})
            with self._lock:
                self._queue.append((rid, owner))
                if owner not in self._ring:
                    self._ring.append(owner)
                ours.add(rid)
        self._adopted = [rid for rid, _ in adopted]
        for r in runs.itertuples():
            rid = r.id
            if rid in ours:
                continue
            pid = as_pid(r.pid)
            if r.status == "running":
                rec = self.store.launcher(rid)
                gone = launcher_gone(rec) if rec is not None else (
                    None if alive_since(pid, r.created) else "its process is gone (killed, or the machine restarted)")
                if gone is None:
                    with self._lock:
                        self._orphans.add(rid)
                elif self._interrupt(rid, gone, "job manager at start"):
                    out.append(rid)
        if adopted:  # once the orphans are known: they count against the capacity from the first turn
            self._ensure_thread()
        return out

    def orphans(self) -> list[str]:
        """The runs a dead manager left running that still run (counted against the capacity until they end)."""
        with self._lock:
            candidates = list(self._orphans)
        alive = {rid for rid in candidates if self._status_or(rid) == "running"}
        with self._lock:
            self._orphans &= alive | (self._orphans - set(candidates))
            return sorted(self._orphans)
