"""Which core each rank of a placement run gets, when there are more ranks than cores: measured.

    .venv/bin/python bench/bench_pinning.py [--steps 16] [--repeats 3] [--smoke]

Placement plans of 2, 3 and 4 processes on this machine's cores (the CXL preset without its DPU, batch 32 in 4
micro-batches, nothing emulated) run through the job's own executor with the ranks on the cores by each
policy of :data:`lab.modelled.placement.cores.RANK_POLICIES`: in turns (rank r on core r mod cores, the job
manager's rule until this bench; a core each while there are enough), partners apart (the ranks that exchange the
most messages on different cores) and free (not pinned). The policies take turns run by run; a plan's step is the median after two warm-up
steps, a policy's the median over its repeats, with the range. Beside each run: the share of the machine's CPU
that other work took (runs above 15 % are marked). The last line: the geometric mean over the plans of each
policy's step over the turns policy's.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from pathlib import Path

from common import bench_parser, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)

from bench_plan import four_devices  # noqa: E402
from lab import settings  # noqa: E402
from lab.comm.spawn import run_local  # noqa: E402
from lab.machine.calibrate import synthetic_profile  # noqa: E402
from lab.machine.plans import message_weights, plan_parts  # noqa: E402
from lab.modelled.placement.cores import RANK_POLICIES, rank_cores  # noqa: E402
from lab.processes import LOADED_SHARE, LoadMeter  # noqa: E402
from lab.scenario.document import Scenario, Training  # noqa: E402
from lab.machine.heldout import timing_worker  # noqa: E402
from lab.train.placement_run import resolved  # noqa: E402

WARMUP = 2
PLANS = (("cnn", "type_rule"), ("cnn", "round_robin"), ("transformer", "type_rule"), ("transformer", "round_robin"),
         ("mlp", "round_robin"), ("cnn", "even_split"), ("transformer", "chain_dp"))


def run(sc: Scenario, steps: int, cpus: list) -> tuple[float, dict, list]:
    world = len(cpus)
    meter = LoadMeter()
    with tempfile.TemporaryDirectory() as tmp:
        run_local(timing_worker, world, (sc.to_json(), steps, tmp, cpus), timeout_s=600)
        recs = [json.loads(Path(tmp, f"time{r}.json").read_text()) for r in range(world)]
    spans = [max(r[i][1] for r in recs) - min(r[i][0] for r in recs) for i in range(WARMUP, steps)]
    cpu = [statistics.median(r[i][2] + r[i][3] for i in range(WARMUP, steps)) for r in recs]
    return statistics.median(spans), meter.result(), cpu


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--procs", default="2,3,4", help="plans of these process counts only")
    a = ap.parse_args()
    policies = RANK_POLICIES
    if a.smoke:  # the first plan of two processes, one timed step, one run of a pinned and of the unpinned policy
        a.steps, a.repeats, a.procs = WARMUP + 1, 1, "2"
        policies = ("turns", "free")
    wanted = {int(p) for p in a.procs.split(",")}
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cpus = settings.job_cpus()
    topo = four_devices()
    prof = synthetic_profile()
    rows, ratios = [], {p: [] for p in policies}
    for model, strategy in PLANS:
        tr = Training(model=model, parallel="placement", strategy=strategy, steps=a.steps, batch_size=32,
                      micro_batches=4)
        sc = resolved(Scenario(f"{model}-{strategy}", topo, tr))
        parts = plan_parts(sc, prof)
        n = len(parts.devices)
        if n not in wanted:
            continue
        weights = message_weights(parts)
        maps = {p: [None if c is None else cpus[c] for c in rank_cores(n, len(cpus), weights, p)]
                for p in policies}
        got: dict[str, list[float]] = {p: [] for p in policies}
        loads: dict[str, list[float]] = {p: [] for p in policies}
        for _ in range(a.repeats):
            for p in policies:
                t, load, _ = run(sc, a.steps, maps[p])
                got[p].append(t)
                loads[p].append(load["others_share"])
        base = statistics.median(got["turns"])
        for p in policies:
            med = statistics.median(got[p])
            ratios[p].append(med / base)
            rows.append([model, strategy, n, p, str(maps[p]), f"{med * 1e3:.2f}",
                         f"{min(got[p]) * 1e3:.2f}-{max(got[p]) * 1e3:.2f}", f"{med / base:.2f}",
                         f"{max(loads[p]) * 100:.0f}" + (" (loaded)" if max(loads[p]) > LOADED_SHARE else "")])
        if a.smoke:
            break
    if a.smoke:
        print(SMOKE_NOTE)
    print(f"# {len(cpus)} job cores {cpus}; {a.steps} steps, median after {WARMUP}, {a.repeats} runs per policy "
          "taken in turns")
    print(table(["model", "strategy", "procs", "policy", "cores by rank", "step (ms)", "range (ms)", "x turns",
                 "other work (%)"], rows))

    def gm(xs):
        return math.exp(statistics.mean(math.log(x) for x in xs)) if xs else math.nan

    score("pinning", [(f"{p}/turns", gm(ratios[p]), "x") for p in policies if p != "turns"],
          why_not=None if ratios["turns"] else f"no plan of {a.procs} processes ran")


if __name__ == "__main__":
    main()
