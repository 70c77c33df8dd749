"""Dynamic load balancing (weights from each node's waiting time) and data-parallel batch splits.

**Splits.** :func:`split_batch` cuts a global batch into whole per-node counts, even or in
proportion to weights, with the largest-remainder (Hamilton) method in exact rational arithmetic:
the counts always add up to the batch and each is within one of its exact quota.
:func:`compute_shares` gives the task-level heterogeneous system's "each node's share of the total
compute" from the cost model.

**The balancing loop** (both modes follow the same four steps):

* weights: every node gets a weight; all start equal.
* a round: plan with the current weights, run the round, and record every node's busy time
  and waiting time (``wait = round time - busy``; the node that finishes last waits 0).
* the test: ``imbalance = (max wait - mean wait) / round time``. If it is at most ``tolerance`` the
  balance is good enough and the weights stay; otherwise they are updated by the chosen rule and
  the next round re-plans.
* the stop: when the plan has not changed for ``patience`` rounds in a row (or after
  ``max_rounds``, reported as not converged).

Two update rules (the load-balancing design leaves the rule open; both are offered and shown side
by side):

* ``"wait"`` (the load-balancing design's wording, made definite):
  ``w_i <- w_i * (1 + step * (wait_i - mean wait) / round time)``, then renormalised. Load moves
  from nodes that waited less than average (the slowest, which waited 0, loses most) to those
  that waited more, in proportion to the difference. It needs no speed measurement but only
  creeps towards balance, and a node that stays idle because of the plan's shape keeps gaining
  weight, so in model parallelism it can oscillate.
* ``"throughput"`` (the literature's rule, e.g. LB-BSP, Chen et al. 2020; HetPipe): measure each
  node's speed as ``work done / busy time`` and make its load proportional to it. Nodes that did
  no work keep their previous speed estimate (the catalogue's at first). Without noise it lands on
  the balanced plan after one round.

Two modes:

* **data parallel** (:func:`balance_data_parallel`): the plan is the batch split; weights are the
  shares (sum 1). A node's busy time is its sample count times its true seconds per sample.
* **model parallel** (:func:`balance_model_parallel`): the plan is an operator placement by
  ``greedy_eft`` (or ``heft``) on the cost model with every device's speed multiplied by its weight
  (start 1 each: "as the catalogue says"; the wait rule keeps their mean at 1, the throughput rule
  sets them to the measured speed relative to the catalogue); the round replays that placement and
  per-device order with the true times.

The "true" speeds are the catalogue's divided by an editable per-device ``slowdown``, times a
seeded per-device, per-round noise factor ``exp(noise * N(0, 1))``. A round is **simulated with
the cost model** (modelled, not measured).

One :class:`BalanceLoop` keeps the book (weights, the test, the rule, the stop) for a simulated
loop here and for a measured one: a balancing placement run (:mod:`lab.train.placement_run`) feeds it each
round's measured busy times and step time, and re-plans with :func:`weighted_plan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from lab.errors import LabError
from lab.modelled.costmodel import DATASHEET, CostModel
from lab.modelled.datasheet import check_speed
from lab.modelled.placement import greedy_eft, heft, replay
from lab.scenario.names import BALANCE_LABELS, BALANCE_RULES

RULES = BALANCE_RULES
RULE_LABELS = {r: BALANCE_LABELS[r] for r in RULES}
PLANNERS = {"greedy_eft": greedy_eft, "heft": heft}
MAX_ROUNDS = 500


# ----- splits ----------------------------------------------------------------------------------------

def split_batch(total: int, weights: Sequence[float] | int) -> list[int]:
    """Whole per-node sample counts that add up to ``total`` exactly.

    ``weights``: an int ``n`` for an even split over ``n`` nodes, or one non-negative weight per
    node (any scale). Largest-remainder method: every node gets the floor of its exact quota
    ``total * w_i / sum(w)``; the samples left over go one each to the largest remainders (ties to
    the lower index). Exact rational arithmetic, so no rounding can lose or add a sample.
    """
    if isinstance(total, bool) or not isinstance(total, (int, np.integer)) or total < 0:
        raise LabError(f"the batch must be a whole number of samples, at least 0 (got {total!r})", where="split")
    total = int(total)
    if isinstance(weights, (int, np.integer)) and not isinstance(weights, bool):
        if weights < 1:
            raise LabError(f"an even split needs at least one node (got {weights})", where="split")
        weights = [1] * int(weights)
    ws = list(weights)
    if not ws:
        raise LabError("the split needs at least one node", where="split")
    fr = []
    for i, w in enumerate(ws):
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)) or not math.isfinite(w) or w < 0:
            raise LabError(f"weight {i} must be a non-negative finite number (got {w!r})", where="split")
        fr.append(Fraction(w) if not isinstance(w, (np.integer, np.floating)) else Fraction(float(w)))
    s = sum(fr)
    if s == 0:
        raise LabError("at least one weight must be positive", where="split")
    quotas = [total * w / s for w in fr]
    counts = [q.numerator // q.denominator for q in quotas]
    left = total - sum(counts)
    order = sorted(range(len(ws)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[:left]:
        counts[i] += 1
    return counts


def per_sample_times(graph, topology, devices: Sequence[str] | None = None,
                     speed: Mapping[str, float] | None = None, model: CostModel | None = None) -> dict[str, float]:
    """Modelled forward seconds per sample of the whole model on each device that can run all of it.

    ``graph`` is an OpGraph (FLOPs scale with the batch, so seconds / batch is per sample).
    ``devices`` defaults to every device with a kernel for each operator class the model uses.
    """
    factors = check_speed(speed, topology.device_names)
    model = model or DATASHEET
    names = list(devices) if devices is not None else [
        d.name for d in topology.devices if graph.classes <= d.kernels]
    if not names:
        raise LabError(f"no device of {topology.name!r} can run the whole model (it needs kernels for "
                       f"{sorted(graph.classes)}); data parallelism needs such devices", where="data split")
    out = {}
    for name in names:
        dev = topology.device(name)
        t = sum(model.op_seconds(op, dev, topology) for op in graph.ops) / factors[name]
        if not math.isfinite(t):
            missing = sorted(graph.classes - dev.kernels)
            raise LabError(f"device {name!r} cannot run the whole model: no kernel for {missing}", where="data split")
        out[name] = t / graph.batch_size
    return out


def compute_shares(per_sample: Mapping[str, float]) -> list[float]:
    """The task-level design's weighted split: each node's share of the total compute (samples/s over the sum)."""
    speeds = [1.0 / t if t > 0 else math.inf for t in per_sample.values()]
    if any(math.isinf(s) for s in speeds):
        inf = [math.isinf(s) for s in speeds]
        return [1.0 / sum(inf) if x else 0.0 for x in inf]
    total = sum(speeds)
    return [s / total for s in speeds]


# ----- the loop ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BalanceRound:
    round: int  # 1-based
    weights: tuple[float, ...]  # the weights this round planned with
    plan: tuple  # sample counts (data) or device per task (model)
    busy: tuple[float, ...]  # seconds per node (simulated)
    waits: tuple[float, ...]  # seconds per node
    round_time: float  # seconds
    max_wait: float
    mean_wait: float
    imbalance: float  # (max wait - mean wait) / round time
    good_enough: bool
    changes: int | None  # samples or tasks moved since the previous round (None in round 1)
    unchanged: int  # rounds in a row with the same plan


@dataclass(frozen=True)
class BalanceResult:
    mode: str  # "data" or "model"
    rule: str
    nodes: tuple[str, ...]
    rounds: tuple[BalanceRound, ...]
    converged: bool
    reason: str
    reference: Mapping[str, Any] = field(default_factory=dict)  # what full knowledge of the true speeds gives

    @property
    def final(self) -> BalanceRound:
        return self.rounds[-1]


def _check_common(rule: str, step: float, tolerance: float, patience: int, max_rounds: int, noise: float) -> None:
    where = "load balancing"
    if rule not in RULES:
        raise LabError(f"unknown rule {rule!r}; choose one of {list(RULES)}", where=where)
    if not (isinstance(step, (int, float)) and 0 < step <= 2):
        raise LabError(f"step must be in (0, 2] (got {step!r})", where=where)
    if not (isinstance(tolerance, (int, float)) and 0 <= tolerance <= 1):
        raise LabError(f"tolerance must be in [0, 1] (got {tolerance!r})", where=where)
    if isinstance(patience, bool) or not isinstance(patience, int) or not 1 <= patience <= 100:
        raise LabError(f"patience must be a whole number of rounds from 1 to 100 (got {patience!r})", where=where)
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or not 1 <= max_rounds <= MAX_ROUNDS:
        raise LabError(f"max rounds must be a whole number from 1 to {MAX_ROUNDS} (got {max_rounds!r})", where=where)
    if not (isinstance(noise, (int, float)) and 0 <= noise <= 1):
        raise LabError(f"noise must be between 0 and 1 (got {noise!r})", where=where)


def _noise(seed: int, rnd: int, m: int, sigma: float) -> np.ndarray:
    if sigma == 0:
        return np.ones(m)
    return np.exp(sigma * np.random.default_rng([int(seed), rnd]).standard_normal(m))


class BalanceLoop:
    """The loop's bookkeeping, the same for a simulated round and a measured one: the weights to plan the next
    round with, the test, the update rule and the stop. Feed it each round with :meth:`observe`."""

    def __init__(self, nodes: Sequence[str], rule: str, step: float, tolerance: float, patience: int,
                 max_rounds: int, prior_speed: Sequence[float], total_weight: float, normalise_measured: bool,
                 diff: Callable[[tuple, tuple], int]):
        self.nodes, self.rule, self.step, self.tolerance = list(nodes), rule, step, tolerance
        self.patience, self.max_rounds, self.total_weight = patience, max_rounds, total_weight
        self.normalise_measured, self.diff = normalise_measured, diff
        self.weights = np.full(len(self.nodes), total_weight / len(self.nodes))
        self.speed_est = np.array(prior_speed, dtype=float)
        self.prev: tuple | None = None
        self.unchanged = 0
        self.rounds: list[BalanceRound] = []
        self.converged = False
        self.reason = ""

    @property
    def done(self) -> bool:
        return self.converged or len(self.rounds) >= self.max_rounds

    def observe(self, plan: tuple, busy: Sequence[float], work: Sequence[float], round_time: float) -> BalanceRound:
        """Record a round that ran ``plan`` with the current weights (``busy`` seconds and ``work`` done per
        node, the round's time), then move the weights for the next round unless the loop is done."""
        busy, work, T = np.asarray(busy, dtype=float), np.asarray(work, dtype=float), float(round_time)
        waits = np.maximum(T - busy, 0.0)
        changes = None if self.prev is None else self.diff(self.prev, plan)
        self.unchanged = self.unchanged + 1 if changes == 0 else 0
        mx, mean = float(waits.max()), float(waits.mean())
        imb = (mx - mean) / T if T > 0 else 0.0
        good = imb <= self.tolerance
        w = self.weights
        r = BalanceRound(len(self.rounds) + 1, tuple(float(x) for x in w), tuple(plan), tuple(float(x) for x in busy),
                         tuple(float(x) for x in waits), T, mx, mean, float(imb), good, changes, self.unchanged)
        self.rounds.append(r)
        self.prev = tuple(plan)
        if self.unchanged >= self.patience:
            self.converged, self.reason = True, f"the plan has not changed for {self.patience} round(s)"
            return r
        if len(self.rounds) >= self.max_rounds:
            self.reason = f"not converged within {self.max_rounds} rounds: the plan kept changing"
            return r
        if good:
            return r
        if self.rule == "wait":
            w = w * np.maximum(1.0 + self.step * (waits - mean) / T, 1e-9)
        else:
            measured = (busy > 0) & (work > 0)
            self.speed_est = np.where(measured, work / np.where(busy > 0, busy, 1.0), self.speed_est)
            w = self.speed_est.copy()
            if not self.normalise_measured:
                self.weights = w
                return r
        self.weights = w * (self.total_weight / w.sum())
        return r


def _run(nodes: list[str], plan_fn: Callable[[np.ndarray], tuple], simulate: Callable[[tuple, int], tuple],
         rule: str, step: float, tolerance: float, patience: int, max_rounds: int,
         prior_speed: np.ndarray, total_weight: float, normalise_measured: bool,
         diff: Callable[[tuple, tuple], int]) -> tuple[list[BalanceRound], bool, str]:
    loop = BalanceLoop(nodes, rule, step, tolerance, patience, max_rounds, prior_speed, total_weight,
                       normalise_measured, diff)
    while not loop.done:
        plan = plan_fn(loop.weights)
        busy, work, T = simulate(plan, len(loop.rounds) + 1)
        loop.observe(plan, busy, work, T)
    return loop.rounds, loop.converged, loop.reason


def _slowdowns(slowdown: Mapping[str, float] | None, names: list[str]) -> dict[str, float]:
    return check_speed(slowdown, names, what="slowdown")


def balance_data_parallel(per_sample: Mapping[str, float], total: int, slowdown: Mapping[str, float] | None = None,
                          noise: float = 0.0, seed: int = 0, rule: str = "wait", step: float = 1.0,
                          tolerance: float = 0.05, patience: int = 3, max_rounds: int = 50) -> BalanceResult:
    """Balance a global batch of ``total`` samples over the nodes of ``per_sample`` (catalogue
    seconds per sample, e.g. from :func:`per_sample_times`). Weights are batch shares."""
    _check_common(rule, step, tolerance, patience, max_rounds, noise)
    nodes = list(per_sample)
    if not nodes:
        raise LabError("no nodes to balance", where="load balancing")
    cat = np.array([float(per_sample[n]) for n in nodes])
    if not (np.isfinite(cat).all() and (cat > 0).all()):
        raise LabError("seconds per sample must be positive and finite for every node", where="load balancing")
    slow = _slowdowns(slowdown, nodes)
    true = cat * np.array([slow[n] for n in nodes])

    def plan_fn(w: np.ndarray) -> tuple:
        return tuple(split_batch(total, [float(x) for x in w]))

    def simulate(plan: tuple, r: int) -> tuple:
        counts = np.array(plan, dtype=float)
        busy = counts * true * _noise(seed, r, len(nodes), noise)
        return busy, counts, float(busy.max())

    rounds, ok, why = _run(nodes, plan_fn, simulate, rule, step, tolerance, patience, max_rounds,
                           prior_speed=1.0 / cat, total_weight=1.0, normalise_measured=True,
                           diff=lambda a, b: sum(abs(x - y) for x, y in zip(a, b)) // 2)
    ideal = (1.0 / true) / (1.0 / true).sum()
    ideal_counts = split_batch(total, [float(x) for x in ideal])
    ref = {"weights": tuple(float(x) for x in ideal), "plan": tuple(ideal_counts),
           "round_time": float(max(c * t for c, t in zip(ideal_counts, true)))}
    return BalanceResult("data", rule, tuple(nodes), tuple(rounds), ok, why, ref)


def model_loop(g, rule: str = "wait", step: float = 1.0, tolerance: float = 0.05, patience: int = 3,
               max_rounds: int = 50) -> BalanceLoop:
    """The loop over an operator placement of TaskGraph ``g``: one weight per device of ``g`` (the planner's
    speed factor, 1 = as the cost model says; the wait rule keeps their mean at 1, the throughput rule sets
    them to the measured speed relative to the cost model), a plan is the device of every task in ``g``'s
    order, and a change is a task that moved."""
    _check_common(rule, step, tolerance, patience, max_rounds, 0.0)
    m = len(g.devices)
    return BalanceLoop(list(g.devices), rule, step, tolerance, patience, max_rounds, prior_speed=np.ones(m),
                       total_weight=float(m), normalise_measured=False,
                       diff=lambda a, b: sum(1 for x, y in zip(a, b) if x != y))


def weighted_plan(g, weights: Sequence[float], planner: str = "greedy_eft"):
    """The planner's schedule of ``g`` with every device's speed multiplied by its weight."""
    if planner not in PLANNERS:
        raise LabError(f"unknown planner {planner!r}; choose one of {list(PLANNERS)}", where="load balancing")
    di = {d: j for j, d in enumerate(g.devices)}
    return PLANNERS[planner](g.scaled(lambda t, d: 1.0 / weights[di[d]]))


def device_work(g, plan: Sequence[str]) -> np.ndarray:
    """Per device of ``g``, the cost model's compute seconds of the tasks ``plan`` (one device per task, in
    ``g``'s task order) puts there: the work the throughput rule divides by the measured busy time."""
    di = {d: j for j, d in enumerate(g.devices)}
    work = np.zeros(len(g.devices))
    for t, d in zip(g.tasks, plan):
        work[di[d]] += g.compute_time(t, d)
    return work


def balance_model_parallel(g, slowdown: Mapping[str, float] | None = None, noise: float = 0.0, seed: int = 0,
                           rule: str = "wait", step: float = 1.0, tolerance: float = 0.05, patience: int = 3,
                           max_rounds: int = 50, planner: str = "greedy_eft") -> BalanceResult:
    """Balance an operator placement of TaskGraph ``g`` (cost-model times) across its devices, each round
    simulated at the true speeds (:func:`model_loop`). The reference is the plan the planner makes when it
    knows the true (noise-free) speeds."""
    _check_common(rule, step, tolerance, patience, max_rounds, noise)
    if planner not in PLANNERS:
        raise LabError(f"unknown planner {planner!r}; choose one of {list(PLANNERS)}", where="load balancing")
    nodes = list(g.devices)
    slow = _slowdowns(slowdown, nodes)
    di = {d: j for j, d in enumerate(nodes)}
    loop = model_loop(g, rule, step, tolerance, patience, max_rounds)
    while not loop.done:
        schedule = weighted_plan(g, loop.weights, planner)
        plan = tuple(schedule.slots[t][0] for t in g.tasks)
        eps = _noise(seed, len(loop.rounds) + 1, len(nodes), noise)
        run = replay(g.scaled(lambda t, d: slow[d] * eps[di[d]]), schedule)
        busy = np.zeros(len(nodes))
        for t, (d, a, b) in run.slots.items():
            busy[di[d]] += b - a
        loop.observe(plan, busy, device_work(g, plan), run.makespan)
    true_plan = PLANNERS[planner](g.scaled(lambda t, d: slow[d]))
    ref = {"plan": tuple(true_plan.slots[t][0] for t in g.tasks), "round_time": true_plan.makespan,
           "weights": tuple(1.0 / slow[d] for d in nodes)}
    return BalanceResult("model", rule, tuple(nodes), tuple(loop.rounds), loop.converged, loop.reason, ref)


__all__ = ["BalanceLoop", "model_loop", "weighted_plan", "device_work", "PLANNERS", "split_batch", "per_sample_times", "compute_shares", "balance_data_parallel", "balance_model_parallel",
           "BalanceRound", "BalanceResult", "RULES", "RULE_LABELS"]
