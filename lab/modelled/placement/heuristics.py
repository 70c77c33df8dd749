"""Placement by list scheduling: earliest finish time, HEFT, replaying a fixed assignment, and the simple baselines (type rule, fastest device, round robin, even split)."""
from __future__ import annotations

import math
from bisect import bisect_right
from typing import Mapping, Sequence

import numpy as np

from lab.errors import LabError
from lab.modelled.placement.graph import (
    TYPE_RULE,
    TYPE_RULE_DEFAULT,
    Device,
    PlacementSchedule,
    Task,
    TaskGraph,
    _to_schedule,
)


def _ready_row(g: TaskGraph, i: int, dev: list[int], fin: list[float]) -> np.ndarray:
    row = np.zeros(len(g.devices))
    for p, val in g.preds[i]:
        np.maximum(row, fin[p] + g._comm_row(val, dev[p]), out=row)
    return row


def greedy_eft(g: TaskGraph) -> PlacementSchedule:
    """Greedy earliest finish: stable topological order, earliest finish time, append to the device queue."""
    n = len(g.tasks)
    avail = np.zeros(len(g.devices))
    dev, start, fin = [0] * n, [0.0] * n, [0.0] * n
    for i in g.topo:
        st = np.maximum(avail, _ready_row(g, i, dev, fin))
        eft = st + g.C[i]
        d = int(np.argmin(eft))
        dev[i], start[i], fin[i] = d, float(st[d]), float(eft[d])
        avail[d] = fin[i]
    return _to_schedule(g, "greedy_eft", dev, start, fin)


def upward_ranks(g: TaskGraph) -> list[float]:
    """HEFT's upward rank per task (index order): mean compute + max over successors of mean transfer + rank."""
    n = len(g.tasks)
    mean_c = [float(g.C[i][np.isfinite(g.C[i])].mean()) for i in range(n)]
    rank = [0.0] * n
    for i in reversed(g.topo):
        best = 0.0
        for s, val in g.succs[i]:
            best = max(best, g._mean_comm(val) + rank[s])
        rank[i] = mean_c[i] + best
    return rank


def _find_gap(starts: list[float], fins: list[float], ready: float, dur: float) -> tuple[float, int]:
    """Earliest start >= ready in an idle gap of at least ``dur``; returns (start, insert index)."""
    k = bisect_right(fins, ready)
    t = ready
    while k < len(starts):
        if t + dur <= starts[k]:
            return t, k
        t = max(ready, fins[k])
        k += 1
    return t, k


def heft(g: TaskGraph) -> PlacementSchedule:
    """HEFT: decreasing upward rank, earliest finish time with insertion into idle gaps."""
    n, m = len(g.tasks), len(g.devices)
    rank = upward_ranks(g)
    order = sorted(range(n), key=lambda i: (-rank[i], g.pos[i]))
    starts: list[list[float]] = [[] for _ in range(m)]
    fins: list[list[float]] = [[] for _ in range(m)]
    dev, start, fin = [0] * n, [0.0] * n, [0.0] * n
    for i in order:
        ready = _ready_row(g, i, dev, fin)
        best = (math.inf, 0, 0.0, 0)
        for d in range(m):
            c = g.C[i, d]
            if not math.isfinite(c):
                continue
            s, k = _find_gap(starts[d], fins[d], float(ready[d]), float(c))
            if s + c < best[0]:
                best = (s + c, d, s, k)
        f, d, s, k = best
        starts[d].insert(k, s)
        fins[d].insert(k, f)
        dev[i], start[i], fin[i] = d, s, f
    return _to_schedule(g, "heft", dev, start, fin)


def schedule_assignment(g: TaskGraph, assignment: Mapping[Task, Device], strategy: str = "assigned",
                        order: Sequence[Task] | None = None, note: str = "", extra: Mapping | None = None) -> PlacementSchedule:
    """Times for a fixed assignment: tasks in ``order`` (default: stable topological order), each
    appended to its device's queue as soon as its inputs have arrived."""
    n = len(g.tasks)
    idx_order = g.topo if order is None else [g._ti[t] for t in order]
    if sorted(idx_order) != list(range(n)):
        raise LabError("the order must list every task exactly once", where=strategy)
    dev = [0] * n
    for t in g.tasks:
        if t not in assignment:
            raise LabError(f"task {t!r} has no device", where=strategy)
        d = assignment[t]
        if d not in g._di:
            raise LabError(f"task {t!r} is assigned to {d!r}, which is not a device", where=strategy)
        if t in g.pins and g.pins[t] != d:
            raise LabError(f"task {t!r} is assigned to {d!r}, but it is pinned to {g.pins[t]!r}", where=strategy)
        if not g.can_run(t, d):
            raise LabError(f"task {t!r} is assigned to {d!r}, which has no kernel for it", where=strategy)
        dev[g._ti[t]] = g._di[d]
    avail = [0.0] * len(g.devices)
    start, fin = [0.0] * n, [0.0] * n
    done = [False] * n
    for i in idx_order:
        d = dev[i]
        r = 0.0
        for p, val in g.preds[i]:
            if not done[p]:
                raise LabError(f"the order puts {g.tasks[i]!r} before its input {g.tasks[p]!r}", where=strategy)
            r = max(r, fin[p] + g._comm(val, dev[p], d))
        start[i] = max(avail[d], r)
        fin[i] = start[i] + float(g.C[i, d])
        avail[d] = fin[i]
        done[i] = True
    return _to_schedule(g, strategy, dev, start, fin, note, extra)


