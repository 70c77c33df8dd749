"""All-reduce, step by step and timed on a topology: pure functions, no processes.

Four algorithms over N participating devices, each a :class:`CollectiveSchedule` of :class:`Step` s:

* ``ring``: reduce-scatter (N-1 steps) then all-gather (N-1 steps) over N chunks, in a chosen
  ring order (the CXL design's worked example: A -> B -> C -> D -> A, chunks a0..d3).
* ``host``: host aggregation: every device uploads its buffer to the host, the host sums and
  sends the result back (2 steps; the host's own port carries N buffers each way).
* ``tree``: reduce up a binary tree (heap layout over the order, root first), broadcast down.
* ``hierarchical``: reduce inside each group (a binary tree over the group's fast links), ring
  all-reduce among the group leaders (over the slower links), broadcast back inside each group
  (seeds A and C: groups are the topology's pools / resource groups).

A step's ``state`` holds, for every node and every chunk, the set of contributions it holds as a
bitmask of participant indices (bit i = participant i's share). A reduce into a chunk that
already holds one of the incoming contributions raises: schedules are checked to count every
contribution exactly once.

Times follow the alpha-beta model on the topology's actual links (:func:`schedule_time`):
messages of one step run concurrently, a message costs its route's latency plus bytes over the
narrowest effective bandwidth on its route, where k concurrent messages crossing one link in
the same direction get bandwidth/k each; a step costs its slowest message; steps add up.
:func:`uniform_time` is the closed form on identical links (t = steps*alpha + bytes*beta) for any N.

Units: bytes, seconds, bytes/s.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from lab.scenario.names import ALGORITHM_LABELS, ALGORITHMS
from lab.errors import LabError
from lab.scenario.topology import Topology

MAX_SCHEDULE_DEVICES = 256  # step-by-step schedules; uniform_time takes any N
MAX_STATE_DEVICES = 64  # contribution sets are kept up to this many devices
BRUTE_FORCE_MAX = 8  # ring-order search: exhaustive up to this many devices


# ---------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Transfer:
    """One message piece: ``src`` sends chunk ``chunk`` (``nbytes``) to ``dst``, which adds it to
    its own copy (``op="reduce"``) or overwrites its copy (``op="copy"``). Node indices."""

    src: int
    dst: int
    chunk: int
    nbytes: int
    op: str  # "reduce" | "copy"


@dataclass(frozen=True)
class Step:
    """Transfers that run at the same time, and every node's chunks after them (or None)."""

    phase: str
    transfers: tuple[Transfer, ...]
    state: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True)
class CollectiveSchedule:
    algorithm: str
    nodes: tuple[str, ...]  # participants first (index = contribution bit), then an outside host
    n: int  # number of participants (contributions)
    chunk_bytes: tuple[int, ...]
    initial: tuple[tuple[int, ...], ...] | None
    steps: tuple[Step, ...]
    order: tuple[int, ...]  # participant indices in ring / tree order
    groups: tuple[tuple[int, ...], ...] = ()  # hierarchical: participant indices per group
    itemsize: int = 4

    @property
    def nbytes(self) -> int:
        return sum(self.chunk_bytes)

    @property
    def full(self) -> int:
        return (1 << self.n) - 1

    def final(self) -> tuple[tuple[int, ...], ...]:
        if self.initial is None:
            raise LabError("this schedule was built without contribution states (with_state=False)")
        return self.steps[-1].state if self.steps else self.initial

    def state_at(self, step: int) -> tuple[tuple[int, ...], ...]:
        """Contributions held after ``step`` steps (0: before the first step)."""
        if self.initial is None:
            raise LabError("this schedule was built without contribution states (with_state=False)")
        return self.initial if step == 0 else self.steps[step - 1].state

    def sent_bytes(self) -> list[int]:
        out = [0] * len(self.nodes)
        for st in self.steps:
            for t in st.transfers:
                out[t.src] += t.nbytes
        return out

    def received_bytes(self) -> list[int]:
        out = [0] * len(self.nodes)
        for st in self.steps:
            for t in st.transfers:
                out[t.dst] += t.nbytes
        return out

    def label(self, mask: int, chunk: int, max_terms: int = 4) -> str:
        """A chunk's content as the seed writes it: 'a0+b0+c0' (or '7 of 16 (…)' when long)."""
        return contribution_label(mask, chunk, self.n, max_terms)


