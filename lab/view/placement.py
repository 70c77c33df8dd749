"""What the Placement page shows that is not a figure: pins changed by its buttons, the balancing loop's
defaults and runs, and the sentences built from them. User text goes through ``plain`` (the page passes
its markdown escape; identity by default)."""

from __future__ import annotations

from typing import Callable, Mapping

from lab.modelled.balance import (
    RULE_LABELS,
    RULES,
    BalanceResult,
    balance_data_parallel,
    balance_model_parallel,
)

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


__all__ = ["BALANCE_KNOBS", "BALANCE_MODES", "changed_pins", "topology_line", "pins_line", "balance_intro",
           "default_slowdowns", "data_nodes_line", "run_balancing", "balance_summary", "rounds_caption"]
