"""Training jobs as OS processes: submit, queue, watch, stop, and notice the ones that vanished.

A job is ``python -m lab.train --scenario FILE --run-id ID`` started in a new session, so the
launcher leads a process group holding every worker and one ``killpg`` ends all of it. The run
row is created (status ``queued``) when the job is submitted; the launcher marks it ``running`` and
the workers write their measurements; pages poll the run store, never the process.

A :class:`JobManager` keeps a queue and starts at most ``capacity`` jobs at a time (default 1:
this machine has 2 cores) from a small daemon thread, so a preset such as "compare the three
optimisers" runs its jobs one after another. Pages keep one manager in ``st.cache_resource``.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from lab.errors import LabError
from lab.runs import ACTIVE, FINISHED, RunStore
from lab.scenario import Scenario

ROOT = Path(__file__).resolve().parent.parent
STOP_GRACE_S = 3.0


@dataclass(frozen=True)
class Job:
    """A handle on a submitted job: its run id, and its launcher's pid once it started."""

    run_id: str
    pid: int | None = None


def _proc_alive(pid: int | None, must_contain: str = "lab.train") -> bool:
    """A live, non-zombie process whose command line contains ``must_contain``."""
    if not pid:
        return False
    proc = Path(f"/proc/{pid}")
    if proc.exists():
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return False
        return state != "Z" and must_contain in cmd
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    except OSError:
        return False
    return not Path("/proc").exists()


