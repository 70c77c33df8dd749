"""Every pair's widest route over a network, computed at once, and kept per network value.

A route between two nodes takes the largest bottleneck bandwidth, then the lowest summed latency,
then the fewest hops (:class:`lab.scenario.topology.Topology` gives routes this meaning).

The widest-path bottleneck between two nodes is the bandwidth at which they first fall into one
component when links are added from the fastest down (Kruskal's order, the maximum spanning forest).
At each bandwidth level, the components that merge are that level's children; every pair split
across two children has that level as its bottleneck, and its route is the lowest (latency, hops)
path over the links at least that fast. One Dijkstra from each node outside the largest child
covers every such pair, a route read backwards serving the other direction. A node is a source only
when its side of a merge is not the largest, so at most log2(n) times, and each search stays inside
the merged component: the whole table costs about as much as one Dijkstra per node.

Nodes are indices here; :mod:`lab.scenario.topology` maps them to names and links.
"""

from __future__ import annotations

import heapq
import math
from typing import Sequence

import numpy as np

from lab.errors import LabError
from lab.memo import SharedCache

#: (node a, node b, bandwidth, latency) of one link, ``a`` and ``b`` indices into the node list.
Edge = tuple[int, int, float, float]

# Latencies are summed as whole femtoseconds: integer sums do not depend on their order, so two routes of
# equal latency tie exactly and the fewer hops win (float sums in different orders differ in the last bit).
_FS = 1e15


