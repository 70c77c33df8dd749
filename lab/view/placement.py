"""What the Placement page shows that is not a figure: pins changed by its buttons, the balancing loop's
defaults and runs, and the sentences built from them. User text goes through ``plain`` (the page passes
its markdown escape; identity by default)."""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Mapping, Sequence

from lab.errors import LabError
from lab.jobs.comparison import Spread
from lab.machine import plans
from lab.machine.calibrated_model import cost_model as named_cost_model
from lab.modelled import placement as pl
from lab.modelled.balance import (
    RULE_LABELS,
    RULES,
    BalanceResult,
    balance_data_parallel,
    balance_model_parallel,
    per_sample_times,
)
from lab.scenario.document import Spec, check_pins
from lab.scenario.names import COST_MODELS, MODELS, STRATEGY_LABELS, STRATEGY_NAMES, STRATEGY_SHORT
from lab.scenario.text import check_name, loads
from lab.scenario.topology import Topology
from lab.store.runs import ACTIVE

Plain = Callable[[str], str]

#: The simulated balancing loop's knobs (view controls: their labels and bounds are in lab.view.state.VIEW).
BALANCE_KNOBS = ("pl_noise", "pl_seed", "pl_tol", "pl_patience", "pl_rounds")

BALANCE_MODES = {"model": "operators across devices (model parallel)", "data": "batch shares (data parallel)"}
MAX_BALANCE_RUN_STEPS = 2000  # a balancing run's rounds x steps per round, at most


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


def baseline_json(record: Mapping) -> str:
    """A kept plan's record (:func:`lab.modelled.placement.plan_record`) as the text the link carries."""
    return json.dumps(record, separators=(",", ":"), sort_keys=True)


def baseline_from_json(text: str) -> dict | None:
    """The kept plan of a link (None for none); a record that is not one raises a LabError saying what is wrong.
    It is outside input: every field is checked, its topology as a topology file is."""
    if not text:
        return None
    where = "the kept baseline"
    d = loads(text)
    if not isinstance(d, dict) or set(d) != {"model", "batch", "strategy", "pins", "cost_model", "topology",
                                             "makespan", "busy"}:
        raise LabError("is not a kept plan (its fields differ)", where=where)
    if d["model"] not in MODELS or d["strategy"] not in STRATEGY_NAMES or d["cost_model"] not in COST_MODELS:
        raise LabError("names a model, strategy or cost model the lab does not have", where=where)
    if isinstance(d["batch"], bool) or not isinstance(d["batch"], int) or not 1 <= d["batch"] <= 65536:
        raise LabError("has a batch size that is not a whole number from 1 to 65536", where=where)
    d["pins"] = dict(check_pins(d["pins"], where=f"{where} pins"))
    if d["topology"] is not None:
        d["topology"] = Topology.from_dict(d["topology"]).to_dict()
    finite = Spec(float, 0.0, min=0.0, max=1e12)
    d["makespan"] = finite.check("makespan", d["makespan"], where)
    if not isinstance(d["busy"], dict) or len(d["busy"]) > 256:
        raise LabError("has no busy time per device", where=where)
    d["busy"] = {check_name(k, where, what="a device name"): finite.check("busy", v, where) for k, v in d["busy"].items()}
    return d


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


def assignment_of(g, strategy: str) -> dict[str, str]:
    """Every operator's device in ``strategy``'s plan of task graph ``g``."""
    return pl.plan_assignment(g, strategy)[0]


def strategy_scenarios(sc, g, model: str, batch: int, micro_batches: int, steps: int, emulate: bool,
                       repeats: int, plan=assignment_of) -> list[tuple]:
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
    err, rerr = out["error"], out.get("replay_error", math.nan)
    return [("Step, measured (median)", _ms(out["measured_step"])),
            ("Step, modelled", _ms(out["modelled_step"])),
            ("Error (measured / modelled − 1)", "—" if not math.isfinite(err) else f"{err:+.0%}"),
            ("Replay error (drawn step)", "—" if not math.isfinite(rerr) else f"{rerr:+.0%}"),
            ("Run", f"{out['status']}, {out['steps_measured']} steps measured (the first 2 are warm-up)")]


