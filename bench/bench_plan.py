"""Placement plans run for real, beside the model of the same step, scored on held-out work.

    .venv/bin/python bench/bench_plan.py [--steps 16] [--repeats 3] [--models mlp,cnn,resnet,transformer] [--smoke]

**Held out.** The model is the saved machine profile (or a quick calibration made here when there is none):
fitted only on the calibration networks and the executor's synthetic plans, never on a preset model, and
frozen. Every prediction is made, and the predicted table printed, before the first scored run.

**What is scored.** Each preset model's plan by every strategy on the CXL preset without its DPU (four devices,
so every plan fits in the four processes a bench starts at most); the CNN with the pin conv1 -> FPGA (the design
review's question); and the same for the PCIe preset without its DPU, a topology the calibration never saw.
Strategies that make the same plan run once and are reported together. Each plan runs with the cluster emulated
and without (every device is this machine). The plans of a set take turns, run after run, ``repeats`` times;
a run's step is the median of its steps after two warm-up steps (the last step is recorded operator by operator
for the replay, and left out of the median); a plan's step is the median of its runs, with their range. Beside
every run the share of the machine's CPU that other work took: a plan with a run above 15 % is reported apart
and not scored.

**Beside the score.** Kendall's tau between the model's and the measurement's order of the plans per (model,
cluster, mode) set and pooled; an ablation (the error with each term of the core model removed); the replay's
error (each run's recorded step replayed with its own task times: the floor the schedule can reach); and the
executor's overhead against plain one-process training of the same model, taking turns step by step.

**Beside it, the calibration's own proof**: the plans drawn at random and run after the profile's fit
(:mod:`lab.machine.heldout`), as the profile keeps them; a smoke run draws and runs one with the made-up profile.

**The noise floor beside the aims**, measured in the same run: how far a plan's first and last runs are apart;
how far the same plans are from the last bench run on this machine (the bench keeps each plan's step beside its
score); the calibration's random plans run again, and how far they are from what the calibration measured; and
the replay's error by process count (a replay gives each process a core of its own). A model cannot come closer
to a measurement than the next measurement of the same plan does.

The last line: ``plan: runs <n>, held-out geomean error <pct> %, worst <pct> %, kendall tau <x>, worst set tau
<x>, replay error <pct> %, overhead <x>x, random held-out <pct> % over <k> plans``; when a value could not be
measured (every run under load, a profile with no random held-out plans) it says which and why, and the bench
exits 1.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import bench_parser, score, table  # noqa: E402  (also puts the checkout on sys.path)

from lab.comm.spawn import run_local  # noqa: E402
from lab.errors import LabError  # noqa: E402
from lab.machine.heldout import WARMUP, measure_plan  # noqa: E402
from lab.machine.heldout import again as heldout_again  # noqa: E402
from lab.machine.heldout import check as heldout_check  # noqa: E402
from lab.machine.heldout import score as heldout_score  # noqa: E402
from lab.machine.plans import TERMS, kendall, last_bench, plans_apart, predict_plan, record_bench  # noqa: E402
from lab.machine.profile import geomean_error, load_profile  # noqa: E402
from lab.machine.replay import replay_error  # noqa: E402
from lab.processes import LOADED_SHARE  # noqa: E402
from lab.scenario.catalogue import preset  # noqa: E402
from lab.scenario.document import Scenario, Training  # noqa: E402
from lab.scenario.names import STRATEGY_NAMES, STRATEGY_SHORT  # noqa: E402
from lab.scenario.topology import Topology  # noqa: E402
from lab.testing.plan_workers import overhead_worker  # noqa: E402
from lab.train.placement_run import resolved, stage_count, stage_devices  # noqa: E402


def without_dpu(name: str) -> Topology:
    d = preset(name).to_dict()
    d["devices"] = [x for x in d["devices"] if x["name"] != "dpu"]
    d["links"] = [x for x in d["links"] if "dpu" not in (x["a"], x["b"])]
    d["name"] = f"{name}-4"
    return Topology.from_dict(d)


def four_devices() -> Topology:
    return without_dpu("cxl")


def profile():
    prof = load_profile()
    if prof is not None:
        return prof, "the saved profile"
    from lab.machine.calibrate import calibrate

    print("# no machine profile: a quick calibration first", file=sys.stderr, flush=True)
    return calibrate(quick=True), "a quick calibration made by this bench"


def made_up_profile():
    """Round made-up numbers with the executor's terms, no calibration: what a smoke run predicts with."""
    from lab.machine.calibrate import synthetic_profile
    from lab.machine.profile import ExecutorFit

    return dataclasses.replace(synthetic_profile(), executor=ExecutorFit()), "a made-up profile (smoke run)"