class JobManager:
    def __init__(self, store_path: str | os.PathLike | None = None, capacity: int = 1, poll_s: float = 0.2):
        if capacity < 1:
            raise LabError(f"capacity must be at least 1 (got {capacity})", where="jobs")
        self.store = RunStore(store_path)
        self.capacity = capacity
        self.poll_s = poll_s
        self.started_at = time.time()
        self._queue: collections.deque[str] = collections.deque()
        self._running: dict[str, subprocess.Popen] = {}
        self._files: dict[str, tuple[Path, object]] = {}
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._closed = False

    # ----- folders -----------------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        d = self.store.data_dir() / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def log_path(self, run_id: str) -> Path:
        return self.store.data_dir() / "logs" / f"{run_id}.log"

    # ----- submitting --------------------------------------------------------------------------
    def submit(self, scenario: Scenario, name: str | None = None) -> Job:
        """Queue a run of ``scenario``; it starts as soon as there is capacity."""
        return self.submit_many([(scenario, name)])[0]

    def submit_many(self, items: Iterable[tuple[Scenario, str | None]]) -> list[Job]:
        """Queue several runs; they start one after another (``capacity`` at a time)."""
        jobs = []
        for sc, name in items:
            if not isinstance(sc, Scenario):
                raise LabError("a job needs a Scenario", where="jobs")
            from lab.train.launcher import preflight
            from lab.train.worker import check_scenario

            preflight(sc)
            check_scenario(sc)
            rid = self.store.create_run(sc, name=name, status="queued")
            with self._lock:
                self._queue.append(rid)
            jobs.append(Job(rid))
        self._ensure_thread()
        self._schedule()
        return [Job(j.run_id, self.pid(j.run_id)) for j in jobs]

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(target=self._loop, name="lab-jobs", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while not self._closed:
            try:
                self._schedule()
            except Exception:  # noqa: BLE001 - the scheduler must keep running
                pass
            with self._lock:
                idle = not self._queue and not self._running
            if idle:
                # nothing to do: the thread ends and is started again by the next submit
                with self._lock:
                    if not self._queue and not self._running:
                        self._thread = None
                        return
            time.sleep(self.poll_s)

    def _schedule(self) -> None:
        with self._lock:
            for rid, p in list(self._running.items()):
                if p.poll() is not None:
                    self._finish(rid, p)
            while len(self._running) < self.capacity and self._queue:
                rid = self._queue.popleft()
                try:
                    if self.store.status(rid) != "queued":  # stopped or deleted while it waited
                        continue
                except LabError:
                    continue
                self._start(rid)

    def _start(self, rid: str) -> None:
        run = self.store.get_run(rid)
        scenario_file = self._dir("jobs") / f"{rid}.json"
        scenario_file.write_text(Scenario.from_dict(run["scenario"]).to_json())
        log = open(self._dir("logs") / f"{rid}.log", "ab")
        env = dict(os.environ, LAB_DB=str(self.store.path.resolve()),
                   PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        try:
            p = subprocess.Popen([sys.executable, "-m", "lab.train", "--scenario", str(scenario_file),
                                  "--run-id", rid], cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=log, start_new_session=True)
        except OSError as exc:
            log.close()
            self.store.set_status(rid, "failed", error=f"could not start the job process: {exc}",
                                  only_from=ACTIVE)
            return
        self.store.update_run(rid, pid=p.pid)
        self._running[rid] = p
        self._files[rid] = (scenario_file, log)

    def _finish(self, rid: str, p: subprocess.Popen) -> None:
        """A job process ended: clean up, and make sure its run does not stay 'running'."""
        self._running.pop(rid, None)
        scenario_file, log = self._files.pop(rid, (None, None))
        if log is not None:
            log.close()
        if scenario_file is not None:
            scenario_file.unlink(missing_ok=True)
        code = p.returncode
        try:
            status = self.store.status(rid)
        except LabError:
            return
        if status in ACTIVE:
            why = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
                   else f"exit code {code}")
            self.store.set_status(rid, "failed", error=f"the job process ended ({why}) without finishing the run; "
                                  f"see {self.log_path(rid)}", only_from=ACTIVE)

    # ----- watching ----------------------------------------------------------------------------
    def status(self, run_id: str) -> str:
        return self.store.status(run_id)

    def pid(self, run_id: str) -> int | None:
        with self._lock:
            p = self._running.get(run_id)
        if p is not None:
            return p.pid
        try:
            return _as_pid(self.store.get_run(run_id)["pid"])
        except LabError:
            return None

    def queued(self) -> list[str]:
        with self._lock:
            return list(self._queue)

    def running(self) -> list[str]:
        with self._lock:
            return list(self._running)

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

    # ----- stopping ----------------------------------------------------------------------------
    def stop(self, run_id: str) -> bool:
        """Stop a queued or running job: a queued one never starts; a running one's whole process
        group is ended (SIGTERM, then SIGKILL after a grace period). Returns whether it was active."""
        with self._lock:
            if run_id in self._queue:
                self._queue.remove(run_id)
                return self.store.set_status(run_id, "stopped", error="stopped before it started",
                                             only_from=("queued",))
            p = self._running.get(run_id)
        try:
            run = self.store.get_run(run_id)
        except LabError:
            return False
        # marked first, so the launcher's own "stopped by SIGTERM" or a last "done" cannot overwrite it
        was_active = self.store.set_status(run_id, "stopped", error="stopped by the user", only_from=ACTIVE)
        if p is not None:
            _end_group(p.pid, lambda: p.poll() is not None)
            try:
                p.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            with self._lock:
                if p.poll() is not None and run_id in self._running:
                    self._finish(run_id, p)
        elif run["status"] == "running" and _proc_alive(run["pid"]):  # started elsewhere
            _end_group(run["pid"], lambda: not _proc_alive(run["pid"]))
        return was_active

    def mark_interrupted(self) -> list[str]:
        """Runs marked running whose process is gone (and queued runs nobody will start, left by an
        earlier manager) become 'interrupted'. Returns their ids."""
        out = []
        runs = self.store.list_runs(statuses=ACTIVE)
        with self._lock:
            ours = set(self._queue) | set(self._running)
        for _, r in runs.iterrows():
            rid = r["id"]
            if rid in ours:
                continue
            pid = _as_pid(r["pid"])
            if r["status"] == "running":
                if not _proc_alive(pid):
                    if self.store.set_status(rid, "interrupted", only_from=("running",),
                                             error="the job's process ended without reporting (killed, or the "
                                                   "machine restarted)"):
                        out.append(rid)
            elif r["created"] < self.started_at and not _proc_alive(pid):
                if self.store.set_status(rid, "interrupted", only_from=("queued",),
                                         error="queued by an earlier session of the lab that has ended"):
                    out.append(rid)
        return out

    def shutdown(self, stop_running: bool = True) -> None:
        with self._lock:
            queued = list(self._queue)
            running = list(self._running)
        for rid in queued:
            self.stop(rid)
        if stop_running:
            for rid in running:
                self.stop(rid)
        self._closed = True


def _as_pid(v) -> int | None:
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def _end_group(pid: int, gone) -> None:
    """SIGTERM the process group led by ``pid`` (or just ``pid`` when it does not lead one), then
    SIGKILL after the grace period."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    lead = pgid == pid

    def send(sig):
        try:
            if lead:
                os.killpg(pgid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            pass

    send(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:
        if gone():
            return
        time.sleep(0.05)
    send(signal.SIGKILL)


__all__ = ["Job", "JobManager"]
