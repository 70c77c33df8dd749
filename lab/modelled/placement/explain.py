"""Placement for people: the strategies by name, comparison tables, why an operator went where it went, plans kept as baselines, and the task graph of a model preset on a topology."""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from lab.errors import LabError
from lab.memo import SharedCache
from lab.modelled.opgraph import trace
from lab.modelled.placement.graph import (
    OPTIMAL_MAX_TASKS,
    Device,
    PlacementSchedule,
    Task,
    TaskGraph,
)
from lab.modelled.placement.heuristics import (
    _ready_row,
    even_rounds,
    even_split,
    greedy_eft,
    heft,
    round_robin,
    single_fastest,
    type_rule,
)
from lab.modelled.placement.search import chain_dp, coarsen, optimal
from lab.scenario.names import STRATEGY_LABELS

STRATEGIES: dict[str, Callable[[TaskGraph], PlacementSchedule]] = {
    "greedy_eft": greedy_eft,
    "heft": heft,
    "optimal": optimal,
    "type_rule": type_rule,
    "single_fastest": single_fastest,
    "round_robin": round_robin,
    "even_split": even_split,
    "even_rounds": even_rounds,
    "chain_dp": chain_dp,
}




def run_strategy(name: str, g: TaskGraph) -> PlacementSchedule:
    if name not in STRATEGIES:
        raise LabError(f"unknown strategy {name!r}; choose one of {list(STRATEGIES)}", where="placement")
    return STRATEGIES[name](g)


