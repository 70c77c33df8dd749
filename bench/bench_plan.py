"""Placement plans run for real, beside the model of the same step.

    .venv/bin/python bench/bench_plan.py [--steps 24] [--repeats 2] [--models mlp,cnn,resnet,transformer]

For each preset model and each strategy, on the CXL preset without its DPU (so every plan fits in the
four processes the lab's tests and benches start at most), with the pin conv1 -> FPGA on the CNN as the
design review asks: the strategy's plan is written out; plans that put every operator on the same devices
as an earlier strategy run once and are reported for each. Each distinct plan runs ``repeats`` times with
the cluster emulated and without (every device is this machine), each run ``steps`` steps through the
job's own executor (:class:`lab.train.stages.PlacementTrainer`); a run's step time is the median after
the first two steps, a plan's the median of its runs.

Beside it: the modelled step of the same schedule (:func:`lab.machine.plans.predict_plan`) from this
machine's calibrated costs (the saved profile, or a quick calibration made here when there is none), the
error, Kendall's tau between the model's and the measurement's order of the plans (per model and mode,
then averaged), and the executor's overhead: a plan with every operator on one device (one micro-batch)
against plain one-process training of the same model, taking turns step by step in one process.

The last line: ``plan: runs <n>, geomean error <pct> %, worst <pct> %, kendall tau <x>, overhead <x>x``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import table  # noqa: E402  (also puts the checkout on sys.path)

from lab.comm.spawn import run_local  # noqa: E402
from lab.machine.plans import kendall, predict_plan  # noqa: E402
from lab.machine.profile import geomean_error, load_profile  # noqa: E402
from lab.scenario.catalogue import preset  # noqa: E402
from lab.scenario.document import Scenario, Training  # noqa: E402
from lab.scenario.names import STRATEGY_NAMES, STRATEGY_SHORT  # noqa: E402
from lab.scenario.topology import Topology  # noqa: E402
from lab.testing.plan_workers import overhead_worker, timing_worker  # noqa: E402
from lab.train.stages import resolved, stage_count  # noqa: E402

WARMUP = 2


def four_devices() -> Topology:
    d = preset("cxl").to_dict()
    d["devices"] = [x for x in d["devices"] if x["name"] != "dpu"]
    d["links"] = [x for x in d["links"] if "dpu" not in (x["a"], x["b"])]
    d["name"] = "cxl-4"
    return Topology.from_dict(d)


def profile():
    prof = load_profile()
    if prof is not None:
        return prof, "the saved profile"
    from lab.machine.calibrate import calibrate

    print("# no machine profile: a quick calibration first", file=sys.stderr, flush=True)
    return calibrate(quick=True), "a quick calibration made by this bench"


def timed(sc: Scenario, steps: int) -> float:
    world = stage_count(sc)
    with tempfile.TemporaryDirectory() as tmp:
        run_local(timing_worker, world, (sc.to_json(), steps, tmp), timeout_s=600)
        recs = [json.loads(Path(tmp, f"time{r}.json").read_text()) for r in range(world)]
    spans = [max(r[i][1] for r in recs) - min(r[i][0] for r in recs) for i in range(WARMUP, steps)]
    return statistics.median(spans)


def overhead(model: str, steps: int) -> tuple[float, float]:
    tr = Training(model=model, parallel="placement", strategy="single_fastest", micro_batches=1, steps=steps)
    sc = resolved(Scenario("overhead", four_devices(), tr))
    with tempfile.TemporaryDirectory() as tmp:
        run_local(overhead_worker, 1, (sc.to_json(), steps, tmp), timeout_s=600)
        got = json.loads(Path(tmp, "overhead.json").read_text())
    return statistics.median(got["executor"][WARMUP:]), statistics.median(got["plain"][WARMUP:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--models", default="mlp,cnn,resnet,transformer")
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    prof, source = profile()
    topo = four_devices()
    rows, pairs, taus = [], [], []
    runs = 0
    t_start = time.time()
    for model in a.models.split(","):
        pins = {"conv1": "fpga"} if model == "cnn" else {}
        plans: dict[tuple, list[str]] = {}
        scs: dict[tuple, Scenario] = {}
        for name in STRATEGY_NAMES:
            tr = Training(model=model, parallel="placement", strategy=name, pins=pins, steps=a.steps,
                          batch_size=32, micro_batches=4)
            sc = resolved(Scenario(f"{model}-{name}", topo, tr))
            key = sc.training.placement
            plans.setdefault(key, []).append(name)
            scs.setdefault(key, sc)
        for emulate in (True, False):
            ranked = []
            for key, names in plans.items():
                sc = scs[key]
                sc = sc.replace(training=sc.training.replace(emulate=emulate))
                measured = statistics.median(timed(sc, a.steps) for _ in range(a.repeats))
                runs += a.repeats
                modelled = predict_plan(sc, prof).makespan
                err = measured / modelled - 1.0
                pairs.append((modelled, measured))
                ranked.append({"modelled": modelled, "measured": measured})
                rows.append([model, "emulated" if emulate else "this machine",
                             "/".join(STRATEGY_SHORT[n] for n in names), stage_count(sc), f"{modelled * 1e3:.2f}",
                             f"{measured * 1e3:.2f}", f"{err * 100:+.0f}"])
                print(" ".join(map(str, rows[-1])), file=sys.stderr, flush=True)
            tau = kendall(ranked)
            if math.isfinite(tau):
                taus.append(tau)
                rows.append([model, "emulated" if emulate else "this machine", f"kendall tau {tau:+.2f}", "", "", "",
                             ""])
    print(f"# plans on {topo.name} (the CXL preset without its DPU), batch 32 in 4 micro-batches, {a.steps} steps, "
          f"median of {a.repeats} run(s); model: {source} ({prof.created[:10]})")
    print(table(["model", "cluster", "strategies (same plan)", "procs", "modelled (ms)", "measured (ms)",
                 "error (%)"], rows))
    over = []
    for model in a.models.split(","):
        ex, plain = overhead(model, a.steps * 4)
        over.append(ex / plain)
        print(f"# overhead {model}: executor {ex * 1e3:.3f} ms, plain one-process training {plain * 1e3:.3f} ms, "
              f"{ex / plain:.2f}x")
    worst = max(abs(m / p - 1.0) for p, m in pairs)
    print(f"# {time.time() - t_start:.0f} s")
    print(f"plan: runs {runs}, geomean error {geomean_error([p for p, _ in pairs], [m for _, m in pairs]) * 100:.1f} %, "
          f"worst {worst * 100:.0f} %, kendall tau {statistics.mean(taus) if taus else math.nan:.2f}, "
          f"overhead {statistics.median(over):.2f}x")


if __name__ == "__main__":
    main()
