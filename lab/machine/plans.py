"""A placement run beside its model: the modelled step of the very task lists the run's processes execute, the
replay of what the run recorded, and what the run measured.

**The model of a step** (:func:`predict_plan`) runs each process's own tasks, in the executor's order
(:mod:`lab.modelled.placement.executor`), on this machine's cores (:mod:`lab.modelled.placement.cores`):

* each operator's one-process forward + backward cost from the calibration (one third forward, two thirds
  backward), times the executor's own factor; a cost per piece call, per operator when the piece runs node by
  node (emulated runs), and the loss: all measured inside the executor on synthetic plans
  (:mod:`lab.machine.insitu`, the profile's ``executor``);
* each message the sender's and the receiver's CPU, their communication threads' CPU and the wire; with
  emulation an operator is followed by a wait of ``s - 1`` times its warm time and a tensor waits for the
  topology's link time;
* each process's optimiser step at its own parameters;
* the processes on the cores a job's ranks get (:func:`lab.modelled.placement.cores.rank_cores`), sharing them
  with the other work measured beside the run.

A profile made before the executor was measured prices a message as its point-to-point probe did and adds no
executor costs; :func:`prediction_caveat` says so beside every prediction, or how far the model was off the last
time it was measured.

**The replay** (:mod:`lab.machine.replay`) runs the recorded step through the same model with its own task times.

**The measurement** (:func:`plan_outcome`): the step time is the median, after the first two steps, of
each step from the barrier that starts it to the last process's optimiser step; the drawn step is the
recorded step nearest that median.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from scipy.stats import kendalltau

from lab import settings
from lab.errors import LabError, first_line
from lab.machine.profile import ExecutorFit, MachineProfile, geomean_error, op_features
from lab.machine.plan_memory import memory_error, memory_rows, modelled_peaks
from lab.machine.replay import replay_error
from lab.modelled.opgraph import trace
from lab.modelled.placement.core_tasks import Machine
from lab.modelled.placement.cores import rank_cores
from lab.modelled.placement.cores import simulate as simulate_cores
from lab.modelled.placement.executor import Linear, StepCosts
from lab.modelled.placement.pipeline import bubble_share
from lab.modelled.placement.executor import messages as executor_messages
from lab.modelled.placement.executor import tasks as executor_tasks
from lab.scenario.document import Scenario
from lab.scenario.names import PIPELINE_SCHEDULES, STRATEGY_SHORT
from lab.train import placement_run

FORWARD_SHARE = 1.0 / 3.0
WARMUP_STEPS = 2


def _tensor_bytes(pieces: list, final: tuple, micro: int, in_features: int) -> dict[tuple[int, int], int]:
    """Bytes of every piece output at one micro-batch, by running the pieces once on zeros."""
    out: dict[tuple[int, int], int] = {}
    vals: dict[int, tuple] = {}
    x = torch.zeros(micro, in_features)
    with torch.no_grad():
        for p in pieces:
            ins = [x if r is placement_run.INPUT else vals[r[0]][r[1]] for r in p.reads]
            res = p.module(*ins)
            vals[p.index] = (res,) if p.single else tuple(res)
            for o, t in enumerate(vals[p.index]):
                out[(p.index, o)] = int(t.numel() * t.element_size()) if torch.is_tensor(t) else 0
    return out


@dataclass
class PlanParts:
    """What a placement run's processes execute in one step, as the core model takes it: the pieces with their
    operators' one-process costs (seconds, forward and backward, before the executor's factor), the devices by
    rank, the optimiser per device, the emulated factors and links, and the messages' bytes."""

    pieces: list  # [Piece] with one-process costs
    devices: list[str]
    micro_batches: int
    optimizer: dict
    link: Any  # (src, dst, bytes) -> seconds, or None without emulation
    emulated: bool
    schedule: str = "gpipe"  # the order of each process's actions (lab.modelled.placement.order.schedule)


