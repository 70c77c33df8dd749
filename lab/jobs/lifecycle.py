"""A job's lifecycle after its start, in two parts of the job manager with their own state: :class:`Drains`
(a job whose launcher ended waits for its last workers, then its slots are freed and its scratch folder goes;
the Release button does the same at once) and :class:`Sweeper` (launchers that vanished: killed, or a server
that restarted)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from lab import processes, settings
from lab.errors import LabError
from lab.jobs.access import ANONYMOUS
from lab.processes import as_pid
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


def status_or(store, run_id: str, default: str | None = None) -> str | None:
    """The run's status, or ``default`` when it was deleted."""
    try:
        return store.status(run_id)
    except LabError:
        return default


def launcher_alive(store, run_id: str, run: dict) -> bool:
    """Whether the launcher of ``run`` (started by any process: this manager, another, the command line) runs."""
    rec = store.job_records.launcher(run_id)
    if rec is not None:
        return launcher_gone(rec) is None
    return alive_since(run["pid"], run["created"])


def mark_gone(store, run_id: str, why: str, by: str) -> bool:
    """A running run whose launcher is gone without a word becomes interrupted, with why and by whom; whether
    it was running."""
    changed = store.set_status(run_id, "interrupted", only_from=("running",),
                               error=f"the job ended without reporting: {why}")
    if changed:
        store.job_records.set_heartbeats(run_id, [])
        store.job_records.add_event(run_id, "ended", detail={"status": "interrupted", "by": by, "why": why})
    return changed


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


class Drains:
    """Jobs whose launcher is gone, each waiting for its last worker to exit before its slots (in ``book``) and
    its scratch folder are freed. ``lock`` is the manager's, which also guards the book."""

    def __init__(self, store, book, lock):
        self.store, self.book, self.lock = store, book, lock
        self.waiting: dict[str, dict] = {}  # run id -> its scratch folder, since when, by whom, what was killed

    def ids(self) -> list[str]:
        with self.lock:
            return list(self.waiting)

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def __contains__(self, run_id: str) -> bool:
        return run_id in self.waiting

    def begin(self, run_id: str, by: str) -> None:
        with self.lock:
            rec = self.store.job_records.launcher(run_id) or {}
            self.waiting.setdefault(run_id, {"since": time.monotonic(), "scratch": rec.get("scratch"), "by": by,
                                             "killed": []})
            self.step(run_id)

    def step_all(self) -> None:
        with self.lock:
            for rid in list(self.waiting):
                self.step(rid)

    def step(self, run_id: str) -> bool:
        """Release the job once its last process is gone (SIGKILL for those left after DRAIN_S): its slots are
        freed and its scratch folder goes. Returns whether it is released."""
        with self.lock:
            d = self.waiting.get(run_id)
            if d is None:
                return True
            left = processes_of(run_id, self.store, exclude=(os.getpid(),))
            if left and time.monotonic() - d["since"] > DRAIN_S:
                d["killed"] += processes.kill_pids(left)
                return False
            if left:
                return False
            del self.waiting[run_id]
            slots = self.book.release(run_id)
        scratch = remove_scratch(run_id, d["scratch"])
        try:
            self.store.job_records.set_heartbeats(run_id, [])
            self.store.job_records.add_event(run_id, "released", detail={
                "by": d["by"], "slots": slots, "worker_processes_left": 0, "killed": d["killed"],
                "waited_s": round(time.monotonic() - d["since"], 3), "scratch_folders_removed": scratch})
        except LabError:
            pass
        return True

    def release(self, run_id: str, run: dict, by: str) -> dict:
        """What the Release button does for a job that no longer runs: processes still carrying its run id are
        killed and waited for, a run left 'running' by a vanished process becomes interrupted, its intermediate
        checkpoints, heartbeats and scratch go (final.pt and the logs stay). Returns what was released."""
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
        scratch = remove_scratch(run_id, (self.store.job_records.launcher(run_id) or {}).get("scratch"))
        self.store.job_records.set_heartbeats(run_id, [])
        with self.lock:
            self.waiting.pop(run_id, None)
            slots = self.book.release(run_id)
        detail = {"by": "release button", "released_by": by, "killed": killed, "checkpoint_files_removed": removed,
                  "slots": slots, "scratch_folders_removed": scratch, "kept": "final.pt and the logs"}
        self.store.job_records.add_event(run_id, "released", detail=detail)
        return detail


