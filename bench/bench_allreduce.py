"""All-reduce speed: the lab's ring against gloo's all_reduce, and the pure models' build times.

    .venv/bin/python bench/bench_allreduce.py [--procs 4] [--numel 16777216] [--iters 15] [--warmup 2]
                                              [--extra-sizes 1M,4M] [--smoke]

1. Real processes (gloo over loopback, spawned by lab.comm.measure): ``lab.comm.ring_allreduce``
   against ``torch.distributed.all_reduce`` on ``--numel`` float32 (default 16M = 64 MiB) with
   ``--procs`` processes (default 4), in the same run. Every iteration times both, barrier-started,
   taking turns on who goes first; an iteration's time is the slowest rank's. Printed: the median,
   the minimum, the ratio of medians, and the median of the per-iteration ratios (each ring time
   over the gloo time of the same iteration: drifting load from other processes cancels). Target:
   ring / gloo <= 1.10.
2. Pure functions: building the step-by-step schedule (with every device's contribution sets)
   for N = 16, the alpha-beta time on a 16-device topology, the lab's ring-order search, and the
   uniform model for N = 1024. Target: each well under a second.

``--smoke`` runs both parts at their smallest sizes (2 processes, a 4 KiB buffer, 2 iterations; the
pure functions once each) in seconds: it checks the bench still runs and measures nothing.
"""

from __future__ import annotations

import math
import statistics
import time

from common import bench_parser, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)

from lab.comm import measure  # noqa: E402
from lab.modelled import collectives  # noqa: E402
from lab.scenario.topology import Device, Link, Switch, Topology  # noqa: E402



def device_names(n: int) -> list[str]:
    """gpu0, gpu1, ...: collectives.default_names runs A..Z, and the lab refuses L beside I (they look alike)."""
    return [f"gpu{i}" for i in range(n)]


def identical_star(n: int, bandwidth: float, latency: float) -> Topology:
    """C.uniform_star's cluster (N identical devices and a host on one switch, pools of about sqrt(N)
    for the hierarchical algorithm) with names the lab's look-alike check accepts at any N."""
    size = math.isqrt(n - 1) + 1 if n > 3 else n
    devs = [Device(nm, "gpu", pool=f"group{i // size}", throughput={"matmul": 1e12})
            for i, nm in enumerate(device_names(n))]
    devs.append(Device("host", "cpu", pool="host", throughput={"matmul": 1e12}))
    links = [Link(d.name, "switch", "switch", bandwidth, latency) for d in devs]
    return Topology(f"{n} identical devices", tuple(devs), tuple(links), (Switch("switch"),),
                    "identical devices on one switch").validate()


def best_of(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_real(procs: int, numel: int, iters: int, warmup: int, extra: list[int]) -> list[tuple]:
    """Prints the table; returns the score's values at the largest size (the target's, the loop's last)."""
    sizes = sorted(set(extra + [numel * 4]))
    print(f"## lab ring vs gloo all_reduce: {procs} processes, float32, {iters} iterations after {warmup} warm-up")
    rows = measure.measure(procs, sizes, iters, impls=("gloo", "ring"), warmup=warmup, timeout=1800,
                     progress=lambda d, t, r: print(f"  ... {d}/{t} {r['impl']} {measure.human_bytes(r['size'])}",
                                                    flush=True))
    out = []
    for size in sizes:
        g = next(r for r in rows if r["impl"] == "gloo" and r["size"] == size)
        r = next(r for r in rows if r["impl"] == "ring" and r["size"] == size)
        paired = statistics.median(a / b for a, b in zip(r["times"], g["times"]))
        for x in (g, r):
            out.append([measure.human_bytes(size), x["impl"], f"{x['time'] * 1e3:.2f}", f"{x['time_min'] * 1e3:.2f}",
                        f"{x['busbw'] / 1e9:.3f}",
                        "" if x is g else f"{r['time'] / g['time']:.3f}",
                        "" if x is g else f"{paired:.3f}",
                        "" if x is g else f"{r['time_min'] / g['time_min']:.3f}"])
    print(table(["size", "impl", "median (ms)", "min (ms)", "busbw (GB/s)", "ring/gloo medians",
                 "ring/gloo paired median", "ring/gloo mins"], out))
    print("target: ring / gloo <= 1.10 at the largest size")
    return [("ring/gloo medians", r["time"] / g["time"], "x", 3), ("ring/gloo paired", paired, "x", 3),
            ("ring", r["time"] * 1e3, "ms"), ("gloo", g["time"] * 1e3, "ms")]


def bench_pure(repeat: int = 5) -> float:
    """Prints the table; returns the slowest of the pure functions' times as printed, in ms."""
    print(f"## pure functions (best of {repeat})")
    rows = []
    for alg in collectives.ALGORITHMS:
        t = best_of(lambda: collectives.check_schedule(collectives.build_schedule(alg, 16, 4 * 1_000_003)), repeat)
        rows.append([f"step-through, N=16, {alg} (schedule + contribution sets + check)", f"{t * 1e3:.2f}"])
    star = identical_star(16, 25e9, 1e-6)
    names = device_names(16)
    for alg in collectives.ALGORITHMS:
        s = collectives.build_schedule(alg, names, 4 << 20, host="host")
        t = best_of(lambda: collectives.schedule_time(s, star), repeat)
        rows.append([f"alpha-beta time on a 16-device topology, {alg}", f"{t * 1e3:.2f}"])
    t = best_of(lambda: collectives.best_ring_order(star, names[:8]), repeat)
    rows.append(["ring order, 8 devices (brute force, 5040 rings)", f"{t * 1e3:.2f}"])
    t = best_of(lambda: collectives.best_ring_order(star, names), repeat)
    rows.append(["ring order, 16 devices (greedy + 2-opt)", f"{t * 1e3:.2f}"])
    t = best_of(lambda: [collectives.uniform_time(a, 1024, 4 << 24, 5e-6, 1e-10) for a in collectives.ALGORITHMS], repeat)
    rows.append(["uniform model, N=1024, all four algorithms", f"{t * 1e3:.3f}"])
    t = best_of(lambda: collectives.sweep_uniform([2 ** k for k in range(1, 11)], 4 << 20, 5e-6, 1e-10), repeat)
    rows.append(["uniform model, N = 2..1024 sweep (the page's chart)", f"{t * 1e3:.3f}"])
    print(table(["what", "time (ms)"], rows))
    print("target: each well under 1000 ms")
    return max(float(ms) for _, ms in rows)


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--numel", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--extra-sizes", default="", help="more buffer sizes to time, e.g. 1M,4M")
    ap.add_argument("--skip-real", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        print(SMOKE_NOTE)
        slowest = bench_pure(repeat=1)
    else:
        slowest = bench_pure()
    print()
    real = []
    if not args.skip_real:
        extra = [measure.parse_size(x) for x in args.extra_sizes.split(",") if x.strip()]
        if args.smoke:
            real = bench_real(2, 1024, 2, 1, [])
        else:
            real = bench_real(args.procs, args.numel, args.iters, args.warmup, extra)
    if args.smoke:
        print(SMOKE_NOTE)
    score("allreduce", [*real, ("slowest pure function", slowest, "ms")])


if __name__ == "__main__":
    main()
