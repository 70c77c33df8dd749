"""Placement by search: the contiguous pipeline partition (dynamic programming), the exact optimum (branch and bound) and the coarsening that keeps it tractable."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from lab.errors import LabError
from lab.modelled.placement.graph import (
    BEST_ORDER_MAX_DEVICES,
    OPTIMAL_MAX_TASKS,
    Device,
    PlacementSchedule,
    Task,
    TaskGraph,
    _to_schedule,
)
from lab.modelled.placement.heuristics import greedy_eft, heft, schedule_assignment


def partition_chain(times: np.ndarray, cut: np.ndarray | None = None, mem: np.ndarray | None = None,
                    capacity: np.ndarray | None = None) -> tuple[float, list[tuple[int, int, int]]]:
    """Optimal min-max split of a chain of L layers into contiguous stages on M devices in order.

    ``times[l, j]``: seconds of layer ``l`` on device ``j`` (inf: no kernel). ``cut[k, a, b]``:
    seconds to send what crosses the cut after layer ``k`` from device ``a`` to device ``b``
    (shape (L-1, M, M); None: free). ``mem[l]``: bytes layer ``l`` needs; ``capacity[j]``: bytes
    device ``j`` has. Devices may be skipped (an empty stage), never reordered.

    The bottleneck is the largest of every stage's compute and every cut's transfer (PipeDream's
    planner: the transfer between two stages is its own pipeline step, overlapping with compute).
    Returns ``(bottleneck, [(device index, first layer, end layer exclusive), ...])``. Dynamic
    programming in O(M^2 L + M L^2).
    """
    times = np.asarray(times, dtype=float)
    L, M = times.shape
    if L == 0 or M == 0:
        raise LabError("the chain needs at least one layer and one device", where="chain partition")
    cut = np.zeros((max(L - 1, 0), M, M)) if cut is None else np.asarray(cut, dtype=float)
    mem = np.zeros(L) if mem is None else np.asarray(mem, dtype=float)
    capacity = np.full(M, math.inf) if capacity is None else np.asarray(capacity, dtype=float)
    finite = np.isfinite(times)
    P = np.vstack([np.zeros(M), np.cumsum(np.where(finite, times, 0.0), axis=0)])
    bad = np.vstack([np.zeros(M), np.cumsum(~finite, axis=0)])
    memP = np.concatenate([[0.0], np.cumsum(mem)])
    ii = np.arange(L + 1)
    upper = ii[:, None] < ii[None, :]
    mem_need = memP[None, :] - memP[:, None]
    f = np.full((M, L + 1), math.inf)
    arg_i = np.zeros((M, L + 1), dtype=int)
    prev_j = np.full((M, L + 1), -1, dtype=int)
    for j in range(M):
        h = np.full(L + 1, math.inf)
        h[0] = 0.0
        hj = np.full(L + 1, -1, dtype=int)
        for jp in range(j):
            if L > 1:
                cand = np.maximum(f[jp, 1:L], cut[:, jp, j])
                better = cand < h[1:L]
                h[1:L] = np.where(better, cand, h[1:L])
                hj[1:L] = np.where(better, jp, hj[1:L])
        S = P[None, :, j] - P[:, None, j]
        valid = upper & ((bad[None, :, j] - bad[:, None, j]) == 0) & (mem_need <= capacity[j])
        V = np.where(valid, np.maximum(S, h[:, None]), math.inf)
        f[j] = V.min(axis=0)
        arg_i[j] = V.argmin(axis=0)
        prev_j[j] = hj
    j = int(np.argmin(f[:, L]))
    best = float(f[j, L])
    if not math.isfinite(best):
        raise LabError("no contiguous split fits: some layer has no device with a kernel and enough memory "
                       "in this device order", where="chain partition")
    stages, i = [], L
    while True:
        ip = int(arg_i[j, i])
        stages.append((j, ip, i))
        if ip == 0:
            break
        j, i = int(prev_j[j, ip]), ip
    return best, stages[::-1]


@dataclass(frozen=True)
class ChainPlan:
    bottleneck: float  # seconds per batch in steady pipeline flow
    stages: tuple[tuple[Device, tuple[Task, ...]], ...]
    order: tuple[Device, ...]  # the device order the stages follow
    searched_orders: int = 1

    @property
    def assignment(self) -> dict[Task, Device]:
        return {t: d for d, ts in self.stages for t in ts}


def _chain_arrays(g: TaskGraph) -> tuple[np.ndarray, np.ndarray]:
    """Layer times in topological order and the cut cost array over all devices."""
    L, M = len(g.tasks), len(g.devices)
    times = g.C[g.topo]
    cnt, val = np.zeros(L + 1), np.zeros(L + 1)
    crossing: list[list[float]] = [[] for _ in range(L)]
    for (u, v), x in g.transfer.items():
        a, b = g.pos[g._ti[u]], g.pos[g._ti[v]]  # cuts a+1 .. b carry this edge
        cnt[a + 1] += 1
        cnt[b + 1] -= 1
        val[a + 1] += x
        val[b + 1] -= x
        if g.link_time is not None and g._lat is None:
            for k in range(a + 1, b + 1):
                crossing[k].append(x)
    cnt, val = np.cumsum(cnt)[1:L], np.cumsum(val)[1:L]  # cut k sits after layer k-1: index k-1
    if g.link_time is None:
        cut = np.broadcast_to(val[:, None, None], (L - 1, M, M)).copy()
    elif g._lat is not None:
        lat = np.where(np.isfinite(g._lat), g._lat, 0.0)
        cut = cnt[:, None, None] * lat[None] + val[:, None, None] * g._ibw[None]
    else:
        cut = np.zeros((L - 1, M, M))
        for k in range(1, L):
            for a in range(M):
                for b in range(M):
                    cut[k - 1, a, b] = sum(g._comm(x, a, b) for x in crossing[k])
    return times, cut


def chain_partition(g: TaskGraph, devices: Sequence[Device] | None = None, best_order: bool = False) -> ChainPlan:
    """The optimal contiguous split of ``g``'s stable topological order over ``devices`` (in that
    order; default all devices in graph order), counting transfers at each cut (every edge that
    crosses a cut is forwarded through it) and device memory. ``best_order=True`` also tries every
    order of the devices (at most :data:`BEST_ORDER_MAX_DEVICES`)."""
    devs = list(devices) if devices is not None else list(g.devices)
    for d in devs:
        if d not in g._di:
            raise LabError(f"{d!r} is not a device; devices: {g.devices}", where="chain partition")
    if best_order and len(devs) > BEST_ORDER_MAX_DEVICES:
        raise LabError(f"trying every device order is limited to {BEST_ORDER_MAX_DEVICES} devices "
                       f"(got {len(devs)}); fix an order instead", where="chain partition")
    times, cut = _chain_arrays(g)
    mem = g.memory[g.topo]
    best: tuple[float, list, tuple] | None = None
    orders = itertools.permutations(devs) if best_order else [tuple(devs)]
    count = 0
    for order in orders:
        count += 1
        idx = [g._di[d] for d in order]
        try:
            bn, stages = partition_chain(times[:, idx], cut[:, idx][:, :, idx], mem, g.capacity[idx])
        except LabError:
            continue
        if best is None or bn < best[0]:
            best = (bn, stages, order)
    if best is None:
        raise LabError("no contiguous split fits: some layer has no device with a kernel and enough memory"
                       + (f" (with the pins {', '.join(f'{t} -> {d}' for t, d in g.pins.items())}, each device "
                          "must hold one unbroken run of layers)" if g.pins else ""), where="chain partition")
    bn, stages, order = best
    topo = [g.tasks[i] for i in g.topo]
    return ChainPlan(bn, tuple((order[j], tuple(topo[a:b])) for j, a, b in stages), tuple(order), count)


def chain_dp(g: TaskGraph, best_order: bool | None = None) -> PlacementSchedule:
    """The optimal contiguous pipeline partition (:func:`chain_partition`), scheduled for one batch.
    Tries every device order when there are at most :data:`BEST_ORDER_MAX_DEVICES` devices."""
    if best_order is None:
        best_order = len(g.devices) <= BEST_ORDER_MAX_DEVICES
    plan = chain_partition(g, best_order=best_order)
    note = (f"pipeline bottleneck {plan.bottleneck:.3g} s over {len(plan.stages)} stage(s); "
            f"{'best of ' + str(plan.searched_orders) + ' device orders' if best_order else 'device order fixed'}")
    return schedule_assignment(g, plan.assignment, "chain_dp", note=note,
                               extra={"bottleneck": plan.bottleneck, "stages": plan.stages})


class _Abort(Exception):
    pass


def _device_classes(g: TaskGraph, pair_comm: list[list[list[float]]]) -> list[int]:
    """For each device, the lowest-index device interchangeable with it (same compute column and
    the same transfer times to and from every other device, on every edge)."""
    m = len(g.devices)
    rep = list(range(m))
    for b in range(m):
        for a in range(b):
            if rep[a] != a or not np.array_equal(g.C[:, a], g.C[:, b]):
                continue
            perm = list(range(m))
            perm[a], perm[b] = b, a
            if all(M[perm[x]][perm[y]] == M[x][y] for M in pair_comm for x in range(m) for y in range(m)):
                rep[b] = a
                break
    return rep


def optimal(g: TaskGraph, max_tasks: int = OPTIMAL_MAX_TASKS, node_limit: int = 500_000) -> PlacementSchedule:
    """The minimum makespan, by depth-first branch and bound.

    The search builds the schedule task by task in order of start time (ties by topological
    position), each task appended to its device's queue as early as its inputs allow. Some
    optimal schedule is always found this way (shifting every task of an optimal schedule as early
    as possible in its own start order never makes it worse, and the result is a fixed point of
    that shift). Pruning: the best of HEFT and greedy as the first incumbent; for every
    unscheduled task, its earliest possible finish on any device plus its shortest remaining
    chain; the remaining work spread over all devices; and interchangeable devices (same times
    everywhere) that are still empty are tried only once. Raises :class:`LabError` above
    ``max_tasks`` tasks, or if ``node_limit`` search nodes do not finish the proof.
    """
    n, m = len(g.tasks), len(g.devices)
    if n > max_tasks:
        raise LabError(f"exact search is limited to {max_tasks} tasks and this graph has {n}; coarsen it "
                       "(coarsen(graph, 12)) or use heft / greedy_eft", where="optimal")
    incumbent = min((heft(g), greedy_eft(g)), key=lambda s: s.makespan)
    ub = [incumbent.makespan]
    best_slots: list[Any] = [None]
    C = g.C.tolist()
    capable = [[d for d in range(m) if math.isfinite(C[i][d])] for i in range(n)]
    minc = [min(C[i][d] for d in capable[i]) for i in range(n)]
    bl = [0.0] * n
    for i in reversed(g.topo):
        bl[i] = minc[i] + max((bl[s] for s, _ in g.succs[i]), default=0.0)
    tail = [max((bl[s] for s, _ in g.succs[i]), default=0.0) for i in range(n)]
    # preds[i] = [(p, seconds[from device][to device])]
    preds = [[(p, [[g._comm(val, a, b) for b in range(m)] for a in range(m)]) for p, val in g.preds[i]]
             for i in range(n)]
    rep = _device_classes(g, [M for ps in preds for _, M in ps])
    succ_idx = [[s for s, _ in g.succs[i]] for i in range(n)]
    pos = g.pos
    dev = [-1] * n
    start = [0.0] * n
    fin = [0.0] * n
    avail = [0.0] * m
    used = [0] * m  # tasks on each device
    left = [len(g.preds[i]) for i in range(n)]
    unscheduled = set(range(n))
    nodes = [0]
    rem_work = [sum(minc)]

    def earliest_finish(u: int, s: float) -> float:
        best = math.inf
        for d in capable[u]:
            e = avail[d] if avail[d] > s else s
            for p, cm in preds[u]:
                if dev[p] >= 0:
                    x = fin[p] + cm[dev[p]][d]
                    if x > e:
                        e = x
            e += C[u][d]
            if e < best:
                best = e
        return best

    def dfs(k: int, last_s: float, last_pos: int, cur_max: float) -> None:
        nodes[0] += 1
        if nodes[0] > node_limit:
            raise _Abort
        if k == n:
            if cur_max < ub[0]:
                ub[0] = cur_max
                best_slots[0] = (list(dev), list(start), list(fin))
            return
        cands = []
        first_free: dict[int, int] = {}
        for q in range(m):
            if not used[q] and rep[q] not in first_free:
                first_free[rep[q]] = q
        for t in unscheduled:
            if left[t]:
                continue
            for d in capable[t]:
                if not used[d] and first_free[rep[d]] != d:
                    continue  # an interchangeable empty device with a lower index is tried instead
                r = 0.0
                for p, cm in preds[t]:
                    x = fin[p] + cm[dev[p]][d]
                    if x > r:
                        r = x
                s = avail[d] if avail[d] > r else r
                if s < last_s or (s == last_s and pos[t] < last_pos):
                    continue
                cands.append((s + C[t][d], s, t, d))
        cands.sort()
        for f, s, t, d in cands:
            if f >= ub[0]:
                break
            lb = max(cur_max, f + tail[t])
            if lb >= ub[0]:
                continue
            work = rem_work[0] - minc[t]
            tot = 0.0
            for q in range(m):
                a = f if q == d else avail[q]
                tot += a if a > s else s
            if (tot + work) / m >= ub[0]:
                continue
            old_avail = avail[d]
            dev[t], start[t], fin[t], avail[d] = d, s, f, f
            used[d] += 1
            unscheduled.discard(t)
            rem_work[0] -= minc[t]
            for v in succ_idx[t]:
                left[v] -= 1
            ok = True
            for u in unscheduled:
                if earliest_finish(u, s) + tail[u] >= ub[0]:
                    ok = False
                    break
            if ok:
                dfs(k + 1, s, pos[t], max(cur_max, f))
            for v in succ_idx[t]:
                left[v] += 1
            rem_work[0] += minc[t]
            unscheduled.add(t)
            used[d] -= 1
            dev[t], avail[d] = -1, old_avail

    try:
        dfs(0, -math.inf, -1, 0.0)
    except _Abort:
        raise LabError(f"the exact search did not finish within {node_limit:,} search nodes; coarsen the "
                       "graph further", where="optimal") from None
    extra = {"search_nodes": nodes[0]}
    if best_slots[0] is None:
        s = incumbent
        return PlacementSchedule("optimal", dict(s.slots), s.makespan, f"proven optimal ({nodes[0]:,} search nodes; "
                        f"{s.strategy} was already optimal)", extra)
    d_, s_, f_ = best_slots[0]
    return _to_schedule(g, "optimal", d_, s_, f_, f"proven optimal ({nodes[0]:,} search nodes)", extra)


def coarsen(g: TaskGraph, max_tasks: int = OPTIMAL_MAX_TASKS) -> tuple[TaskGraph, dict[Task, list[Task]]]:
    """Merge tasks along edges until at most ``max_tasks`` remain.

    Each step merges the two ends of one edge whose merge keeps the graph acyclic and leaves some
    device able to run the whole group; edges inside a chain (one successor, one predecessor) go
    first, then the pair with the least work. A group's time on a device is the sum of its
    members' (inf if any member has no kernel there); edges between two groups become one message
    (seconds, or bytes, summed). A placement of the coarse graph keeps each group on one device,
    so its optimum is an upper bound on the optimum of the fine graph.
    Returns the coarse graph and ``{group: [member tasks in topological order]}``.
    """
    import networkx as nx

    if len(g.tasks) <= max_tasks:
        return g, {t: [t] for t in g.tasks}
    if max_tasks < 1:
        raise LabError("max_tasks must be at least 1", where="coarsen")
    group_of = {i: i for i in range(len(g.tasks))}
    members = {i: [i] for i in range(len(g.tasks))}
    vec = {i: g.C[i].copy() for i in range(len(g.tasks))}
    G = nx.DiGraph()
    G.add_nodes_from(members)
    for (u, v) in g.transfer:
        G.add_edge(g._ti[u], g._ti[v])
    while G.number_of_nodes() > max_tasks:
        best = None
        for a, b in G.edges:
            merged = vec[a] + vec[b]
            if not np.isfinite(merged).any():
                continue
            chain = G.out_degree(a) == 1 and G.in_degree(b) == 1
            if not chain and any(s != b and nx.has_path(G, s, b) for s in G.successors(a)):
                continue
            key = (not chain, float(np.min(merged)))
            if best is None or key < best[0]:
                best = (key, a, b)
        if best is None:
            raise LabError(f"cannot coarsen below {G.number_of_nodes()} tasks without creating a cycle or "
                           "a group no device can run", where="coarsen")
        _, a, b = best
        for s in list(G.successors(b)):
            if s != a:
                G.add_edge(a, s)
        for p in list(G.predecessors(b)):
            if p != a:
                G.add_edge(p, a)
        G.remove_node(b)
        members[a] += members.pop(b)
        vec[a] = vec[a] + vec.pop(b)
        for i in members[a]:
            group_of[i] = a
    order = sorted(members, key=lambda k: min(g.pos[i] for i in members[k]))
    names: dict[int, Any] = {}
    for k in order:
        mem = sorted(members[k], key=lambda i: g.pos[i])
        members[k] = mem
        names[k] = g.tasks[mem[0]] if len(mem) == 1 else f"{g.tasks[mem[0]]}..{g.tasks[mem[-1]]}"
    compute = {names[k]: {d: float(vec[k][j]) for j, d in enumerate(g.devices) if math.isfinite(vec[k][j])}
               for k in order}
    transfer: dict[tuple, float] = {}
    for (u, v), x in g.transfer.items():
        a, b = group_of[g._ti[u]], group_of[g._ti[v]]
        if a != b:
            transfer[(names[a], names[b])] = transfer.get((names[a], names[b]), 0.0) + x
    info = {}
    for k in order:
        ts = [g.tasks[i] for i in members[k]]
        infos = [g.info.get(t, {}) for t in ts]
        main = max(infos, key=lambda d: d.get("flops", 0.0)) if infos else {}
        info[names[k]] = {"class": main.get("class"), "flops": sum(d.get("flops", 0.0) for d in infos),
                          "kind": "+".join(str(d.get("kind", "?")) for d in infos) if len(ts) > 1 else main.get("kind"),
                          "members": ts}
    coarse = TaskGraph(compute, transfer, g.link_time, devices=g.devices, info=info, device_types=g.device_types,
                       memory={names[k]: float(sum(g.memory[i] for i in members[k])) for k in order},
                       capacity=dict(zip(g.devices, g.capacity)))
    if g.pins:  # a group holding a pinned task stays on that pin; its free times are its members' sums
        coarse.free_C = np.array([g.free_C[members[k]].sum(axis=0) for k in order])
        coarse.pins = {names[k]: g.pins[g.tasks[i]] for k in order for i in members[k] if g.tasks[i] in g.pins}
    return coarse, {names[k]: [g.tasks[i] for i in members[k]] for k in order}
