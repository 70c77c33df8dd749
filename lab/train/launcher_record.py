"""What a launcher leaves for others to find it by: who it is (pid, group, creation time, boot, host) as the run
store keeps it, whether it is gone, the job's processes, its scratch folder and its workers' logs."""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from lab import processes, settings
from lab.errors import LabError
from lab.store.runs import RunStore


def logs_dir(store: RunStore, run_id: str) -> Path:
    return store.data_dir() / "logs" / run_id


def processes_of(run_id: str, store: RunStore | str | os.PathLike | None = None,
                 exclude: tuple[int, ...] = ()) -> list[int]:
    """Live (non-zombie) processes of the job of ``run_id`` ([] before a launcher claimed the run, and
    for a launcher on another machine). A launcher that leads its process group (the job manager's,
    or one started from an interactive shell) holds the job in it: its members created since the
    launcher was. One in another's group (a script's, a test calling :func:`launch`) shares it with its
    callers: then the descendants it created since it claimed the run, while it runs (its workers
    die with it)."""
    store = store if isinstance(store, RunStore) else RunStore(store)
    try:
        rec = store.job_records.launcher(run_id)
    except LabError:
        return []
    if not rec or rec.get("host") != host_name() or not rec.get("pid"):
        return []
    if rec.get("boot") and processes.boot_id() and rec["boot"] != processes.boot_id():
        return []
    if rec.get("pgid") and rec["pgid"] == rec["pid"]:
        return processes.group_members(rec["pgid"], since=rec.get("created") or rec.get("started"),
                                       exclude=exclude)
    return [p for p in processes.descendants(rec, since=rec.get("started")) if p not in exclude]


def scratch_prefix(run_id: str) -> str:
    return f"lab-job-{run_id}-"


def remove_scratch(run_id: str, folder: str | os.PathLike | None = None) -> int:
    """Delete the scratch folders a launcher of this run left behind (a launcher killed with
    SIGKILL cannot clean up): ``folder`` (the one its launcher recorded, wherever its temporary
    directory was) when it is this run's, and any in this process's temporary directory; returns
    how many went."""
    found = set(Path(tempfile.gettempdir()).glob(scratch_prefix(run_id) + "*"))
    if folder:
        f = Path(folder)
        if f.name.startswith(scratch_prefix(run_id)) and f.is_dir():  # never anything else
            found.add(f)
    n = 0
    for d in found:
        shutil.rmtree(d, ignore_errors=True)
        n += not d.exists()
    return n


def host_name() -> str:
    return socket.gethostname()


def identity(pid: int | None = None) -> dict:
    """Who a launcher is: pid, process group, creation time, boot and host."""
    return {**processes.identity(pid), "host": host_name()}


def stale_after() -> float:
    """A launcher on another machine (or without /proc) whose heartbeat is older than this many
    seconds (LAB_LAUNCHER_STALE, default 30) is taken for dead."""
    return settings.number("LAB_LAUNCHER_STALE")


def launcher_gone(record: dict | None, now: float | None = None) -> str | None:
    """Why the launcher of a launcher record is gone, or None while it may still run.

    On this machine in this boot the process itself decides: gone when no process has its pid and
    creation time, or that process is a zombie (killed, not yet reaped). After a reboot every launcher
    is gone. Elsewhere (another host sharing the store) only its heartbeat can tell: gone once it
    is older than :func:`stale_after`."""
    if not record:
        return None
    now = time.time() if now is None else now
    pid = record.get("pid")
    here = record.get("host") == host_name()
    if here and record.get("boot") and processes.boot_id() and record["boot"] != processes.boot_id():
        return "the machine restarted since the launcher started"
    if here:
        made = processes.created(pid)
        if made is None or (record.get("created") is not None and made != record["created"]):
            return f"its launcher (pid {pid}) is gone"
        if not processes.running(pid):
            return f"its launcher (pid {pid}) was killed"
        return None
    beat = record.get("beat") or record.get("started")
    if beat is not None and now - beat > stale_after():
        return f"its launcher (pid {pid} on {record.get('host')}) has not beaten for {now - beat:.0f} s"
    return None
