"""The calibration's proof: placement plans nobody chose, drawn at random from what users reach, run for real after
the fit, and the model's error on them.

A fit judged on the plans it was fitted to says little of the next plan a student draws. So after fitting, the
calibration draws ``n`` plans with a seeded generator (the seed is recorded) from the space the pages offer: a
topology (a preset, or one made from the catalogue's devices and links), a network (a preset, a torchvision
architecture, at a width between 0.25 and 1), a strategy's plan or one with random operators pinned to random
devices, 1 to 8 micro-batches, emulated or not, 1 to 4 processes. Each plan passes the lab's own checks (the plan
is resolved as a job resolves it), is predicted before it runs, and runs as a bench runs a plan
(:func:`measure_plan`). What is kept in the profile (``heldout``): the seed, every plan's prediction and
measurement, the geometric-mean error, the worst, Kendall's tau, and what the set covered, so that a prediction
outside it says so.
"""
from __future__ import annotations

import json
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from lab import settings
from lab.comm.spawn import init_worker, run_local
from lab.errors import LabError
from lab.machine.cases import pin_rank
from lab.machine.plans import kendall, predict_plan
from lab.machine.profile import MachineProfile, geomean_error
from lab.processes import LOADED_SHARE, LoadMeter
from lab.scenario.catalogue import PRESETS, catalogue_device, catalogue_link, preset
from lab.scenario.document import Scenario, Training
from lab.scenario.topology import Topology
from lab.scenario.zoo import BUILDERS as ZOO
from lab.train.placement_run import placed_ranks, resolved, stage_count

WHERE = "held-out plans"
#: The lab's own networks and torchvision's, as the Model picker offers them.
NETWORKS = ("mlp", "cnn", "resnet", "transformer", *sorted(ZOO))
WIDTHS = (0.25, 0.5, 0.75, 1.0)
#: Devices a generated topology adds beside its host, and the links that may join them to it.
EXTRA_DEVICES = ("gpu", "fpga", "asic", "npu", "tpu", "dpu")
LINKS = ("pcie", "cxl", "ethernet", "nvlink")
MAX_PROCS = 4
#: The strategies a plan is drawn with: fixed, so that a seed recorded in a profile draws the same plans after the
#: pages offer more. The even rounds strategy (the even split cut twice round the devices, for the interleaved
#: schedule, which the held-out set does not draw) is not among them.
DRAWN_STRATEGIES = ("greedy_eft", "heft", "optimal", "type_rule", "single_fastest", "round_robin", "even_split",
                    "chain_dp")
WARMUP = 2
#: A plan whose modelled step is longer than this is drawn again: the held-out set must fit the calibration's
#: few minutes, and a plan of seconds a step says no more of the model than one of a tenth.
MAX_MODELLED_STEP_S = 0.25


def generated_topology(rng: random.Random) -> Topology:
    """A host and one to three catalogue devices, each on a link of a random kind to the host."""
    kinds = rng.sample(EXTRA_DEVICES, rng.randint(1, 3))
    devs = [catalogue_device("host", "cpu")] + [catalogue_device(k, k) for k in kinds]
    links = [catalogue_link("host", k, rng.choice(LINKS)) for k in kinds]
    return Topology(f"drawn: host + {' + '.join(kinds)}", tuple(devs), tuple(links), (),
                    "drawn at random from the catalogue for the calibration's held-out plans").validate()


def _draw_one(rng: random.Random, profile: MachineProfile | None) -> tuple[Scenario, dict] | None:
    topo = preset(rng.choice(sorted(PRESETS))) if rng.random() < 0.5 else generated_topology(rng)
    model = rng.choice(NETWORKS)
    tr = Training(model=model, model_width=rng.choice(WIDTHS), parallel="placement",
                  strategy=rng.choice(DRAWN_STRATEGIES), micro_batches=rng.randint(1, 8), batch_size=32,
                  emulate=rng.random() < 0.5, steps=WARMUP + 4, eval_every=100_000)
    try:
        sc = resolved(Scenario(f"held-out {model}", topo, tr))
        pinned = rng.random() < 0.3
        if pinned:  # one or two operators pinned to random devices, the rest planned around them
            ops = sorted(dict(sc.training.placement))
            pins = {op: rng.choice(topo.devices).name for op in rng.sample(ops, min(len(ops), rng.randint(1, 2)))}
            sc = resolved(Scenario(sc.name, topo, tr.replace(pins=pins)))
        procs = stage_count(sc)
        if procs > MAX_PROCS:
            return None
        if profile is not None and predict_plan(sc, profile).makespan > MAX_MODELLED_STEP_S:
            return None
    except LabError:  # a plan the lab refuses (an operator on a device with no kernel for it): drawn again
        return None
    about = {"topology": topo.name, "model": model, "width": tr.model_width, "strategy": "pins" if pinned else
             tr.strategy, "micro_batches": tr.micro_batches, "emulated": tr.emulate, "procs": procs}
    return sc, about


