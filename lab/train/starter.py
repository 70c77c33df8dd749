"""The warm starter process (``python -m lab.train.starter``; :mod:`lab.train.warm` says what it is
and how the job manager talks to it). Nothing imports this module: it is the starter's entry, and
it imports torch and the training code at once because that is what it is for."""

from __future__ import annotations

import json
import os
import select
import sys
from pathlib import Path

from lab.settings import one_thread_per_pool  # light: no torch, no numpy

one_thread_per_pool()  # before torch and numpy load: no thread pools to break a fork

from lab.processes import rss_mb  # noqa: E402
from lab.train import fork  # noqa: E402
from lab.train.launcher import JobSpec, run_job  # noqa: E402
from lab.train.ranks import load_rank_code  # noqa: E402


def _start_launcher(req: dict) -> int:
    """Fork a launcher for one job (its own session, its log as its output); its pid."""
    spec = JobSpec.from_dict(req.get("spec"))  # a malformed request is answered, before any fork
    return fork.fork_child(lambda: run_job(spec), req["env"], Path(req["log"]), new_session=True).pid


def _send(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def serve() -> int:
    """Load, say so, then answer requests on standard input until it closes: the job manager's
    process holds the other end, so the starter ends with it however that process ends. (The
    kernel's parent-death signal would fire when the thread that started it ends, not the app.)"""
    load_rank_code()  # torch, the ranks' code and the digits: every job forked from here has them
    children: set[int] = set()
    _send({"ready": True, "pid": os.getpid(), "rss_mb": round(rss_mb(), 1)})
    buf = b""
    stdin = sys.stdin.fileno()
    while True:
        for pid in list(children):  # report the launchers that ended
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                children.discard(pid)
                continue
            if done:
                children.discard(pid)
                _send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
        ready, _, _ = select.select([stdin], [], [], 0.05)
        if not ready:
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:  # the job manager is gone
            return 0
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            rid = None
            try:
                req = json.loads(line)
                rid = req.get("id") if isinstance(req, dict) else None
                if not isinstance(req, dict) or req.get("op") != "start":
                    raise ValueError("unknown request")
                pid = _start_launcher(req)
                children.add(pid)
                _send({"id": rid, "pid": pid, "rss_mb": round(rss_mb(), 1)})
            except Exception as exc:  # noqa: BLE001 - a bad request is answered, never fatal
                _send({"id": rid, "error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    raise SystemExit(serve())
