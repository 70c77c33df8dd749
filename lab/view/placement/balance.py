"""What the Placement page shows of the balancing loop that is not a figure: its knobs and defaults, the loop
simulated by the cost model, the loop run for real beside its baselines, and the sentences built from them."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from lab.errors import LabError
from lab.machine import plans
from lab.modelled.balance import (
    RULE_LABELS,
    RULES,
    BalanceResult,
    balance_data_parallel,
    balance_model_parallel,
    per_sample_times,
)
from lab.scenario.names import PIPELINE_SCHEDULE_SHORT, STRATEGY_LABELS, STRATEGY_SHORT
from lab.view.placement.plans import Plain, assignment_of, milliseconds, plan_scenario, schedule_runs
from lab.view.state import VIEW


#: The simulated balancing loop's knobs (view controls: their labels and bounds are in lab.view.state.VIEW).
BALANCE_KNOBS = ("pl_noise", "pl_seed", "pl_tol", "pl_patience", "pl_rounds")


BALANCE_MODES = dict(VIEW["pl_bal_mode"].setting.names)  # what each mode balances, as its radio says it


MAX_BALANCE_RUN_STEPS = 2000  # a balancing run's rounds x steps per round, at most


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


DATA_NODES_LINE = ("Data-parallel nodes: the devices that can run the whole model ({nodes}); the global batch of "
                   "{batch} samples is split between them.")


def data_nodes_line(per_sample: Mapping[str, float], batch: int, plain: Plain = str) -> str:
    """Which devices are the data-parallel nodes and what they split."""
    return DATA_NODES_LINE.format(nodes=plain(", ".join(per_sample)), batch=batch)


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


def balance_run_intro() -> str:
    """What "Run the balancing loop" does, and what it is measured against."""
    return ("**Run the balancing loop** runs the loop above for real, once per rule: one process per device of the "
            "topology, over gloo, the drawn cluster emulated (each device slower by the catalogue and by the slowdown "
            "above, which the planner does not know). The first round runs the planner's plan by the cost model chosen "
            "above (with this machine's calibrated costs, the plan they choose). Every round trains the current plan "
            "for a few steps; each "
            "device's busy time is measured (compute and its emulated wait) and its waiting is the round's step time "
            "minus that; the next weights follow from them by the rule, the planner (greedy earliest finish, or HEFT "
            "when that is the strategy chosen) re-plans, and an operator that moves takes its parameters and its "
            "optimiser's state with it. The run ends when the plan has not changed for *patience* rounds. The first "
            "step of each round is a warm-up (it pays one-off costs such as allocating memory) and is not measured. "
            "Beside each measured loop, dashed, the loop above as the cost model simulates it for the same rule. The "
            "loop runs the schedule chosen; a re-made plan that schedule cannot run (1F1B, for one, runs one stretch "
            "of the model per device) is not taken: the round keeps its plan, and the run says so.")


def balance_planner(strategy: str) -> str:
    """The planner a balancing loop re-plans with: HEFT when that is the page's strategy, else greedy earliest
    finish."""
    return "heft" if strategy == "heft" else "greedy_eft"


def balance_scenario(sc, model: str, batch: int, micro_batches: int, rule: str, round_steps: int, max_rounds: int,
                     tolerance: float, patience: int, slowdown: Mapping[str, float], strategy: str,
                     start: Mapping[str, str] | None = None):
    """The scenario of a balancing run: a placement run of the page's model whose plan the loop re-makes every
    round by ``rule`` (greedy earliest finish, or HEFT when that is ``strategy``), the cluster emulated with the
    page's slowdowns; as many rounds of ``round_steps`` as ``max_rounds`` allows within
    :data:`MAX_BALANCE_RUN_STEPS` steps. Its first round runs ``start`` (the page's plan, by the page's cost
    model); without it, the planner's plan on the datasheet."""
    rounds = max(1, min(int(max_rounds), MAX_BALANCE_RUN_STEPS // int(round_steps)))
    tr = sc.training.replace(parallel="placement", model=model, batch_size=int(batch), micro_batches=int(micro_batches),
                             strategy=balance_planner(strategy), placement=dict(start or {}), balance=rule,
                             round_steps=int(round_steps), steps=int(round_steps) * rounds,
                             balance_tolerance=float(tolerance), balance_patience=int(patience),
                             slowdown={d: float(f) for d, f in slowdown.items() if float(f) != 1.0}, emulate=True,
                             compression={"kind": "none"}, sync="allreduce", fault="none", fault_policy="fail",
                             eval_every=int(round_steps) * rounds)
    return sc.replace(training=tr)


#: The plans a balancing loop is measured against on the same emulated cluster: the coarse layer-by-layer split
#: the load-balancing design argues against, and the CXL design's rule by device type.
BALANCE_BASELINES = ("even_split", "type_rule")


def balance_items(sc, g, model: str, batch: int, micro_batches: int, round_steps: int, max_rounds: int,
                  tolerance: float, patience: int, slowdown: Mapping[str, float], strategy: str,
                  plan=assignment_of) -> list[tuple]:
    """(scenario, run name) of one balancing session: the loop with each rule, then each baseline plan of
    :data:`BALANCE_BASELINES` (``plan(g, strategy)`` gives its assignment) on the same emulated cluster, run for
    three rounds' steps; a baseline that cannot place the graph, or whose plan the schedule cannot run, is left out.
    The loop starts from the planner's plan of ``g``, so with the calibrated cost model its first round is the plan
    the calibrated costs choose; a start the schedule cannot run is refused with what to change."""
    planner = balance_planner(strategy)
    start = plan(g, planner)
    schedule = sc.training.schedule
    if not schedule_runs(g, start, schedule, micro_batches):
        raise LabError(f"the balancing loop starts from the plan of {STRATEGY_SHORT[planner]}, which the "
                       f"{PIPELINE_SCHEDULE_SHORT[schedule]} schedule cannot run (it gives a device more than one "
                       "stretch of the model, or not in the order the schedule takes them): choose GPipe, or pin the "
                       "operators so that the plan runs under it", where="training.schedule")
    items = [(balance_scenario(sc, model, batch, micro_batches, r, round_steps, max_rounds, tolerance, patience,
                               slowdown, strategy, start), f"balancing ({r}) · {model}") for r in RULES]
    slow = items[0][0].training.slowdown
    for name in BALANCE_BASELINES:
        try:
            assignment = plan(g, name)
        except LabError:
            continue
        if not schedule_runs(g, assignment, sc.training.schedule, micro_batches):
            continue  # the schedule would refuse the baseline's plan
        one = plan_scenario(sc, model, batch, name, assignment, micro_batches, 3 * int(round_steps), True)
        items.append((one.replace(training=one.training.replace(slowdown=dict(slow))),
                      f"baseline: {STRATEGY_SHORT[name]} · {model}"))
    return items


def measured_plan_step(store, run: Mapping) -> float:
    """A finished placement run's measured step time (s): a balancing loop's last round (the mean of its steps
    after the round's warm-up), a plan's median after the warm-up steps; NaN before it has one."""
    tr = run["scenario"]["training"]
    if tr.get("balance", "off") != "off":
        rounds = ((run.get("info") or {}).get("balance") or {}).get("rounds") or []
        return rounds[-1]["round_time"] if rounds else math.nan
    steps = plans.measured_steps(store.metrics(run["id"]), tr["batch_size"])
    return float(sorted(steps)[len(steps) // 2]) if steps else math.nan


def plan_key(tr: Mapping) -> str:
    """A placement run's plan in one word: its balancing rule, or its strategy."""
    return tr["balance"] if tr.get("balance", "off") != "off" else tr["strategy"]


def balance_outcome(store, run_ids) -> list[dict]:
    """One row per run of a balancing session: the plan, its status, and its measured step time
    (:func:`measured_plan_step`), each against the even layer split's."""
    rows = []
    for rid in run_ids:
        try:
            run = store.get_run(rid)
        except LabError:
            continue
        tr = run["scenario"]["training"]
        if tr.get("parallel") != "placement":
            continue
        key = plan_key(tr)
        label = (f"balancing loop ({key}), last round" if tr.get("balance", "off") != "off"
                 else STRATEGY_LABELS.get(key, key))
        rows.append({"plan": label, "key": key, "status": run["status"], "step": measured_plan_step(store, run)})
    base = next((r["step"] for r in rows if r["key"] == "even_split" and math.isfinite(r["step"])), math.nan)
    for r in rows:
        r["vs_split"] = r["step"] / base - 1.0 if math.isfinite(base) and math.isfinite(r["step"]) else math.nan
    return rows


def balance_run_rows(run: Mapping) -> list[dict]:
    """A stored balancing run's rounds as the rounds figure draws them: round, device, weight (relative to the
    round's mean weight, so both rules read on one scale), wait and step (s)."""
    bal = (run.get("info") or {}).get("balance") or {}
    nodes = bal.get("nodes") or []
    rows = []
    for r in bal.get("rounds") or []:
        mean = sum(r["weights"]) / len(r["weights"]) if r["weights"] else 1.0
        for d, w, wait in zip(nodes, r["weights"], r["waits"]):
            rows.append({"round": r["round"], "device": d, "weight": w / mean if mean > 0 else w, "wait": wait,
                         "step": r["round_time"]})
    return rows


def modelled_rounds_rows(res: BalanceResult) -> list[dict]:
    """A simulated loop's rounds in the rows of :func:`balance_run_rows`."""
    rows = []
    for r in res.rounds:
        mean = sum(r.weights) / len(r.weights) if r.weights else 1.0
        for d, w, wait in zip(res.nodes, r.weights, r.waits):
            rows.append({"round": r.round, "device": d, "weight": w / mean if mean > 0 else w, "wait": wait,
                         "step": r.round_time})
    return rows


def balance_run_line(run: Mapping, plain: Plain = str) -> str:
    """How a balancing run stands: its rule, rounds, whether the plan settled, and the step time of its first
    and last round."""
    tr = run["scenario"]["training"]
    bal = (run.get("info") or {}).get("balance") or {}
    rounds = bal.get("rounds") or []
    head = f"**{plain(tr.get('balance', ''))}** ({plain(RULE_LABELS.get(tr.get('balance'), ''))}), {run['status']}"
    if not rounds:
        return head + ": no round has ended yet."
    first, last = rounds[0]["round_time"], rounds[-1]["round_time"]
    state = (f"the plan settled ({plain(bal.get('reason', ''))})" if bal.get("converged") else
             plain(bal.get("reason") or "") if bal.get("done") else "running")
    moved = sum(r["changes"] or 0 for r in rounds)
    kept = [r for r in rounds if r.get("kept")]
    refused = (f" {len(kept)} re-made plan(s) were not taken, as the schedule cannot run them "
               f"({plain(kept[-1]['kept'])})." if kept else "")
    return (f"{head}: {len(rounds)} round(s), {moved} operator move(s); step {milliseconds(first)} in round 1, "
            f"{milliseconds(last)} in round {len(rounds)} ({last / first - 1:+.0%}); {state}.{refused}")


def balance_run_panels(store: Any, run_ids: Sequence[str], simulated: Mapping[str, Any], quote) -> list[tuple]:
    """One (run id, its line, its measured rounds, the simulated loop's rounds or None) per balancing run
    (the baselines, which do not balance, are left out)."""
    out = []
    for rid in run_ids:
        run = store.get_run(rid)
        rule = run["scenario"]["training"].get("balance", "off")
        if rule != "off":
            out.append((rid, balance_run_line(run, quote), balance_run_rows(run),
                        modelled_rounds_rows(simulated[rule]) if rule in simulated else None))
    return out


def balancing(g, og, topology, cost_model, mode: str, batch: int, slowdown: Mapping[str, float], noise: float,
              seed: int, tolerance: float, patience: int, max_rounds: int) -> tuple:
    """Both rules' balancing loops in ``mode`` ("model": operators across devices; "data": batch shares, from
    each device's seconds per sample): (results by rule, the seconds per sample or None, the nodes balanced,
    the reference round time)."""
    per_sample = per_sample_times(og, topology, model=cost_model) if mode == "data" else None
    results = run_balancing(g, per_sample, batch, slowdown, noise, seed, tolerance, patience, max_rounds)
    first = results[RULES[0]]
    return results, per_sample, first.nodes, first.reference["round_time"]


BALANCE_OUTCOME_CAPTION = ("every plan on the same emulated cluster; a loop's step is its last round's (mean after "
                           "the round's warm-up step), a plan's the median after 2 warm-up steps.")


BALANCE_ROUNDS_CAPTION = ("solid: what each run measured, round by round; dashed: the loop above, simulated by the "
                          "cost model (modelled). Shares and ratios, because the cost model's seconds are not this "
                          "machine's; the seconds are in the hover.")


SLOWDOWN_NOTE = "By default {fastest} (the catalogue's fastest matmul device) runs 20× slower than its datasheet."


def slowdown_note(fastest: str, plain: Plain = str) -> str:
    return SLOWDOWN_NOTE.format(fastest=plain(fastest))
