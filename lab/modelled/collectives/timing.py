"""How long a collective takes: nccl-tests' bandwidths, a schedule's time on a topology (messages, steps, the slowest hop), the uniform alpha-beta model for any N, and alpha and beta fitted to measured times."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from lab.errors import LabError
from lab.modelled.collectives.ring import near_equal, ring_bytes, ring_share, ring_steps
from lab.modelled.collectives.schedules import (
    CollectiveSchedule,
    Step,
    _default_group_sizes,
    _tree_levels,
)
from lab.scenario.names import ALGORITHMS
from lab.scenario.topology import Topology


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth as nccl-tests defines it: S / t (bytes/s)."""
    return nbytes / seconds if seconds > 0 else math.inf


def busbw(nbytes: float, seconds: float, n: int) -> float:
    """All-reduce bus bandwidth as nccl-tests defines it: algbw x 2(n-1)/n (bytes/s)."""
    return algbw(nbytes, seconds) * ring_share(n)


BANDWIDTH_FORMULA = (r"\mathrm{algbw} = \frac{S}{t},\qquad "
                     r"\mathrm{busbw} = \mathrm{algbw}\times\frac{2(N-1)}{N}")


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


def _shares(topology: Topology, pairs: tuple[tuple[str, str] | None, ...]) -> list[tuple[float, float, str, int] | None]:
    """For concurrent messages between ``pairs`` (None: a message that moves nothing), each one's
    route latency, bandwidth (its narrowest link's over the messages crossing it), that hop, and
    how many messages cross it."""
    routes, use = [], {}
    for pair in pairs:
        if pair is None:
            routes.append(None)
            continue
        p = topology.path(*pair)
        if not p.links:
            raise LabError(f"no route from {pair[0]!r} to {pair[1]!r}", where=f"topology {topology.name!r}")
        hops = list(zip(p.nodes, p.nodes[1:], p.links))
        for u, v, _ in hops:
            use[(u, v)] = use.get((u, v), 0) + 1
        routes.append((p, hops))
    out = []
    for r in routes:
        if r is None:
            out.append(None)
            continue
        p, hops = r
        u, v, link = min(hops, key=lambda h: h[2].bandwidth / use[(h[0], h[1])])
        k = use[(u, v)]
        out.append((p.latency, link.bandwidth / k, _hop_name(u, v), k))
    return out


def messages_time(topology: Topology, messages: Sequence[tuple[str, str, int]],
                  shares: dict | None = None) -> list[MessageTime]:
    """Concurrent messages (src, dst, bytes) on ``topology``: each gets latency + bytes over the
    narrowest bandwidth on its route, a link crossed by k of them in one direction giving 1/k.
    ``shares`` keeps the routes and sharing of each set of pairs already seen on ``topology``
    (every step of a ring has the same), so that they are worked out once."""
    pairs = tuple((src, dst) if src != dst and nb > 0 else None for src, dst, nb in messages)
    found = shares.get(pairs) if shares is not None else None
    if found is None:
        found = _shares(topology, pairs)
        if shares is not None:
            shares[pairs] = found
    out = []
    for (src, dst, nb), r in zip(messages, found):
        if r is None:
            out.append(MessageTime(src, dst, nb, 0.0, math.inf, "", 0))
            continue
        latency, bw, hop, k = r
        out.append(MessageTime(src, dst, nb, latency + nb / bw, bw, hop, k))
    return out


def step_messages(s: CollectiveSchedule, step: Step) -> list[tuple[str, str, int]]:
    """The step's transfers merged per (src, dst) pair into one message each."""
    merged: dict[tuple[int, int], int] = {}
    for t in step.transfers:
        merged[(t.src, t.dst)] = merged.get((t.src, t.dst), 0) + t.nbytes
    return [(s.nodes[a], s.nodes[b], nb) for (a, b), nb in merged.items()]


def schedule_time(s: CollectiveSchedule, topology: Topology, shares: dict | None = None) -> TimeEstimate:
    """The alpha-beta time of ``s`` on ``topology`` (node names must be nodes of the topology);
    ``shares`` as :func:`messages_time` has it, kept across the schedules of a sweep."""
    names = set(topology.device_names) | {sw.name for sw in topology.switches}
    unknown = [nm for nm in s.nodes if nm not in names]
    if unknown:
        raise LabError(f"{unknown} are not devices of topology {topology.name!r}", where="all-reduce time")
    steps, link_time = [], {}
    total = 0.0
    shares = {} if shares is None else shares
    for i, st in enumerate(s.steps):
        msgs = messages_time(topology, step_messages(s, st), shares)
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
    if algorithm == "ring":  # lock step: every step lasts as long as the largest chunk
        steps = ring_steps(n)
        wire = steps * max(near_equal(count, n)) * itemsize
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
    leaders = ring_steps(g)
    ring_wire = leaders * max(near_equal(count, g)) * itemsize if g > 1 else 0
    steps = len(up) + len(down) + leaders
    wire = sum(up) + sum(down) + ring_wire
    t = (len(up) + len(down)) * alpha + (sum(up) + sum(down)) * beta + leaders * a2 + ring_wire * b2
    return UniformTime(algorithm, n, nbytes, steps, wire, t)


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
    """(a, b) of t = a*alpha + b*beta for a ring all-reduce (:mod:`.ring`)."""
    return ring_steps(n), ring_bytes(nbytes, n)


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
