"""Time per step of the lab's optimisers against torch.optim.Adam on one 10M-parameter tensor.

    .venv/bin/python bench/bench_optim.py [--numel 10000000] [--rounds 5] [--threads N]

Every optimiser gets its own float32 parameter and a fixed random gradient. The optimisers take
turns (one step each per round, round-robin, after one warm-up step) so a noisy neighbour on a
shared machine slows them alike; the table shows the median ms/step and the ratio to
torch.optim.Adam (foreach) measured in the same run. Target: the lab's optimisers within 1.5x.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.optim.optimizers import AdaBelief, Adam, MaxAdaBelief, MaxAdaBeliefCorrected  # noqa: E402

PEER = "torch.optim.Adam (foreach)"


def candidates():
    yield PEER, lambda p: torch.optim.Adam([p], lr=1e-3, foreach=True)
    yield "torch.optim.Adam (for-loop, CPU default)", lambda p: torch.optim.Adam([p], lr=1e-3, foreach=False)
    yield "torch.optim.Adam (fused)", lambda p: torch.optim.Adam([p], lr=1e-3, fused=True)
    yield "lab Adam", lambda p: Adam([p], lr=1e-3)
    yield "lab Adam (check_finite=False)", lambda p: Adam([p], lr=1e-3, check_finite=False)
    yield "lab AdaBelief", lambda p: AdaBelief([p], lr=1e-3)
    yield "lab MaxAdaBelief (raw max)", lambda p: MaxAdaBelief([p], lr=1e-3)
    yield "lab MaxAdaBeliefCorrected", lambda p: MaxAdaBeliefCorrected([p], lr=1e-3)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=10_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    grad = torch.randn(args.numel, generator=gen)
    runs = []
    for name, make in candidates():
        p = torch.nn.Parameter(grad * 0.1)
        p.grad = grad
        try:
            opt = make(p)
            opt.step()                                          # warm-up: creates the state
        except (RuntimeError, ValueError) as exc:  # e.g. fused not available on this build
            print(f"skipped {name}: {exc}")
            continue
        runs.append((name, opt, []))
    for _ in range(args.rounds):
        for name, opt, times in runs:
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
    med = {name: statistics.median(times) for name, _, times in runs}
    peer = med[PEER]
    print(f"\n{args.numel / 1e6:g}M float32 parameters, {torch.get_num_threads()} threads, "
          f"{args.rounds} timed steps each (median)")
    print(f"{'optimiser':44s} {'ms/step':>9s} {'x torch Adam':>13s}")
    for name, _, _ in runs:
        print(f"{name:44s} {med[name] * 1e3:9.1f} {med[name] / peer:13.2f}")


if __name__ == "__main__":
    main()
