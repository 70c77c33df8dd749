"""What the Placement page shows that is not a figure: pins changed by its buttons, the balancing loop's
defaults and runs, and the sentences built from them. User text goes through ``plain`` (the page passes
its markdown escape; identity by default)."""

from __future__ import annotations

import math
from typing import Callable, Mapping

from lab.errors import LabError
from lab.jobs.comparison import Spread
from lab.machine import plans
from lab.modelled.balance import (
    RULE_LABELS,
    RULES,
    BalanceResult,
    balance_data_parallel,
    balance_model_parallel,
)
from lab.scenario.names import STRATEGY_LABELS, STRATEGY_NAMES, STRATEGY_SHORT

Plain = Callable[[str], str]

# The balancing loop's knobs: widget key -> (label, min, max, step).
BALANCE_KNOBS: dict[str, tuple[str, float, float, float]] = {
    "pl_noise": ("noise σ", 0.0, 1.0, 0.01), "pl_seed": ("seed", 0, 2**31 - 1, 1),
    "pl_tol": ("tolerance", 0.0, 1.0, 0.01), "pl_patience": ("patience (rounds)", 1, 100, 1),
    "pl_rounds": ("max rounds", 1, 500, 1)}

BALANCE_MODES = {"model": "operators across devices (model parallel)", "data": "batch shares (data parallel)"}


def changed_pins(pins: Mapping[str, str], change: str, op: str, device: str) -> dict[str, str]:
    """The pins after a button: "pin" puts ``op`` on ``device``, "unpin" frees ``op``, anything else clears all."""
    new = dict(pins)
    if change == "pin":
        new[op] = device
    elif change == "unpin":
        new.pop(op, None)
    else:
        new = {}
    return new


def topology_line(topology, plain: Plain = str) -> str:
    """The topology's name and its devices with their types, as the page's caption says them."""
    return (f"Topology **{plain(topology.name)}**: "
            f"{plain(', '.join(f'{d.name} ({d.type})' for d in topology.devices))}. Change it on the Topology page.")


def pins_line(pins: Mapping[str, str], plain: Plain = str) -> str:
    """The pins in the scenario, in one sentence."""
    return ("**Pinned:** " + (", ".join(f"{plain(t)} → {plain(d)}" for t, d in pins.items())
                              or "nothing: the strategy places every operator") + ". Pins are part of the scenario "
            "(saved with it and carried by the page link).")


def balance_intro() -> str:
    """What the dynamic load balancing section does, naming both update rules."""
    return ("Every node starts with an equal weight. Each round the planner plans with the weights, the round runs "
            "at the **true** speeds (the cost model's divided by the slowdown below, times seeded noise), every node's "
            "waiting time is recorded, and if `(max wait − mean wait) / round time` exceeds the tolerance the weights "
            "are updated. The loop stops when the plan has not changed for *patience* rounds. Both update rules run "
            "side by side: " + "; ".join(f"**{r}** = {RULE_LABELS[r]}" for r in RULES) + ". A stable plan is not "
            "necessarily a good one: the wait rule only sees idle time, so it can settle on a slower plan than the "
            "one the planner would make knowing the true speeds (the green line).")


def default_slowdowns(topology) -> tuple[str, dict[str, float]]:
    """The device with the catalogue's fastest matmul, and each device's default slowdown (20x for that
    device, 1x for the others)."""
    names = topology.device_names
    fastest = max(names, key=lambda n: topology.device(n).throughput.get("matmul", 0.0))
    return fastest, {n: 20.0 if n == fastest else 1.0 for n in names}


def data_nodes_line(per_sample: Mapping[str, float], batch: int, plain: Plain = str) -> str:
    """Which devices are the data-parallel nodes and what they split."""
    return (f"Data-parallel nodes: the devices that can run the whole model ({plain(', '.join(per_sample))}); the "
            f"global batch of {batch} samples is split between them.")