def compare_strategies(g: TaskGraph, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Every strategy's makespan on ``g`` and its gap to the optimum (when it could be computed).

    Rows: strategy, label, makespan (s, None if it failed), gap (fraction above the optimum or
    None), note (the failure message when it failed)."""
    rows, opt = [], None
    for name in names or STRATEGIES:
        try:
            s = run_strategy(name, g)
            rows.append({"strategy": name, "label": STRATEGY_LABELS[name], "makespan": s.makespan, "note": s.note})
            if name == "optimal":
                opt = s.makespan
        except LabError as exc:
            rows.append({"strategy": name, "label": STRATEGY_LABELS[name], "makespan": None, "note": str(exc)})
    for r in rows:
        r["gap"] = (r["makespan"] / opt - 1.0) if (opt and r["makespan"] is not None) else None
    return rows


def graph_for(strategy: str, g: TaskGraph) -> tuple[TaskGraph, str | None]:
    """The graph ``strategy`` runs on, and a note when it is not ``g``: the exact optimum on a graph of
    more than ``OPTIMAL_MAX_TASKS`` operators runs on a coarsened graph (:func:`coarsen`)."""
    if strategy != "optimal" or len(g) <= OPTIMAL_MAX_TASKS:
        return g, None
    shown, _ = coarsen(g, OPTIMAL_MAX_TASKS)
    return shown, (f"The exact search handles at most {OPTIMAL_MAX_TASKS} tasks; this model has {len(g)} operators, "
                   f"so it runs on a coarsened graph of {len(shown)} groups (each group stays on one device, so this "
                   "optimum is an upper bound on the true one).")


def strategy_comparison(g: TaskGraph) -> tuple[list[dict[str, Any]], str | None]:
    """:func:`compare_strategies` rows, each with the ``graph`` it ran on: every strategy on ``g`` (the exact
    optimum only when ``g`` is small enough) and, when ``g`` is too big for the exact search, every strategy on
    a coarsened graph too, with a note saying so (None when ``g`` is small enough).

    Kept per graph (its fingerprint) in this process and shared by every session: a class that opens one link
    asks for the same comparison at once, and it is about a third of a Placement view's work at the size caps."""
    key = g.fingerprint()
    if key is None:
        return _strategy_comparison(g)
    rows, note = _COMPARISONS.get(key, lambda: _strategy_comparison(g))
    return [dict(r) for r in rows], note  # copies: a caller may add to its rows


_COMPARISONS = SharedCache(32)


def _strategy_comparison(g: TaskGraph) -> tuple[list[dict[str, Any]], str | None]:
    small = len(g) <= OPTIMAL_MAX_TASKS
    names = [n for n in STRATEGIES if small or n != "optimal"]
    rows = [r | {"graph": f"full graph ({len(g)} operators)"} for r in compare_strategies(g, names)]
    if small:
        return rows, None
    coarse, _ = coarsen(g, OPTIMAL_MAX_TASKS)
    rows += [r | {"graph": f"coarsened graph ({len(coarse)} groups)"} for r in compare_strategies(coarse)]
    return rows, (f"This model has {len(g)} operators, more than the exact search takes, so every strategy also "
                  f"runs on a coarsened graph of {len(coarse)} groups (chains merged first; a group stays on "
                  "one device). The optimum and the gaps are for that graph.")


def plan_metrics(s: PlacementSchedule, operators: int, transfers: Iterable[Any], scale: float,
                 unit: str) -> list[tuple[str, Any]]:
    """(label, value) of a plan's headline numbers: its makespan in ``unit`` (``seconds * scale``, 4
    significant digits), the model's operators, the devices it uses and its transfers between devices."""
    return [(f"Makespan ({unit})", f"{s.makespan * scale:.4g}"), ("Operators", operators),
            ("Devices used", len(set(s.assignment.values()))), ("Transfers between devices", len(list(transfers)))]


def task_labels(g: TaskGraph) -> dict[Task, str]:
    """Per task its class and FLOPs, as the operator graph's hover shows them."""
    return {t: f"{g.task_class(t)}, {g.info.get(t, {}).get('flops', 0):.3g} FLOPs" for t in g.tasks}


def over_full(usage: Iterable[Mapping[str, Any]]) -> list[Device]:
    """The devices of :func:`device_usage` rows that hold more than their memory."""
    return [u["device"] for u in usage if u["over"]]


def schedule_table(g: TaskGraph, s: PlacementSchedule) -> list[dict[str, Any]]:
    """One row per task in start order: task, class, flops, device, start, finish (s), and its
    compute time on every device (s, inf: no kernel)."""
    rows = []
    for t in sorted(g.tasks, key=lambda t: (s.slots[t][1], g.pos[g._ti[t]])):
        d, a, b = s.slots[t]
        row = {"task": t, "class": g.task_class(t), "flops": g.info.get(t, {}).get("flops"),
               "device": d, "start": a, "finish": b}
        row["times"] = {dv: g.compute_time(t, dv) for dv in g.devices}
        rows.append(row)
    return rows


def device_usage(g: TaskGraph, s: PlacementSchedule) -> list[dict[str, Any]]:
    """Per device: busy and idle seconds within the makespan, memory used (sum of its tasks'
    memory), capacity, and whether it is over-full."""
    busy = s.busy()
    used: dict[Device, float] = {}
    for t, (d, _, _) in s.slots.items():
        used[d] = used.get(d, 0.0) + float(g.memory[g._ti[t]])
    out = []
    for j, d in enumerate(g.devices):
        b = busy.get(d, 0.0)
        cap = float(g.capacity[j])
        out.append({"device": d, "busy": b, "idle": max(s.makespan - b, 0.0), "memory": used.get(d, 0.0),
                    "capacity": cap, "over": used.get(d, 0.0) > cap})
    return out


def decision_order(g: TaskGraph, s: PlacementSchedule) -> list[int]:
    """The order in which the plan placed its tasks: greedy earliest finish follows the stable
    topological order; every other plan is read in start order (each of its tasks starts as soon
    as its inputs and its device allow, so that order rebuilds its state)."""
    if s.strategy == "greedy_eft":
        return list(g.topo)
    return sorted(range(len(g.tasks)), key=lambda i: (s.slots[g.tasks[i]][1], s.slots[g.tasks[i]][2], g.pos[i]))


def _why_all(g: TaskGraph, s: PlacementSchedule) -> dict[Task, list[dict[str, Any]]]:
    m = len(g.devices)
    dev = [g._di[s.slots[t][0]] for t in g.tasks]
    fin = [float(s.slots[t][2]) for t in g.tasks]
    avail = np.zeros(m)
    out: dict[Task, list[dict[str, Any]]] = {}
    for i in decision_order(g, s):
        t = g.tasks[i]
        inputs_at = max((fin[p] for p, _ in g.preds[i]), default=0.0)
        ready = _ready_row(g, i, dev, fin)
        rows = []
        for j, d in enumerate(g.devices):
            c = float(g.free_C[i, j])
            row = {"task": t, "device": d, "type": g.device_types.get(d), "kernel": math.isfinite(c),
                   "allowed": math.isfinite(g.C[i, j]), "chosen": j == dev[i], "inputs_at": inputs_at,
                   "transfer": None, "wait": None, "compute": None, "finish": None}
            if row["kernel"]:
                st = max(float(avail[j]), float(ready[j]))
                row.update(transfer=float(ready[j]) - inputs_at, wait=st - float(ready[j]), compute=c, finish=st + c)
            rows.append(row)
        out[t] = rows
        avail[dev[i]] = max(avail[dev[i]], fin[i])
    return out


def why(g: TaskGraph, s: PlacementSchedule, task: Task) -> list[dict[str, Any]]:
    """One row per device for ``task``: as the earliest-finish rule weighs it at the moment the plan
    places ``task`` (see :func:`decision_order`; the devices hold the tasks placed before it).

    Row: device, type, kernel (has one), allowed (not excluded by a pin), chosen (the plan's
    device), inputs_at (s, when its last input was produced; 0 without inputs), transfer (s, how
    much later the inputs arrive on that device), wait (s, for the device to finish its queue),
    compute (s), finish (s). ``inputs_at + transfer + wait + compute == finish``; for the chosen
    device ``finish`` is the plan's finish (and with greedy earliest finish it is the smallest of
    the allowed devices). Devices without a kernel have None times."""
    if task not in g._ti:
        raise LabError(f"{task!r} is not an operator of this graph", where="why")
    return _why_all(g, s)[task]


def _reason(g: TaskGraph, s: PlacementSchedule, rows: list[dict[str, Any]]) -> str:
    cands = sorted((r for r in rows if r["kernel"]), key=lambda r: r["finish"])
    chosen = next(r for r in rows if r["chosen"])
    t0 = chosen["inputs_at"]

    def pct(r: dict) -> str:  # time from the inputs to the finish, against the chosen device's
        span = chosen["finish"] - t0
        if span <= 0:
            return "same finish" if r["finish"] == chosen["finish"] else f"+{r['finish'] - chosen['finish']:.3g} s"
        ratio = (r["finish"] - t0) / span
        return f"{100 * (ratio - 1):+.0f} %" if ratio < 3 else f"{ratio:.3g}x as long"

    cls = g.task_class(chosen["task"])
    if len(cands) == 1:
        return f"the only device with a kernel for {cls or 'it'}"
    others = [r for r in cands if not r["chosen"]]
    if chosen["task"] in g.pins:
        best = cands[0]
        if best["chosen"]:
            return f"pinned (also the earliest finish; next best {others[0]['device']} {pct(others[0])})"
        return f"pinned; the free choice {best['device']}: {pct(best)}"
    if chosen is cands[0] or chosen["finish"] <= cands[0]["finish"]:
        return f"earliest finish of {len(cands)} candidates; next best {others[0]['device']} {pct(others[0])}"
    best = next(r for r in cands if r["allowed"])
    return f"placed by {s.strategy}, not by earliest finish; {best['device']} would finish it {pct(best)}"


def reasons(g: TaskGraph, s: PlacementSchedule) -> dict[Task, str]:
    """One line per task saying why it is on its device (earliest finish and the next best device,
    or its pin and what the free choice would have been)."""
    return {t: _reason(g, s, rows) for t, rows in _why_all(g, s).items()}


def transfer_rows(g: TaskGraph, s: PlacementSchedule) -> list[dict[str, Any]]:
    """Every transfer between two devices: producer, consumer, src, dst, start (the producer's
    finish), finish (its arrival), bytes (None when the graph's transfers are in seconds)."""
    out = []
    for (u, v), val in g.transfer.items():
        du, _, fu = s.slots[u]
        dv = s.slots[v][0]
        if du != dv:
            out.append({"producer": u, "consumer": v, "src": du, "dst": dv, "start": fu,
                        "finish": fu + g.transfer_time(u, v, du, dv),
                        "bytes": val if g.link_time is not None else None})
    return out


def plan_record(model: str, batch: int, strategy: str, pins: Mapping[Task, Device], s: PlacementSchedule,
                topology=None, cost_model: str = "datasheet") -> dict[str, Any]:
    """What a plan is kept as for a later comparison: its settings (the topology as its dict), makespan and busy
    time per device."""
    return {"model": model, "batch": int(batch), "strategy": strategy, "pins": dict(pins), "cost_model": cost_model,
            "topology": topology.to_dict() if topology is not None else None,
            "makespan": float(s.makespan), "busy": {d: float(b) for d, b in s.busy().items()}}


def _gbs(x: float) -> str:
    return f"{x / 1e9:.3g} GB/s"


def topology_changes(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """What differs between two topologies (their dicts), in a few words each: devices and switches added or
    removed, a device's numbers changed, a link added, removed, or of another kind, bandwidth or latency."""
    if a is None or b is None or a == b:
        return []
    out = []
    devs = ({d["name"]: d for d in a.get("devices", [])}, {d["name"]: d for d in b.get("devices", [])})
    out += [f"device {n} removed" for n in devs[0] if n not in devs[1]]
    out += [f"device {n} added" for n in devs[1] if n not in devs[0]]
    out += [f"device {n} changed" for n in devs[0] if n in devs[1] and devs[0][n] != devs[1][n]]
    sws = ({w["name"] for w in a.get("switches", [])}, {w["name"] for w in b.get("switches", [])})
    out += [f"switch {n} removed" for n in sorted(sws[0] - sws[1])] + [f"switch {n} added" for n in sorted(sws[1] - sws[0])]

    def links(t):
        return {tuple(sorted((x["a"], x["b"]))): x for x in t.get("links", [])}

    la, lb = links(a), links(b)
    for key, x in la.items():
        y = lb.get(key)
        name = f"link {key[0]}–{key[1]}"
        if y is None:
            out.append(f"{name} removed")
        elif x != y:
            out.append(f"{name}: {x['kind']} {_gbs(x['bandwidth'])} → {y['kind']} {_gbs(y['bandwidth'])}"
                       + (f", latency {x['latency'] * 1e6:.3g} → {y['latency'] * 1e6:.3g} µs"
                          if x["latency"] != y["latency"] else ""))
    out += [f"link {k[0]}–{k[1]} added" for k in lb if k not in la]
    return out or ["topology changed"]


def compare_plans(base: Mapping[str, Any], now: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """A one-line summary of what changed between two :func:`plan_record`s and what it did to the
    makespan (e.g. "conv1 pinned to fpga: makespan +12.0 %"), and rows per device: busy time (s) in
    the baseline and now, and the change (s; a change within rounding of the values is 0)."""
    changes = []
    if base["model"] != now["model"] or base["batch"] != now["batch"]:
        changes.append(f"model {base['model']} (batch {base['batch']}) -> {now['model']} (batch {now['batch']})")
    if base["strategy"] != now["strategy"]:
        changes.append(f"strategy {base['strategy']} -> {now['strategy']}")
    if base.get("cost_model", "datasheet") != now.get("cost_model", "datasheet"):
        changes.append(f"cost model {base.get('cost_model', 'datasheet')} -> {now.get('cost_model', 'datasheet')}")
    changes += topology_changes(base.get("topology"), now.get("topology"))
    bp, np_ = base["pins"], now["pins"]
    changes += [f"{t} pinned to {d}" for t, d in np_.items() if bp.get(t) != d]
    changes += [f"{t} unpinned" for t in bp if t not in np_]

    def change(a: float, b: float) -> float:
        d = b - a
        return 0.0 if abs(d) <= 1e-9 * max(abs(a), abs(b)) else d

    rel = change(base["makespan"], now["makespan"]) / base["makespan"] if base["makespan"] > 0 else 0.0
    summary = f"{'; '.join(changes) or 'same settings'}: makespan {100 * rel:+.1f} %"
    devs = list(dict.fromkeys([*base["busy"], *now["busy"]]))
    rows = [{"device": d, "baseline": base["busy"].get(d, 0.0), "now": now["busy"].get(d, 0.0),
             "change": change(base["busy"].get(d, 0.0), now["busy"].get(d, 0.0))} for d in devs]
    rows.append({"device": "makespan", "baseline": base["makespan"], "now": now["makespan"],
                 "change": change(base["makespan"], now["makespan"])})
    return summary, rows


def model_task_graph(model: str, topology, batch_size: int = 32, speed: Mapping[str, float] | None = None,
                     merge_data_ops: bool = True) -> TaskGraph:
    """Trace a preset model at ``batch_size`` and cost it on ``topology``."""

    return TaskGraph.from_model(trace(model, batch_size, merge_data_ops=merge_data_ops), topology, speed)


def plan_assignment(g: TaskGraph, strategy: str) -> tuple[dict[Task, Device], PlacementSchedule, TaskGraph, str | None]:
    """Every operator's device under ``strategy`` on ``g`` (pins included): the plan a placement run
    executes. Also the schedule, the graph it was made on (a coarsened one for the exact optimum of a
    large model, whose groups are spread back over their operators here) and the note that says so."""
    shown, note = graph_for(strategy, g)
    s = run_strategy(strategy, shown)
    if shown is g:
        return s.assignment, s, shown, note
    _, groups = coarsen(g, OPTIMAL_MAX_TASKS)
    return {t: s.assignment[grp] for grp, members in groups.items() for t in members}, s, shown, note
