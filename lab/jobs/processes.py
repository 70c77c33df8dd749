"""A job's processes as the operating system sees them: whether a launcher is still alive, ending
a process group (SIGTERM, then SIGKILL after a grace period), a lower priority for job processes,
and which core each rank of a placed job gets."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from lab import procfs, settings
from lab.jobs.policies import cpu_of

STOP_GRACE_S = 3.0


def lower_priority(n: int) -> None:
    """A cold job process's priority, before it runs (``preexec_fn``): as every job's (LAB_JOB_NICE, LAB_JOB_IDLE)."""
    procfs.as_background_work(n, settings.job_idle())



def alive(pid: int | None, must_contain: str = "lab.train") -> bool:
    """A live, non-zombie process whose command line contains ``must_contain``."""
    if not pid:
        return False
    if Path(f"/proc/{pid}").exists():
        cmd = procfs.command_line(pid)  # waits out the moment after exec when it reads empty
        return cmd is not None and procfs.running(pid) and must_contain in cmd
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    except OSError:
        return False
    return not Path("/proc").exists()


def rank_cpus(held: dict[str, list[str]], tasks: int) -> list[int]:
    """Rank k -> core: the placement's groups taken in turn (rank 0 on the first group, ...)."""
    turns = []
    left = {g: len(ds) for g, ds in held.items()}
    while len(turns) < tasks and any(left.values()):
        for g in held:
            if left[g] and len(turns) < tasks:
                turns.append(g)
                left[g] -= 1
    return [c for c in (cpu_of(g) for g in turns) if c is not None]


def signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


def as_pid(v) -> int | None:
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def end_group(pid: int, gone) -> None:
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


__all__ = ["alive", "as_pid", "end_group", "lower_priority", "rank_cpus", "signal_name", "STOP_GRACE_S"]