def measured_badge(out: Mapping) -> str:
    return "measured, with emulated waits" if out["emulated"] else "measured, every device is this machine"


def gantt_title(out: Mapping) -> str:
    return (f"One training step of the plan ({STRATEGY_LABELS.get(out['strategy'], out['strategy'])}), "
            f"{out['micro_batches']} micro-batches, step {out['drawn_step']}")


def gantt_caption(out: Mapping) -> str:
    unc = out.get("clock_uncertainty") or 0.0
    return ("Top: what the processes recorded in the step nearest the median step time (grey hatched: emulated "
            "waits; lines: tensors from the sender's stamp to the moment the receiver took them). Middle, "
            "modelled: the prediction, each process's own tasks in the executor's order from this machine's "
            "calibrated costs, on this machine's cores (processes that share a core take turns; a message costs "
            "CPU on both sides). Bottom, replayed: the recorded step run again through the same model with its own "
            "measured task times and deliveries, each process on a core of its own and nothing between the tasks; "
            "close to the top, the schedule explains the step; far below it, the time went between the tasks "
            "(processes waiting for a core, the executor's own work). " + str(out.get("caveat") or "") + ". The "
            "plan's makespan above is another quantity: one forward pass of the whole batch by the page's cost "
            "model. One clock: every process stamps the machine's monotonic clock (offsets from rank 0 estimated "
            f"at the start, uncertainty {unc * 1e6:.0f} µs).")


def waiting_line(out: Mapping) -> str:
    return (f"The run is {out['status']}; its recorded steps appear here when it ends." if out["status"] in
            ("queued", "running") else f"The run is {out['status']} and recorded no step.")


