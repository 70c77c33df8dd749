"""Training throughput of the lab's loop against DistributedDataParallel, and one epoch end to end.

    .venv/bin/python bench/bench_train.py [--workers 2] [--steps 500] [--warmup 50] [--batch 32]
                                          [--model mlp] [--rounds 7] [--smoke]

1. Samples per second of the lab's training loop in gradient all-reduce mode (gloo, no emulation)
   against the same training written with ``torch.nn.parallel.DistributedDataParallel``: same
   model, data, shards, batch, optimiser (lab.optim.optimizers) and process count, one thread per process.
   Both run in the same worker processes (lab.train.reference.paired_worker): each round runs the
   lab's loop -- the job's own :class:`lab.train.trainer.Trainer`, recording every step in a run
   store as always -- and then the DDP loop, back to back, so a noisy neighbour on this shared
   machine slows both alike. Both are timed from the end of step ``--warmup`` to the last step.
   The ratio is the median of the per-round ratios (best and worst printed beside it). Target:
   the lab's loop at least 0.9 of DDP.
2. A 4-worker MLP run on digits for one epoch (ceil(1347 / (4 x 32)) = 11 steps), timed end to end
   from the command line (``python -m lab.train --workers 4 --steps 11``), process start-up included.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import bench_parser, ROOT, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)

from lab.store.runs import JOB_WORKER, RunStore  # noqa: E402
from lab.train.reference import paired_throughput  # noqa: E402


def paired(tmp: Path, workers: int, steps: int, warmup: int, batch: int, model: str, rounds: int) -> list[dict]:
    return paired_throughput(tmp, workers, steps, warmup, batch, model, rounds)


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    a = args
    epoch_workers, epoch_steps = 4, math.ceil(1347 / (4 * 32))  # one epoch of digits, batch 32 per worker
    if a.smoke:  # two timed steps after one warm-up step, one round; then one step of two workers end to end
        a.workers, a.steps, a.warmup, a.rounds = 2, 3, 1, 1
        epoch_workers, epoch_steps = 2, 1
        print(SMOKE_NOTE)
    with tempfile.TemporaryDirectory(prefix="bench-train-") as d:
        tmp = Path(d)
        os.environ["LAB_DATA"] = str(tmp)
        res = paired(tmp, a.workers, a.steps, a.warmup, a.batch, a.model, a.rounds)
        lab, ddp = [r["lab"] for r in res], [r["ddp"] for r in res]
        ratios = [r["lab"] / r["ddp"] for r in res]
        print(f"{a.model}, digits, {a.workers} processes x batch {a.batch}, steps {a.warmup + 1}..{a.steps} timed, "
              f"gloo on loopback, 1 thread per process, {a.rounds} rounds (lab loop then DDP, same processes)")
        rows = [[str(i + 1), f"{r['lab']:,.0f}", f"{r['ddp']:,.0f}", f"{q:.3f}"] for i, (r, q) in enumerate(zip(res, ratios))]
        rows.append(["median", f"{statistics.median(lab):,.0f}", f"{statistics.median(ddp):,.0f}",
                     f"{statistics.median(ratios):.3f}"])
        print(table(["round", "lab loop samples/s", "DDP samples/s", "lab / DDP"], rows))
        print(f"ratio lab / DDP: {statistics.median(ratios):.3f} (median of rounds; best {max(ratios):.3f}, "
              f"worst {min(ratios):.3f}); target >= 0.9")

        steps = epoch_steps
        db = tmp / "epoch.db"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "lab.train", "--workers", str(epoch_workers),
                               "--steps", str(steps)], cwd=ROOT, env=dict(os.environ, LAB_DB=str(db)),
                              capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - t0
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
        store = RunStore(db)
        rid = store.list_runs().id[0]
        train_s = store.metrics(rid, worker=JOB_WORKER).wall.max()
        print()
        what = f"{steps} step of digits" if a.smoke else "one epoch of digits"
        print(table([f"{what}, {epoch_workers} workers, MLP", "seconds"],
                    [["end to end (command line, start-up included)", f"{wall:.1f}"],
                     [f"training loop only ({steps} steps)", f"{train_s:.2f}"]]))
        print(f"last line: {last}")
    # The loop's time is what the run stored: a run that failed stored no step, and its time is no number.
    score("train", [("lab/ddp", statistics.median(ratios), "x", 3), ("best", max(ratios), "x", 3),
                    ("worst", min(ratios), "x", 3), ("end to end", wall, "s", 1),
                    ("training loop", train_s, "s")],
          why_not={"training loop": f"the command line's run stored no step: {last}"})


if __name__ == "__main__":
    main()
