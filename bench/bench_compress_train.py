"""Compressed training on emulated edge links: time per step and final accuracy, dense vs Group-TopK.

Seed D's setting: the edge preset (Raspberry Pi-class devices on a 100 Mbit/s switch, 200 us per
hop), 4 workers mapped to edge0..edge3 with emulation on, digits, the MLP (17,226 parameters),
gradient all-reduce. Every message waits its modelled transfer time on those links before it is
sent (the lab's ring for dense, lab.train.compressed for the compressed runs). Variants:

* dense: the lab's ring all-reduce of the fp32 gradient (and the loss slot);
* GTK1%+EF: Group-TopK 1 % (group 1024) with error feedback, shared by sparse all-gather;
* GTK1%+EF ring (Adam only, for its bytes and time): the same, shared by the edge-compression design's sparse ring;
* torch's DDP hooks on the lab's ring: PowerSGD (rank 2, 20 plain steps first; ``--rank``, ``--warmup``), and the
  FP16 and BF16 all-reduces (``--no-hooks`` leaves them out).

Paired measurement: 4 spawned processes build, for each optimiser, the training job's own Trainer
once per variant (same setup, same step code as a run: forward/backward, compressed or dense sync,
optimiser step) and run them taking turns step by step (the order alternates every step), so every
variant sees the same machine load: this machine has 2 cores shared with other work, and its load
moves within seconds. Store writes and periodic evaluation (equal for both) are left out. Time per
step: each rank's wall time of its step, steps after the first 20, mean and median over steps and
ranks. Accuracy: the final test accuracy of each variant's model (450 held-out digits: one digit is
0.22 points). Bytes: counted from the real messages.

    .venv/bin/python bench/bench_compress_train.py                 # 300 steps, lr 0.01 (~1-3 min)
    .venv/bin/python bench/bench_compress_train.py --steps 100
    .venv/bin/python bench/bench_compress_train.py --smoke       # seconds: checks the bench still runs

``--smoke``: Adam alone, 2 workers, every variant for the fewest steps past the warm-up; measures nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import bench_parser, score, SMOKE_NOTE, table  # noqa: E402

from lab.comm.spawn import run_local  # noqa: E402
from lab.jobs.grid import where_each_wins  # noqa: E402
from lab.scenario.document import Compression  # noqa: E402
from lab.testing.train_workers import paired_bench_worker  # noqa: E402

WARMUP = 20
OPTIMIZER_CLASSES = ("adam", "adabelief", "maxadabelief")
LABELS = {"dense": "dense ring all-reduce (fp32 gradient + loss slot)",
          "gtk_ef": "Group-TopK 1% + EF, sparse all-gather (6 B/entry)",
          "gtk_ef_ring": "Group-TopK 1% + EF, sparse ring of the edge-compression design (8 B/pair)",
          "powersgd": "PowerSGD (torch's hook), P and Q all-reduced (fp32)",
          "fp16_hook": "FP16 all-reduce (torch's hook, 2 B/entry)",
          "bf16_hook": "BF16 all-reduce (torch's hook, 2 B/entry)"}


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=32, help="per worker")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--optimisers", default=",".join(OPTIMIZER_CLASSES))
    ap.add_argument("--rank", type=int, default=2, help="PowerSGD's rank")
    ap.add_argument("--warmup", type=int, default=WARMUP, help="PowerSGD's plain all-reduce steps")
    ap.add_argument("--no-hooks", action="store_true", help="leave torch's hooks out")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.workers, args.optimisers = WARMUP + 2, 2, "adam"
        print(SMOKE_NOTE, flush=True)
    if args.steps <= WARMUP + 1:
        ap.error(f"--steps must be more than {WARMUP + 1}")
    opts = args.optimisers.split(",")
    gtk = dict(kind="group_topk", ratio=0.01, group_size=1024, error_feedback=True)
    training = dict(model="mlp", dataset="digits", lr=args.lr, workers=args.workers, steps=args.steps,
                    batch_size=args.batch, sync="allreduce", allreduce_impl="ring", emulate=True,
                    worker_devices=[f"edge{i}" for i in range(args.workers)])
    variants = {"dense": Compression().to_dict(),
                "gtk_ef": Compression(**gtk, sharing="sparse_allgather").to_dict()}
    if not args.no_hooks:
        variants.update(powersgd=Compression(kind="powersgd", rank=args.rank, warmup=args.warmup).to_dict(),
                        fp16_hook=Compression(kind="fp16_hook").to_dict(),
                        bf16_hook=Compression(kind="bf16_hook").to_dict())
    res: dict = {}
    t0 = time.time()
    load0 = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="bench-compress-train-")
    try:
        for opt in opts:  # Adam also runs the seed's sparse ring (bytes and time)
            vs = dict(variants, gtk_ef_ring=Compression(**gtk, sharing="sparse_ring").to_dict()) \
                if opt == "adam" else variants
            config = {"optimisers": [opt], "variants": vs, "training": training, "steps": args.steps,
                      "preset": "edge"}
            run_local(paired_bench_worker, args.workers, (tmp, config), timeout_s=900)
            ranks = [json.loads((Path(tmp) / f"paired{r}.json").read_text()) for r in range(args.workers)]
            errors = [r["error"] for r in ranks if "error" in r]
            if errors:
                raise SystemExit("; ".join(errors))
            for name in vs:
                recs = [r[opt][name] for r in ranks]
                if len({r["checksum"] for r in recs}) != 1:
                    raise SystemExit(f"{opt} {name}: the workers' parameters differ")
                dt = np.array([r["dt"][WARMUP:] for r in recs])
                res[(opt, name)] = {
                    "s_step": float(dt.mean()), "s_step_median": float(np.median(dt)), "acc": recs[0]["test_acc"],
                    "bytes": float(np.mean([r["sent"][WARMUP:] for r in recs])),
                    "recv": float(np.mean([r["recv"][WARMUP:] for r in recs])),
                    "t_compress": float(np.mean([r["t_compress"][WARMUP:] for r in recs])),
                    "emul": float(np.mean([r["emul_comm"][WARMUP:] for r in recs]))}
            print(f"  ran {opt} ({', '.join(vs)}): {time.time() - t0:.0f} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nEdge preset (emulated 100 Mbit/s links, 200 us per hop), {args.workers} workers, digits, MLP, "
          f"batch {args.batch}/worker, {args.steps} steps, lr {args.lr} (no lr scaling), lab ring for dense.")
    print(f"Time per step: mean over steps {WARMUP + 1}..{args.steps} and ranks (median in brackets); "
          "speed-up = dense / GTK. Accuracy: final test accuracy.")
    print(f"Machine load (1-min load average, {os.cpu_count()} cores) before / after: {load0:.1f} / "
          f"{os.getloadavg()[0]:.1f}\n")
    print(f"{'optimiser':13s} {'dense ms/step':>16s} {'GTK1%+EF ms/step':>17s} {'speed-up':>15s} "
          f"{'dense acc %':>12s} {'GTK1%+EF acc %':>15s} {'diff (pts)':>11s}")
    for opt in opts:
        d, c = res[(opt, "dense")], res[(opt, "gtk_ef")]
        print(f"{opt:13s} {d['s_step'] * 1e3:7.2f} ({d['s_step_median'] * 1e3:6.2f}) "
              f"{c['s_step'] * 1e3:8.2f} ({c['s_step_median'] * 1e3:6.2f}) {d['s_step'] / c['s_step']:6.2f}x "
              f"({d['s_step_median'] / c['s_step_median']:5.2f}x) "
              f"{100 * d['acc']:12.2f} {100 * c['acc']:15.2f} {100 * (c['acc'] - d['acc']):+11.2f}")

    names = [n for n in LABELS if n in variants]
    print(f"\nEvery compressor against dense (same processes, taking turns; means from step {WARMUP + 1}, where "
          f"PowerSGD is {'past' if args.warmup <= WARMUP else 'still in'} its {args.warmup} plain steps; accuracy: one "
          "seed, 0.22 points a digit)")
    if not args.smoke:
        print(f"{'optimiser':13s} {'variant':10s} {'ms/step':>8s} {'vs dense':>9s} {'acc %':>7s} {'diff (pts)':>11s} "
              f"{'sent B/step':>12s} {'vs dense':>9s}")
    rows: list[dict] = []
    cells: list[list] = []
    for opt in opts:
        d = res[(opt, "dense")]
        for n in names:
            r = res[(opt, n)]
            cells.append([opt, n, f"{r['s_step_median'] * 1e3:.2f}", f"{d['s_step_median'] / r['s_step_median']:.2f}x",
                          f"{100 * r['acc']:.2f}", f"{100 * (r['acc'] - d['acc']):+.2f}", f"{r['bytes']:.0f}",
                          f"{r['bytes'] / d['bytes']:.4f}x"])
            if not args.smoke:
                print(f"{opt:13s} {n:10s} {r['s_step_median'] * 1e3:8.2f} "
                      f"{d['s_step_median'] / r['s_step_median']:8.2f}x "
                      f"{100 * r['acc']:7.2f} {100 * (r['acc'] - d['acc']):+11.2f} {r['bytes']:12.0f} "
                      f"{r['bytes'] / d['bytes']:8.4f}x")
            rows.append({"variant": n, "label": n, "status": "done", "final_test_acc": r["acc"],
                         "bytes_per_worker_step": r["bytes"], "s_per_step": r["s_step_median"]})
    if args.smoke:
        print(table(["optimiser", "variant", "ms/step", "vs dense", "acc %", "diff (pts)", "sent B/step", "vs dense"],
                    cells))
    # the Compression page's own words on the grid, from these paired runs
    print("\nWhere each wins (means over the optimisers):")
    for line in where_each_wins(rows):
        print("  " + line)

    print("\nPer worker and step (means): what the links cost and what compression costs")
    print(f"{'run':26s} {'ms/step':>8s} {'emulated link wait (ms)':>24s} {'compression (ms)':>17s}")
    for (opt, name), r in res.items():
        print(f"{opt + ' ' + name:26s} {r['s_step'] * 1e3:8.2f} {r['emul'] * 1e3:24.2f} {r['t_compress'] * 1e3:17.3f}")

    print("\nBytes per worker per step, counted from the real messages (Adam; sent = received here)")
    print(f"{'sharing':52s} {'sent (B)':>10s} {'recv (B)':>10s} {'vs dense':>9s}")
    base = res[("adam", "dense")]["bytes"] if ("adam", "dense") in res else float("nan")
    for name, label in LABELS.items():
        if ("adam", name) in res:
            r = res[("adam", name)]
            print(f"{label:52s} {r['bytes']:10.0f} {r['recv']:10.0f} {r['bytes'] / base:8.4f}x")
    print(f"\nTotal bench time: {time.time() - t0:.0f} s")
    if args.smoke:
        print(SMOKE_NOTE)
    # Group-TopK 1 % + EF against dense, as the first table: speed-up on the means, accuracy, and the bytes.
    scored = []
    for opt in opts:
        d, c = res[(opt, "dense")], res[(opt, "gtk_ef")]
        scored += [(f"{opt} speed-up", d["s_step"] / c["s_step"], "x"),
                   (f"{opt} accuracy diff", 100 * (c["acc"] - d["acc"]), "points"),
                   (f"{opt} bytes vs dense", c["bytes"] / d["bytes"], "x", 4)]
    score("compress train", scored)


if __name__ == "__main__":
    main()
