"""How a warm process becomes a job's process: the side of warm starts that runs in the children.

The warm starter (:mod:`lab.train.starter`) forks a launcher for each job with :func:`become` and
:func:`run_main`; a launcher forked that way forks each worker with :func:`fork_worker`. Each child
takes the streams, descriptors, environment, folder, signal handlers and process title a cold
``python -m lab.train`` would have, then runs the very same entry. :class:`Forked` and the job
manager's :class:`lab.train.warm.StartedLauncher` answer as a :class:`subprocess.Popen` does, so
the launcher and the job manager treat a forked process as a started one.
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import setproctitle

from lab.settings import ROOT

#: True in the starter and every launcher it forks: such a launcher forks its workers.
FORK_WORKERS = False



# ---------------------------------------------------------------------------------------------
# A forked child, as the launcher and the job manager use a subprocess.Popen
# ---------------------------------------------------------------------------------------------
class PopenLike:
    """What :class:`subprocess.Popen` offers beside ``poll``, for a child this module started another
    way: ``wait``, ``send_signal``, ``kill`` and ``terminate``. A subclass says how ``poll`` learns
    the exit code."""

    pid: int
    args: list[str]
    returncode: int | None
    POLL_S = 0.01

    def poll(self) -> int | None:
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(self.POLL_S)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Forked(PopenLike):
    """A child process started by ``os.fork`` in this process: ``pid``, ``poll``, ``wait``,
    ``returncode``, ``kill``, ``terminate`` and ``send_signal`` as :class:`subprocess.Popen` has them."""

    def __init__(self, pid: int, args: list[str] | None = None):
        self.pid = pid
        self.args = args or []
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: it is gone, how is not known
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def _close_fds(keep: tuple[int, ...]) -> None:
    """Close every descriptor above 2 but ``keep``: a child holds only what a cold start would."""
    try:
        fds = [int(f) for f in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 256))
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def claim_title_space() -> None:
    """Let setproctitle take the memory of this process's command line and environment for titles
    now, while the environment is the one it started with: a child that changed its environment
    first would have only the command line's few bytes for its title."""
    setproctitle.setproctitle(setproctitle.getproctitle())


def lab_train_args(argv: list[str]) -> list[str]:
    """The arguments after ``python -m lab.train`` in a command line."""
    return list(argv[3:]) if list(argv[:3]) == [sys.executable, "-m", "lab.train"] else list(argv)


def become(env: dict, cwd: str, stdout: int, stderr: int, keep: tuple[int, ...] = ()) -> None:
    """In a just-forked child: the standard streams, descriptors, environment, folder and signal
    handlers a process started cold with ``env`` in ``cwd`` would have."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    _close_fds(keep)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)


def run_main(argv: list[str]) -> None:
    """Run ``python -m lab.train`` with ``argv`` in this (forked) process, as the interpreter runs
    it for a cold start (``runpy``, the module already imported), and leave with its exit code.
    The process takes that command line as its title: ``ps`` and the lab's own process scans
    (:func:`lab.train.launcher.processes_of`) find a job's processes by it."""
    code = 1
    try:
        setproctitle.setproctitle(" ".join([sys.executable, "-m", "lab.train", *argv]))
        sys.argv = [str(Path(ROOT) / "lab" / "train" / "__main__.py"), *argv]
        runpy.run_module("lab.train", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a child must never return into its parent's code
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(int(code or 0))


def fork_worker(argv: list[str], env: dict, log_path: Path, keep_fds: tuple[int, ...] = (),
                cpu: int | None = None) -> Forked:
    """A worker of a warm launcher: forked from it (so it is its child, in its process group), with
    the environment, descriptors and core a cold ``python -m lab.train`` worker would get."""
    sys.stdout.flush()
    sys.stderr.flush()
    err = os.open(str(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        pid = os.fork()
    except OSError:
        os.close(err)
        os.close(devnull)
        raise
    if pid == 0:  # the worker
        try:
            become(env, str(ROOT), devnull, err, keep_fds)
            if cpu is not None:
                try:
                    os.sched_setaffinity(0, {cpu})
                except (OSError, AttributeError):
                    pass
        except BaseException:  # noqa: BLE001 - a child must never return into its parent's code
            traceback.print_exc()  # into the worker's log (stderr is its log once become() ran)
            os._exit(1)
        run_main(lab_train_args(argv))
    os.close(err)
    os.close(devnull)
    return Forked(pid, argv)
