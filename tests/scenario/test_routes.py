"""Routes (lab.scenario.routes through Topology.path and path_matrix) against references: every
simple path enumerated on small random networks, the routes a star and a chain must take at the
size caps, and an independent search (maximum spanning tree, then a shortest path over the fast
enough links) on a mesh at the caps. And the table is built once per topology value."""
from __future__ import annotations

import itertools
import math
import random
import threading

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.memo import SharedCache
from lab.scenario import routes
from lab.scenario.catalogue import preset
from lab.scenario.topology import Device, Link, Switch, Topology
from lab.testing.caps import cap_topology

FLOPS = {"matmul": 1e12}


def brute(topo: Topology, a: str, b: str) -> tuple[float, float, int] | None:
    """(bottleneck, latency, hops) of the best simple path by (max bottleneck, min latency, min
    hops), every simple path enumerated; None when there is none."""
    g = topo.graph
    best = None
    for nodes in nx.all_simple_paths(g, a, b):
        links = [g[u][v]["link"] for u, v in zip(nodes, nodes[1:])]
        key = (-min(l.bandwidth for l in links), sum(l.latency for l in links), len(links))
        best = key if best is None or key < best else best
    return None if best is None else (-best[0], best[1], best[2])


def small_topology(n_dev: int, n_sw: int, edges: list[tuple[int, int, float, float]]) -> Topology:
    devs = tuple(Device(f"d{i}", "gpu", throughput=FLOPS) for i in range(n_dev))
    sws = tuple(Switch(f"s{i}") for i in range(n_sw))
    names = [d.name for d in devs] + [s.name for s in sws]
    links, seen = [], set()
    for a, b, bw, lat in edges:
        pair = frozenset((a % len(names), b % len(names)))
        if len(pair) == 2 and pair not in seen:
            seen.add(pair)
            x, y = sorted(pair)
            links.append(Link(names[x], names[y], "pcie", bw, lat))
    return Topology("small", devs, tuple(links), sws)  # not validated: it may be disconnected


def check_against_brute(topo: Topology) -> None:
    nodes = list(topo.graph.nodes)
    m = topo.path_matrix(1e6, nodes)
    for (i, a), (j, b) in itertools.product(enumerate(nodes), repeat=2):
        p = topo.path(a, b)
        if a == b:
            assert (p.nodes, p.hops, p.latency, p.bottleneck) == ((a,), 0, 0.0, math.inf)
            continue
        want = brute(topo, a, b)
        if want is None:
            assert (p.bottleneck, p.latency, p.hops) == (0.0, math.inf, 0)
            assert (m["bottleneck"][i][j], m["hops"][i][j], m["time"][i][j]) == (0.0, 0, 0.0)
            continue
        # Latencies are multiples of 1/8, so every sum is exact and ties are real ties.
        assert (p.bottleneck, p.latency, p.hops) == want, (a, b)
        # The route itself: a simple path from a to b over these links, whose numbers are its own.
        assert p.nodes[0] == a and p.nodes[-1] == b and len(set(p.nodes)) == len(p.nodes)
        assert [frozenset((l.a, l.b)) for l in p.links] == [frozenset(e) for e in zip(p.nodes, p.nodes[1:])]
        assert p.bottleneck == min(l.bandwidth for l in p.links)
        assert p.latency == sum(l.latency for l in p.links)
        assert (m["bottleneck"][i][j], m["latency"][i][j], m["hops"][i][j]) == want
        assert m["time"][i][j] == want[1] + 1e6 / want[0]


# Few values, so that bandwidths and latencies tie often; latencies include 0.
BANDWIDTHS = st.sampled_from([1.0, 2.0, 4.0, 8.0])
LATENCIES = st.sampled_from([0.0, 0.125, 0.25, 0.5, 1.0])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(n_dev=st.integers(1, 6), n_sw=st.integers(0, 2),
       edges=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), BANDWIDTHS, LATENCIES), max_size=14))
def test_routes_equal_every_simple_path_enumerated(n_dev, n_sw, edges):
    check_against_brute(small_topology(n_dev, n_sw, edges))


@pytest.mark.parametrize("seed", range(40))
def test_routes_equal_brute_force_on_seeded_dense_networks(seed):
    rng = random.Random(seed)
    n = rng.randint(4, 8)
    edges = [(a, b, rng.choice([1.0, 2.0, 2.0, 4.0]), rng.choice([0.0, 0.25, 0.5, 0.5, 1.0]))
             for a, b in itertools.combinations(range(n), 2) if rng.random() < 0.6]
    check_against_brute(small_topology(n - 2, 2, edges))


