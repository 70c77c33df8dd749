"""Small real process groups on this machine, the one way the lab starts ranks outside a training job
(the calibration, the reference runs, the tests' and benches' workers): start N ranks over gloo and
reap them. The parent holds the rendezvous store on a port the operating system picked, so two
groups started at the same moment never meet on one port (a port found free and then bound by the
children could be taken in between).

Ranks fork from multiprocessing's fork server, a clean interpreter that has imported torch once, instead of
each starting a fresh interpreter that imports it again (``bench/bench_start.py`` measures both ways). A rank
still gets what a spawned one gets: the caller's modules path and folder (multiprocessing passes them) and
the caller's environment as it is at the call (passed here, since the server keeps its own)."""
from __future__ import annotations

import datetime
import multiprocessing
import os
import time
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lab.errors import LabError

#: What the fork server imports before it forks the first rank: torch and what every rank joins a group with.
#: Not torch._dynamo, though torch.optim imports it in every rank that builds an optimiser (1.2 s of CPU):
#: DistributedDataParallel ranks forked from a server that had loaded it hung or aborted in 4 of 45 groups
#: under load, against none of 45 without it.
PRELOAD = ["torch", "torch.distributed", "torch.fx", "numpy"]


def init_worker(rank: int, world: int, port: int, timeout_s: float = 60.0) -> None:
    """In a rank started by :func:`run_local`: join its gloo group through the parent's store at ``port``."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=timeout_s)
    rendezvous = dist.TCPStore("127.0.0.1", port, world_size=world, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=rendezvous, rank=rank, world_size=world, timeout=timeout)


def _rank(rank: int, fn: Callable, env: dict, *args) -> None:
    os.environ.clear()
    os.environ.update(env)
    fn(rank, *args)


def run_local(fn: Callable, world: int, args: tuple = (), timeout_s: float = 120.0,
              start_method: str = "forkserver") -> None:
    """Start ``world`` processes ``fn(rank, world, port, *args)`` and wait for all of them;
    ``fn`` joins the group with :func:`init_worker` (``port`` is this process's rendezvous store).

    On a failure or after ``timeout_s`` every child is killed and reaped and a RuntimeError says which
    rank failed. ``start_method`` "spawn" starts each rank in a fresh interpreter (the bench's peer).
    """
    if not 1 <= world <= 4:
        raise LabError(f"run_local starts 1 to 4 processes (got {world})")
    rendezvous = dist.TCPStore("127.0.0.1", 0, world_size=world, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout_s))
    port = rendezvous.port
    multiprocessing.set_forkserver_preload(PRELOAD)  # read once, when the server starts
    ctx = mp.start_processes(_rank, args=(fn, dict(os.environ), world, port, *args), nprocs=world, join=False,
                             start_method=start_method)
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