def run_balancing(g, per_sample: Mapping[str, float] | None, batch: int, slowdown: Mapping[str, float],
                  noise: float, seed: int, tolerance: float, patience: int,
                  max_rounds: int) -> dict[str, BalanceResult]:
    """Both update rules' balancing loops: over the operators of ``g`` on its devices (model parallel) when
    ``per_sample`` is None, else over batch shares of ``batch`` between the devices of ``per_sample``
    (seconds per sample; data parallel, with the slowdowns of those devices only)."""
    kw = dict(slowdown=slowdown, noise=noise, seed=int(seed), tolerance=tolerance, patience=int(patience),
              max_rounds=int(max_rounds))
    if per_sample is None:
        return {r: balance_model_parallel(g, rule=r, **kw) for r in RULES}
    kw["slowdown"] = {n: slowdown[n] for n in per_sample}
    return {r: balance_data_parallel(per_sample, batch, rule=r, **kw) for r in RULES}


def balance_summary(rule: str, res: BalanceResult, mode: str, reference_time: float, scale: float, unit: str,
                    plain: Plain = str) -> str:
    """How one rule's loop ended and its last round against ``reference_time`` (s), the round time of the
    plan (or split) made with the true speeds; times in ``unit`` (``seconds * scale``)."""
    ref = reference_time
    return (f"**{rule}** ({RULE_LABELS[rule]}): {'stopped' if res.converged else 'did not stop'} after "
            f"{len(res.rounds)} rounds ({plain(res.reason)}); last round "
            f"{res.final.round_time * scale:.4g} {unit} vs {ref * scale:.4g} {unit} for the "
            f"{'plan' if mode == 'model' else 'split'} made with the true speeds")


def rounds_caption(mode: str) -> str:
    """What the rounds tables' weights and imbalance are."""
    return (f"weights: {'batch shares' if mode == 'data' else 'the planner speed factor per device'}"
            "; imbalance = (max wait − mean wait) / round time (dimensionless).")


def strategy_ranking(store, run_ids, profile) -> tuple[list[dict], float]:
    """Placement runs grouped by strategy: per strategy the modelled step, the measured step (mean over its
    repeats of each run's median, with the comparison's 95 % interval), the error, and Kendall's tau between
    the model's and the measurement's order of the strategies (NaN with fewer than two)."""
    by: dict[str, list[dict]] = {}
    for rid in run_ids:
        try:
            out = plans.plan_outcome(store, rid, profile)
        except LabError:  # a run deleted meanwhile, or not a placement run
            continue
        if out["status"] == "done" and math.isfinite(out["measured_step"]):
            by.setdefault(plans.plan_label(out), []).append(out)
    rows = []
    for label, outs in by.items():
        name = outs[0]["strategy"]
        spread = Spread.of([o["measured_step"] for o in outs])
        lo, hi = spread.interval() if spread.n > 1 else (None, None)
        modelled = outs[0]["modelled_step"]
        rows.append({"strategy": label, "key": name, "modelled": modelled,
                     "measured": spread.mean, "low": lo, "high": hi, "repeats": spread.n,
                     "error": spread.mean / modelled - 1.0 if modelled and math.isfinite(modelled) else math.nan})
    return rows, plans.kendall(rows)


def run_intro() -> str:
    """What "Run this plan" does, and which comparison is the honest one."""
    return ("**Run this plan** starts one process per device the plan uses, over gloo: each holds the operators "
            "placed on its device, activations travel forward and gradients backward between them, and the batch "
            "is pipelined in micro-batches (GPipe), so the bubbles are real. With **emulate the drawn cluster** on, "
            "an operator on a device the catalogue says is slower for its class waits in proportion, and every "
            "tensor waits the topology's link time (both emulated). With it off, every device is this machine: then "
            "nothing emulated enters the measurement, and the prediction from this machine's calibrated costs is "
            "tested on its own; that is the comparison that is not circular. **Run every strategy** runs each "
            "strategy's plan (with the pins) and ranks them by the model and by the measurement.")


def plan_scenario(sc, model: str, batch: int, strategy: str, assignment: Mapping[str, str], micro_batches: int,
                  steps: int, emulate: bool):
    """The scenario of a placement run of the page's plan: its model, batch, strategy, pins and every operator's
    device as the page placed it (with the page's cost model)."""
    tr = sc.training.replace(parallel="placement", model=model, batch_size=int(batch), strategy=strategy,
                             placement=dict(assignment), micro_batches=int(micro_batches), steps=int(steps),
                             emulate=bool(emulate), compression={"kind": "none"}, sync="allreduce",
                             fault="none", fault_policy="fail", eval_every=max(1, int(steps)))
    return sc.replace(training=tr)


