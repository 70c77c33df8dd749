"""This machine's processes as /proc shows them, and the chores every part of the lab that starts
processes shares: ending and reaping a set of children, reading the end of their logs. Nothing here
knows about runs or jobs; the launcher and the job manager build on it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterable


COMMAND_LINE_WAIT_S = 0.5


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and ')')."""
    try:
        return Path(f"/proc/{int(pid)}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError, ValueError):
        return None


def state(pid: int) -> str | None:
    """The process's state letter (R, S, D, T, Z, X...), or None when there is no such process."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def start_ticks(pid: int | None) -> int | None:
    """When process ``pid`` started (clock ticks since boot, stat field 22), or None when there is
    no such process. With the pid it names one process for the whole boot."""
    if not pid:
        return None
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def _read_command_line(pid: int) -> str | None:
    try:
        return Path(f"/proc/{int(pid)}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError):
        return None


def command_line(pid: int, wait_s: float = COMMAND_LINE_WAIT_S) -> str | None:
    """The process's command line, words joined by spaces, or None when there is no such process;
    "" for a kernel thread and for a dying process that has released its memory.

    Right after exec a new process's command line also reads empty for a moment, until its new
    memory is set up; a live process that reads empty is read again for up to ``wait_s`` seconds
    (a dying one turns into a zombie meanwhile, which ends the wait)."""
    cmd = _read_command_line(pid)
    deadline = time.monotonic() + wait_s
    while cmd == "" and running(pid) and time.monotonic() < deadline:
        time.sleep(0.005)
        cmd = _read_command_line(pid)
    return cmd


def running(pid: int) -> bool:
    """A live process that is not a zombie."""
    s = state(pid)
    return s is not None and s not in ("Z", "X")


def pids_whose_command_has(needle: str, exclude: Iterable[int] = ()) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``needle``."""
    skip = set(exclude)
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in skip:
            continue
        cmd = command_line(int(d.name), wait_s=0.0)  # kernel threads read empty for good
        if cmd is not None and needle in cmd + " " and running(int(d.name)):
            out.append(int(d.name))
    return out


def boot_id() -> str:
    """The kernel's id of this boot ("" where there is none): a pid means nothing after a reboot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def rss_mb(pid: int | None = None) -> float:
    """Resident memory of a process in MB (this one by default; 0 when it cannot be read)."""
    try:
        for line in Path(f"/proc/{pid or 'self'}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def kill_pids(pids: Iterable[int]) -> list[int]:
    """SIGKILL each of ``pids`` (processes that may not be this one's children); returns the ones
    that were there to signal."""
    killed = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed


def kill_and_reap(procs: Iterable[subprocess.Popen], grace_s: float) -> None:
    """SIGKILL every process of ``procs`` still running, then reap them all, waiting at most
    ``grace_s`` seconds in all (a process in uninterruptible sleep can outlast it)."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            try:
                p.kill()
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass


def as_background_work(nice: int, idle: bool) -> None:
    """This process (and the children it starts) as background work: ``nice`` niceness, and with ``idle``
    Linux's SCHED_IDLE policy, under which it runs only when no other work wants a core and any page view that
    wakes up takes the core at once (nice alone only lowers its share). Where either is not allowed, it keeps
    the priority it has."""
    try:
        if nice:
            os.nice(nice)
    except OSError:
        pass
    if idle and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            pass


def last_lines(path: str | os.PathLike, lines: int) -> list[str]:
    """The last ``lines`` lines of a text file ([] when it cannot be read)."""
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return []
    return text[-lines:]


def tail_text(path: str | os.PathLike, max_bytes: int = 4000) -> str:
    """The end of a (log) file, at most ``max_bytes`` bytes, decoded leniently."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""