def plan_parts(sc: Scenario, profile: MachineProfile, *, emulate: bool | None = None) -> PlanParts:
    """The scenario's placement run (its plan written out or made by its strategy) as the core model takes it."""
    sc = placement_run.resolved(sc)
    tr = sc.training
    emulate = tr.emulate if emulate is None else emulate
    ds, model = placement_run.model_for(sc)
    return parts_of(sc, model, ds.in_features, profile, emulate=emulate)


def parts_of(sc: Scenario, model: torch.nn.Module, in_features: int, profile: MachineProfile, *,
             emulate: bool) -> PlanParts:
    """:func:`plan_parts` of a scenario whose plan is written out, for ``model`` (a preset or a calibration
    network)."""
    tr = sc.training
    plan = placement_run.resolve(sc, model, in_features)
    cut, final = placement_run.pieces(model, plan)
    micro = math.ceil(tr.batch_size / tr.micro_batches)
    nbytes = _tensor_bytes(cut, final, micro, in_features)
    fit = profile.compute  # one process: the core model shares the cores itself
    og = trace(model, micro, in_features, name=tr.model)
    scales = placement_run.op_scales(sc, plan) if emulate else {}
    cost = {op.name: fit.cost(op_features(op)[0]).time(op.flops) for op in og.ops}
    weighted = {op.name for op in og.ops if op.param_bytes > 0}
    parts = []
    for p, bare in zip(cut, placement_run.with_bytes(cut, nbytes)):
        fwd = tuple((op, cost[op] * FORWARD_SHARE, scales.get(op, 1.0)) for op in p.ops)
        if any(not math.isfinite(s) for _, _, s in fwd):
            raise LabError(f"the plan puts an operator of piece {p.index} on {p.device!r}, which has no kernel for it",
                           where="prediction")
        total = sum(t for _, t, _ in fwd)
        scale = (sum(t * s for _, t, s in fwd) / total) if total > 0 and scales else 1.0
        parts.append(replace(bare, forward=fwd, backward=sum(cost[op] for op in p.ops) * (1.0 - FORWARD_SHARE),
                             backward_scale=scale, weight_share=weight_share(p.ops, cost, weighted)))
    opt = profile.optimizer_cost(tr.optimizer, 1)
    optimizer = {}
    for dev in plan.devices:
        params = [q for p in cut if p.device == dev for q in p.module.parameters()]
        optimizer[dev] = opt.time(sum(q.numel() for q in params), len(params)) if params else 0.0
    topo = sc.topology
    link = (lambda a, b, n: float(topo.transfer_time(a, b, n))) if emulate else None
    return PlanParts(parts, list(plan.devices), tr.micro_batches, optimizer, link, bool(emulate), tr.schedule)


def weight_share(ops, cost: dict, weighted: set) -> float:
    """The share of a piece's backward that computes its weights' gradient, by FLOPs: an operator with weights
    takes twice its forward backward (its input's gradient and its weights', alike), one without takes its
    forward once, all for its input."""
    total = sum(cost[op] * (2.0 if op in weighted else 1.0) for op in ops)
    return sum(cost[op] for op in ops if op in weighted) / total if total > 0 else 0.0


#: The terms of the core model a prediction can leave out (the bench's ablation).
TERMS = ("per-call costs", "message CPU", "shared cores", "wake-ups", "pinning", "cold cores")


def executor_fit(profile: MachineProfile) -> tuple[ExecutorFit, bool]:
    """The profile's executor costs, and whether they were measured in the executor. A profile without them
    prices a message as the point-to-point probe did (all of it on the wire) and no executor overheads."""
    if profile.executor is not None:
        return profile.executor, True
    msg = profile.message_fit(2) or profile.allreduce_fit("gloo", 2)
    return ExecutorFit(wire_fixed=msg.alpha, wire_per_byte=msg.beta), False