def draw(seed: int, n: int, profile: MachineProfile | None = None) -> list[tuple[Scenario, dict]]:
    """``n`` plans drawn with ``seed`` (the same seed, the same plans), each with a few words of what it is. With a
    profile, a plan modelled longer than :data:`MAX_MODELLED_STEP_S` a step is drawn again."""
    rng = random.Random(seed)
    out: list[tuple[Scenario, dict]] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n:
            raise LabError(f"only {len(out)} of {n} plans could be drawn with seed {seed}", where=WHERE)
        got = _draw_one(rng, profile)
        if got is not None:
            out.append(got)
    return out


# ----- one plan run for real ------------------------------------------------------------------------------------
def timing_worker(rank: int, world: int, port: int, scenario_json: str, steps: int, out_dir: str,
                  cpus: list | None = None, record_last: bool = False) -> None:
    """One process of a placement run timed as a bench times it: the job's own steps (no per-operator stamps
    unless the run emulates), each from the barrier that starts it to this process's end. ``cpus``: the core
    of each rank (None: not pinned); without it, as the job manager pins a job's ranks. Writes
    ``time<rank>.json``: [[start, end, main-thread CPU, other threads' CPU], ...] per step on this machine's
    clock; with ``record_last`` the last step is recorded operator by operator as a job records its drawn steps,
    with the bytes the process held for the backward at its peak (``events<rank>.json``)."""
    import torch.distributed as dist

    from lab.train.placement_run import PlacementTrainer

    if cpus is None:
        pin_rank(rank)
    elif cpus[rank] is not None:
        os.sched_setaffinity(0, {int(cpus[rank])})
    init_worker(rank, world, port, timeout_s=120.0)
    try:
        t = PlacementTrainer(Scenario.from_json(scenario_json), rank, world, None, None, launched=False)
        t.setup()
        t.rec.timeline_steps = [steps] if record_last else []
        spans = [[r.start, r.end, r.main_cpu, r.other_cpu] for r in (t.train_step(s) for s in range(1, steps + 1))]
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"time{rank}.json"), "w") as f:
        json.dump(spans, f)
    if record_last:
        with open(os.path.join(out_dir, f"events{rank}.json"), "w") as f:
            json.dump({"events": t.rec.timelines.get(steps, []), "saved_peak": t.rec.saved_peak}, f)


def measure_plan(sc: Scenario, steps: int, record_last: bool = False) -> dict:
    """One run of a resolved placement plan, its ranks on the cores a job's get: its step (the median after
    :data:`WARMUP` steps; with ``record_last`` the last step is recorded operator by operator and left out), the
    last step's events and each rank's peak of bytes saved for the backward in it, and the share of the machine's
    CPU other work took meanwhile."""
    world = stage_count(sc)
    jobs = settings.job_cpus()
    cpus = placed_ranks(sc).cores([jobs[r % len(jobs)] for r in range(world)])
    meter = LoadMeter()
    with tempfile.TemporaryDirectory(prefix="lab-heldout-") as tmp:
        try:
            run_local(timing_worker, world, (sc.to_json(), steps, tmp, cpus, record_last), timeout_s=600)
        except RuntimeError as exc:
            raise LabError(f"the plan {sc.name!r} failed: {exc}", where=WHERE) from None
        recs = [json.loads(Path(tmp, f"time{r}.json").read_text()) for r in range(world)]
        recorded = [json.loads(Path(tmp, f"events{r}.json").read_text()) for r in range(world)] if record_last else []
        events = [e for r in recorded for e in r["events"]]
    load = meter.result()
    last = steps - 1 if record_last else steps
    spans = [max(r[i][1] for r in recs) - min(r[i][0] for r in recs) for i in range(WARMUP, last)]
    return {"step": statistics.median(spans), "events": events, "others": float(load["others_share"]),
            "saved_peak": [r["saved_peak"] for r in recorded]}


