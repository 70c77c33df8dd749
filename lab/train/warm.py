"""Warm starts: jobs that start without paying for Python, torch and the data again.

A cold job pays the interpreter's start and its imports (torch alone takes seconds) once for the
launcher and once more for every worker. The starter is one process, started with the app, that
has imported torch and the training code and loaded the bundled data set, and then waits. For each
job the job manager asks it for a launcher: it forks one, which leads a new session as a cold
launcher does and runs the very same :func:`lab.train.launcher.run_job` on the job's spec; that
launcher forks its workers from itself instead of starting a Python for each. Every job still has its own
processes (a new gloo group, its own heartbeats, pinning, stop, fault detection and checkpoints),
and its workers are the launcher's children in its process group, so stopping a job and the
workers' death with their launcher work as they do cold.

The starter talks to the job manager in JSON lines over its standard input and output:

* starter → manager, once: ``{"ready": true, "pid": P, "rss_mb": M}``;
* manager → starter: ``{"op": "start", "id": K, "spec": {...}, "env": {...}, "log": F}`` (the job's
  :class:`lab.train.launcher.JobSpec`), answered by ``{"id": K, "pid": P}`` or ``{"id": K, "error": "..."}``;
* starter → manager, whenever a launcher it forked ends: ``{"exit": P, "code": C}`` (a negative
  code: killed by that signal).

It never runs a job itself and ends with the process that started it (its standard input
closes). A launcher it forked outlives it, as a cold one outlives the app; the job manager then
judges that launcher by its process and the run store.

This module is the job manager's side: its handle on the starter (:class:`StarterHandle`, one per process
through :func:`shared_starter`) and on each launcher it forked (:class:`StartedLauncher`). What runs
in the children, a launcher or a worker becoming a job's process, is :mod:`lab.train.fork`; the
starter's own loop is :mod:`lab.train.starter`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

from lab import processes, settings
from lab.errors import LabError
from lab.processes import rss_mb
from lab.settings import ROOT, THREAD_VARIABLES
from lab.train.fork import PopenLike
from lab.train.launcher import JobSpec


class StartedLauncher(PopenLike):
    """A launcher the starter forked, as the job manager uses a :class:`subprocess.Popen`: its exit
    code comes from the starter that forked it. Whether it still runs is read from the process
    itself (its pid and start time), so its end is known even when that starter died before it could
    report it, and a restarted starter, which never knew this launcher, changes nothing."""

    POLL_S = 0.02  # each poll takes the lock the starter's reader thread holds
    REPORT_S = 2.0  # a launcher gone this long without a report from a live starter: its code is lost

    def __init__(self, starter: "StarterHandle", pid: int, generation: int | None = None):
        self.starter, self.pid, self.args = starter, pid, []
        self.generation = starter.restarts if generation is None else generation
        self.who = processes.identity(pid)
        self.returncode: int | None = None
        self._gone_at: float | None = None

    def _process_gone(self) -> bool:
        return not processes.still_runs(self.who)

    def poll(self) -> int | None:
        if self.returncode is None:
            code = self.starter.exit_code(self.pid, self.generation)
            if code is not None:
                self.returncode = code
            elif self._process_gone():
                # Its parent reaps it and reports at once; a parent that died, or was replaced, never will.
                now = time.monotonic()
                self._gone_at = self._gone_at or now
                if self.starter.generation_gone(self.generation) or now - self._gone_at > self.REPORT_S:
                    self.returncode = -signal.SIGKILL  # how it ended died with the starter
        return self.returncode


class StarterHandle:
    """The job manager's handle on its warm starter: started in the background, restarted when it
    dies or outgrows ``max_mb``, asked for one launcher per job."""

    def __init__(self, env: dict | None = None, max_mb: float | None = None, ready_timeout: float = 120.0):
        # Every request brings the job's whole environment; the starter's own holds none of the lab's
        # settings, so one starter serves every run store and every test.
        base = env if env is not None else settings.child_env()
        self.env = dict({k: v for k, v in base.items() if not k.startswith("LAB_")}, **THREAD_VARIABLES)
        self.max_mb = float(max_mb if max_mb is not None else settings.number("LAB_WARM_MAX_MB"))
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.rss: float = 0.0
        self.restarts = -1  # the first start is not a restart
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._codes: dict[int, int] = {}
        self._replies: dict[int, dict] = {}
        self._reply_cv = threading.Condition()
        self._next_id = 0
        self._closed = False
        self._started_at = 0.0

    # ----- life ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the starter process (returns at once; :meth:`wait_ready` waits for its imports)."""
        with self._lock:
            if self._closed or (self.proc is not None and self.proc.poll() is None):
                return
            self._ready.clear()
            self._started_at = time.monotonic()
            self.restarts += 1
            self.proc = subprocess.Popen([sys.executable, "-m", "lab.train.starter"], cwd=str(ROOT), env=self.env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
            self.pid = self.proc.pid
            threading.Thread(target=self._read, args=(self.proc, self.restarts), name="lab-warm-starter",
                             daemon=True).start()

    def _read(self, proc: subprocess.Popen, generation: int) -> None:
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "rss_mb" in msg:
                self.rss = float(msg["rss_mb"])
            if msg.get("ready"):
                self._ready.set()
            elif "exit" in msg:
                with self._reply_cv:
                    self._codes[(generation, int(msg["exit"]))] = int(msg["code"])
            elif "id" in msg:
                with self._reply_cv:
                    self._replies[msg["id"]] = msg
                    self._reply_cv.notify_all()
        with self._reply_cv:  # the starter is gone: nobody waits for an answer that cannot come
            self._reply_cv.notify_all()

    def alive(self) -> bool:
        p = self.proc
        return p is not None and p.poll() is None

    def loading_for(self) -> float:
        """Seconds since the starter process was (re)started."""
        return time.monotonic() - self._started_at

    def ready(self) -> bool:
        return self._ready.is_set() and self.alive()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Start it if it is not running (again), and wait until it has loaded what jobs need."""
        if self._closed:
            return False
        if not self.alive():
            self.start()
        self._ready.wait(self.ready_timeout if timeout is None else timeout)
        return self.ready()

    def check(self) -> None:
        """Restart a starter that died or outgrew its memory bound (it idles, so it should not grow)."""
        if self._closed:
            return
        if self.proc is not None and not self.alive():
            self.start()
        elif self.ready() and self.max_mb > 0 and rss_mb(self.pid) > self.max_mb:
            self.stop()
            self._closed = False
            self.start()

    def stop(self) -> None:
        with self._lock:
            self._closed = True
            p = self.proc
            if p is None:
                return
            try:
                p.stdin.close()  # it leaves on end of input
            except OSError:
                pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()

    # ----- jobs ---------------------------------------------------------------------------------
    def exit_code(self, pid: int, generation: int | None = None) -> int | None:
        """The exit code the starter reported for launcher ``pid`` (of the starter process numbered
        ``generation``, as :attr:`restarts` counts them), or None while none came."""
        with self._reply_cv:
            return self._codes.get((self.restarts if generation is None else generation, pid))

    def generation_gone(self, generation: int) -> bool:
        """Whether the starter process numbered ``generation`` has ended (it reports nothing more)."""
        return generation != self.restarts or not self.alive()

    def launch(self, spec: JobSpec, env: dict, log: str, timeout: float = 30.0) -> StartedLauncher:
        """Ask for a launcher of one job, forked by the starter (LabError when the starter cannot).
        The reply comes within milliseconds of a live starter; ``timeout`` bounds a starter that hangs."""
        if not self.ready():
            raise LabError("the warm starter is not running", where="warm start")
        with self._reply_cv:
            self._next_id += 1
            rid = self._next_id
            generation = self.restarts
        req = {"op": "start", "id": rid, "spec": spec.to_dict(), "env": dict(env, **THREAD_VARIABLES), "log": log}
        try:
            with self._lock:
                self.proc.stdin.write((json.dumps(req) + "\n").encode())
                self.proc.stdin.flush()
        except (OSError, ValueError, AttributeError) as exc:
            raise LabError(f"the warm starter did not take the job: {exc}", where="warm start") from None
        deadline = time.monotonic() + timeout
        with self._reply_cv:
            while rid not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    raise LabError("the warm starter did not answer", where="warm start")
                self._reply_cv.wait(min(left, 0.5))
            msg = self._replies.pop(rid)
        if "error" in msg:
            raise LabError(f"the warm starter could not start the job: {msg['error']}", where="warm start")
        return StartedLauncher(self, int(msg["pid"]), generation)


_SHARED: StarterHandle | None = None
_SHARED_LOCK = threading.Lock()


def shared_starter() -> StarterHandle:
    """This process's one warm starter (the app's): every job manager in the process uses it."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = StarterHandle()
        return _SHARED


__all__ = ["shared_starter", "StarterHandle", "StartedLauncher", "rss_mb"]
