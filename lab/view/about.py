"""What the About page says the runs on this server measured of the placement claims: the rule by device type
against the other strategies, and the balancing loop against the coarse layer-by-layer split, each from the
newest finished runs of one emulated cluster (every student's, read only)."""
from __future__ import annotations

import json
import math
from typing import Mapping

from lab.errors import LabError
from lab.scenario.names import BALANCE_LABELS, MODEL_LABELS, STRATEGY_SHORT
from lab.view.placement import measured_plan_step, plan_key

NEWEST = 200  # placement runs read, newest first


def _cluster(tr: Mapping, sc: Mapping) -> str:
    """What must agree for two placement runs to be compared: the cluster as emulated and the model's batch."""
    keep = {k: tr.get(k) for k in ("model", "batch_size", "micro_batches", "emulate", "slowdown", "dataset")}
    return json.dumps([sc.get("topology"), keep], sort_keys=True)


def _finished(store) -> list[dict]:
    runs = store.list_runs(statuses=("done",))
    runs = runs[runs.parallel == "placement"].head(NEWEST)
    out = []
    for rid in runs.id:
        try:
            run = store.get_run(rid)
        except LabError:  # deleted meanwhile
            continue
        step = measured_plan_step(store, run)
        if math.isfinite(step):
            out.append(dict(run, step=step, key=plan_key(run["scenario"]["training"]),
                            cluster=_cluster(run["scenario"]["training"], run["scenario"])))
    return out


def _ms(x: float) -> str:
    return f"{x * 1e3:.3g} ms"


def _where(run: Mapping) -> str:
    tr, sc = run["scenario"]["training"], run["scenario"]
    slow = ", ".join(f"{d} {f:g}× slower" for d, f in sorted((tr.get("slowdown") or {}).items()))
    return (f"{MODEL_LABELS.get(tr['model'], tr['model'])} on “{sc['topology'].get('name', '')}”, "
            + ("emulated" + (f" ({slow})" if slow else "") if tr.get("emulate") else "every device this machine"))


def placement_evidence(store) -> dict[str, str]:
    """The measured sentence for each placement claim: ``type_rule`` and ``balancing``; a claim nobody has
    measured on this server yet says how to measure it."""
    runs = _finished(store)
    out = {"type_rule": "Not measured on this server yet: on the Placement page, “Run every strategy”.",
           "balancing": "Not measured on this server yet: on the Placement page, “Run the balancing loop”."}
    typed = next((r for r in runs if r["key"] == "type_rule"), None)
    if typed is not None:
        same = [r for r in runs if r["cluster"] == typed["cluster"] and r["scenario"]["training"].get(
            "balance", "off") == "off"]
        best: dict[str, float] = {}
        for r in same:  # runs are newest first: keep each strategy's newest
            best.setdefault(r["key"], r["step"])
        others = sorted((v, k) for k, v in best.items() if k != "type_rule")
        rank = 1 + sum(1 for v, _ in others if v < best["type_rule"])
        out["type_rule"] = (f"Measured ({_where(typed)}): the type rule's step {_ms(best['type_rule'])}, "
                            + (f"{rank} of {len(best)} strategies; " + ", ".join(
                                f"{STRATEGY_SHORT.get(k, k)} {_ms(v)}" for v, k in others)
                               if others else "no other strategy measured on this cluster yet") + ".")
    loop = next((r for r in runs if r["scenario"]["training"].get("balance", "off") != "off"), None)
    if loop is not None:
        bal = loop["info"]["balance"]
        split = next((r for r in runs if r["key"] == "even_split" and r["cluster"] == loop["cluster"]), None)
        head = (f"Measured ({_where(loop)}): the loop ({BALANCE_LABELS[loop['key']]}) "
                + (f"settled after {len(bal['rounds'])} rounds" if bal.get("converged")
                   else f"had not settled after {len(bal['rounds'])} rounds")
                + f", its last round's step {_ms(loop['step'])}")
        out["balancing"] = head + (f" against {_ms(split['step'])} for the even layer split "
                                   f"({loop['step'] / split['step'] - 1:+.0%})." if split is not None
                                   else "; the even layer split has not been measured on this cluster.")
    return out


__all__ = ["placement_evidence"]