def overhead(model: str, steps: int) -> tuple[float, float]:
    tr = Training(model=model, parallel="placement", strategy="single_fastest", micro_batches=1, steps=steps)
    sc = resolved(Scenario("overhead", four_devices(), tr))
    with tempfile.TemporaryDirectory() as tmp:
        run_local(overhead_worker, 1, (sc.to_json(), steps, tmp), timeout_s=600)
        got = json.loads(Path(tmp, "overhead.json").read_text())
    return statistics.median(got["executor"][WARMUP:]), statistics.median(got["plain"][WARMUP:])


def plan_sets(models: list[str], steps: int) -> list[dict]:
    """Every scored set: (model, cluster, mode) with its distinct plans."""
    out = []
    for topo in (four_devices(), without_dpu("pcie")):
        for model in models:
            for pins in ([{}, {"conv1": "fpga"}] if model == "cnn" else [{}]):
                if topo.name == "pcie-4" and model not in ("cnn", "transformer"):
                    continue  # the held-out topology: two models are enough to see it
                plans: dict = {}
                for name in STRATEGY_NAMES:
                    tr = Training(model=model, parallel="placement", strategy=name, pins=pins, steps=steps,
                                  batch_size=32, micro_batches=4)
                    sc = resolved(Scenario(f"{model}-{name}", topo, tr))
                    plans.setdefault(sc.training.placement, {"names": [], "sc": sc})["names"].append(name)
                for emulate in (True, False):
                    label = model + (" (conv1->fpga)" if pins else "")
                    out.append({"model": label, "cluster": topo.name, "emulated": emulate,
                                "plans": [{"names": p["names"], "sc": p["sc"].replace(
                                    training=p["sc"].training.replace(emulate=emulate))} for p in plans.values()]})
    return out


def plan_key(s: dict, p: dict) -> str:
    """A scored plan's name from one bench run to the next: its set and its strategies."""
    return " | ".join([s["model"], s["cluster"], "emulated" if s["emulated"] else "this machine", "/".join(p["names"])])


def noise_floor(scored: list, measured: dict, before: dict | None) -> None:
    """What the aims sit on, measured in this run: how far a plan's runs taken in turns are apart, how far the same
    plans are from the last bench run on this machine, and the replay's error by process count (a replay gives
    every process a core of its own, which a machine with fewer cores than processes does not)."""
    firsts = {plan_key(s, p): p["runs"][0]["step"] for s, p in scored if len(p["runs"]) > 1}
    lasts = {plan_key(s, p): p["runs"][-1]["step"] for s, p in scored if len(p["runs"]) > 1}
    n, gap = plans_apart(firsts, lasts)
    if n:
        print(f"# noise floor: a plan's first and last runs in this bench are {gap * 100:.1f} % apart "
              f"(geometric mean over {n} plans)")
    if before and isinstance(before.get("plans"), dict):
        n, gap = plans_apart(before["plans"], measured)
        if n:
            print(f"# noise floor: the same {n} plans measured {gap * 100:.1f} % apart from the last bench run on "
                  f"this machine ({str(before.get('measured', '?'))[:16]}, profile {str(before.get('profile'))[:16]})")
    by_procs: dict[int, list[float]] = {}
    for _, p in scored:
        if math.isfinite(p["replay"]):
            by_procs.setdefault(p["procs"], []).append(abs(p["replay"]))
    if by_procs:
        print("# replay error by processes (every process on a core of its own; the machine has "
              f"{os.cpu_count()}): " + ", ".join(
                  f"{k}: {(math.exp(statistics.mean(math.log1p(e) for e in v)) - 1) * 100:.1f} % over {len(v)}"
                  for k, v in sorted(by_procs.items())))