def simulate_parts(parts: PlanParts, ex: ExecutorFit, *, cores: int, pinned: Sequence[int | None],
                   external: float = 0.0, node_by_node: bool | None = None, without: Sequence[str] = (),
                   cold: Sequence = ()):
    """The core model's step of ``parts`` with executor costs ``ex`` and the machine's slow-down after idle time
    ``cold`` (:attr:`ExecutorFit.cold`: the after-wait factor its fit took off); ``without``: terms of
    :data:`TERMS` left out (the ablation)."""
    unknown = set(without) - set(TERMS)
    if unknown:
        raise LabError(f"unknown model terms {sorted(unknown)}; the terms are {list(TERMS)}", where="prediction")
    k = ex.compute
    st = [replace(s, forward=tuple((op, t * k, sc) for op, t, sc in s.forward), backward=s.backward * k)
          for s in parts.pieces]
    calls = "per-call costs" not in without
    msg_cpu = "message CPU" not in without
    costs = StepCosts(call=ex.call if calls else 0.0, node=ex.node if calls else 0.0,
                      backward_call=ex.backward_call if calls else 0.0, loss=ex.loss if calls else 0.0,
                      send=Linear(ex.send_fixed, ex.send_per_byte) if msg_cpu else Linear(),
                      recv=Linear(ex.recv_fixed, ex.recv_per_byte) if msg_cpu else Linear(),
                      wire=Linear(ex.wire_fixed, ex.wire_per_byte))
    lists = executor_tasks(st, parts.devices, parts.micro_batches, costs, parts.optimizer, parts.link,
                           node_by_node=parts.emulated if node_by_node is None else node_by_node,
                           schedule=parts.schedule)
    n = len(parts.devices)
    if "shared cores" in without:
        cores, pinned, external = n, list(range(n)), 0.0
    elif "pinning" in without:
        pinned = [None] * n
    machine = Machine(cores=cores, wake=ex.wake if "wake-ups" not in without else 0.0,
                      background_same=ex.background_same if msg_cpu else 0.0,
                      background_other=ex.background_other if msg_cpu else 0.0, external=external,
                      cold=tuple((w, f) for w, f in cold if w > 0) if "cold cores" not in without else ())
    return simulate_cores(lists, list(pinned), machine)


def predict_plan(sc: Scenario, profile: MachineProfile, *, emulate: bool | None = None, cores: int | None = None,
                 pinned: Sequence[int | None] | None = None, external: float = 0.0, without: Sequence[str] = ()):
    """The modelled step of the scenario's placement run on this machine's cores: each process's tasks in the
    executor's order, run on ``cores`` cores (the cores jobs run on) with each rank on the core a job's rank
    gets (``pinned``), ``external`` cores' worth of other work beside it. Returns the core model's schedule
    (``rows``, ``makespan``)."""
    if not isinstance(profile, MachineProfile):
        raise LabError("a placement run's prediction needs this machine's calibrated costs: calibrate the machine "
                       "first (Fidelity page, or python -m lab.calibrate)", where="prediction")
    parts = plan_parts(sc, profile, emulate=emulate)
    ex, _ = executor_fit(profile)
    cpus = settings.job_cpus()
    cores = cores or len(cpus)
    if pinned is None:
        pinned = rank_cores(len(parts.devices), cores, message_weights(parts))
    # The cold starts its executor terms were fitted without: a fit made before they were modelled holds them.
    return simulate_parts(parts, ex, cores=cores, pinned=pinned, external=external, without=without, cold=ex.cold)


def message_weights(parts: PlanParts) -> dict[tuple[int, int], int]:
    """Messages per step between each pair of ranks (the smaller rank first)."""
    return executor_messages(parts.pieces, parts.devices, parts.micro_batches, parts.schedule)


def measured_steps(metrics: Any, batch_size: int) -> list[float]:
    """Seconds of each step after the warm-up, from the job's rows (batch / samples per second)."""
    job = metrics[(metrics.worker < 0) & (metrics.step > WARMUP_STEPS)]
    return [batch_size / v for v in job.samples_per_s.dropna() if v > 0]


