"""This machine's processes, through psutil: who a process is (pid, process group, creation time,
boot), whether it still runs, the members of a job's process group, ending a group or a set of
children, background priority, and the ends of their logs. Nothing here knows about runs or jobs;
the launcher and the job manager build on it.

A pid alone names nothing for long: the kernel hands it out again once its process is gone. A
process is therefore named by its pid with its creation time (and the boot it ran in), and a
job's processes by its process group with the time span in which the job created them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterable

import psutil

STOP_GRACE_S = 3.0
_DEAD = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def as_pid(v) -> int | None:
    """``v`` as a pid, or None when it is not a positive whole number."""
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def boot_id() -> str:
    """This boot ("" where it cannot be told): a pid means nothing after a reboot."""
    try:
        return f"{psutil.boot_time():.0f}"
    except (OSError, RuntimeError):
        return ""


def created(pid: int | None) -> float | None:
    """When process ``pid`` was created (Unix seconds), or None when there is no such process. With
    the pid it names one process for the whole boot."""
    pid = as_pid(pid)
    if pid is None:
        return None
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def identity(pid: int | None = None) -> dict:
    """Who process ``pid`` (default this one) is: pid, process group, creation time and boot."""
    pid = os.getpid() if pid is None else pid
    try:
        pgid = os.getpgid(pid)
    except OSError:
        pgid = None
    return {"pid": pid, "pgid": pgid, "created": created(pid), "boot": boot_id()}


def running(pid: int | None) -> bool:
    """A live process that is not a zombie."""
    pid = as_pid(pid)
    if pid is None:
        return False
    try:
        return psutil.Process(pid).status() not in _DEAD
    except (psutil.Error, OSError):
        return False


def still_runs(who: dict | None) -> bool:
    """Whether the process an :func:`identity` describes still runs (not a reused pid, not a zombie,
    not from an earlier boot)."""
    if not isinstance(who, dict) or not as_pid(who.get("pid")):
        return False
    if who.get("boot") and boot_id() and who["boot"] != boot_id():
        return False
    try:
        p = psutil.Process(as_pid(who["pid"]))
        return (who.get("created") is None or p.create_time() == who["created"]) and p.status() not in _DEAD
    except (psutil.Error, OSError):
        return False


def group_members(pgid: int | None, since: float | None = None, until: float | None = None,
                  exclude: Iterable[int] = ()) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid`` created within [``since``, ``until``]:
    a job's processes are all created while its launcher runs, so a group id the kernel handed out
    again later names none of them."""
    pgid = as_pid(pgid)
    if pgid is None:
        return []
    skip = set(exclude)
    out = []
    for p in psutil.process_iter(["pid", "create_time", "status"]):
        pid = p.info["pid"]
        if pid in skip or p.info["status"] in _DEAD:
            continue
        t = p.info["create_time"]
        if t is None or (since is not None and t < since - 0.02) or (until is not None and t > until + 0.02):
            continue
        try:
            if os.getpgid(pid) == pgid:
                out.append(pid)
        except OSError:  # ended meanwhile
            pass
    return sorted(out)


def command_line(pid: int | None) -> str:
    """The process's command line, words joined by spaces ("" when there is no such process)."""
    try:
        return " ".join(psutil.Process(as_pid(pid)).cmdline())
    except (psutil.Error, OSError, ValueError, TypeError):
        return ""


def descendants(who: dict, since: float | None = None) -> list[int]:
    """The live descendants, created since ``since``, of the process an :func:`identity` describes,
    while it runs; [] once it has ended."""
    if not still_runs(who):
        return []
    out = []
    try:
        for c in psutil.Process(as_pid(who["pid"])).children(recursive=True):
            try:
                if c.status() not in _DEAD and (since is None or c.create_time() >= since - 0.02):
                    out.append(c.pid)
            except psutil.Error:  # ended meanwhile
                pass
    except (psutil.Error, OSError):
        return []
    return sorted(out)


def rss_mb(pid: int | None = None) -> float:
    """Resident memory of a process in MB (this one by default; 0 when it cannot be read)."""
    try:
        return psutil.Process(pid or os.getpid()).memory_info().rss / 2**20
    except (psutil.Error, OSError):
        return 0.0


def nice_of(pid: int) -> int | None:
    try:
        return psutil.Process(pid).nice()
    except (psutil.Error, OSError):
        return None


def signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


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


def end_group(pgid: int | None, gone: Callable[[], bool], whole_group: bool = True) -> None:
    """SIGTERM process group ``pgid`` (or, without ``whole_group``, the one process ``pgid``), then
    SIGKILL once the grace period passed and ``gone`` still says no."""
    if pgid is None:
        return

    def send(sig):
        try:
            if whole_group:
                os.killpg(pgid, sig)
            else:
                os.kill(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    send(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:
        if gone():
            return
        time.sleep(0.05)
    send(signal.SIGKILL)


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


def pin(cpu: int | None) -> None:
    """This process on core ``cpu`` alone (where the machine allows it)."""
    if cpu is None:
        return
    try:
        os.sched_setaffinity(0, {cpu})
    except (OSError, AttributeError):
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


# ---- the machine's load while a job runs ------------------------------------------------------------
PSI_CPU = Path("/proc/pressure/cpu")


def _psi_some_s() -> float | None:
    """Seconds in which some runnable task waited for a CPU, since boot (Linux's pressure stall
    information), or None where the kernel does not keep it."""
    try:
        for line in PSI_CPU.read_text().splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1]) / 1e6
    except (OSError, ValueError, IndexError):
        pass
    return None


