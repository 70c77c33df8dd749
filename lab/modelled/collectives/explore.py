"""What-ifs over collective schedules, all modelled: the best ring order, the synchronous versus asynchronous trigger (the CXL design), and the sweeps the All-reduce page draws."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from lab.errors import LabError
from lab.modelled.collectives.schedules import (
    BRUTE_FORCE_MAX,
    CollectiveSchedule,
    build_schedule,
)
from lab.modelled.collectives.timing import (
    MessageTime,
    link_label,
    messages_time,
    schedule_time,
    step_messages,
    uniform_time,
)
from lab.scenario.names import ALGORITHMS
from lab.scenario.topology import Topology


@dataclass(frozen=True)
class RingOrder:
    names: tuple[str, ...]  # in ring order
    slowest_hop_bandwidth: float  # bytes/s, with sharing among the ring's concurrent hops
    max_hop_latency: float
    method: str
    evaluated: int


def ring_hops(topology: Topology, names: Sequence[str], nbytes: int = 1 << 20) -> list[MessageTime]:
    """The N concurrent hops of one ring step (every device sends ``nbytes`` to the next)."""
    m = len(names)
    return messages_time(topology, [(names[i], names[(i + 1) % m], nbytes) for i in range(m)])


class _Hops(dict):
    """A pair's route as its hops ((u, v), bandwidth), looked up the first time a ring uses the pair."""

    def __init__(self, topology: Topology):
        super().__init__()
        self.topology = topology

    def __missing__(self, pair: tuple[str, str]) -> list[tuple[tuple[str, str], float]]:
        p = self.topology.path(*pair)
        hops = self[pair] = [((u, v), l.bandwidth) for u, v, l in zip(p.nodes, p.nodes[1:], p.links)]
        return hops


class _RingEval:
    """Fast ring keys for one set of devices: every pair's latency and bottleneck read at once from
    the route table, a pair's hops looked up when a ring first uses it, then only counted."""

    def __init__(self, topology: Topology, names: Sequence[str]):
        names = list(names)
        table = topology.path_matrix(1.0, names)
        self.hops = _Hops(topology)
        self.lat: dict[tuple[str, str], float] = {}
        self.bw: dict[tuple[str, str], float] = {}
        for a, lat_row, bw_row in zip(names, table["latency"], table["bottleneck"]):
            for b, lat, bw in zip(names, lat_row, bw_row):
                if a != b:
                    self.lat[(a, b)] = lat
                    self.bw[(a, b)] = bw

    def key(self, order: Sequence[str]) -> tuple[float, float, float]:
        """(-slowest hop bandwidth with sharing, largest hop latency, summed latency): smaller is better."""
        m = len(order)
        pairs = [(order[i], order[(i + 1) % m]) for i in range(m)]
        use: dict[tuple[str, str], int] = {}
        for pr in pairs:
            for h, _ in self.hops[pr]:
                use[h] = use.get(h, 0) + 1
        slow = min(bw / use[h] for pr in pairs for h, bw in self.hops[pr])
        lats = [self.lat[pr] for pr in pairs]
        return (-slow, round(max(lats), 12), round(sum(lats), 12))


def _ring_key(topology: Topology, names: Sequence[str]) -> tuple[float, float, float]:
    return _RingEval(topology, names).key(names)


def brute_force_ring_order(topology: Topology, names: Sequence[str]) -> RingOrder:
    """Exhaustive over the (N-1)! rings that start at ``names[0]``: the ring whose slowest hop
    (with link sharing) is widest, then the smallest largest hop latency, then summed latency."""
    names = list(names)
    ev = _RingEval(topology, names)
    best, best_key, count = None, None, 0
    for perm in itertools.permutations(names[1:]):
        cand = [names[0], *perm]
        key = ev.key(cand)
        count += 1
        if best_key is None or key < best_key:
            best, best_key = cand, key
    return RingOrder(tuple(best), -best_key[0], best_key[1], f"brute force over all {count} rings", count)


#: The ring-order heuristic's work, counted in devices visited (a greedy tour m * m / 2, each ring
#: evaluated m): 16 starts with 20 passes of 2-opt fit in it up to 16 devices; at the size caps it
#: ends the search early with the best ring found so far, instead of minutes of searching.
RING_SEARCH_WORK = 600_000


