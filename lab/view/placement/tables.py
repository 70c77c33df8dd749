"""The Placement page's tables and the Gantt chart's caption: plain rows for a table, times in the unit the page
shows. The charts beside them are lab.figures' builders, named by string in each section; these the page model
calls itself."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from lab.modelled.placement.pipeline import is_transfer, lanes
from lab.scenario.units import MIN_VISIBLE, error_pct, time_unit


def gantt_caption() -> str:
    """What :func:`lab.figures.placement.gantt_figure` draws, for the caption under it."""
    return ("each bar is an operator on a device, from its start to its finish (hover: its class and why it is "
            "there); the red lane under a device holds the transfers arriving there. Bars shorter than "
            f"{100 * MIN_VISIBLE:.1f} % of the time axis carry a diamond so they stay visible. Gaps are waiting "
            "(for inputs or for the device).")


def assignment_table(rows: Sequence[Mapping[str, Any]], scale: float, unit: str,
                     reasons: Mapping[Any, str] | None = None) -> list[dict[str, Any]]:
    """The schedule table (:func:`lab.modelled.placement.schedule_table`) with units in the column names and
    the reason each operator is on its device, beside its device: what a reader looks for first stays on a narrow
    screen, the numbers follow."""
    out = []
    for r in rows:
        row = {"operator": str(r["task"]), "device": r["device"], "why here": (reasons or {}).get(r["task"], ""),
               "class": r["class"], "FLOPs": r["flops"], f"start ({unit})": r["start"] * scale,
               f"finish ({unit})": r["finish"] * scale}
        row |= {f"on {d} ({unit})": (t * scale if math.isfinite(t) else None) for d, t in r["times"].items()}
        out.append(row)
    return out


def why_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`lab.modelled.placement.why` rows with units named (one unit for the whole table)."""
    scale, unit = time_unit(max((r["finish"] for r in rows if r["kernel"]), default=0.0))

    def t(x: float | None) -> float | None:
        return None if x is None else x * scale

    return [{"device": r["device"], "type": r["type"], "plan's choice": r["chosen"],
             "allowed": "no kernel" if not r["kernel"] else ("yes" if r["allowed"] else "no: pinned elsewhere"),
             f"inputs exist at ({unit})": t(r["inputs_at"]) if r["kernel"] else None,
             f"transfer ({unit})": t(r["transfer"]), f"wait for device ({unit})": t(r["wait"]),
             f"compute ({unit})": t(r["compute"]), f"finish ({unit})": t(r["finish"])} for r in rows]


def baseline_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`lab.modelled.placement.compare_plans` rows (busy time per device, then the makespan) with units."""
    scale, unit = time_unit(max([abs(r["baseline"]) for r in rows] + [abs(r["now"]) for r in rows] + [0.0]))
    return [{"device": r["device"], f"baseline ({unit})": r["baseline"] * scale, f"now ({unit})": r["now"] * scale,
             f"change ({unit})": r["change"] * scale,
             "change (%)": 100 * r["change"] / r["baseline"] if r["baseline"] else None} for r in rows]


def comparison_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`lab.modelled.placement.compare_strategies` rows (with their graph) in one time unit."""
    scale, unit = time_unit(max([r["makespan"] for r in rows if r["makespan"] is not None] + [0.0]))
    return [{"graph": r["graph"], "strategy": r.get("label", r["strategy"]),
             f"makespan ({unit})": r["makespan"] * scale if r["makespan"] is not None else None,
             "above optimum (%)": 100 * r["gap"] if r["gap"] is not None else None, "note": r["note"]} for r in rows]


def balance_series(results: Mapping[str, Any]) -> dict[str, dict[str, list]]:
    """Per rule, the round-by-round lists :func:`lab.figures.placement.balance_figure` draws (from each BalanceResult)."""
    return {r: {"round": [x.round for x in res.rounds], "round_time": [x.round_time for x in res.rounds],
                "max_wait": [x.max_wait for x in res.rounds], "mean_wait": [x.mean_wait for x in res.rounds],
                "weights": [x.weights for x in res.rounds]} for r, res in results.items()}


def balance_time_unit(results: Mapping[str, Any]) -> tuple[float, str]:
    """The (scale, unit) that reads well for the longest round of any BalanceResult in ``results``."""
    return time_unit(max(x.round_time for res in results.values() for x in res.rounds))


def rounds_table(res: Any, nodes: Sequence[str], mode: str, scale: float, unit: str) -> list[dict[str, Any]]:
    """One row per balancing round (:class:`lab.modelled.balance.BalanceResult`): weights, times, the plan."""
    return [{"round": x.round, **{f"w {n}": w for n, w in zip(nodes, x.weights)},
             f"round time ({unit})": x.round_time * scale, f"max wait ({unit})": x.max_wait * scale,
             f"mean wait ({unit})": x.mean_wait * scale, "imbalance": x.imbalance, "good enough": x.good_enough,
             ("operators moved" if mode == "model" else "samples moved"): x.changes,
             "plan": ", ".join(map(str, x.plan)) if mode == "data" else ", ".join(
                 f"{n}:{sum(1 for p in x.plan if p == n)}" for n in nodes if n in x.plan)} for x in res.rounds]


def device_time_table(rows: Sequence[Mapping[str, Any]], devices: Sequence[str]) -> list[dict[str, Any]]:
    """Per device, in seconds: busy (its compute rows but emulated waits), emulated wait, idle (the step's
    span, from the first start to the last end over every compute row, less busy and emulated; never
    below 0), and idle as a share of the span (None for an empty step). Transfer rows are not device time."""
    comp = [r for r in rows if not is_transfer(r)]
    span = (max(r["end"] for r in comp) - min(r["start"] for r in comp)) if comp else 0.0
    out = []
    for d in lanes(devices, comp):
        mine = [r for r in comp if r.get("device") == d]
        busy = sum(r["end"] - r["start"] for r in mine if r.get("kind") != "emulated")
        emulated = sum(r["end"] - r["start"] for r in mine if r.get("kind") == "emulated")
        idle = max(0.0, span - busy - emulated)
        out.append({"device": d, "busy (s)": busy, "emulated wait (s)": emulated, "idle (s)": idle,
                    "idle share (%)": 100 * idle / span if span > 0 else None})
    return out


def _ranks(values: Sequence[float | None]) -> list[int | None]:
    """1 for the shortest; ties share the better rank (1, 1, 3); None for a missing value."""
    known = sorted(v for v in values if v is not None)
    return [None if v is None else 1 + known.index(v) for v in values]


def ranking_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The strategies ranked by the model and by the measurement (1 = fastest), times in ms, the error
    (measured / modelled − 1, in %), sorted by measured time (missing ones last)."""
    mod = _ranks([r.get("modelled") for r in rows])
    mea = _ranks([r.get("measured") for r in rows])
    out = [{"strategy": r["strategy"], "modelled rank": a, "measured rank": b,
            "modelled (ms)": None if r.get("modelled") is None else r["modelled"] * 1e3,
            "measured (ms)": None if r.get("measured") is None else r["measured"] * 1e3,
            "error (%)": error_pct(r.get("measured"), r.get("modelled"))} for r, a, b in zip(rows, mod, mea)]
    return sorted(out, key=lambda x: (x["measured (ms)"] is None, x["measured (ms)"] or 0.0))


__all__ = ["gantt_caption", "assignment_table", "why_table", "baseline_table", "comparison_table", "balance_series",
           "balance_time_unit", "rounds_table", "device_time_table", "ranking_table"]