def _busy_cpu_s() -> float:
    """CPU seconds every core spent on anything but idling, since boot."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _fork_server_pid() -> int | None:
    """Multiprocessing's fork server in this process, once started (:func:`lab.comm.spawn.run_local` forks its
    ranks from it), or None."""
    import multiprocessing.forkserver as fs

    return as_pid(getattr(getattr(fs, "_forkserver", None), "_forkserver_pid", None))


def _cpu_s(p: psutil.Process) -> float:
    """CPU seconds of process ``p`` (every thread) and of the children it has reaped, theirs included."""
    t = p.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


class JobCpu:
    """The CPU a job took on this machine, counted from the moment it is made: this process's, and that of every
    process the job starts here, however it starts them and whoever reaps them.

    It sums the process tree: this process, every child it starts from now on and their descendants, and
    multiprocessing's fork server with the ranks it forks. A process that ended counts through its parent, which
    reaped it (the kernel adds a reaped child's CPU, and all it had reaped, to its parent's account): a rank
    reaped by this process counts in this process's children's time, a rank the fork server forked and reaped
    counts in the fork server's. The children this process already had when the count began (a warm starter
    beside a page, a cluster a test started) are not the job's, nor is anything they start. A rank that runs
    on this machine outside the tree (a Ray actor, a child of Ray's own daemon) reports its CPU, which
    :meth:`add` counts."""

    def __init__(self) -> None:
        self._me = psutil.Process()
        server = _fork_server_pid()
        self._before = {(c.pid, c.create_time()) for c in self._children() if c.pid != server}
        self._start = self._now()
        self.outside = 0.0

    def add(self, seconds: float) -> None:
        """Count ``seconds`` of CPU that a rank of the job took on this machine outside the tree."""
        self.outside += max(0.0, float(seconds))

    def _children(self) -> list[psutil.Process]:
        try:
            return self._me.children()
        except psutil.Error:
            return []

    def _tree(self) -> list[psutil.Process]:
        out = [self._me]
        for c in self._children():
            try:
                if (c.pid, c.create_time()) in self._before:
                    continue
                out.append(c)
                out.extend(c.children(recursive=True))
            except psutil.Error:  # it ended meanwhile: its parent holds its time
                pass
        return out

    def _now(self) -> float:
        total = 0.0
        for p in self._tree():
            try:
                total += _cpu_s(p)
            except psutil.Error:  # it ended meanwhile: its parent holds its time
                pass
        return total

    def seconds(self) -> float:
        """CPU seconds the job took since the count began. Read it once the job's processes are reaped: a process
        whose parent ended before it lost its way into the count."""
        return max(0.0, self._now() - self._start) + self.outside


class LoadMeter:
    """How busy the machine was with other work between its creation and :meth:`result`.

    The job's own CPU time (:class:`JobCpu`: this process and every process it starts) is taken from the
    machine's busy time; what is left is what other processes took."""

    def __init__(self) -> None:
        self.own = JobCpu()
        self.t0, self.busy0, self.psi0 = time.time(), _busy_cpu_s(), _psi_some_s()

    def result(self) -> dict:
        """``wall_s``; ``cpus``; ``own_cpu_s`` (CPU seconds the job took; ``outside_cpu_s`` of them reported by
        its ranks outside this process's tree, :meth:`JobCpu.add`); ``others_cpu_s`` (CPU seconds other
        processes took); ``others_share`` (that
        share of every core's time); ``pressure`` (share of the time some task waited for a CPU, None
        without pressure stall information); ``load_average`` (1 minute, at the end)."""
        wall = max(time.time() - self.t0, 1e-9)
        cpus = os.cpu_count() or 1
        own = self.own.seconds()
        others = max(0.0, (_busy_cpu_s() - self.busy0) - own)
        psi = _psi_some_s()
        return {"wall_s": round(wall, 3), "cpus": cpus, "own_cpu_s": round(own, 3),
                "outside_cpu_s": round(self.own.outside, 3), "others_cpu_s": round(others, 3),
                "others_share": round(min(1.0, others / (wall * cpus)), 4),
                "pressure": None if psi is None or self.psi0 is None else round(min(1.0, (psi - self.psi0) / wall), 4),
                "load_average": round(os.getloadavg()[0], 2)}


#: A run during which other work took more than this share of the machine's CPU time was measured under
#: load: its step time says as much about the other work as about the run.
LOADED_SHARE = 0.15


def under_load(load: dict | None) -> bool:
    """Whether a :meth:`LoadMeter.result` says the machine was busy with other work (False for none)."""
    return bool(load) and float(load.get("others_share", 0.0)) > LOADED_SHARE


def load_words(load: dict | None) -> str:
    """One sentence on the load a run was measured under ("" for a quiet run, or one measured before
    load was recorded)."""
    if not under_load(load):
        return ""
    pressure = load.get("pressure")
    return (f"Measured under load: other work took {load['others_share'] * 100:.0f} % of this machine's CPU time "
            "while it ran" + (f", and some task waited for a CPU {pressure * 100:.0f} % of the time" if pressure
                              else "") + ". Its times are slower than a quiet machine gives.")
