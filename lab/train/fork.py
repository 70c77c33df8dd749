"""How a warm process becomes a job's process: the side of warm starts that runs in the children.

The warm starter (:mod:`lab.train.starter`) forks a launcher for each job, and a launcher forked
that way forks each worker, with :func:`fork_child`: the child takes the streams, descriptors,
environment, folder and signal handlers a cold process would have (:func:`become`), then runs the
function it was given (the launcher's :func:`lab.train.launcher.run_job`, a rank's
:func:`lab.train.rank.run_rank`) on the data it holds already, and leaves with its exit code.
:class:`Forked` and the job manager's :class:`lab.train.warm.StartedLauncher` answer as a
:class:`subprocess.Popen` does, so the launcher and the job manager treat a forked process as a
started one.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

from lab import processes
from lab.settings import ROOT



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


def become(env: dict, cwd: str, stdout: int, stderr: int, keep: tuple[int, ...] = ()) -> None:
    """In a just-forked child: the standard streams, descriptors, environment, folder and signal
    handlers a process started cold with ``env`` in ``cwd`` would have."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    _close_fds(keep)
    # Python's own streams over the new descriptors, whatever objects the parent had put there
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)


def exit_with(main: Callable[[], int | None]) -> None:
    """Run ``main`` in this (forked) child and leave with its exit code: a child never returns
    into its parent's code, and leaves without the interpreter's shutdown, whose static destructors
    would meet the threads torch's c10d clients still hold ("terminate called without an active
    exception")."""
    code = 1
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - a child must never return into its parent's code
        traceback.print_exc()
        code = 1
    finally:
        try:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(int(code or 0))


def fork_child(main: Callable[[], int | None], env: dict, log_path: Path, keep_fds: tuple[int, ...] = (),
               cpu: int | None = None, *, new_session: bool = False) -> Forked:
    """A child forked from this process (so in its process group, unless ``new_session``), with the
    environment, descriptors and core a cold process would get, its standard output and error in
    ``log_path``, running ``main``."""
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
    if pid == 0:  # the child
        try:
            if new_session:
                os.setsid()  # its own session and process group, as start_new_session gives a cold one
            become(env, str(ROOT), err if new_session else devnull, err, keep_fds)
            processes.pin(cpu)
        except BaseException:  # noqa: BLE001 - a child must never return into its parent's code
            traceback.print_exc()  # into the child's log (stderr is its log once become() ran)
            os._exit(1)
        exit_with(main)
    os.close(err)
    os.close(devnull)
    return Forked(pid)
