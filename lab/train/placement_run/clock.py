"""One clock for a placement run's processes: each one's offset from rank 0, by the round trip with the least
delay (NTP's rule), with its uncertainty."""
from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist


def clock_offsets(rank: int, world: int, rounds: int = 8) -> tuple[float, float]:
    """This process's clock minus rank 0's, and its uncertainty (half the least round trip), NTP's way."""
    if world == 1:
        return 0.0, 0.0
    best = (math.inf, 0.0)
    buf = torch.zeros(2, dtype=torch.float64)
    for r in range(1, world):
        for _ in range(rounds):
            if rank == 0:
                buf[0] = time.perf_counter()
                dist.send(buf, r)
                dist.recv(buf, r)
            elif rank == r:
                dist.recv(buf, 0)
                t1 = time.perf_counter()
                t0 = float(buf[0])
                buf[0], buf[1] = t1, time.perf_counter()
                dist.send(buf, 0)
                dist.recv(buf, 0)
                t3 = float(buf[0])
                rtt = (t3 - t0) - (float(buf[1]) - t1)
                if rtt < best[0]:
                    best = (rtt, ((t1 - t0) + (float(buf[1]) - t3)) / 2)
            if rank == 0:
                buf[0] = time.perf_counter()
                dist.send(buf, r)
    if rank == 0:
        return 0.0, 0.0
    # One machine's processes share its clock: an estimate within its own uncertainty is noise, not an offset.
    return (best[1] if abs(best[1]) > best[0] / 2 else 0.0), best[0] / 2