class Sweeper:
    """Finds the runs whose launcher died without a word while the app runs, and at a manager's start those
    another process left: runs it left running (their launcher gone, or still running: orphans that hold cores
    until they end) and runs it left queued (adopted, queued here again in their order)."""

    def __init__(self, store):
        self.store = store
        self.suspects: dict[str, float] = {}  # run id -> first sweep that found its process gone
        self.last = 0.0
        self.orphan_ids: set[str] = set()
        self.adopted: list[str] = []  # the queued runs taken over at the start from a process that ended
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def due(self, min_interval: float) -> bool:
        """Whether a sweep is due (none in the last ``min_interval`` seconds); if so it starts now."""
        now = time.monotonic()
        with self.lock:
            if now - self.last < min_interval:
                return False
            self.last = now
            return True

    def gone_elsewhere(self, ours: set[str]) -> list[tuple[str, str]]:
        """(run id, why) of runs marked running, not this manager's (``ours``), whose launcher is gone
        (:func:`lab.train.launcher_record.launcher_gone`); a run without a launcher record (e.g. under torchrun)
        once its process has been gone for LAB_LAUNCHER_STALE seconds."""
        now = time.monotonic()
        out, seen = [], set()
        for r in self.store.list_runs(statuses=("running",)).itertuples():
            seen.add(r.id)
            if r.id in ours:
                continue
            rec = self.store.job_records.launcher(r.id)
            if rec is not None:
                why = launcher_gone(rec)
            elif alive_since(r.pid, r.created):
                why = None
            else:  # no launcher record (torchrun restarts its rank 0): only when gone for a while
                with self.lock:
                    first = self.suspects.setdefault(r.id, now)
                why = (f"its process (pid {as_pid(r.pid)}) has been gone for {now - first:.0f} s"
                       if now - first >= stale_after() else None)
            if why is not None:
                out.append((r.id, why))
        with self.lock:
            for rid in (set(self.suspects) - seen) | {rid for rid, _ in out}:
                self.suspects.pop(rid, None)
        return out

    def at_start(self, ours: set[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """What a manager starting now takes over: (run id, student) of queued runs whose queuing process has
        ended, oldest first (recorded as requeued by this process); and (run id, why) of running runs whose
        launcher is gone. Runs left running whose launcher lives on become :meth:`orphans`."""
        runs = self.store.list_runs(statuses=ACTIVE)
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
            self.store.job_records.add_event(rid, "requeued", detail={"owner": owner, "by": "job manager at start",
                                                          "why": "the process that queued it has ended"})
        self.adopted = [rid for rid, _ in adopted]
        ours = ours | set(self.adopted)
        gone = []
        for r in runs.itertuples():
            if r.id in ours or r.status != "running":
                continue
            rec = self.store.job_records.launcher(r.id)
            why = launcher_gone(rec) if rec is not None else (
                None if alive_since(as_pid(r.pid), r.created) else "its process is gone (killed, or the machine restarted)")
            if why is None:
                with self.lock:
                    self.orphan_ids.add(r.id)
            else:
                gone.append((r.id, why))
        return adopted, gone

    def orphans(self) -> list[str]:
        """The runs a dead manager left running that still run (counted against the capacity until they end)."""
        with self.lock:
            candidates = list(self.orphan_ids)
        alive = {rid for rid in candidates if status_or(self.store, rid) == "running"}
        with self.lock:
            self.orphan_ids &= alive | (self.orphan_ids - set(candidates))
            return sorted(self.orphan_ids)

    def start(self, sweep, closed, failed, every_s: float | None = None) -> None:
        """Call ``sweep()`` every ``every_s`` seconds (LAB_SWEEP_S, default 5) on a daemon thread until
        ``closed()``, so dead launchers are found while no page polls; ``failed(where, exc)`` hears what it caught."""
        every = every_s if every_s is not None else settings.number("LAB_SWEEP_S")
        with self.lock:
            if self.thread is not None and self.thread.is_alive():
                return

            def loop():
                while not closed():
                    time.sleep(every)
                    try:
                        sweep()
                    except Exception as exc:  # noqa: BLE001 - the sweeper must keep running, and says what it caught
                        failed("the sweep", exc)

            self.thread = threading.Thread(target=loop, name="lab-jobs-sweep", daemon=True)
            self.thread.start()