def random_set_again(prof, smoke: bool = False) -> None:
    """The calibration's random held-out plans run again here: the set's noise floor beside its score (a smoke run
    prints it however busy the machine was: its numbers are no measurement)."""
    try:
        rows = heldout_again(prof, lambda msg, frac: print(f"# {msg}", file=sys.stderr, flush=True))
    except LabError as exc:
        print(f"# the random held-out plans were not run again: {exc}")
        return
    quiet = [r for r in rows if smoke or (not r["loaded"] and r["others_again"] <= LOADED_SHARE)]
    print("# the calibration's random held-out plans, run again now")
    print(table(["model", "width", "topology", "strategy", "micro", "mode", "procs", "modelled (ms)",
                 "at calibration (ms)", "now (ms)", "apart (%)"],
                [[r["model"], r["width"], r["topology"], r["strategy"], r["micro_batches"],
                  "emulated" if r["emulated"] else "this machine", r["procs"], f"{r['modelled'] * 1e3:.2f}",
                  f"{r['measured'] * 1e3:.2f}", f"{r['again'] * 1e3:.2f}", f"{(r['again'] / r['measured'] - 1) * 100:+.0f}"]
                 for r in rows]))
    if quiet:
        n, gap = plans_apart({i: r["measured"] for i, r in enumerate(quiet)}, {i: r["again"] for i, r in enumerate(quiet)})
        now = geomean_error([r["modelled"] for r in quiet], [r["again"] for r in quiet])
        print(f"# noise floor of the random set: {n} plans measured {gap * 100:.1f} % apart from the calibration's "
              f"measurement; the model's error on this measurement {now * 100:.1f} %")


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn,resnet,transformer")
    a = ap.parse_args()
    if a.smoke:  # one timed step after the warm-up (the recorded last step is left out of the median)
        a.steps, a.repeats, a.models = WARMUP + 2, 1, "mlp"
        print("smoke run: smallest sizes, not a measurement; nothing recorded")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    prof, source = made_up_profile() if a.smoke else profile()
    t_start = time.time()
    sets = plan_sets(a.models.split(","), a.steps)
    if a.smoke:  # the first set's first plans of one and of two processes: the fewest that rank and send messages
        by_procs = {stage_count(p["sc"]): p for p in reversed(sets[0]["plans"])}
        sets = [dict(sets[0], plans=[by_procs[1], by_procs[2]])]
    # The predictions, frozen before anything runs.
    pred_rows = []
    for s in sets:
        for p in s["plans"]:
            p["procs"] = stage_count(p["sc"])
            p["modelled"] = predict_plan(p["sc"], prof).makespan
            p["ablation"] = {t: predict_plan(p["sc"], prof, without=(t,)).makespan for t in TERMS}
            pred_rows.append([s["model"], s["cluster"], "emulated" if s["emulated"] else "this machine",
                              "/".join(STRATEGY_SHORT[n] for n in p["names"]), p["procs"], f"{p['modelled'] * 1e3:.2f}"])
    print(f"# predicted before the first run, from {source} ({prof.created[:19]})", flush=True)
    print(table(["model", "cluster", "mode", "strategies (same plan)", "procs", "modelled (ms)"], pred_rows), flush=True)
    runs = 0
    for s in sets:
        for p in s["plans"]:
            p["runs"] = []
        for _ in range(a.repeats):
            for p in s["plans"]:
                p["runs"].append(measure_plan(p["sc"], a.steps, record_last=True))
                runs += 1
        for p in s["plans"]:
            p["measured"] = statistics.median(r["step"] for r in p["runs"])
            # A smoke run scores what it ran however busy the machine was: its numbers are no measurement.
            p["loaded"] = not a.smoke and max(r["others"] for r in p["runs"]) > LOADED_SHARE
            errs = []
            for r in p["runs"]:
                _, span, err = replay_error(r["events"], stage_devices(p["sc"]))
                if math.isfinite(err):
                    errs.append(err)
            p["replay"] = statistics.median(errs) if errs else math.nan
            print(f"# {s['model']} {s['cluster']} {'emulated' if s['emulated'] else 'this machine'} "
                  f"{'/'.join(p['names'])}: modelled {p['modelled'] * 1e3:.2f} ms, measured {p['measured'] * 1e3:.2f} ms",
                  file=sys.stderr, flush=True)
    rows, pairs, set_taus, replay_errs, apart = [], [], [], [], []
    abl = {t: [] for t in TERMS}
    for s in sets:
        scored = [p for p in s["plans"] if not p["loaded"]]
        for p in s["plans"]:
            steps_ = [r["step"] for r in p["runs"]]
            err = p["measured"] / p["modelled"] - 1.0
            row = [s["model"], s["cluster"], "emulated" if s["emulated"] else "this machine",
                   "/".join(STRATEGY_SHORT[n] for n in p["names"]), p["procs"], f"{p['modelled'] * 1e3:.2f}",
                   f"{p['measured'] * 1e3:.2f}", f"{min(steps_) * 1e3:.2f}-{max(steps_) * 1e3:.2f}", f"{err * 100:+.0f}",
                   f"{p['replay'] * 100:+.0f}" if math.isfinite(p["replay"]) else "-",
                   f"{max(r['others'] for r in p['runs']) * 100:.0f}"]
            (apart if p["loaded"] else rows).append(row)
            if not p["loaded"]:
                pairs.append((p["modelled"], p["measured"]))
                for t in TERMS:
                    abl[t].append((p["ablation"][t], p["measured"]))
                if math.isfinite(p["replay"]):
                    replay_errs.append(abs(p["replay"]))
        tau = kendall([{"modelled": p["modelled"], "measured": p["measured"]} for p in scored])
        if math.isfinite(tau):
            set_taus.append(tau)
            rows.append([s["model"], s["cluster"], "emulated" if s["emulated"] else "this machine",
                         f"kendall tau {tau:+.2f}", "", "", "", "", "", "", ""])
    head = ["model", "cluster", "mode", "strategies (same plan)", "procs", "modelled (ms)", "measured (ms)",
            "range (ms)", "error (%)", "replay error (%)", "other work (%)"]
    print(f"# plans: batch 32 in 4 micro-batches, {a.steps} steps, median of {a.repeats} runs taken in turns; "
          f"model: {source} ({prof.created[:19]}), held out")
    print(table(head, rows))
    if apart:
        print(f"# runs with more than {LOADED_SHARE * 100:.0f} % other work, not scored:")
        print(table(head, apart))
    pooled = kendall([{"modelled": m, "measured": x} for m, x in pairs])
    gm = geomean_error([m for m, _ in pairs], [x for _, x in pairs]) if pairs else math.nan
    print("# ablation: the held-out error with each term of the core model left out")
    print(table(["left out", "geomean error (%)", "kendall tau (pooled)"],
                [["nothing", f"{gm * 100:.1f}", f"{pooled:+.2f}"]] +
                [[t, f"{geomean_error([m for m, _ in abl[t]], [x for _, x in abl[t]]) * 100:.1f}",
                  f"{kendall([{'modelled': m, 'measured': x} for m, x in abl[t]]):+.2f}"] for t in TERMS if abl[t]]))
    over = []
    for model in a.models.split(","):
        ex, plain = overhead(model, a.steps * 4)
        over.append(ex / plain)
        print(f"# overhead {model}: executor {ex * 1e3:.3f} ms, plain one-process training {plain * 1e3:.3f} ms, "
              f"{ex / plain:.2f}x")
    worst = max(abs(m / p - 1.0) for p, m in pairs) if pairs else math.nan
    replay_gm = math.exp(statistics.mean(math.log1p(e) for e in replay_errs)) - 1 if replay_errs else math.nan
    quiet = [(s, p) for s in sets for p in s["plans"] if not p["loaded"]]
    measured = {plan_key(s, p): p["measured"] for s, p in quiet}
    result = {"runs": runs, "scored_plans": len(pairs), "geomean_error": gm, "worst": worst, "tau": pooled,
              "worst_set_tau": min(set_taus) if set_taus else math.nan, "replay_error": replay_gm,
              "overhead": statistics.median(over), "profile": prof.created, "loaded_plans": len(apart),
              "plans": measured}
    noise_floor(quiet, measured, None if a.smoke else last_bench())
    if a.smoke:  # one plan drawn at random, measured as the calibration measures its held-out plans
        held = heldout_check(prof, seed=0, n=1, steps=WARMUP + 1)
        held.update(heldout_score([dict(r, loaded=False) for r in held["rows"]]))
        random_set_again(dataclasses.replace(prof, heldout=held), smoke=True)
    else:
        record_bench(result)
        held = prof.heldout or {}
        random_set_again(prof)
    print(f"# {time.time() - t_start:.0f} s")
    if held:
        print(f"# random held-out plans of the calibration (seed {held['seed']}): {held['plans']} scored, "
              f"{held['loaded']} under load; worst {held['worst'] * 100:.0f} %, kendall tau {held['tau']:.2f}")
    loaded = "every run was measured under load" if not pairs and apart else "no plan was scored"
    k = int(held.get("plans") or 0)
    score("plan", [("runs", runs), ("held-out geomean error", gm * 100, "%", 1), ("worst", worst * 100, "%", 0),
                   ("kendall tau", pooled), ("worst set tau", result["worst_set_tau"]),
                   ("replay error", replay_gm * 100, "%", 1), ("overhead", result["overhead"], "x"),
                   ("random held-out", held.get("geomean_error", math.nan) * 100, f"% over {k} plans", 1)],
          why_not={"held-out geomean error": loaded, "worst": loaded, "kendall tau": loaded,
                   "worst set tau": "no set had two scored plans", "replay error": "no run could be replayed",
                   "random held-out": "the profile holds no plans drawn at random and run after its fit: calibrate "
                                      "again (python -m lab.calibrate)" if not k else "every one ran under load"})


if __name__ == "__main__":
    main()