def contribution_letter(i: int) -> str:
    return chr(ord("a") + i) if i < 26 else f"x{i}"


def contribution_label(mask: int, chunk: int, n: int, max_terms: int = 4) -> str:
    members = [i for i in range(n) if mask >> i & 1]
    if not members:
        return "–"
    if len(members) == n and n > max_terms:
        return f"Σ{chunk} (all {n})"
    if len(members) > max_terms:
        return f"{len(members)} of {n}"
    return "+".join(f"{contribution_letter(i)}{chunk}" for i in members)


def default_names(n: int) -> list[str]:
    """A, B, C, ... (the CXL design's device names), then D26, D27, ..."""
    return [chr(ord("A") + i) if i < 26 else f"D{i}" for i in range(n)]


def chunk_sizes(count: int, parts: int) -> list[int]:
    """Element counts of ``parts`` near-equal chunks (the first ``count % parts`` get one more)."""
    base, extra = divmod(count, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


# ---------------------------------------------------------------------------------------------
# schedule building
# ---------------------------------------------------------------------------------------------
class _Builder:
    def __init__(self, algorithm: str, nodes: Sequence[str], n: int, chunk_bytes: Sequence[int],
                 order: Sequence[int], groups=(), itemsize: int = 4, with_state: bool = True):
        self.algorithm, self.nodes, self.n = algorithm, tuple(nodes), n
        self.chunk_bytes, self.order, self.groups, self.itemsize = tuple(chunk_bytes), tuple(order), groups, itemsize
        self.with_state = with_state and n <= MAX_STATE_DEVICES
        c = len(self.chunk_bytes)
        self.initial = tuple(tuple([1 << i] * c) if i < n else tuple([0] * c) for i in range(len(nodes))) \
            if self.with_state else None
        self.state = [list(r) for r in self.initial] if self.with_state else None
        self.steps: list[Step] = []

    def step(self, phase: str, transfers: list[Transfer]) -> None:
        if not transfers:
            return
        state = None
        if self.with_state:
            old = self.state
            new = [list(r) for r in old]
            for t in transfers:
                val = old[t.src][t.chunk]
                if t.op == "reduce":
                    if new[t.dst][t.chunk] & val:
                        raise RuntimeError(f"{self.algorithm}: step {len(self.steps) + 1} would count a "
                                           f"contribution twice in chunk {t.chunk} of {self.nodes[t.dst]}")
                    new[t.dst][t.chunk] |= val
                else:
                    new[t.dst][t.chunk] = val
            self.state = new
            state = tuple(tuple(r) for r in new)
        self.steps.append(Step(phase, tuple(transfers), state))

    def build(self) -> CollectiveSchedule:
        return CollectiveSchedule(self.algorithm, self.nodes, self.n, self.chunk_bytes, self.initial, tuple(self.steps),
                        self.order, tuple(tuple(g) for g in self.groups), self.itemsize)


def _ring_steps(b: _Builder, members: Sequence[int], chunks: Sequence[int], label: str = "") -> None:
    """Ring all-reduce over ``members`` (node indices, in ring order) on ``chunks`` (one each)."""
    m = len(members)
    if m < 2:
        return
    for s in range(m - 1):
        b.step(f"{label}reduce-scatter", [
            Transfer(members[p], members[(p + 1) % m], chunks[(p - s) % m], b.chunk_bytes[chunks[(p - s) % m]],
                     "reduce")
            for p in range(m)])
    for s in range(m - 1):
        b.step(f"{label}all-gather", [
            Transfer(members[p], members[(p + 1) % m], chunks[(p + 1 - s) % m],
                     b.chunk_bytes[chunks[(p + 1 - s) % m]], "copy")
            for p in range(m)])


def _tree_levels(members: Sequence[int]) -> list[list[tuple[int, int]]]:
    """(child, parent) pairs per depth (depth 1 first) of a binary heap laid over ``members``."""
    levels: list[list[tuple[int, int]]] = []
    for h in range(1, len(members)):
        depth = (h + 1).bit_length() - 1
        while len(levels) < depth:
            levels.append([])
        levels[depth - 1].append((members[h], members[(h - 1) // 2]))
    return levels


def _whole(b: _Builder, src: int, dst: int, op: str) -> list[Transfer]:
    return [Transfer(src, dst, c, nb, op) for c, nb in enumerate(b.chunk_bytes)]


def _tree_reduce_steps(b: _Builder, groups: Sequence[Sequence[int]], phase: str) -> None:
    levels = [_tree_levels(g) for g in groups]
    depth = max((len(lv) for lv in levels), default=0)
    for k in range(depth):  # deepest level of every group first, groups side by side
        tr = []
        for lv in levels:
            d = len(lv) - 1 - k
            if d >= 0:
                for child, parent in lv[d]:
                    tr += _whole(b, child, parent, "reduce")
        b.step(phase, tr)


def _tree_broadcast_steps(b: _Builder, groups: Sequence[Sequence[int]], phase: str) -> None:
    levels = [_tree_levels(g) for g in groups]
    depth = max((len(lv) for lv in levels), default=0)
    for k in range(depth):
        tr = []
        for lv in levels:
            if k < len(lv):
                for child, parent in lv[k]:
                    tr += _whole(b, parent, child, "copy")
        b.step(phase, tr)


def _check_order(order: Sequence[int] | None, n: int) -> tuple[int, ...]:
    if order is None:
        return tuple(range(n))
    order = tuple(int(i) for i in order)
    if sorted(order) != list(range(n)):
        raise LabError(f"the ring order must list every participant index 0..{n - 1} once (got {list(order)})",
                       where="ring order")
    return order


def build_schedule(algorithm: str, participants: int | Sequence[str], nbytes: int, *, itemsize: int = 4,
                   order: Sequence[int] | None = None, groups: Sequence[Sequence[str]] | None = None,
                   host: str | None = None, with_state: bool = True) -> CollectiveSchedule:
    """The step-by-step schedule of ``algorithm`` over ``participants`` (a count or device names).

    ``nbytes``: the buffer every participant holds (a multiple of ``itemsize``; chunks are
    split on element boundaries). ``order``: participant indices in ring order (tree: heap
    order, root first; hierarchical: decides each group's leader, its first member in this
    order). ``groups``: hierarchical only, lists of participant names (default: groups of
    about sqrt(N) consecutive devices). ``host``: host aggregation only, the aggregating node;
    a participant's name, or None for an outside host named "host".
    """
    if algorithm not in ALGORITHMS:
        raise LabError(f"unknown algorithm {algorithm!r}; allowed: {list(ALGORITHMS)}", where="all-reduce")
    names = default_names(participants) if isinstance(participants, int) else [str(x) for x in participants]
    n = len(names)
    if not 2 <= n <= MAX_SCHEDULE_DEVICES:
        raise LabError(f"an all-reduce needs 2 to {MAX_SCHEDULE_DEVICES} participants (got {n})", where="all-reduce")
    if len(set(names)) != n:
        raise LabError(f"participant names must be distinct (got {names})", where="all-reduce")
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise LabError(f"the buffer size must be a whole number of bytes >= 0 (got {nbytes!r})", where="all-reduce")
    if itemsize < 1 or nbytes % itemsize:
        raise LabError(f"the buffer size {nbytes} B is not a whole number of {itemsize}-byte elements",
                       where="all-reduce")
    order = _check_order(order, n)
    count = int(nbytes) // itemsize

    if algorithm == "ring":
        cb = [c * itemsize for c in chunk_sizes(count, n)]
        b = _Builder("ring", names, n, cb, order, itemsize=itemsize, with_state=with_state)
        _ring_steps(b, order, list(range(n)))
        return b.build()

    if algorithm == "host":
        if host is None or host not in names:
            hname = host or "host"
            nodes = names + [hname]
            h = n
        else:
            nodes, h = names, names.index(host)
        b = _Builder("host", nodes, n, [count * itemsize], order, itemsize=itemsize, with_state=with_state)
        b.step("upload to host", [t for i in order if i != h for t in _whole(b, i, h, "reduce")])
        b.step("download from host", [t for i in order if i != h for t in _whole(b, h, i, "copy")])
        return b.build()

    if algorithm == "tree":
        b = _Builder("tree", names, n, [count * itemsize], order, itemsize=itemsize, with_state=with_state)
        _tree_reduce_steps(b, [order], "reduce up the tree")
        _tree_broadcast_steps(b, [order], "broadcast down the tree")
        return b.build()

    # hierarchical
    idx = {nm: i for i, nm in enumerate(names)}
    if groups is None:
        size = max(1, math.isqrt(n - 1) + 1) if n > 3 else n
        gidx = [list(order[i:i + size]) for i in range(0, n, size)]
    else:
        seen: set[int] = set()
        gidx = []
        for g in groups:
            members = []
            for nm in g:
                if nm not in idx:
                    raise LabError(f"group member {nm!r} is not a participant ({names})", where="hierarchical groups")
                if idx[nm] in seen:
                    raise LabError(f"{nm!r} is in two groups", where="hierarchical groups")
                seen.add(idx[nm])
                members.append(idx[nm])
            if members:
                gidx.append(members)
        missing = [names[i] for i in range(n) if i not in seen]
        if missing:
            raise LabError(f"participants {missing} are in no group", where="hierarchical groups")
        rank = {p: k for k, p in enumerate(order)}
        gidx = sorted(([*sorted(g, key=rank.get)] for g in gidx), key=lambda g: rank[g[0]])
    ng = len(gidx)
    cb = [c * itemsize for c in chunk_sizes(count, ng)]
    b = _Builder("hierarchical", names, n, cb, order, groups=gidx, itemsize=itemsize, with_state=with_state)
    _tree_reduce_steps(b, gidx, "reduce inside groups")
    _ring_steps(b, [g[0] for g in gidx], list(range(ng)), label="leaders' ")
    _tree_broadcast_steps(b, gidx, "broadcast inside groups")
    return b.build()


def check_schedule(s: CollectiveSchedule) -> None:
    """Raise if any node does not end holding every contribution of every chunk."""
    final = s.final()
    for i, row in enumerate(final):
        for c, mask in enumerate(row):
            if mask != s.full:
                raise AssertionError(f"{s.algorithm}: {s.nodes[i]} ends with chunk {c} = "
                                     f"{s.label(mask, c)} instead of every contribution")


def uniform_star(n: int, bandwidth: float, latency: float, *, host: bool = True,
                 group_size: int | None = None) -> Topology:
    """N identical devices A, B, C, ... (and a "host") on one non-blocking switch, each link
    ``bandwidth`` bytes/s per direction and ``latency`` s; pools of ``group_size`` devices
    (default about sqrt(N)) for the hierarchical algorithm."""
    from lab.scenario.topology import Device, Link, Switch

    if not 2 <= n <= MAX_SCHEDULE_DEVICES:
        raise LabError(f"N must be from 2 to {MAX_SCHEDULE_DEVICES} (got {n})", where="identical devices")
    sizes = [group_size] * (n // group_size) + ([n % group_size] if n % group_size else []) if group_size \
        else _default_group_sizes(n)
    pools = [f"group{g}" for g, size in enumerate(sizes) for _ in range(size)]
    devs = [Device(nm, "gpu", pool=pools[i], throughput={"matmul": 1e12}) for i, nm in enumerate(default_names(n))]
    if host:
        devs.append(Device("host", "cpu", pool="host", throughput={"matmul": 1e12}))
    links = [Link(d.name, "switch", "switch", bandwidth, latency) for d in devs]
    return Topology(f"{n} identical devices", tuple(devs), tuple(links), (Switch("switch"),),
                    "identical devices on one switch").validate()


def default_participants(topology: Topology) -> list[str]:
    """The devices that hold gradients by default: every device but host CPUs (the CXL design: the host
    hands out work and the accelerators all-reduce), or every device when that leaves fewer than 2."""
    names = [d.name for d in topology.devices if d.type != "cpu"]
    return names if len(names) >= 2 else topology.device_names


def default_host(topology: Topology, participants: Sequence[str]) -> str:
    """The aggregating node for host aggregation: the first host CPU not taking part, else the
    first participant."""
    for d in topology.devices:
        if d.type == "cpu" and d.name not in participants:
            return d.name
    return participants[0]


def topology_groups(topology: Topology, participants: Sequence[str]) -> list[list[str]]:
    """The topology's pools (resource groups), restricted to the participants."""
    return [g for g in ([d for d in members if d in participants] for members in topology.pools.values()) if g]


# ---------------------------------------------------------------------------------------------
# nccl-tests bandwidths
# ---------------------------------------------------------------------------------------------
def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth as nccl-tests defines it: S / t (bytes/s)."""
    return nbytes / seconds if seconds > 0 else math.inf


def busbw(nbytes: float, seconds: float, n: int) -> float:
    """All-reduce bus bandwidth as nccl-tests defines it: algbw x 2(n-1)/n (bytes/s)."""
    return algbw(nbytes, seconds) * 2 * (n - 1) / n


BANDWIDTH_FORMULA = (r"\mathrm{algbw} = \frac{S}{t},\qquad "
                     r"\mathrm{busbw} = \mathrm{algbw}\times\frac{2(N-1)}{N}")


# ---------------------------------------------------------------------------------------------
# time on a topology
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MessageTime:
    src: str
    dst: str
    nbytes: int
    seconds: float
    bandwidth: float  # effective bytes/s on its narrowest (shared) hop
    bottleneck: str  # that hop, "u→v"
    sharing: int  # messages sharing that hop in that direction


@dataclass(frozen=True)
class StepTime:
    index: int
    phase: str
    seconds: float
    slowest: MessageTime | None
    messages: tuple[MessageTime, ...] = ()


@dataclass(frozen=True)
class TimeEstimate:
    algorithm: str
    n: int
    nbytes: int
    seconds: float
    steps: tuple[StepTime, ...]
    bottleneck: str | None  # the hop that bounds the slowest message for the most time
    bottleneck_seconds: float  # time of the steps it bounds
    link_seconds: Mapping[str, float] = field(default_factory=dict)

    @property
    def algbw(self) -> float:
        return algbw(self.nbytes, self.seconds)

    @property
    def busbw(self) -> float:
        return busbw(self.nbytes, self.seconds, self.n)


def _hop_name(u: str, v: str) -> str:
    return f"{u}→{v}"


def messages_time(topology: Topology, messages: Sequence[tuple[str, str, int]]) -> list[MessageTime]:
    """Concurrent messages (src, dst, bytes) on ``topology``: each gets latency + bytes over the
    narrowest bandwidth on its route, a link crossed by k of them in one direction giving 1/k."""
    routes, use = [], {}
    for src, dst, nb in messages:
        if src == dst or nb <= 0:
            routes.append(None)
            continue
        p = topology.path(src, dst)
        if not p.links:
            raise LabError(f"no route from {src!r} to {dst!r}", where=f"topology {topology.name!r}")
        hops = list(zip(p.nodes, p.nodes[1:], p.links))
        for u, v, _ in hops:
            use[(u, v)] = use.get((u, v), 0) + 1
        routes.append((p, hops))
    out = []
    for (src, dst, nb), r in zip(messages, routes):
        if r is None:
            out.append(MessageTime(src, dst, nb, 0.0, math.inf, "", 0))
            continue
        p, hops = r
        u, v, link = min(hops, key=lambda h: h[2].bandwidth / use[(h[0], h[1])])
        k = use[(u, v)]
        bw = link.bandwidth / k
        out.append(MessageTime(src, dst, nb, p.latency + nb / bw, bw, _hop_name(u, v), k))
    return out


def step_messages(s: CollectiveSchedule, step: Step) -> list[tuple[str, str, int]]:
    """The step's transfers merged per (src, dst) pair into one message each."""
    merged: dict[tuple[int, int], int] = {}
    for t in step.transfers:
        merged[(t.src, t.dst)] = merged.get((t.src, t.dst), 0) + t.nbytes
    return [(s.nodes[a], s.nodes[b], nb) for (a, b), nb in merged.items()]


def schedule_time(s: CollectiveSchedule, topology: Topology) -> TimeEstimate:
    """The alpha-beta time of ``s`` on ``topology`` (node names must be nodes of the topology)."""
    names = set(topology.device_names) | {sw.name for sw in topology.switches}
    unknown = [nm for nm in s.nodes if nm not in names]
    if unknown:
        raise LabError(f"{unknown} are not devices of topology {topology.name!r}", where="all-reduce time")
    steps, link_time = [], {}
    total = 0.0
    for i, st in enumerate(s.steps):
        msgs = messages_time(topology, step_messages(s, st))
        slow = max(msgs, key=lambda m: m.seconds, default=None)
        sec = slow.seconds if slow else 0.0
        total += sec
        if slow is not None and slow.bottleneck:
            link_time[slow.bottleneck] = link_time.get(slow.bottleneck, 0.0) + sec
        steps.append(StepTime(i, st.phase, sec, slow, tuple(msgs)))
    bott = max(link_time, key=link_time.get) if link_time else None
    return TimeEstimate(s.algorithm, s.n, s.nbytes, total, tuple(steps), bott,
                        link_time.get(bott, 0.0) if bott else 0.0, link_time)


def link_label(topology: Topology, hop: str | None) -> str:
    """'gpu→cxl-switch (CXL, 64 GB/s)' for a hop name from a TimeEstimate."""
    if not hop:
        return "–"
    u, v = hop.split("→")
    for l in topology.links:
        if {l.a, l.b} == {u, v}:
            return f"{hop} ({l.kind.upper() if l.kind != 'switch' else 'switch port'}, {l.bandwidth / 1e9:g} GB/s)"
    return hop


# ---------------------------------------------------------------------------------------------
# ring order
# ---------------------------------------------------------------------------------------------
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


class _RingEval:
    """Fast ring keys for one set of devices: routes looked up once, then only counted."""

    def __init__(self, topology: Topology, names: Sequence[str]):
        self.hops: dict[tuple[str, str], list[tuple[tuple[str, str], float]]] = {}
        self.lat: dict[tuple[str, str], float] = {}
        self.bw: dict[tuple[str, str], float] = {}
        for a in names:
            for b in names:
                if a != b:
                    p = topology.path(a, b)
                    self.hops[(a, b)] = [((u, v), l.bandwidth) for u, v, l in zip(p.nodes, p.nodes[1:], p.links)]
                    self.lat[(a, b)] = p.latency
                    self.bw[(a, b)] = p.bottleneck

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


def heuristic_ring_order(topology: Topology, names: Sequence[str], *, starts: int = 16, passes: int = 20) -> RingOrder:
    """Greedy widest-nearest-neighbour tours from up to ``starts`` start devices, each improved
    by 2-opt (reverse a segment while that improves the ring's key); the best is kept."""
    names = list(names)
    m = len(names)
    ev = _RingEval(topology, names)
    best, best_key, count = None, None, 0
    for start in names[:starts]:
        tour, left = [start], [x for x in names if x != start]
        while left:
            cur = tour[-1]
            nxt = min(left, key=lambda x: (-ev.bw[(cur, x)], ev.lat[(cur, x)], names.index(x)))
            tour.append(nxt)
            left.remove(nxt)
        key = ev.key(tour)
        count += 1
        for _ in range(passes):
            improved = False
            for i in range(1, m - 1):
                for j in range(i + 1, m):
                    cand = tour[:i] + tour[i:j + 1][::-1] + tour[j + 1:]
                    k2 = ev.key(cand)
                    count += 1
                    if k2 < key:
                        tour, key, improved = cand, k2, True
            if not improved:
                break
        if best_key is None or key < best_key:
            best, best_key = tour, key
    i0 = best.index(names[0])
    best = best[i0:] + best[:i0]
    return RingOrder(tuple(best), -best_key[0], best_key[1],
                     f"greedy widest-neighbour from {min(starts, m)} starts + 2-opt ({count} rings evaluated)", count)


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


# ---------------------------------------------------------------------------------------------
# uniform alpha-beta model (any N)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UniformTime:
    algorithm: str
    n: int
    nbytes: int
    steps: int
    bytes_on_wire: int  # summed over steps: the most bytes through one port in that step
    seconds: float


def _tree_port_bytes(group_sizes: Sequence[int], nbytes: int, top_down: bool = False) -> list[int]:
    """Per tree step, the most bytes one port carries: levels of all groups side by side, the
    deepest first when reducing, the top first when broadcasting (as the schedules run them)."""
    per_level: dict[int, int] = {}
    for g in group_sizes:
        levels = _tree_levels(list(range(g)))
        d = len(levels)
        for k in range(d):
            lv = levels[k] if top_down else levels[d - 1 - k]
            fan = max(sum(1 for _, p in lv if p == q) for q in {p for _, p in lv})
            per_level[k] = max(per_level.get(k, 0), fan * nbytes)
    return [per_level[k] for k in sorted(per_level)]


def uniform_time(algorithm: str, n: int, nbytes: int, alpha: float, beta: float, *, itemsize: int = 4,
                 group_sizes: Sequence[int] | None = None, inter_alpha: float | None = None,
                 inter_beta: float | None = None, host_participates: bool = False) -> UniformTime:
    """t = steps x alpha + bytes_on_wire x beta on identical links, each device on its own
    port of a non-blocking switch (a port receiving k messages at once carries k x bytes).

    ring: 2(N-1) steps, 2(N-1) x the largest chunk (2(N-1)/N x S when N divides S);
    host: 2 steps, 2N x S through the host's port (2(N-1) x S if the host participates);
    tree: 2 x depth steps, each 2 x S where a parent has two children at that level;
    hierarchical: group trees, leaders' ring (``inter_alpha``/``inter_beta`` if given), trees.
    """
    if algorithm not in ALGORITHMS:
        raise LabError(f"unknown algorithm {algorithm!r}; allowed: {list(ALGORITHMS)}", where="all-reduce")
    if not isinstance(n, (int, np.integer)) or n < 2:
        raise LabError(f"an all-reduce needs at least 2 participants (got {n})", where="all-reduce")
    count = nbytes // itemsize
    if algorithm == "ring":
        steps = 2 * (n - 1)
        wire = steps * -(-count // n) * itemsize
        return UniformTime(algorithm, n, nbytes, steps, wire, steps * alpha + wire * beta)
    if algorithm == "host":
        k = n - 1 if host_participates else n
        return UniformTime(algorithm, n, nbytes, 2, 2 * k * nbytes, 2 * alpha + 2 * k * nbytes * beta)
    if algorithm == "tree":
        up, down = _tree_port_bytes([n], nbytes), _tree_port_bytes([n], nbytes, top_down=True)
        wire = sum(up) + sum(down)
        steps = len(up) + len(down)
        return UniformTime(algorithm, n, nbytes, steps, wire, steps * alpha + wire * beta)
    sizes = list(group_sizes) if group_sizes else _default_group_sizes(n)
    if sum(sizes) != n or min(sizes) < 1:
        raise LabError(f"group sizes {sizes} must be positive and add up to N={n}", where="hierarchical")
    up, down = _tree_port_bytes(sizes, nbytes), _tree_port_bytes(sizes, nbytes, top_down=True)
    g = len(sizes)
    a2 = alpha if inter_alpha is None else inter_alpha
    b2 = beta if inter_beta is None else inter_beta
    ring_steps = 2 * (g - 1)
    ring_wire = ring_steps * -(-count // g) * itemsize if g > 1 else 0
    steps = len(up) + len(down) + ring_steps
    wire = sum(up) + sum(down) + ring_wire
    t = (len(up) + len(down)) * alpha + (sum(up) + sum(down)) * beta + ring_steps * a2 + ring_wire * b2
    return UniformTime(algorithm, n, nbytes, steps, wire, t)


def _default_group_sizes(n: int) -> list[int]:
    size = max(1, math.isqrt(n - 1) + 1) if n > 3 else n
    return [min(size, n - i) for i in range(0, n, size)]


# ---------------------------------------------------------------------------------------------
# synchronous versus asynchronous trigger (the CXL design)
# ---------------------------------------------------------------------------------------------
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
    for st in s.steps:
        msgs = messages_time(topology, step_messages(s, st))
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


# ---------------------------------------------------------------------------------------------
# fitting alpha and beta to measured times
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AlphaBetaFit:
    n: int
    alpha: float  # seconds per message step
    beta: float  # seconds per byte
    sizes: tuple[int, ...]
    measured: tuple[float, ...]
    predicted: tuple[float, ...]

    @property
    def errors(self) -> tuple[float, ...]:
        """pred / meas - 1 for each size."""
        return tuple(p / m - 1 for p, m in zip(self.predicted, self.measured))

    @property
    def geomean_error(self) -> float:
        """exp(mean |ln(pred / meas)|) - 1: the typical factor the model is off by, minus one."""
        logs = [abs(math.log(p / m)) for p, m in zip(self.predicted, self.measured) if p > 0 and m > 0]
        return math.exp(sum(logs) / len(logs)) - 1 if logs else math.nan

    @property
    def bandwidth(self) -> float:
        return 1 / self.beta if self.beta > 0 else math.inf


GEOMEAN_ERROR_DEFINITION = ("geometric-mean error = exp(mean over sizes of |ln(predicted / measured)|) − 1, "
                            "the typical factor by which the model misses, written as a percentage")


def ring_features(n: int, nbytes: float) -> tuple[float, float]:
    """(a, b) of t = a*alpha + b*beta for a ring all-reduce: a = 2(N-1), b = 2(N-1)/N x S."""
    return 2 * (n - 1), 2 * (n - 1) / n * nbytes


def fit_alpha_beta(n: int, sizes: Sequence[float], times: Sequence[float]) -> AlphaBetaFit:
    """Least squares for t = a*alpha + b*beta (ring features), alpha, beta >= 0.

    Each row is divided by its measured time, so the fit minimises relative errors and small
    sizes count as much as large ones (sizes span several orders of magnitude).
    """
    from scipy.optimize import nnls

    if n < 2:
        raise LabError("fitting alpha and beta needs at least 2 processes", where="alpha-beta fit")
    rows = [(s, t) for s, t in zip(sizes, times) if t > 0 and math.isfinite(t)]
    if len(rows) < 2:
        raise LabError("fitting alpha and beta needs at least two measured sizes", where="alpha-beta fit")
    a = np.array([ring_features(n, s) for s, _ in rows], dtype=float)
    t = np.array([t for _, t in rows], dtype=float)
    scale = np.array([1.0, 1e-9])  # beta is ~1e-9 s/B: balance the columns
    (x0, x1), _ = nnls(a * scale / t[:, None], np.ones(len(rows)))
    alpha, beta = x0 * scale[0], x1 * scale[1]
    pred = a @ np.array([alpha, beta])
    return AlphaBetaFit(n, float(alpha), float(beta), tuple(int(s) for s, _ in rows), tuple(float(v) for v in t),
                        tuple(float(v) for v in pred))


# ---------------------------------------------------------------------------------------------
# sweeps for the page (all modelled)
# ---------------------------------------------------------------------------------------------
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
    return {label: (list(sizes), [schedule_time(setup.schedule(alg, s), topology).seconds for s in sizes])
            for label, (alg, setup) in setups.items()}


def sweep_devices(topology: Topology, setups: Mapping[str, tuple[str, Setup]],
                  nbytes: int) -> dict[str, tuple[list[int], list[float]]]:
    """Modelled time against N, taking the first N participants of each setup (N >= 2)."""
    out = {}
    for label, (alg, setup) in setups.items():
        ns = list(range(2, len(setup.participants) + 1))
        out[label] = (ns, [schedule_time(setup.prefix(k).schedule(alg, nbytes), topology).seconds for k in ns])
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