def replay(g: TaskGraph, plan: PlacementSchedule, strategy: str | None = None) -> PlacementSchedule:
    """Run ``plan``'s assignment and per-device order with ``g``'s times (e.g. the true speeds)."""
    order = sorted(g.tasks, key=lambda t: (plan.slots[t][1], plan.slots[t][2], g.pos[g._ti[t]]))
    return schedule_assignment(g, plan.assignment, strategy or plan.strategy, order=order)


def type_rule(g: TaskGraph) -> PlacementSchedule:
    """The rule by device type; fallback: the fastest device that has a kernel (a pinned task: its pin)."""
    if not g.device_types or len(g.info) < len(g.tasks):
        raise LabError("the type rule needs each task's operator class and each device's type; build the "
                       "graph with TaskGraph.from_model", where="type_rule")
    assignment = {}
    for i, t in enumerate(g.tasks):
        prefer = TYPE_RULE.get(g.task_class(t), TYPE_RULE_DEFAULT)
        cands = [j for j, d in enumerate(g.devices) if g.device_types.get(d) in prefer and math.isfinite(g.C[i, j])]
        if not cands:
            cands = [j for j in range(len(g.devices)) if math.isfinite(g.C[i, j])]
        assignment[t] = g.devices[min(cands, key=lambda j: (g.C[i, j], j))]
    return schedule_assignment(g, assignment, "type_rule")


def single_fastest(g: TaskGraph) -> PlacementSchedule:
    """Everything on the one device that runs the whole graph fastest (no transfers); pinned tasks
    stay on their pins and the device is chosen for the rest."""
    free = [i for i, t in enumerate(g.tasks) if t not in g.pins]
    totals = g.C[free].sum(axis=0)
    if not np.isfinite(totals).any():
        raise LabError("no single device has a kernel for every task"
                       + (" that is not pinned" if g.pins else ""), where="single_fastest")
    d = g.devices[int(np.argmin(totals))]
    return schedule_assignment(g, {t: g.pins.get(t, d) for t in g.tasks}, "single_fastest")


def round_robin(g: TaskGraph) -> PlacementSchedule:
    """Tasks in topological order dealt to the devices in turn, skipping devices without a kernel."""
    m = len(g.devices)
    ptr, assignment = 0, {}
    for i in g.topo:
        for k in range(m):
            j = (ptr + k) % m
            if math.isfinite(g.C[i, j]):
                assignment[g.tasks[i]] = g.devices[j]
                ptr = j + 1
                break
    return schedule_assignment(g, assignment, "round_robin")


def even_split(g: TaskGraph, rounds: int = 1) -> PlacementSchedule:
    """The coarse layer-by-layer baseline: the topological order cut into contiguous blocks of equal
    task count, one per device that has a kernel for every task (in device order), or ``rounds`` per device going
    round the devices in turn (the plan an interleaved schedule runs: device ``k mod P`` holds block ``k``). Pinned
    tasks stay on their pins; the blocks cut the other tasks."""
    free = [i for i in g.topo if g.tasks[i] not in g.pins]
    general = [j for j in range(len(g.devices)) if np.isfinite(g.C[free, j]).all()]
    if not general:
        raise LabError("no device has a kernel for every task" + (" that is not pinned" if g.pins else "")
                       + ", so an even layer split is impossible", where="even_split")
    assignment = dict(g.pins)
    n, k = len(free), min(len(general) * max(1, int(rounds)), len(free))
    sizes = [n // k + (1 if b < n % k else 0) for b in range(k)] if k else []
    pos = 0
    for b, size in enumerate(sizes):
        for i in free[pos:pos + size]:
            assignment[g.tasks[i]] = g.devices[general[b % len(general)]]
        pos += size
    return schedule_assignment(g, assignment, "even_split" if rounds == 1 else "even_rounds")


def even_rounds(g: TaskGraph) -> PlacementSchedule:
    """:func:`even_split` twice round the devices: two stretches per device, taken in turn (for interleaved 1F1B,
    which runs no plan of one stretch per device; a model with fewer free tasks than twice the devices gets one
    block per task)."""
    return even_split(g, rounds=2)