def test_ties_in_latency_go_to_the_fewest_hops():
    # a-b-c-d at 0.5 s a hop against a-x-d at 0.75 s a hop: both 1.5 s, the two-hop route wins.
    devs = tuple(Device(n, "gpu", throughput=FLOPS) for n in "abcdx")
    links = (Link("a", "b", "pcie", 1.0, 0.5), Link("b", "c", "pcie", 1.0, 0.5), Link("c", "d", "pcie", 1.0, 0.5),
             Link("a", "x", "pcie", 1.0, 0.75), Link("x", "d", "pcie", 1.0, 0.75))
    t = Topology("tie", devs, links).validate()
    assert t.path("a", "d").nodes == ("a", "x", "d") and t.path("d", "a").nodes == ("d", "x", "a")
    assert t.path("a", "d").latency == 1.5


def test_a_wider_route_wins_over_a_faster_narrower_one():
    devs = tuple(Device(n, "gpu", throughput=FLOPS) for n in "abc")
    links = (Link("a", "c", "pcie", 1.0, 0.0), Link("a", "b", "pcie", 2.0, 5.0), Link("b", "c", "pcie", 2.0, 5.0))
    t = Topology("wide", devs, links).validate()
    p = t.path("c", "a")
    assert (p.nodes, p.bottleneck, p.latency, p.hops) == (("c", "b", "a"), 2.0, 10.0, 2)


def test_presets_match_brute_force_for_every_pair():
    for name in ("cxl", "two-pools", "gpu-npu"):
        t = preset(name)
        for a, b in itertools.permutations(list(t.graph.nodes), 2):
            p = t.path(a, b)
            assert (p.bottleneck, p.latency, p.hops) == pytest.approx(brute(t, a, b)), (name, a, b)


# ---- at the caps ------------------------------------------------------------------------------

def test_star_at_the_caps_routes_every_pair_through_the_hub():
    t = cap_topology("star")
    spoke = {l.a: l for l in t.links}
    m = t.path_matrix(1e6)
    names = m["names"]
    assert len(names) == 256
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if a == b:
                continue
            bw = min(spoke[a].bandwidth, spoke[b].bandwidth)
            lat = spoke[a].latency + spoke[b].latency
            assert (m["bottleneck"][i][j], m["hops"][i][j]) == (bw, 2)
            assert m["latency"][i][j] == pytest.approx(lat, rel=1e-12)
            assert m["time"][i][j] == pytest.approx(lat + 1e6 / bw, rel=1e-12)
    p = t.path("d007", "d200")
    assert p.nodes == ("d007", "hub", "d200") and p.links == (spoke["d007"], spoke["d200"])


def test_chain_at_the_caps_routes_along_the_line():
    t = cap_topology("chain")
    links = list(t.links)
    m = t.path_matrix(1e6)
    names = m["names"]
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            seg = links[i:j]
            bw, lat = min(l.bandwidth for l in seg), sum(l.latency for l in seg)
            for x, y in ((i, j), (j, i)):
                assert (m["bottleneck"][x][y], m["hops"][x][y]) == (bw, j - i)
                assert m["latency"][x][y] == pytest.approx(lat, rel=1e-12)
    far = t.path("d255", "d000")
    assert far.nodes == tuple(reversed(names)) and far.hops == 255
    assert far.links == tuple(reversed(links))


def test_mesh_at_the_caps_matches_an_independent_search():
    """On the 1,024-link mesh (latencies made whole numbers so that sums are exact): the bottleneck
    is the narrowest link on the maximum spanning tree's path, and the route the lowest latency,
    then fewest hops, over the links at least that wide (one weight: latency * 4096 + 1 per hop)."""
    base = cap_topology("mesh", seed=3)
    rng = random.Random(5)
    t = base.replace(links=tuple(Link(l.a, l.b, l.kind, l.bandwidth, float(rng.randrange(4))) for l in base.links))
    g = t.graph
    tree = nx.maximum_spanning_tree(g, weight="bandwidth")
    m = t.path_matrix(1e6, list(g.nodes))
    index = {n: k for k, n in enumerate(g.nodes)}
    nodes = list(g.nodes)
    for a in rng.sample(nodes, 12):
        tree_paths = nx.single_source_shortest_path(tree, a)
        for b in rng.sample(nodes, 40):
            if a == b:
                continue
            tp = tree_paths[b]
            bw = min(g[u][v]["bandwidth"] for u, v in zip(tp, tp[1:]))
            sub = nx.subgraph_view(g, filter_edge=lambda u, v: g[u][v]["bandwidth"] >= bw)
            w = nx.dijkstra_path_length(sub, a, b, weight=lambda u, v, e: e["latency"] * 4096 + 1)
            lat, hops = divmod(w, 4096)
            i, j = index[a], index[b]
            assert (m["bottleneck"][i][j], m["latency"][i][j], m["hops"][i][j]) == (bw, lat, hops), (a, b)
            p = t.path(a, b)
            assert (p.bottleneck, p.latency, p.hops) == (bw, lat, hops)
            assert p.latency == sum(l.latency for l in p.links) and p.bottleneck == min(l.bandwidth for l in p.links)