class RouteTable:
    """The widest route between every ordered pair of the nodes ``names``.

    ``bottleneck[i, j]`` (bytes/s; inf on the diagonal, 0 when ``j`` cannot be reached),
    ``latency[i, j]`` (seconds; inf when unreachable) and ``hops[i, j]`` are the numbers of the
    route from ``names[i]`` to ``names[j]``; :meth:`nodes` gives its node sequence."""

    def __init__(self, names: Sequence[str], edges: Sequence[Edge]) -> None:
        self.names = tuple(names)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.n = n = len(self.names)
        self.bottleneck = np.zeros((n, n))
        self.latency = np.full((n, n), math.inf)
        self.hops = np.zeros((n, n), dtype=np.int64)
        np.fill_diagonal(self.bottleneck, math.inf)
        np.fill_diagonal(self.latency, 0.0)
        # For a pair, the search that found its route (-1: none), and each search's source and
        # predecessor array: the route is read from those, when asked for, not stored per pair.
        self._search = np.full((n, n), -1, dtype=np.int32)
        self._sources: list[int] = []
        self._preds: list[np.ndarray] = []
        self._adjacency = self._adjacent(n, edges)
        self._build(edges)
        del self._adjacency

    @staticmethod
    def _adjacent(n: int, edges: Sequence[Edge]) -> list[list[tuple[float, int, int]]]:
        """Each node's links as (bandwidth, latency in femtoseconds, neighbour), fastest first, so that a
        search over the links at least ``level`` fast stops reading a list at its first slower link."""
        adj: list[list[tuple[float, int, int]]] = [[] for _ in range(n)]
        for a, b, bw, lat in edges:
            if a != b:
                fs = round(lat * _FS)
                adj[a].append((bw, fs, b))
                adj[b].append((bw, fs, a))
        for links in adj:
            links.sort(key=lambda x: -x[0])
        return adj

    def _build(self, edges: Sequence[Edge]) -> None:
        parent = list(range(self.n))
        members: dict[int, list[int]] = {i: [i] for i in range(self.n)}

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        by_level: dict[float, list[tuple[int, int]]] = {}
        for a, b, bw, _ in edges:
            if a != b:
                by_level.setdefault(bw, []).append((a, b))
        for level in sorted(by_level, reverse=True):
            # The components this level's links join, as groups of the components before it.
            joined: dict[int, int] = {}

            def top(r: int) -> int:
                while joined.get(r, r) != r:
                    r = joined[r]
                return r

            for a, b in by_level[level]:
                ra, rb = top(find(a)), top(find(b))
                if ra != rb:
                    joined[ra] = rb
                    joined.setdefault(rb, rb)
            groups: dict[int, list[int]] = {}
            for r in joined:
                groups.setdefault(top(r), []).append(r)
            for roots in groups.values():
                children = sorted((members[r] for r in roots), key=len)  # the largest last
                for k, child in enumerate(children[:-1]):
                    rest = np.array([t for later in children[k + 1:] for t in later], dtype=np.intp)
                    for s in child:
                        self._search_from(s, level, rest)
                big = roots[max(range(len(roots)), key=lambda i: len(members[roots[i]]))]
                for r in roots:
                    if r != big:
                        parent[r] = big
                        members[big].extend(members.pop(r))

    def _search_from(self, src: int, level: float, targets: np.ndarray) -> None:
        """Dijkstra from ``src`` over the links at least ``level`` fast, by (latency, hops), and
        the routes from ``src`` to ``targets`` (and back) recorded at bottleneck ``level``."""
        n, adj = self.n, self._adjacency
        dist: list[float] = [math.inf] * n
        hops = [0] * n
        pred = [-1] * n
        dist[src] = 0
        settled = [False] * n
        heap = [(0, 0, src)]
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            d, h, u = pop(heap)
            if settled[u]:
                continue
            settled[u] = True
            h1 = h + 1
            for bw, lat, v in adj[u]:
                if bw < level:
                    break
                nd = d + lat
                if nd < dist[v] or (nd == dist[v] and h1 < hops[v]):
                    dist[v], hops[v], pred[v] = nd, h1, u
                    push(heap, (nd, h1, v))
        k = len(self._sources)
        self._sources.append(src)
        self._preds.append(np.array(pred, dtype=np.int32))
        d_t = np.array(dist, dtype=float)[targets] / _FS
        h_t = np.array(hops)[targets]
        for rows, cols in ((src, targets), (targets, src)):
            self.bottleneck[rows, cols] = level
            self.latency[rows, cols] = d_t
            self.hops[rows, cols] = h_t
            self._search[rows, cols] = k

    def nodes(self, i: int, j: int) -> list[int] | None:
        """The route from ``i`` to ``j`` as node indices (``[i]`` for ``i == j``), None when ``j``
        cannot be reached."""
        if i == j:
            return [i]
        k = int(self._search[i, j])
        if k < 0:
            return None
        src, pred = self._sources[k], self._preds[k]
        if src == i:  # found from i: walk back from j
            out = [j]
            while out[-1] != i:
                out.append(int(pred[out[-1]]))
            out.reverse()
            return out
        out = [i]  # found from j: the route from j to i, read backwards
        while out[-1] != j:
            out.append(int(pred[out[-1]]))
        return out

    def index_of(self, name: str) -> int:
        if name not in self.index:
            raise LabError(f"no node named {name!r}")
        return self.index[name]

    def route(self, a: str, b: str) -> tuple[tuple[str, ...], float, float] | None:
        """The route from ``a`` to ``b``: (its node names, bottleneck, latency), None when ``b``
        cannot be reached."""
        i, j = self.index_of(a), self.index_of(b)
        seq = self.nodes(i, j)
        if seq is None:
            return None
        return tuple(self.names[k] for k in seq), float(self.bottleneck[i, j]), float(self.latency[i, j])

    def matrix(self, names: Sequence[str], nbytes: float) -> dict[str, list]:
        """Between every pair of ``names`` (rows from, columns to), as lists of lists: "time" (s) to
        move ``nbytes``, "bottleneck", "latency", "hops"."""
        idx = np.array([self.index_of(n) for n in names], dtype=np.intp)
        cell = np.ix_(idx, idx)
        bw, lat, hops = self.bottleneck[cell], self.latency[cell], self.hops[cell]
        time = np.zeros(bw.shape)
        moves = hops > 0  # a node to itself, or to one it cannot reach, moves nothing (as Path.time says)
        time[moves] = lat[moves] + nbytes / bw[moves]
        return {"time": time.tolist(), "bottleneck": bw.tolist(), "latency": lat.tolist(), "hops": hops.tolist()}


# One table per network value in this process: every session showing the same topology (a class
# opening one link) shares it, and a network is searched once even when sessions ask at once.
_CACHE_SIZE = 16
_tables = SharedCache(_CACHE_SIZE)


def route_table(nodes: tuple[str, ...], edges: tuple[tuple[str, str, float, float], ...]) -> RouteTable:
    """The :class:`RouteTable` of the network of ``nodes`` and ``edges`` (a, b, bandwidth,
    latency), node ``i`` being ``nodes[i]``; built once per value and kept for the
    :data:`_CACHE_SIZE` networks used last."""

    def build() -> RouteTable:
        index = {name: i for i, name in enumerate(nodes)}
        return RouteTable(nodes, [(index[a], index[b], bw, lat) for a, b, bw, lat in edges])

    return _tables.get((nodes, edges), build)