def strategy_scenarios(sc, g, model: str, batch: int, micro_batches: int, steps: int, emulate: bool,
                       repeats: int, plan) -> list[tuple]:
    """(scenario, run name) for every strategy's plan of ``g`` (``plan(g, strategy)`` gives the assignment),
    ``repeats`` times each with seeds 0, 1, ...; a strategy that cannot place the graph is left out."""
    out = []
    for name in STRATEGY_NAMES:
        try:
            assignment = plan(g, name)
        except LabError:
            continue
        for r in range(int(repeats)):
            one = plan_scenario(sc, model, batch, name, assignment, micro_batches, steps, emulate)
            one = one.replace(training=one.training.replace(seed=sc.training.seed + r))
            out.append((one, f"{STRATEGY_SHORT[name]} · {model} · seed {one.training.seed}"))
    return out


MAX_SHOWN_RUNS = 40


def shown_runs(old, new) -> tuple:
    """The placement runs the page shows after queueing ``new``: the earlier ones kept (a plan run and then its
    pinned variant stand side by side), newest last, at most :data:`MAX_SHOWN_RUNS`."""
    out = list(dict.fromkeys([*(old or ()), *new]))
    return tuple(out[-MAX_SHOWN_RUNS:])


def run_exists(store, run_id: str) -> bool:
    try:
        store.get_run(run_id)
        return True
    except LabError:
        return False


def _ms(seconds: float) -> str:
    return "—" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.3g} ms"


def outcome_metrics(out: Mapping) -> list[tuple[str, str]]:
    """(label, value) of a placement run's headline: measured and modelled step, the error, the status."""
    err = out["error"]
    return [("Step, measured (median)", _ms(out["measured_step"])),
            ("Step, modelled", _ms(out["modelled_step"])),
            ("Error (measured / modelled − 1)", "—" if not math.isfinite(err) else f"{err:+.0%}"),
            ("Run", f"{out['status']}, {out['steps_measured']} steps measured (the first 2 are warm-up)")]


def measured_badge(out: Mapping) -> str:
    return "measured, with emulated waits" if out["emulated"] else "measured, every device is this machine"


def gantt_title(out: Mapping) -> str:
    return (f"One training step of the plan ({STRATEGY_LABELS.get(out['strategy'], out['strategy'])}), "
            f"{out['micro_batches']} micro-batches, step {out['drawn_step']}")


def gantt_caption(out: Mapping) -> str:
    unc = out.get("clock_uncertainty") or 0.0
    return ("Above: what the processes recorded in the step nearest the median step time (grey hatched: emulated "
            "waits; lines: tensors from the sender's stamp to the moment the receiver took them). Below: the model "
            "of the same schedule from this machine's calibrated costs, where a slower device's operator is simply "
            "longer (no separate wait bar). The plan's makespan above is another quantity: one forward pass of the "
            "whole batch by the page's cost model. One clock: every process stamps the "
            f"machine's monotonic clock (offsets from rank 0 estimated at the start, uncertainty {unc * 1e6:.0f} µs).")


def waiting_line(out: Mapping) -> str:
    return (f"The run is {out['status']}; its recorded steps appear here when it ends." if out["status"] in
            ("queued", "running") else f"The run is {out['status']} and recorded no step.")


def ranking_line(tau: float, n: int) -> str:
    if not math.isfinite(tau):
        return "The ranking needs at least two plans that finished."
    return (f"Kendall's tau between the model's order and the measured order of these {n} plans: {tau:+.2f} "
            "(1: the same order, −1: reversed). Bars: modelled and measured step; whiskers: the 95 % interval over "
            "the repeats.")


__all__ = ["strategy_ranking", "shown_runs", "run_exists", "outcome_metrics", "measured_badge", "gantt_title", "gantt_caption",
           "waiting_line", "ranking_line", "run_intro", "plan_scenario", "strategy_scenarios", "BALANCE_KNOBS", "BALANCE_MODES", "changed_pins", "topology_line", "pins_line", "balance_intro",
           "default_slowdowns", "data_nodes_line", "run_balancing", "balance_summary", "rounds_caption"]