def heuristic_ring_order(topology: Topology, names: Sequence[str], *, starts: int = 16, passes: int = 20,
                         work: int | None = None) -> RingOrder:
    """Greedy widest-nearest-neighbour tours from up to ``starts`` start devices, each improved
    by 2-opt (reverse a segment while that improves the ring's key); the best is kept. The search
    stops once it has done ``work`` (default :data:`RING_SEARCH_WORK`)."""
    names = list(names)
    m = len(names)
    ev = _RingEval(topology, names)
    index = {x: i for i, x in enumerate(names)}
    budget = RING_SEARCH_WORK if work is None else work
    best, best_key, count, used, tried, cut = None, None, 0, 0, 0, False
    for start in names[:starts]:
        if best is not None and used + m * m // 2 > budget:
            cut = True
            break
        used += m * m // 2
        tried += 1
        tour, left = [start], [x for x in names if x != start]
        while left:
            cur = tour[-1]
            nxt = min(left, key=lambda x: (-ev.bw[(cur, x)], ev.lat[(cur, x)], index[x]))
            tour.append(nxt)
            left.remove(nxt)
        key = ev.key(tour)
        count += 1
        used += m
        for _ in range(passes):
            improved = False
            for i in range(1, m - 1):
                for j in range(i + 1, m):
                    if used + m > budget:
                        cut = True
                        break
                    cand = tour[:i] + tour[i:j + 1][::-1] + tour[j + 1:]
                    k2 = ev.key(cand)
                    count += 1
                    used += m
                    if k2 < key:
                        tour, key, improved = cand, k2, True
                if cut:
                    break
            if cut or not improved:
                break
        if best_key is None or key < best_key:
            best, best_key = tour, key
        if cut:
            break
    i0 = best.index(names[0])
    best = best[i0:] + best[:i0]
    return RingOrder(tuple(best), -best_key[0], best_key[1],
                     f"greedy widest-neighbour from {tried} starts + 2-opt ({count} rings evaluated"
                     + ("; the search stopped at its work limit" if cut else "") + ")", count)


def best_ring_order(topology: Topology, names: Sequence[str]) -> RingOrder:
    """The lab's ring order: brute force up to :data:`BRUTE_FORCE_MAX` devices, a heuristic above."""
    if len(names) <= 2:
        key = _ring_key(topology, names)
        return RingOrder(tuple(names), -key[0], key[1], "only one ring", 1)
    if len(names) <= BRUTE_FORCE_MAX:
        return brute_force_ring_order(topology, names)
    return heuristic_ring_order(topology, names)


def given_ring_order(topology: Topology, names: Sequence[str]) -> RingOrder:
    key = _ring_key(topology, names)
    return RingOrder(tuple(names), -key[0], key[1], "as given", 1)


@dataclass(frozen=True)
class Segment:
    node: str
    kind: str  # "compute" | "idle" | "communicate"
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    mode: str
    segments: tuple[Segment, ...]
    end: Mapping[str, float]  # when each node holds the full result
    idle: Mapping[str, float]  # seconds neither computing nor communicating before its end
    makespan: float
    allreduce_start: Mapping[str, float]


def trigger_timeline(s: CollectiveSchedule, topology: Topology, compute: Mapping[str, float], mode: str,
                     trigger_latency: float = 0.0) -> Timeline:
    """One iteration: compute, then the all-reduce ``s``.

    ``mode="sync"``: the host sees every device finish, then starts the all-reduce on all at
    once (after ``trigger_latency``). ``mode="async"``: each device starts as soon as it has
    finished computing. Either way a message leaves when its sender has finished its previous
    step, and a node finishes a step when its messages of that step have arrived and left; it
    waits only for the nodes it exchanges with (its ring neighbours). Message durations are the
    lock-step ones of :func:`schedule_time` (link sharing as if the step ran at once).
    """
    if mode not in ("sync", "async"):
        raise LabError(f"trigger mode {mode!r} is not allowed; choose 'sync' or 'async'", where="trigger")
    for nm in s.nodes[:s.n]:
        if nm not in compute:
            raise LabError(f"no compute time for {nm!r}", where="trigger")
        if not (compute[nm] >= 0 and math.isfinite(compute[nm])):
            raise LabError(f"compute time of {nm!r} must be a finite number >= 0 (got {compute[nm]})", where="trigger")
    comp = {nm: float(compute.get(nm, 0.0)) for nm in s.nodes}
    last = max(comp[nm] for nm in s.nodes[:s.n])
    start = {nm: (last + trigger_latency if mode == "sync" else comp[nm]) for nm in s.nodes}
    if mode == "async":
        for nm in s.nodes[s.n:]:  # an outside host has nothing to compute
            start[nm] = 0.0
    done = dict(start)
    busy: dict[str, list[tuple[float, float]]] = {nm: [] for nm in s.nodes}
    shares: dict = {}
    for st in s.steps:
        msgs = messages_time(topology, step_messages(s, st), shares)
        new = dict(done)
        for m in msgs:
            t0 = done[m.src]
            t1 = t0 + m.seconds
            busy[m.src].append((t0, t1))
            busy[m.dst].append((t1 - m.seconds, t1))
            new[m.src] = max(new[m.src], t1)
            new[m.dst] = max(new[m.dst], t1)
        done = new
    segs, idle = [], {}
    for nm in s.nodes:
        c = comp[nm] if nm in s.nodes[:s.n] else 0.0
        if c > 0:
            segs.append(Segment(nm, "compute", 0.0, c))
        spans = _union(busy[nm])
        t, gap = c, 0.0
        for a, b in spans:
            if a > t + 1e-15:
                segs.append(Segment(nm, "idle", t, a))
                gap += a - t
            segs.append(Segment(nm, "communicate", a, b))
            t = max(t, b)
        idle[nm] = gap
    return Timeline(mode, tuple(segs), done, idle, max(done.values()), start)


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


