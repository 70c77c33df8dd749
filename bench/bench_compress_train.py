"""Compressed training on emulated edge links: time per step and final accuracy, dense vs Group-TopK.

Seed D's setting: the edge preset (Raspberry Pi-class devices on a 100 Mbit/s switch, 200 us per
hop), 4 workers mapped to edge0..edge3 with emulation on, digits, the MLP (17,226 parameters),
gradient all-reduce. Every message waits its modelled transfer time on those links before it is
sent (the lab's ring for dense, lab.train.compressed for the compressed runs). For each of the
seed's three optimisers, two real runs, interleaved so both see the same machine load:

* dense: the lab's ring all-reduce of the fp32 gradient (and the loss slot);
* Group-TopK 1 % (group 1024) with error feedback, shared by sparse all-gather.

Then one more compressed run (Adam) shared by seed D's sparse ring, for its bytes. Prints time per
step (wall clock of the job between step 20 and the last, so start-up is left out), the speed-up,
the final test accuracy (450 held-out digits: one digit is 0.22 points), the time split, and the
bytes per worker per step counted from the real messages.

    .venv/bin/python bench/bench_compress_train.py                 # 300 steps, lr 0.01 (~4-8 min)
    .venv/bin/python bench/bench_compress_train.py --steps 100     # quicker
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.catalogue import preset  # noqa: E402
from lab.runs import JOB_WORKER, RunStore  # noqa: E402
from lab.scenario import Compression, Scenario, Training  # noqa: E402
from lab.train.launcher import launch  # noqa: E402

WARMUP = 20
OPTIMISERS = ("adam", "adabelief", "maxadabelief")


def scenario(opt: str, comp: Compression, steps: int, lr: float, batch: int, workers: int) -> Scenario:
    tr = Training(model="mlp", dataset="digits", optimizer=opt, lr=lr, workers=workers, steps=steps,
                  batch_size=batch, sync="allreduce", allreduce_impl="ring", emulate=True,
                  worker_devices=tuple(f"edge{i}" for i in range(workers)), eval_every=max(1, steps // 3),
                  check_every=50, compression=comp)
    return Scenario("edge-bench", preset("edge"), tr)


def measure(store: RunStore, rid: str, steps: int, workers: int) -> dict:
    m = store.metrics(rid)
    job = m[m.worker == JOB_WORKER].set_index("step")
    per = m[(m.worker >= 0) & (m.step > WARMUP)]
    wall = job.wall.dropna()
    dt = np.diff(wall[wall.index >= WARMUP].to_numpy())
    acc = job.test_acc.dropna()
    n = steps - WARMUP
    return {"s_step": (wall[steps] - wall[WARMUP]) / n, "s_step_median": float(np.median(dt)),
            "acc": float(acc.iloc[-1]),
            "bytes": float(per.bytes_sent.sum()) / (workers * n), "recv": float(per.bytes_recv.sum()) / (workers * n),
            **{k: float(per[k].sum()) / (workers * n) for k in ("t_compute", "t_comm", "t_compress", "t_idle",
                                                                 "t_emul_comm")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=32, help="per worker")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--optimisers", default=",".join(OPTIMISERS))
    args = ap.parse_args()
    if args.steps <= WARMUP + 1:
        ap.error(f"--steps must be more than {WARMUP + 1}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-compress-train-"))
    db = tmp / "runs.db"
    dense = Compression()
    gtk_ef = Compression(kind="group_topk", ratio=0.01, group_size=1024, error_feedback=True,
                         sharing="sparse_allgather")
    gtk_ring = Compression(kind="group_topk", ratio=0.01, group_size=1024, error_feedback=True, sharing="sparse_ring")
    plan = []
    for opt in args.optimisers.split(","):
        plan += [(opt, "dense", dense), (opt, "gtk_ef", gtk_ef)]
    plan.append(("adam", "gtk_ef_ring", gtk_ring))
    res: dict = {}
    t0 = time.time()
    load0 = os.getloadavg()[0]
    try:
        for opt, variant, comp in plan:
            sc = scenario(opt, comp, args.steps, args.lr, args.batch, args.workers)
            r = launch(sc, store_path=db, name=f"{opt} {variant}", log=open("/dev/null", "w"))
            if r.status != "done":
                raise SystemExit(f"run {opt} {variant} {r.status}: {r.error}")
            res[(opt, variant)] = measure(RunStore(db), r.run_id, args.steps, args.workers)
            print(f"  ran {opt:13s} {variant:12s} {res[(opt, variant)]['s_step'] * 1e3:7.2f} ms/step  "
                  f"acc {res[(opt, variant)]['acc']:.4f}  ({time.time() - t0:.0f} s)", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nEdge preset (emulated 100 Mbit/s links, 200 us per hop), {args.workers} workers, digits, MLP, "
          f"batch {args.batch}/worker, {args.steps} steps, lr {args.lr}, lab ring for dense.")
    print("Time per step: job wall clock, steps "
          f"{WARMUP + 1}..{args.steps} (mean; median of single steps in brackets; speed-up = dense / GTK). "
          "Accuracy: final test accuracy.")
    print(f"Machine load (1-min load average, {os.cpu_count()} cores) before / after: {load0:.1f} / "
          f"{os.getloadavg()[0]:.1f}\n")
    print(f"{'optimiser':13s} {'dense ms/step':>18s} {'GTK1%+EF ms/step':>18s} {'speed-up':>16s} "
          f"{'dense acc %':>12s} {'GTK1%+EF acc %':>15s} {'diff (pts)':>11s}")
    for opt in args.optimisers.split(","):
        d, c = res[(opt, "dense")], res[(opt, "gtk_ef")]
        print(f"{opt:13s} {d['s_step'] * 1e3:8.2f} ({d['s_step_median'] * 1e3:6.2f}) "
              f"{c['s_step'] * 1e3:8.2f} ({c['s_step_median'] * 1e3:6.2f}) {d['s_step'] / c['s_step']:6.2f}x "
              f"({d['s_step_median'] / c['s_step_median']:5.2f}x) "
              f"{100 * d['acc']:12.2f} {100 * c['acc']:15.2f} {100 * (c['acc'] - d['acc']):+11.2f}")

    print("\nTime split per worker and step (ms; means over workers and steps; comm includes the emulated link wait)")
    print(f"{'run':28s} {'compute':>8s} {'compress':>9s} {'comm':>8s} {'(emulated)':>11s} {'idle':>8s}")
    for (opt, variant), r in res.items():
        print(f"{opt + ' ' + variant:28s} {r['t_compute'] * 1e3:8.2f} {r['t_compress'] * 1e3:9.3f} "
              f"{r['t_comm'] * 1e3:8.2f} {r['t_emul_comm'] * 1e3:11.2f} {r['t_idle'] * 1e3:8.2f}")

    print("\nBytes per worker per step, counted from the real messages (Adam runs; sent = received here)")
    base = res[("adam", "dense")]["bytes"] if ("adam", "dense") in res else None
    print(f"{'sharing':52s} {'sent (B)':>10s} {'recv (B)':>10s} {'vs dense':>9s}")
    for key, label in ((("adam", "dense"), "dense ring all-reduce (fp32 gradient + loss slot)"),
                       (("adam", "gtk_ef"), "Group-TopK 1% + EF, sparse all-gather (6 B/entry)"),
                       (("adam", "gtk_ef_ring"), "Group-TopK 1% + EF, sparse ring, seed D (8 B/pair)")):
        if key in res:
            r = res[key]
            print(f"{label:52s} {r['bytes']:10.0f} {r['recv']:10.0f} "
                  f"{(r['bytes'] / base if base else float('nan')):8.4f}x")
    print(f"\nTotal bench time: {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
