"""Who may act on a job, and the actions: the teacher's sign-in and limits, stopping, releasing and deleting a run,
each refused for another student's run unless the actor is the teacher."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from typing import Iterable

from lab import processes
from lab.errors import LabError
from lab.jobs.access import (
    TEACHER,
    can_manage,
    check_manage,
    delete_runs,
)
from lab.jobs.lifecycle import DRAIN_S, alive_since
from lab.jobs.limits import Limits
from lab.processes import STOP_GRACE_S, as_pid, end_group
from lab.store.runs import ACTIVE
from lab.train.launcher_record import launcher_gone, processes_of, remove_scratch

log = logging.getLogger("lab.jobs")


LIMIT = "limit"  # who stopped a job that ran past the time limit


class Actions:
    """Acting on jobs, part of :class:`lab.jobs.manager.JobManager`."""

    # ----- stopping and releasing -------------------------------------------------------------
    def _failed(self, where: str, exc: BaseException) -> None:
        log.exception("%s failed", where)
        with self._lock:
            self.failures = (self.failures + [(time.time(), f"{where}: {type(exc).__name__}: {exc}")])[-20:]

    def sign_in_teacher(self, owner: str, claim, client: str | None = None) -> bool:
        """Make ``owner``, at the address ``client``, the teacher for this server when ``claim`` is
        LAB_TEACHER_TOKEN."""
        return self.roster.sign_in(owner, claim, client)

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
        SIGKILL after a grace period). The stop event and the run's info record who stopped it.
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
                self.store.add_event(run_id, "stop", detail={**detail, "while": "queued"})
                self.store.add_event(run_id, "ended", detail={"status": "stopped"})
            return ok
        try:
            run = self.store.get_run(run_id)
        except LabError:
            return False
        # marked first, so the launcher's own "stopped by SIGTERM" or a last "done" cannot overwrite it
        was_active = self.store.set_status(run_id, "stopped", error=f"stopped by {_who(by)}", only_from=ACTIVE)
        if was_active:
            self.store.merge_info(run_id, {"stopped_by": by})
            self.store.add_event(run_id, "stop", detail={**detail, "while": run["status"]})
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
        return alive_since(run["pid"], run["created"])

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
        self.store.add_event(run_id, "released", detail=detail)
        return detail


def _who(by: str) -> str:
    """How a stop reads in the run's error: the teacher, its session, or the lab itself."""
    if by == TEACHER:
        return "the teacher"
    if by in ("shutdown",):
        return "the lab shutting down"
    if by == LIMIT:
        return "the time limit the teacher set for a job"
    return f"session {by}"