@dataclass(frozen=True)
class Setup:
    """Who takes part and how: everything a schedule needs besides the algorithm and size."""

    participants: tuple[str, ...]
    order: tuple[int, ...] | None = None
    groups: tuple[tuple[str, ...], ...] | None = None
    host: str | None = None

    def schedule(self, algorithm: str, nbytes: int, with_state: bool = False) -> CollectiveSchedule:
        return build_schedule(algorithm, list(self.participants), nbytes, order=self.order,
                              groups=self.groups, host=self.host, with_state=with_state)

    def prefix(self, k: int) -> "Setup":
        """The first ``k`` participants (in ring order), with the same groups and host."""
        order = self.order or tuple(range(len(self.participants)))
        keep = [self.participants[i] for i in order[:k]]
        groups = None
        if self.groups is not None:
            groups = tuple(g for g in (tuple(x for x in grp if x in keep) for grp in self.groups) if g)
        return Setup(tuple(keep), None, groups, self.host)


def compare_algorithms(topology: Topology, setup: Setup, nbytes: int,
                       algorithms: Sequence[str] = ALGORITHMS) -> list[dict]:
    """One row per algorithm: modelled seconds, algbw, busbw, steps and the bottleneck hop."""
    rows = []
    for alg in algorithms:
        est = schedule_time(setup.schedule(alg, nbytes), topology)
        rows.append({"algorithm": alg, "seconds": est.seconds, "algbw": est.algbw, "busbw": est.busbw,
                     "steps": len(est.steps), "bottleneck": link_label(topology, est.bottleneck),
                     "bottleneck_share": est.bottleneck_seconds / est.seconds if est.seconds else 0.0})
    return rows


def sweep_sizes(topology: Topology, setups: Mapping[str, tuple[str, Setup]],
                sizes: Sequence[int]) -> dict[str, tuple[list[int], list[float]]]:
    """Modelled time against buffer size: ``setups`` maps a label to (algorithm, setup)."""
    shares: dict = {}  # the schedules differ in bytes only: routes and sharing are worked out once
    return {label: (list(sizes), [schedule_time(setup.schedule(alg, s), topology, shares).seconds for s in sizes])
            for label, (alg, setup) in setups.items()}


#: The sweep against N takes at most this many values of N, spread evenly from 2 to all the
#: participants: each is a whole schedule of up to about 2 N^2 messages.
SWEEP_N_POINTS = 24


def sweep_ns(n: int) -> list[int]:
    """The values of N the sweep against N takes for ``n`` participants: every one from 2 to ``n``
    when they are at most :data:`SWEEP_N_POINTS`, else that many spread evenly, 2 and ``n`` among them."""
    if n - 1 <= SWEEP_N_POINTS:
        return list(range(2, n + 1))
    return sorted({2 + round(k * (n - 2) / (SWEEP_N_POINTS - 1)) for k in range(SWEEP_N_POINTS)})


def sweep_devices(topology: Topology, setups: Mapping[str, tuple[str, Setup]],
                  nbytes: int) -> dict[str, tuple[list[int], list[float]]]:
    """Modelled time against N, taking the first N participants of each setup (N from
    :func:`sweep_ns`)."""
    out = {}
    shares: dict = {}
    for label, (alg, setup) in setups.items():
        ns = sweep_ns(len(setup.participants))
        out[label] = (ns, [schedule_time(setup.prefix(k).schedule(alg, nbytes), topology, shares).seconds
                           for k in ns])
    return out


def sweep_uniform(n_values: Sequence[int], nbytes: int, alpha: float, beta: float,
                  algorithms: Sequence[str] = ALGORITHMS) -> dict[str, tuple[list[int], list[float]]]:
    """The closed-form uniform model against N (any N, e.g. up to 1024)."""
    return {alg: (list(n_values), [uniform_time(alg, n, nbytes, alpha, beta).seconds for n in n_values])
            for alg in algorithms}


def compute_times(topology: Topology, participants: Sequence[str], flops: float,
                  op_class: str = "matmul") -> dict[str, float]:
    """Seconds each device needs for ``flops`` of work of ``op_class`` (its fastest class if it
    has no kernel for that one): the per-device compute time for the trigger timeline."""
    out = {}
    for nm in participants:
        thr = topology.device(nm).throughput
        rate = thr.get(op_class) or max(thr.values())
        out[nm] = flops / rate
    return out