def plan_outcome(store: Any, run_id: str, profile: MachineProfile | None) -> dict:
    """What a placement run measured and what the model says of the same step: the median step time, the
    drawn step's timeline, the modelled schedule (None without a profile), the error, and the run's facts."""
    run = store.get_run(run_id)
    sc = Scenario.from_dict(run["scenario"])
    tr = sc.training
    if tr.parallel != "placement":
        raise LabError(f"run {run_id} is a data-parallel run, not a placement run", where="placement")
    info = run.get("info") or {}
    steps = measured_steps(store.metrics(run_id), tr.batch_size)
    median = float(sorted(steps)[len(steps) // 2]) if steps else math.nan
    events = store.job_records.plan_events(run_id)
    drawn, rows = None, []
    if len(events):
        spans = {s: float(g.end.max() - g.start.min()) for s, g in events.groupby("step")}
        drawn = min(spans, key=lambda s: (abs(spans[s] - median) if math.isfinite(median) else 0, s))
        rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in events[events.step == drawn].to_dict("records")]
    predicted, note = None, None
    if profile is not None:
        load = info.get("load") or {}
        # Other work measured beside the run competes for the cores as that many always-busy processes.
        external = float(load.get("others_share") or 0.0) * float(load.get("cpus") or 0)
        try:
            predicted = predict_plan(sc, profile, external=external)
        except LabError as exc:
            note = str(exc)
    else:
        note = ("no prediction: this machine is not calibrated yet (Fidelity page, or python -m lab.calibrate); "
                "the strategy's own plan is on the datasheet")
    modelled = predicted.makespan if predicted is not None else math.nan
    replayed, replay_span, replay_err, replay_rows = math.nan, math.nan, math.nan, []
    if rows:
        try:
            sched, replay_span, replay_err = replay_error(rows, info.get("devices") or [])
            replayed, replay_rows = sched.makespan, sched.rows
        except LabError as exc:
            note = (note + " " if note else "") + f"no replay: {exc}"
    failure = first_line(run.get("error") or "") if run["status"] in ("failed", "interrupted", "stopped") else ""
    devices = info.get("devices") or sorted({d for _, d in tr.placement})
    by_schedule: dict[str, dict | None] = {}
    for name in PIPELINE_SCHEDULES:  # the same plan's memory under every schedule it can run
        try:
            by_schedule[name] = modelled_peaks(sc.replace(training=tr.replace(schedule=name)))
        except LabError as exc:
            by_schedule[name] = None
            if name == tr.schedule:
                note = (note + " " if note else "") + f"no memory model: {exc}"
    memory = memory_rows(devices, by_schedule.get(tr.schedule), info.get("saved_peak"))
    return {"run_id": run_id, "status": run["status"], "failure": failure, "strategy": tr.strategy, "model": tr.model,
            "emulated": bool(tr.emulate), "devices": devices, "schedule": tr.schedule,
            "micro_batches": tr.micro_batches, "memory": memory, "memory_error": memory_error(memory),
            "memory_by_schedule": by_schedule, "bubble_measured": bubble_share(rows, devices),
            "bubble_modelled": bubble_share(predicted.rows, devices) if predicted else math.nan, "measured_step": median, "steps_measured": len(steps),
            "modelled_step": modelled, "error": (median / modelled - 1.0) if (modelled and math.isfinite(median)
                                                                            and math.isfinite(modelled)) else math.nan,
            "drawn_step": drawn, "measured_rows": rows, "modelled_rows": predicted.rows if predicted else [],
            "note": note, "clock_uncertainty": max(info.get("clock_uncertainty") or [0.0]),
            "replay_step": replayed, "replay_measured": replay_span, "replay_error": replay_err,
            "replay_rows": replay_rows, "caveat": prediction_caveat(
                profile, len(info.get("devices") or [1]), cpu=sum(predicted.cpu) if predicted else None,
                micro_batches=tr.micro_batches, emulated=bool(tr.emulate), step=modelled if predicted else None),
            "placement": dict(tr.placement), "pins": dict(tr.pins)}


#: A plan whose step needs this many times the CPU of the largest calibration plan is outside what it measured.
FAR_LARGER = 10.0


def prediction_caveat(profile: MachineProfile | None, procs: int, bench: dict | None = None,
                      cpu: float | None = None, micro_batches: int | None = None, emulated: bool | None = None,
                      step: float | None = None) -> str:
    """How far a prediction of a plan of ``procs`` processes (``cpu``: its modelled CPU seconds a step; ``step``:
    its modelled step) may be off, measured on plans the model was not fitted to: the calibration's plans drawn at
    random and run after the fit, and the last bench_plan.py score with this profile; or why no number can be
    backed (more processes than the calibration measured, a model far larger than its networks, executor costs
    never measured, no held-out measurement). A plan outside what the held-out plans covered says so. The error on
    the calibration's own plans, which the model was fitted to, is never quoted: it says little of the next plan."""
    if profile is None:
        return "no prediction: this machine is not calibrated yet"
    ex, measured = executor_fit(profile)
    if not measured:
        return ("the executor's own costs were never measured on this machine (the profile is older than that "
                "calibration): calibrate again before trusting the prediction's size")
    top = max(ex.procs or (1,))
    if procs > top:
        return (f"this plan starts {procs} processes; the calibration measured at most {top}: no error can be backed "
                "for it")
    if cpu is not None and ex.largest > 0 and cpu > FAR_LARGER * ex.largest:
        return (f"this plan's step needs {cpu / ex.largest:.0f} times the CPU of the largest calibration plan: the "
                "calibration did not measure work this large, so no error can be backed for it")
    said = []
    held = profile.heldout or {}
    if math.isfinite(held.get("geomean_error", math.nan)) and held.get("plans"):
        said.append(f"expected error: within {held['geomean_error'] * 100:.0f} % (geometric mean; worst "
                    f"{held['worst'] * 100:.0f} %, Kendall tau {held['tau']:.2f}) on the {held['plans']} plans drawn "
                    f"at random (seed {held['seed']}) and run after the calibration's fit")
        if why := heldout_outside(held, procs, micro_batches, emulated, step):
            said.append(f"this plan lies outside them ({why})")
    bench = bench if bench is not None else last_bench()
    if bench and bench.get("profile") == profile.created and math.isfinite(bench.get("geomean_error", math.nan)):
        said.append(f"{'' if said else 'expected error: '}within {bench['geomean_error'] * 100:.0f} % (geometric "
                    f"mean; worst {bench['worst'] * 100:.0f} %) on the {bench.get('scored_plans', '?')} held-out plans "
                    f"bench_plan.py measured on this machine ({str(bench.get('measured', ''))[:10]}) with this profile")
    if not said:
        return ("no held-out measurement with this profile: no error can be backed for its predictions; calibrate "
                "again (python -m lab.calibrate runs plans drawn at random after its fit)")
    return "; ".join(said)


def heldout_outside(heldout: dict, procs: int, micro_batches: int | None = None, emulated: bool | None = None,
            step: float | None = None) -> str:
    """Why a plan lies outside what the calibration's held-out plans covered (:mod:`lab.machine.heldout`; "" when
    it lies inside)."""
    cov = heldout.get("covered") or {}
    if procs not in cov.get("procs", ()):
        return f"the held-out plans had {', '.join(map(str, cov.get('procs', []))) or 'no'} process(es), not {procs}"
    mb = cov.get("micro_batches") or []
    if micro_batches is not None and mb and not min(mb) <= micro_batches <= max(mb):
        return f"the held-out plans had {min(mb)} to {max(mb)} micro-batches, not {micro_batches}"
    if emulated is not None and emulated not in cov.get("emulated", ()):
        return f"no held-out plan was {'emulated' if emulated else 'run without emulation'}"
    longest = float(cov.get("longest_step") or 0.0)
    if step is not None and longest > 0 and step > 4 * longest:
        return f"this step is modelled {step / longest:.0f} times longer than the longest held-out step"
    return ""


def placement_rows(store: Any, profile: MachineProfile | None, run_ids: Sequence[str], limit: int = 12) -> list[dict]:
    """The newest ``limit`` finished placement runs of ``run_ids``: per run its plan, the measured step, the
    prediction, the replay of its drawn step and the two errors (a data-parallel run is left out)."""
    rows = []
    for rid in run_ids:
        if len(rows) >= limit:
            break
        try:
            out = plan_outcome(store, rid, profile)
        except LabError:  # a data-parallel run, or one deleted meanwhile
            continue
        if out["status"] != "done":
            continue
        rows.append({"run": rid, "plan": plan_label(out), "processes": len(out["devices"]),
                     "measured (ms)": out["measured_step"] * 1e3, "modelled (ms)": out["modelled_step"] * 1e3,
                     "error (%)": out["error"] * 100, "replay of the drawn step (ms)": out["replay_step"] * 1e3,
                     "that step measured (ms)": out["replay_measured"] * 1e3,
                     "replay error (%)": out["replay_error"] * 100})
    return rows


def bench_path() -> Path:
    """Where bench_plan.py leaves its last held-out score (the data folder)."""
    return settings.data_dir() / "plan_fidelity.json"


def record_bench(result: dict, path: Path | None = None) -> Path:
    """Keep bench_plan.py's last held-out score (with when it was measured) for the pages to quote."""
    path = path or bench_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({**result, "measured": datetime.now(timezone.utc).isoformat(timespec="seconds")}))
    os.replace(tmp, path)
    return path


