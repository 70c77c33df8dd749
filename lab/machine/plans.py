"""A placement run beside its model: the modelled step of the very schedule the run executes, and what
the run measured.

**The model of a step** (:func:`predict_plan`) is :func:`lab.modelled.placement.pipeline.simulate` over
the run's own pieces and micro-batches, with

* each operator's forward + backward seconds from this machine's calibrated costs at the micro-batch
  (:class:`lab.machine.calibrated_model.CalibratedModel`, fitted with as many processes as the run starts),
  split one third forward, two thirds backward (the usual rule: a backward pass computes the
  gradients of both the inputs and the weights);
* a sent tensor costs one point-to-point message as calibrated on this machine (latency + bytes /
  bandwidth, with as many processes as the run starts; a profile made before that measurement existed
  uses one step of the calibrated gloo all-reduce instead); with emulation, each operator is slower
  by its device's catalogue factor and a tensor takes at least the topology's link time for its bytes
  (the receiver waits the rest, as the run does);
* each process's optimiser step at its own parameters, from the calibrated optimiser cost.

Without emulation no emulated wait enters either side, so the comparison tests the calibrated cost
model itself: that is the non-circular one. With emulation, most of the time is waits the run makes
by the topology's numbers, which the model adds by the same numbers.

**The measurement** (:func:`plan_outcome`): the step time is the median, after the first two steps, of
each step from the barrier that starts it to the last process's optimiser step; the drawn step is the
recorded step nearest that median.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from scipy.stats import kendalltau

from lab.errors import LabError
from lab.machine.calibrated_model import CalibratedModel
from lab.machine.profile import MachineProfile
from lab.modelled.costmodel import catalogue_slowdown
from lab.modelled.opgraph import trace
from lab.modelled.placement.pipeline import Piece as ModelPiece
from lab.modelled.placement.pipeline import PipelineSchedule, simulate
from lab.scenario.document import Scenario
from lab.scenario.names import STRATEGY_SHORT
from lab.train import stages

FORWARD_SHARE = 1.0 / 3.0
WARMUP_STEPS = 2


def _tensor_bytes(pieces: list, final: tuple, micro: int, in_features: int) -> dict[tuple[int, int], int]:
    """Bytes of every piece output at one micro-batch, by running the pieces once on zeros."""
    out: dict[tuple[int, int], int] = {}
    vals: dict[int, tuple] = {}
    x = torch.zeros(micro, in_features)
    with torch.no_grad():
        for p in pieces:
            ins = [x if r is stages.INPUT else vals[r[0]][r[1]] for r in p.inputs]
            res = p.module(*ins)
            vals[p.index] = (res,) if p.single else tuple(res)
            for o, t in enumerate(vals[p.index]):
                out[(p.index, o)] = int(t.numel() * t.element_size()) if torch.is_tensor(t) else 0
    return out


def predict_plan(sc: Scenario, profile: MachineProfile, *, emulate: bool | None = None) -> PipelineSchedule:
    """The modelled step of the scenario's placement run (its plan written out or made by its strategy)."""
    if not isinstance(profile, MachineProfile):
        raise LabError("a placement run's prediction needs this machine's calibrated costs: calibrate the machine "
                       "first (Fidelity page, or python -m lab.calibrate)", where="prediction")
    sc = stages.resolved(sc)
    tr = sc.training
    emulate = tr.emulate if emulate is None else emulate
    ds, model = stages.model_for(sc)
    plan = stages.resolve(sc, model, ds.in_features)
    cut, final = stages.pieces(model, plan)
    micro = math.ceil(tr.batch_size / tr.micro_batches)
    nbytes = _tensor_bytes(cut, final, micro, ds.in_features)
    world = len(plan.devices)
    cm = CalibratedModel(profile, procs=world)
    og = trace(model, micro, ds.in_features, name=tr.model)
    topo = sc.topology
    fwd, bwd = {}, {}
    for op in og.ops:
        dev = plan.assignment[op.name]
        slower = catalogue_slowdown(topo, topo.device(dev), op.op_class) if emulate else 1.0
        t = cm.fit.cost(op.op_class).time(op.flops) * slower if math.isfinite(slower) else math.inf
        fwd[op.name], bwd[op.name] = t * FORWARD_SHARE, t * (1.0 - FORWARD_SHARE)
    msg = profile.message_fit(max(2, world)) or profile.allreduce_fit("gloo", max(2, world))

    def link(src: str, dst: str, n: float) -> float:
        sent = msg.alpha + n * msg.beta  # the real message on this machine
        return max(sent, float(topo.transfer_time(src, dst, n))) if emulate else sent

    opt = profile.optimizer_cost(tr.optimizer, world)
    optimizer = {}
    for dev in plan.devices:
        params = [q for p in cut if p.device == dev for q in p.module.parameters()]
        optimizer[dev] = opt.time(sum(q.numel() for q in params), len(params)) if params else 0.0
    model_pieces = [ModelPiece(p.index, p.device, tuple(p.ops),
                               tuple((r[0], float(nbytes[(r[0], r[1])])) for r in p.inputs if r is not stages.INPUT),
                               p.index == final[0])
                    for p in cut]
    return simulate(model_pieces, fwd, bwd, link, tr.micro_batches, optimizer)


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
    events = store.plan_events(run_id)
    drawn, rows = None, []
    if len(events):
        spans = {s: float(g.end.max() - g.start.min()) for s, g in events.groupby("step")}
        drawn = min(spans, key=lambda s: (abs(spans[s] - median) if math.isfinite(median) else 0, s))
        rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in events[events.step == drawn].to_dict("records")]
    predicted, note = None, None
    if profile is not None:
        try:
            predicted = predict_plan(sc, profile)
        except LabError as exc:
            note = str(exc)
    else:
        note = ("no prediction: this machine is not calibrated yet (Fidelity page, or python -m lab.calibrate); "
                "the strategy's own plan is on the datasheet")
    modelled = predicted.makespan if predicted is not None else math.nan
    return {"run_id": run_id, "status": run["status"], "strategy": tr.strategy, "model": tr.model,
            "emulated": bool(tr.emulate), "devices": info.get("devices") or sorted({d for _, d in tr.placement}),
            "micro_batches": tr.micro_batches, "measured_step": median, "steps_measured": len(steps),
            "modelled_step": modelled, "error": (median / modelled - 1.0) if (modelled and math.isfinite(median)
                                                                            and math.isfinite(modelled)) else math.nan,
            "drawn_step": drawn, "measured_rows": rows, "modelled_rows": predicted.rows if predicted else [],
            "note": note, "clock_uncertainty": max(info.get("clock_uncertainty") or [0.0]),
            "placement": dict(tr.placement), "pins": dict(tr.pins)}


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


__all__ = ["predict_plan", "plan_outcome", "measured_steps", "kendall", "plan_label", "FORWARD_SHARE"]
