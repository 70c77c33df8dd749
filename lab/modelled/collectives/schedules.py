"""All-reduce, step by step and timed on a topology: pure functions, no processes.

Four algorithms over N participating devices, each a :class:`CollectiveSchedule` of :class:`Step` s:

* ``ring``: reduce-scatter (N-1 steps) then all-gather (N-1 steps) over N chunks, in a chosen
  ring order (the CXL design's worked example: A -> B -> C -> D -> A, chunks a0..d3).
* ``host``: host aggregation: every device uploads its buffer to the host, the host sums and
  sends the result back (2 steps; the host's own port carries N buffers each way).
* ``tree``: reduce up a binary tree (heap layout over the order, root first), broadcast down.
* ``hierarchical``: reduce inside each group (a binary tree over the group's fast links), ring
  all-reduce among the group leaders (over the slower links), broadcast back inside each group
  (the coherent-interconnect and task-level designs: groups are the topology's pools / resource groups).

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

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from lab.errors import LabError
from lab.modelled.collectives.ring import near_equal
from lab.scenario.names import ALGORITHMS
from lab.scenario.topology import Device, Link, Switch, Topology

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
        """A chunk's content as the designs' figures write it: 'a0+b0+c0' (or '7 of 16 (…)' when long)."""
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
    """A, B, C, ... (the CXL design's device names), then D26, D27, ...: names a reader tells apart, which the
    lab's look-alike rule accepts (tests check every count the pages offer)."""
    return [chr(ord("A") + i) for i in range(min(n, 26))] + [f"D{i}" for i in range(26, n)]


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
        cb = [c * itemsize for c in near_equal(count, n)]
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
    cb = [c * itemsize for c in near_equal(count, ng)]
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
    hands out work and the accelerators all-reduce), or every device when that leaves fewer than 2;
    the first :data:`MAX_STATE_DEVICES` of them (the All-reduce page's step-through draws each one)."""
    names = [d.name for d in topology.devices if d.type != "cpu"]
    return (names if len(names) >= 2 else topology.device_names)[:MAX_STATE_DEVICES]


def check_explored(names: Sequence[str]) -> None:
    """The devices the All-reduce page explores: at least 2, at most :data:`MAX_STATE_DEVICES` (its
    step-through draws every device's contributions, and its sweeps build dozens of schedules of
    about 2 N^2 messages each; the uniform model takes any N)."""
    if len(names) < 2:
        raise LabError("choose at least two devices", where="devices taking part")
    if len(names) > MAX_STATE_DEVICES:
        raise LabError(f"choose at most {MAX_STATE_DEVICES} devices (got {len(names)}): the step-through draws "
                       "every device, and the uniform model further down takes any N", where="devices taking part")


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
# sweeps for the page (all modelled)
# ---------------------------------------------------------------------------------------------


def _default_group_sizes(n: int) -> list[int]:
    size = max(1, math.isqrt(n - 1) + 1) if n > 3 else n
    return [min(size, n - i) for i in range(0, n, size)]