# ----- the check ------------------------------------------------------------------------------------------------
def score(rows: list[dict]) -> dict:
    """The geometric-mean error, the worst error and Kendall's tau over the rows measured on a quiet machine."""
    quiet = [r for r in rows if not r["loaded"]]
    pred, meas = [r["modelled"] for r in quiet], [r["measured"] for r in quiet]
    return {"plans": len(quiet), "loaded": len(rows) - len(quiet), "geomean_error": geomean_error(pred, meas),
            "worst": max((abs(m / p - 1.0) for p, m in zip(pred, meas)), default=math.nan),
            "tau": kendall(quiet)}


def covered(rows: list[dict]) -> dict:
    """What the held-out set spanned: process counts, micro-batches, emulated or not, the networks, the longest
    measured step."""
    return {"procs": sorted({r["procs"] for r in rows}), "micro_batches": sorted({r["micro_batches"] for r in rows}),
            "emulated": sorted({r["emulated"] for r in rows}), "models": sorted({r["model"] for r in rows}),
            "longest_step": max((r["measured"] for r in rows), default=0.0)}


def check(profile: MachineProfile, *, seed: int | None = None, n: int = 12, steps: int = WARMUP + 4,
          progress: Callable[[str, float], None] | None = None) -> dict:
    """Draw ``n`` plans with ``seed`` (a new one from the clock when None), predict each with ``profile``, run each
    for real and score the predictions (:func:`score`); a plan run while other work took more than
    :data:`lab.processes.LOADED_SHARE` of the CPU is kept but not scored."""
    seed = int(time.time()) % 2**31 if seed is None else int(seed)
    progress = progress or (lambda msg, frac: None)
    plans = draw(seed, n, profile)
    rows = []
    for i, (sc, about) in enumerate(plans):
        progress(f"held-out plan {i + 1} of {n}: {about['model']} ×{about['width']:g} on {about['topology']}, "
                 f"{about['procs']} process(es)", i / n)
        modelled = predict_plan(sc, profile).makespan  # before it runs
        got = measure_plan(sc, steps)
        rows.append({**about, "modelled": modelled, "measured": got["step"], "others": got["others"],
                     "loaded": got["others"] > LOADED_SHARE})
    progress("held-out plans measured", 1.0)
    return {"seed": seed, "steps": steps, "rows": rows, **score(rows), "covered": covered(rows)}


def again(profile: MachineProfile, progress: Callable[[str, float], None] | None = None) -> list[dict]:
    """The profile's random held-out plans drawn again with its recorded seed and run again as the calibration ran
    them: each recorded row with ``again`` (the step measured now) and ``others_again`` (other work's share
    meanwhile). How far ``again`` is from ``measured`` is the set's noise floor: a model cannot be closer to one
    measurement than the next measurement of the same plan is. Raises LabError when the profile holds no such set,
    or when its seed no longer draws the plans it recorded (a profile made by another version of the generator)."""
    held = profile.heldout or {}
    rows = held.get("rows") or []
    if not rows:
        raise LabError("the profile holds no plans drawn at random: calibrate again (python -m lab.calibrate)",
                       where=WHERE)
    progress = progress or (lambda msg, frac: None)
    plans = draw(int(held["seed"]), len(rows), profile)
    out = []
    for i, ((sc, about), row) in enumerate(zip(plans, rows)):
        if any(row.get(k) != v for k, v in about.items()):
            raise LabError(f"seed {held['seed']} now draws another plan {i + 1} ({about['model']} on "
                           f"{about['topology']}) than the profile recorded ({row.get('model')} on "
                           f"{row.get('topology')})", where=WHERE)
        progress(f"held-out plan {i + 1} of {len(rows)} again", i / len(rows))
        got = measure_plan(sc, int(held.get("steps") or WARMUP + 4))
        out.append({**row, "again": got["step"], "others_again": got["others"]})
    return out


__all__ = ["draw", "check", "again", "score", "covered", "measure_plan", "timing_worker", "generated_topology",
           "NETWORKS", "MAX_PROCS"]
