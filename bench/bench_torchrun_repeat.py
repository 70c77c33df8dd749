"""The torchrun path repeated: a 2-process job N times (optionally with two busy loops on the cores),
counting exit codes and aborts ("terminate called without an active exception", SIGABRT).

    .venv/bin/python bench/bench_torchrun_repeat.py --repeats 20 --busy [--smoke]
"""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

from common import bench_parser, free_port, ROOT, run_in_session, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)


def spin(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--busy", action="store_true", help="two background processes spin on the cores")
    a = ap.parse_args()
    if a.smoke:  # one 1-step job of two processes and nothing spinning beside it: at most 3 processes
        a.repeats, a.steps, a.busy = 1, 1, False
        print(SMOKE_NOTE)
    stop = mp.Event()
    spinners = [mp.Process(target=spin, args=(stop,), daemon=True) for _ in range(2 if a.busy else 0)]
    for p in spinners:
        p.start()
    codes: collections.Counter = collections.Counter()
    aborts, times = 0, []
    torchrun = str(Path(sys.executable).parent / "torchrun")
    try:
        for i in range(a.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ, LAB_DB=str(Path(tmp) / "runs.db"), LAB_DATA=tmp)
                t0 = time.perf_counter()
                # its own session: a torchrun that hangs is killed with its workers
                p = run_in_session([torchrun, "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                                    "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "-m", "lab.train",
                                    "--steps", str(a.steps)], 300, cwd=ROOT, env=env)
                err = p.stderr
                times.append(time.perf_counter() - t0)
                codes[p.returncode] += 1
                if "terminate called" in err or "SIGABRT" in err or "Signals.SIGABRT" in err:
                    aborts += 1
                print(f"{i + 1:3d}  exit {p.returncode}  {times[-1]:.1f} s" + ("  ABORT" if "terminate called"
                                                                               in err else ""), flush=True)
    finally:
        stop.set()
        for p in spinners:
            p.join(timeout=5)
    print(table(["repeats", "busy cores", "exit codes", "aborts", "median s"],
                [[a.repeats, 2 if a.busy else 0, dict(codes), aborts, f"{sorted(times)[len(times) // 2]:.1f}"]]))
    score("torchrun repeat", [("runs", a.repeats), ("busy cores", 2 if a.busy else 0),
                              ("clean exits", codes[0]), ("other exits", a.repeats - codes[0]), ("aborts", aborts),
                              ("median", sorted(times)[len(times) // 2], "s", 1)])


if __name__ == "__main__":
    main()