def last_bench(path: Path | None = None) -> dict | None:
    """bench_plan.py's last held-out score, or None (never run here, or unreadable)."""
    try:
        d = json.loads((path or bench_path()).read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and isinstance(d.get("geomean_error"), (int, float)) else None


def plans_apart(before: Mapping[str, float], now: Mapping[str, float]) -> tuple[int, float]:
    """How far two measurements of the same plans are apart, the noise floor a model's error on them sits on: the
    number of plans (by key) measured both times, and the geometric mean of how far one time is from the other
    (as :func:`lab.machine.profile.geomean_error`; NaN when no plan was measured both times)."""
    keys = [k for k in now if k in before]
    return len(keys), geomean_error([before[k] for k in keys], [now[k] for k in keys])


def plan_label(out: dict) -> str:
    """A plan in a few words: its strategy, its pins, and whether the cluster was emulated."""
    pins = ", ".join(f"{op}→{dev}" for op, dev in sorted(out["pins"].items()))
    return (STRATEGY_SHORT.get(out["strategy"], out["strategy"]) + (f" (pins {pins})" if pins else "")
            + ("" if out["emulated"] else ", this machine"))


def kendall(rows: Sequence[dict]) -> float:
    """Kendall's tau between the modelled and the measured step times of ``rows`` (NaN with fewer than two)."""
    pairs = [(r["modelled"], r["measured"]) for r in rows if math.isfinite(r["modelled"]) and math.isfinite(r["measured"])]
    if len(pairs) < 2:
        return math.nan
    tau = kendalltau([p[0] for p in pairs], [p[1] for p in pairs]).statistic
    return float(tau) if tau is not None else math.nan


__all__ = ["placement_rows", "prediction_caveat", "heldout_outside", "record_bench", "last_bench", "plan_parts", "parts_of",
           "simulate_parts", "message_weights", "executor_fit", "TERMS", "PlanParts", "predict_plan", "plan_outcome", "measured_steps", "kendall", "plan_label", "plans_apart", "FORWARD_SHARE"]