def ranking_line(tau: float, n: int) -> str:
    if not math.isfinite(tau):
        return "The ranking needs at least two plans that finished."
    return (f"Kendall's tau between the model's order and the measured order of these {n} plans: {tau:+.2f} "
            "(1: the same order, −1: reversed). Bars: modelled and measured step; whiskers: the 95 % interval over "
            "the repeats.")


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
            "step of each round is a warm-up and is not measured. Beside each measured loop, dashed, the loop above "
            "as the cost model simulates it for the same rule.")


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
    three rounds' steps; a baseline that cannot place the graph is left out. The loop starts from the planner's
    plan of ``g``, so with the calibrated cost model its first round is the plan the calibrated costs choose."""
    start = plan(g, balance_planner(strategy))
    items = [(balance_scenario(sc, model, batch, micro_batches, r, round_steps, max_rounds, tolerance, patience,
                               slowdown, strategy, start), f"balancing ({r}) · {model}") for r in RULES]
    slow = items[0][0].training.slowdown
    for name in BALANCE_BASELINES:
        try:
            assignment = plan(g, name)
        except LabError:
            continue
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
    return (f"{head}: {len(rounds)} round(s), {moved} operator move(s); step {_ms(first)} in round 1, "
            f"{_ms(last)} in round {len(rounds)} ({last / first - 1:+.0%}); {state}.")


def kept_runs(store: Any, run_ids: Any) -> tuple[list[str], bool]:
    """The runs a link names that still exist, and whether any of them is queued or running (the page polls)."""
    ids = [r for r in run_ids or () if run_exists(store, r)]
    return ids, bool(ids) and bool(len(store.list_runs(statuses=ACTIVE).query("id in @ids")))


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




def placed(strategy: str, g) -> tuple:
    """The plan of ``strategy`` on task graph ``g`` as the page shows it: (the graph it placed, which drops
    pins the strategy cannot honour, with a note saying so; the validated schedule; its transfers; the reason
    for every operator's device)."""
    shown, note = pl.graph_for(strategy, g)
    s = pl.run_strategy(strategy, shown).validate(shown)
    return shown, note, s, pl.transfer_rows(shown, s), pl.reasons(shown, s)


def other_plan_line(strategy: str, og, topology, pins: Mapping[str, str], assignment: Mapping[str, str],
                    cm_name: str, profile) -> str | None:
    """Where the other cost model's plan of the same strategy differs from the one shown: the datasheet's is
    what the catalogue alone says, the calibrated one what runs on this machine (None: the same plan, or no
    profile to compare with)."""
    if profile is None:
        return None
    other = "datasheet" if cm_name == "calibrated" else "calibrated"
    try:
        g = pl.TaskGraph.from_model(og, topology, model=named_cost_model(other, profile)).with_pins(dict(pins))
        _, _, s, _, _ = placed(strategy, g)
    except LabError:
        return None
    moved = [op for op in og.names if s.assignment.get(op) != assignment.get(op)]
    if not moved:
        return (f"The {'catalogue alone (datasheet)' if other == 'datasheet' else 'calibrated model of this machine'}"
                " makes the same plan.")
    shown = ", ".join(f"{op} → {s.assignment[op]}" for op in moved[:6]) + (" …" if len(moved) > 6 else "")
    if other == "datasheet":
        return (f"The catalogue alone (datasheet, one forward pass, catalogue links) would put {len(moved)} of "
                f"{len(og.names)} operators elsewhere: {shown}.")
    return (f"On this machine (the calibrated model: the executor's messages and per-operator costs) the plan "
            f"would put {len(moved)} of {len(og.names)} operators elsewhere: {shown}. Choose the calibrated cost "
            "model to plan on what runs here.")


def balancing(g, og, topology, cost_model, mode: str, batch: int, slowdown: Mapping[str, float], noise: float,
              seed: int, tolerance: float, patience: int, max_rounds: int) -> tuple:
    """Both rules' balancing loops in ``mode`` ("model": operators across devices; "data": batch shares, from
    each device's seconds per sample): (results by rule, the seconds per sample or None, the nodes balanced,
    the reference round time)."""
    per_sample = per_sample_times(og, topology, model=cost_model) if mode == "data" else None
    results = run_balancing(g, per_sample, batch, slowdown, noise, seed, tolerance, patience, max_rounds)
    first = results[RULES[0]]
    return results, per_sample, first.nodes, first.reference["round_time"]


# ----- what the Placement page says ----------------------------------------------------------------
INTRO = ("Each preset model is traced (torch.fx) into operators with FLOPs and bytes. A cost model turns them into "
         "seconds on every device of the scenario's topology and transfers into seconds over the route (**latency "
         "+ bytes / bottleneck**). Each strategy then places every operator; a **pin** puts one operator on a device "
         "of your choice and the strategy places the rest around it. The plans are modelled: from the catalogue's "
         "throughputs, or from this machine's calibrated costs (the numbers the Training page predicts with). Under "
         "**Run the plan**, a plan runs in real processes and is measured beside the model.")
WHY_CAPTION = ("the finish on each device as the earliest-finish rule weighs it when the plan places this operator "
               "(greedy earliest finish: in topological order; other strategies: in start order), with the operators "
               "placed before it already queued: inputs exist + transfer + wait for the device + compute = finish.")
def cost_model_line(cm) -> str:
    """What the chosen cost model's numbers are (the calibrated model says how it prices transfers itself)."""
    if getattr(cm, "name", "") == "calibrated":
        return f"Cost model: {cm.describe()}."
    return f"Cost model: {cm.describe()}. Transfers: latency + bytes / bottleneck bandwidth of the route."


def why_caption(cm) -> str:
    """:data:`WHY_CAPTION` and where the numbers of the chosen cost model ``cm`` come from, in the Gantt chart's
    units (one pass of the batch as that model prices it)."""
    if getattr(cm, "name", "") != "calibrated":
        return (WHY_CAPTION + " Units: seconds of one forward pass by the catalogue's numbers (datasheet): compute "
                "from the catalogue's throughputs, transfers over the catalogue's links. Neither is measured here; "
                "a run of the plan on this machine is.")
    measured = getattr(cm, "executor", None) is not None
    return (WHY_CAPTION + " Units: seconds of one forward + backward pass on this machine: compute calibrated "
            "(this machine's operator costs, " + ("as the placement executor runs them" if measured else
                                                  "from whole-network calls") + "), times the catalogue's slowdown of "
            "the device (emulated, as a run waits); transfers " + ("calibrated: the executor's messages on this "
                                                                   "machine, or the topology's link where slower"
                                                                   if measured else "by the topology's links "
                                                                   "(datasheet): this profile has no measurement of "
                                                                   "the executor's messages") + ".")


BASELINE_CAPTION = ("busy time per device (compute only), then the makespan, in the baseline and now. The baseline "
                    "travels in the page link.")
NO_BASELINE = ("Keep a plan, then pin an operator, change the strategy or edit a link on the Topology page to see what "
               "it costs.")
DAG_CAPTION = "red dashed edges are activations sent between devices."
MEMORY_CAPTION = "memory = parameters + output activations (float32) of the operators placed there."
COMPARISON_COLUMNS = {"above optimum (%)": {"kind": "number", "format": "%.1f"}}
BALANCE_OUTCOME_CAPTION = ("every plan on the same emulated cluster; a loop's step is its last round's (mean after "
                           "the round's warm-up step), a plan's the median after 2 warm-up steps.")
BALANCE_ROUNDS_CAPTION = ("solid: what each run measured, round by round; dashed: the loop above, simulated by the "
                          "cost model (modelled). Shares and ratios, because the cost model's seconds are not this "
                          "machine's; the seconds are in the hover.")


def assignment_caption(unit: str) -> str:
    return (f"times in {unit}; an empty 'on device' cell means that device has no kernel for the operator's class (or "
            "a pin excludes it). Data-layout ops (view, flatten, transpose) are merged into the operator that "
            "produced their input.")


def comparison_caption(pass_: str) -> str:
    return (f"one {pass_} of one batch, with the pins; chain_dp optimises the steady pipeline bottleneck (its note), "
            "not this single-pass makespan.")


def slowdown_note(fastest: str, plain: Plain = str) -> str:
    return f"By default {plain(fastest)} (the catalogue's fastest matmul device) runs 20× slower than its datasheet."


def explained(names: Sequence[str], current: str | None) -> tuple[str, str | None]:
    """The operator the "why" panel explains: the current one while the graph has it, else the first, with a
    notice naming the one that went."""
    if current in names:
        return current, None
    notice = f"The operator explained is now {names[0]} ({current} is not in this graph)." if current else None
    return names[0], notice


def against_baseline(text: str, record: Mapping) -> tuple[str, list | None, str | None]:
    """The plan ``record`` beside the baseline the link keeps as ``text``: (summary, per-device rows, or None
    without a baseline; a notice when the link's baseline could not be read and is dropped)."""
    try:
        base = baseline_from_json(text)
    except LabError as exc:
        return "", None, f"The baseline in the link was dropped: {exc}"
    if base is None:
        return "", None, None
    summary, rows = pl.compare_plans(base, record)
    return summary, rows, None


def baseline_columns(columns: Sequence[str]) -> dict:
    """The baseline table's number formats: times to four significant digits, the change as a signed percentage."""
    spec = {c: {"kind": "number", "format": "%.4g"} for c in columns
            if c.startswith(("baseline (", "now (", "change ("))}
    return spec | {"change (%)": {"kind": "number", "format": "%+.1f"}}

__all__ = ["baseline_json", "baseline_from_json", "measured_plan_step", "plan_key", "BALANCE_BASELINES", "balance_items", "balance_outcome", "balance_run_intro", "balance_scenario", "balance_run_rows", "modelled_rounds_rows",
           "balance_run_line", "MAX_BALANCE_RUN_STEPS", "strategy_ranking", "shown_runs", "run_exists", "outcome_metrics", "measured_badge", "gantt_title", "gantt_caption",
           "waiting_line", "ranking_line", "run_intro", "plan_scenario", "strategy_scenarios", "BALANCE_KNOBS", "BALANCE_MODES", "changed_pins", "topology_line", "pins_line", "balance_intro",
           "default_slowdowns", "data_nodes_line", "run_balancing", "balance_summary", "rounds_caption", "kept_runs", "balance_run_panels"]