# ---- one table per topology value ---------------------------------------------------------------

@pytest.fixture
def counted(monkeypatch):
    """How many route tables get built, from an empty cache."""
    built = []

    class Counted(routes.RouteTable):
        def __init__(self, *args, **kw):
            built.append(1)
            super().__init__(*args, **kw)

    monkeypatch.setattr(routes, "RouteTable", Counted)
    monkeypatch.setattr(routes, "_tables", SharedCache(routes._CACHE_SIZE))
    return built


def test_equal_topologies_share_one_table(counted):
    first = cap_topology("star")
    first.path_matrix(1e6)
    again = Topology.from_json(first.to_json())  # another session's copy of the same topology
    assert again is not first
    again.path_matrix(1e6)
    again.path("d001", "d002")
    assert len(counted) == 1
    first.replace(links=first.links[:-1], devices=first.devices[:-1]).path_matrix(1e6)
    assert len(counted) == 2


def test_sessions_asking_at_once_build_the_table_once(counted):
    copies = [cap_topology("chain") for _ in range(8)]
    start = threading.Barrier(len(copies))
    out = []

    def view(t):
        start.wait()
        out.append(t.path_matrix(1e6)["hops"][0][-1])

    threads = [threading.Thread(target=view, args=(t,)) for t in copies]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert out == [255] * 8
    assert len(counted) == 1


def test_unknown_nodes_are_lab_errors():
    from lab.errors import LabError

    t = preset("cxl")
    with pytest.raises(LabError, match="no node named"):
        t.path("gpu", "nowhere")
    with pytest.raises(LabError, match="no node named"):
        t.path_matrix(1.0, ["gpu", "nowhere"])


# Decimal latencies whose float sums depend on their order (0.1 + 0.2 != 0.3): a tie is a tie all the same.
DECIMAL_LATENCIES = st.sampled_from([0.1, 0.2, 0.3, 0.7, 0.8, 0.0])


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(n_dev=st.integers(2, 6), n_sw=st.integers(0, 2),
       edges=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), BANDWIDTHS, DECIMAL_LATENCIES), max_size=14))
def test_ties_of_decimal_latencies_go_to_the_fewest_hops_as_brute_force_in_exact_sums(n_dev, n_sw, edges):
    from fractions import Fraction

    topo = small_topology(n_dev, n_sw, edges)
    g = topo.graph
    for a, b in itertools.permutations(list(g.nodes), 2):
        best = None
        for nodes in nx.all_simple_paths(g, a, b):
            links = [g[u][v]["link"] for u, v in zip(nodes, nodes[1:])]
            key = (-min(l.bandwidth for l in links), sum(Fraction(repr(l.latency)) for l in links), len(links))
            best = key if best is None or key < best else best
        p = topo.path(a, b)
        if best is None:
            assert p.hops == 0
            continue
        assert (p.bottleneck, p.hops) == (-best[0], best[2]), (a, b)
        assert math.isclose(p.latency, float(best[1]), rel_tol=1e-9, abs_tol=1e-18)


def test_two_hops_of_seven_tenths_and_a_tenth_tie_with_one_of_eight_tenths_and_the_fewer_hops_win():
    devs = tuple(Device(n, "gpu", throughput=FLOPS) for n in "abd")
    links = (Link("a", "b", "pcie", 1.0, 0.7), Link("b", "d", "pcie", 1.0, 0.1), Link("a", "d", "pcie", 1.0, 0.8))
    assert 0.7 + 0.1 < 0.8  # the float sum is smaller: the rule must still see a tie
    t = Topology("tenths", devs, links).validate()
    assert t.path("a", "d").nodes == ("a", "d") and t.path("d", "a").nodes == ("d", "a")
