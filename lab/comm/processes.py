"""Small real process groups on this machine: spawn N ranks over gloo on a free port and reap them."""
from __future__ import annotations

import datetime
import os
import socket
import time
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lab.errors import LabError


def init_worker(rank: int, world: int, port: int, timeout_s: float = 60.0) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


def run_local(fn: Callable, world: int, args: tuple = (), timeout_s: float = 120.0) -> None:
    """Start ``world`` spawned processes ``fn(rank, world, port, *args)`` and wait for all of them.

    The port is chosen at run time; on a failure or after ``timeout_s`` every child is killed and
    reaped and a RuntimeError says which rank failed.
    """
    if not 1 <= world <= 4:
        raise LabError(f"run_local starts 1 to 4 processes (got {world})")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.start_processes(fn, args=(world, port, *args), nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not finish within {timeout_s:.0f} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
            p.join(timeout=10)
