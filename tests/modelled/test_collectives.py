"""lab.modelled.collectives: schedules, bytes, alpha-beta times on topologies, ring order, trigger, fit."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import pytest

from lab.errors import LabError
from lab.modelled import collectives
from lab.scenario.catalogue import preset
from lab.scenario.topology import Device, Link, Switch, Topology

G = 1e9


def _dev(name: str, pool: str = "pool0") -> Device:
    return Device(name, "gpu", pool=pool, throughput={"matmul": 1e12})


def star(k: int, bw: float = 10 * G, lat: float = 1e-6, host: bool = False, pools: int = 1) -> Topology:
    names = collectives.default_names(k)
    devs = [_dev(n, f"g{i * pools // k}") for i, n in enumerate(names)]
    if host:
        devs.append(_dev("host"))
    links = [Link(d.name, "sw", "switch", bw, lat) for d in devs]
    return Topology("star", tuple(devs), tuple(links), (Switch("sw"),)).validate()


def multiset_final(s: collectives.CollectiveSchedule) -> list[list[Counter]]:
    """Reference: replay the transfers on multisets (Counter) of contributions, independent of
    the builder's bitmasks, so a contribution counted twice would show up as a count of 2."""
    nodes, chunks = len(s.nodes), len(s.chunk_bytes)
    state = [[Counter({i: 1}) if i < s.n else Counter() for _ in range(chunks)] for i in range(nodes)]
    for st in s.steps:
        old = [[c.copy() for c in row] for row in state]
        for t in st.transfers:
            if t.op == "reduce":
                state[t.dst][t.chunk] = state[t.dst][t.chunk] + old[t.src][t.chunk]
            else:
                state[t.dst][t.chunk] = old[t.src][t.chunk].copy()
    return state


# ---------------------------------------------------------------------------------------------
# the CXL design's worked example
# ---------------------------------------------------------------------------------------------
def test_seed_example_four_devices_ring_a_b_c_d():
    s = collectives.build_schedule("ring", ["A", "B", "C", "D"], 16)  # four chunks of one float each
    assert [st.phase for st in s.steps] == ["reduce-scatter"] * 3 + ["all-gather"] * 3
    for st in s.steps:  # every step: A -> B, B -> C, C -> D, D -> A, one chunk each
        assert [(s.nodes[t.src], s.nodes[t.dst]) for t in st.transfers] == [
            ("A", "B"), ("B", "C"), ("C", "D"), ("D", "A")]
        assert all(t.nbytes == 4 for t in st.transfers)
    lab = lambda step, dev, chunk: s.label(s.state_at(step)[s.nodes.index(dev)][chunk], chunk)  # noqa: E731
    assert [lab(0, "A", c) for c in range(4)] == ["a0", "a1", "a2", "a3"]
    assert [lab(0, "D", c) for c in range(4)] == ["d0", "d1", "d2", "d3"]
    # chunk 0 accumulates along the ring: a0 -> a0+b0 -> a0+b0+c0 -> a0+b0+c0+d0
    assert lab(1, "B", 0) == "a0+b0"
    assert lab(2, "C", 0) == "a0+b0+c0"
    assert lab(3, "D", 0) == "a0+b0+c0+d0"
    assert s.steps[0].transfers[0] == collectives.Transfer(0, 1, 0, 4, "reduce")
    assert s.steps[3].transfers[3].op == "copy"
    for dev in "ABCD":
        assert [lab(6, dev, c) for c in range(4)] == [f"a{i}+b{i}+c{i}+d{i}" for i in range(4)]


# ---------------------------------------------------------------------------------------------
# every schedule: every contribution exactly once, bytes sent and received
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", collectives.ALGORITHMS)
@pytest.mark.parametrize("n", range(2, 17))
def test_every_device_ends_with_every_contribution_exactly_once(algorithm, n):
    for count in (1, 7, n - 1, 1001):
        s = collectives.build_schedule(algorithm, n, 4 * count)
        collectives.check_schedule(s)
        for row in multiset_final(s):
            for chunk in row:
                assert chunk == Counter({i: 1 for i in range(n)})


@pytest.mark.parametrize("n", range(2, 17))
def test_ring_bytes_per_device(n):
    for count in (n * 5, n * 5 + 3, 1):
        s = collectives.build_schedule("ring", n, 4 * count)
        nb = 4 * count
        sent, recv = s.sent_bytes(), s.received_bytes()
        cb = s.chunk_bytes
        for p in range(n):  # p sends every chunk but (p+1) in reduce-scatter and every chunk but (p+2) after
            assert sent[p] == 2 * nb - cb[(p + 1) % n] - cb[(p + 2) % n]
            assert recv[p] == 2 * nb - cb[(p + 1) % n] - cb[p % n]
        if count % n == 0:
            assert sent == recv == [2 * (n - 1) * nb // n] * n  # 2(N-1)/N of the buffer
        assert len(s.steps) == 2 * (n - 1)


def test_host_tree_hierarchical_bytes():
    nb = 4 * 1000
    for n in range(2, 17):
        h = collectives.build_schedule("host", n, nb)
        assert h.nodes[-1] == "host" and len(h.steps) == 2
        assert h.sent_bytes() == [nb] * n + [n * nb] and h.received_bytes() == [nb] * n + [n * nb]
        hp = collectives.build_schedule("host", n, nb, host="A")  # the aggregator is a participant
        assert hp.sent_bytes()[0] == (n - 1) * nb and hp.sent_bytes()[1:] == [nb] * (n - 1)
        t = collectives.build_schedule("tree", n, nb)
        assert sum(t.sent_bytes()) == 2 * (n - 1) * nb  # every tree edge carries S up and S down
        assert len(t.steps) == 2 * int(math.log2(n))
        groups = [collectives.default_names(n)[i:i + 3] for i in range(0, n, 3)]
        g = len(groups)
        hi = collectives.build_schedule("hierarchical", n, nb, groups=groups)
        ring = 2 * (g - 1) * nb // g * g if nb % g == 0 else sum(
            collectives.build_schedule("ring", g, nb).sent_bytes())
        assert sum(hi.sent_bytes()) == 2 * (n - g) * nb + ring
        collectives.check_schedule(hi)


def test_hierarchical_uses_groups_and_leaders():
    names = ["g0", "g1", "n0", "n1", "n2"]
    s = collectives.build_schedule("hierarchical", names, 40, groups=[["n0", "n1", "n2"], ["g0", "g1"]])
    assert s.groups == ((0, 1), (2, 3, 4))  # groups sorted by their leader's place in the order
    leaders = {0, 2}
    ring_steps = [st for st in s.steps if st.phase.startswith("leaders'")]
    assert len(ring_steps) == 2
    for st in ring_steps:
        assert {t.src for t in st.transfers} | {t.dst for t in st.transfers} == leaders
    collectives.check_schedule(s)


def test_ring_order_changes_who_sends_to_whom():
    s = collectives.build_schedule("ring", ["A", "B", "C", "D"], 16, order=[0, 2, 1, 3])
    assert [(s.nodes[t.src], s.nodes[t.dst]) for t in s.steps[0].transfers] == [
        ("A", "C"), ("C", "B"), ("B", "D"), ("D", "A")]
    collectives.check_schedule(s)


def test_builder_refuses_double_counting():
    b = collectives._Builder("x", ["A", "B"], 2, [4], (0, 1))
    b.step("up", [collectives.Transfer(0, 1, 0, 4, "reduce")])
    with pytest.raises(RuntimeError, match="twice"):
        b.step("again", [collectives.Transfer(0, 1, 0, 4, "reduce")])


@pytest.mark.parametrize("bad, match", [
    (dict(algorithm="bogus"), "unknown algorithm"),
    (dict(participants=1), "2 to"),
    (dict(nbytes=10), "whole number of 4-byte"),
    (dict(order=[0, 0, 1]), "ring order"),
    (dict(algorithm="hierarchical", groups=[["A"], ["B"]]), "in no group"),
    (dict(algorithm="hierarchical", groups=[["A", "Q"], ["B", "C"]]), "not a participant"),
])
def test_bad_input_is_a_lab_error(bad, match):
    args = dict(algorithm="ring", participants=3, nbytes=12)
    args.update(bad)
    with pytest.raises(LabError, match=match):
        collectives.build_schedule(args.pop("algorithm"), args.pop("participants"), args.pop("nbytes"), **args)


# ---------------------------------------------------------------------------------------------
# nccl-tests bandwidths
# ---------------------------------------------------------------------------------------------
def test_nccl_tests_bandwidth_definitions():
    assert collectives.algbw(1e9, 0.5) == 2e9
    assert collectives.busbw(1e9, 0.5, 4) == pytest.approx(2e9 * 2 * 3 / 4)
    assert collectives.busbw(1e9, 0.5, 2) == pytest.approx(2e9)
    est = collectives.schedule_time(collectives.build_schedule("ring", 4, 4 << 20), star(4))
    assert est.algbw == pytest.approx((4 << 20) / est.seconds)
    assert est.busbw == pytest.approx(est.algbw * 1.5)


# ---------------------------------------------------------------------------------------------
# alpha-beta time on a topology
# ---------------------------------------------------------------------------------------------
def tiny() -> Topology:
    """X, Y, Z on one switch; Z's link is ten times slower and Y's latency larger."""
    devs = (_dev("X"), _dev("Y"), _dev("Z"))
    links = (Link("X", "sw", "pcie", 10 * G, 1e-6), Link("Y", "sw", "pcie", 10 * G, 5e-6),
             Link("Z", "sw", "pcie", 1 * G, 2e-6))
    return Topology("tiny", devs, links, (Switch("sw"),)).validate()


def test_alpha_beta_ring_hand_checked_and_slowest_link_named():
    topo = tiny()
    s = collectives.build_schedule("ring", ["X", "Y", "Z"], 3_000_000)  # chunks of 1 MB
    est = collectives.schedule_time(s, topo)
    # per step: X->Y 6 us + 1e6/1e10; Y->Z 7 us + 1e6/1e9; Z->X 3 us + 1e6/1e9: Y->Z is slowest
    step = 7e-6 + 1e6 / 1e9
    assert [st.seconds for st in est.steps] == pytest.approx([step] * 4)
    assert est.seconds == pytest.approx(4 * step)
    assert all(st.slowest.src == "Y" and st.slowest.dst == "Z" for st in est.steps)
    assert est.bottleneck == "sw→Z"
    assert "1 GB/s" in collectives.link_label(topo, est.bottleneck)
    assert est.bottleneck_seconds == pytest.approx(est.seconds)


def test_links_shared_in_one_direction_split_bandwidth():
    topo = tiny()
    # X and Y both send 1 MB to Z at once: sw->Z carries both, each gets 0.5 GB/s
    m = collectives.messages_time(topo, [("X", "Z", 1_000_000), ("Y", "Z", 1_000_000)])
    assert [x.bandwidth for x in m] == [0.5 * G, 0.5 * G]
    assert m[0].seconds == pytest.approx(3e-6 + 2e-3)
    assert m[1].seconds == pytest.approx(7e-6 + 2e-3)
    assert m[0].sharing == 2 and m[0].bottleneck == "sw→Z"
    # opposite directions do not share (full duplex)
    m = collectives.messages_time(topo, [("X", "Z", 1_000_000), ("Z", "X", 1_000_000)])
    assert [x.bandwidth for x in m] == [1 * G, 1 * G]


def test_host_aggregation_shares_the_hosts_port():
    topo = star(4, bw=10 * G, lat=1e-6, host=True)
    s = collectives.build_schedule("host", collectives.default_names(4), 1_000_000, host="host")
    est = collectives.schedule_time(s, topo)
    # 4 uploads share sw->host, 4 downloads share host->sw: each step 2 us + 4 x 1e6 / 1e10
    assert est.seconds == pytest.approx(2 * (2e-6 + 4e6 / 1e10))
    assert est.bottleneck in ("sw→host", "host→sw")


@pytest.mark.parametrize("algorithm", collectives.ALGORITHMS)
def test_uniform_model_equals_topology_model_on_identical_links(algorithm):
    bw, lat = 8 * G, 1.5e-6
    for n in range(2, 10):
        topo = star(n, bw, lat, host=True, pools=max(1, n // 3))
        names = collectives.default_names(n)
        groups = [[d for d in g if d in names] for g in topo.pools.values()]
        groups = [g for g in groups if g]
        for count in (n * 1000, n * 1000 + 1):
            nb = 4 * count
            s = collectives.build_schedule(algorithm, names, nb, host="host", groups=groups)
            est = collectives.schedule_time(s, topo)
            u = collectives.uniform_time(algorithm, n, nb, alpha=2 * lat, beta=1 / bw, group_sizes=[len(g) for g in groups])
            assert u.seconds == pytest.approx(est.seconds, rel=1e-9), (algorithm, n, count)
            assert u.steps == len(s.steps)


def test_uniform_model_formulas_and_large_n():
    n, nb = 1024, 4 << 24
    u = collectives.uniform_time("ring", n, nb, alpha=5e-6, beta=1e-10)
    assert u.steps == 2 * (n - 1)
    assert u.bytes_on_wire == 2 * (n - 1) * nb // n
    assert u.seconds == pytest.approx(2 * (n - 1) * 5e-6 + 2 * (n - 1) / n * nb * 1e-10)
    h = collectives.uniform_time("host", n, nb, alpha=5e-6, beta=1e-10)
    assert h.seconds == pytest.approx(2 * 5e-6 + 2 * n * nb * 1e-10)
    t = collectives.uniform_time("tree", n, nb, alpha=5e-6, beta=1e-10)
    # 1024 = 1023 (nine full levels, a parent of two at each) + one node alone at depth 10
    assert t.steps == 2 * 10 and t.bytes_on_wire == 2 * (9 * 2 + 1) * nb
    hi = collectives.uniform_time("hierarchical", n, nb, alpha=5e-6, beta=1e-10, group_sizes=[8] * 128)
    assert hi.steps == 2 * 3 + 2 * 127
    with pytest.raises(LabError):
        collectives.uniform_time("hierarchical", 10, 40, 1e-6, 1e-9, group_sizes=[3, 3])


# ---------------------------------------------------------------------------------------------
# ring order
# ---------------------------------------------------------------------------------------------
def random_topology(seed: int, k: int) -> Topology:
    rng = random.Random(seed)
    devs = [_dev(f"d{i}") for i in range(k)]
    sws = [Switch(f"s{j}") for j in range(rng.randint(1, 3))]
    bws = [1 * G, 2 * G, 4 * G, 8 * G, 16 * G, 32 * G]
    links = [Link(d.name, rng.choice(sws).name, "pcie", rng.choice(bws), rng.choice([1e-6, 2e-6])) for d in devs]
    links += [Link(f"s{j}", f"s{j + 1}", "switch", rng.choice(bws), 1e-6) for j in range(len(sws) - 1)]
    pairs: set = set()
    for _ in range(rng.randint(0, k)):
        a, b = sorted(rng.sample(range(k), 2))
        if (a, b) not in pairs:
            pairs.add((a, b))
            links.append(Link(f"d{a}", f"d{b}", "nvlink", rng.choice(bws), 5e-7))
    return Topology("random", tuple(devs), tuple(links), tuple(sws)).validate()


def test_brute_force_ring_order_matches_exhaustive_search():
    for seed in range(12):
        k = 4 + seed % 3
        topo = random_topology(seed, k)
        names = topo.device_names
        best = collectives.brute_force_ring_order(topo, names)
        assert best.evaluated == math.factorial(k - 1)
        exhaustive = max(min(h.bandwidth for h in collectives.ring_hops(topo, list(p)))
                         for p in itertools.permutations(names))
        assert best.slowest_hop_bandwidth == exhaustive
        assert sorted(best.names) == sorted(names) and best.names[0] == names[0]


def test_heuristic_ring_order_matches_brute_force_on_small_cases():
    for seed in range(40):
        k = 5 + seed % 3
        topo = random_topology(100 + seed, k)
        names = topo.device_names
        bf = collectives.brute_force_ring_order(topo, names)
        h = collectives.heuristic_ring_order(topo, names)
        assert sorted(h.names) == sorted(names)
        assert h.slowest_hop_bandwidth == bf.slowest_hop_bandwidth, seed


def test_lab_order_beats_an_interleaved_order_on_two_pools():
    topo = preset("two-pools")
    inter = ["p0-gpu", "p1-gpu", "p0-fpga", "p1-fpga", "p0-asic", "p1-asic", "p0-dpu", "p1-dpu"]
    given = collectives.given_ring_order(topo, inter)
    best = collectives.best_ring_order(topo, inter)
    assert given.slowest_hop_bandwidth == pytest.approx(32 * G / 4)  # 4 crossings each way share the fabric
    assert best.slowest_hop_bandwidth == pytest.approx(32 * G)
    assert "brute force" in best.method
    s_given = collectives.schedule_time(collectives.build_schedule("ring", inter, 4 << 20), topo)
    order = [inter.index(x) for x in best.names]
    s_best = collectives.schedule_time(collectives.build_schedule("ring", inter, 4 << 20, order=order), topo)
    assert s_best.seconds < s_given.seconds / 3
    big = collectives.best_ring_order(random_topology(7, 10), [f"d{i}" for i in range(10)])
    assert "2-opt" in big.method


# ---------------------------------------------------------------------------------------------
# synchronous versus asynchronous trigger
# ---------------------------------------------------------------------------------------------
def test_trigger_sync_waits_for_the_last_device_async_does_not():
    topo = tiny()
    s = collectives.build_schedule("ring", ["X", "Y", "Z"], 3_000_000)
    comp = {"X": 1e-3, "Y": 2e-3, "Z": 5e-3}
    sync = collectives.trigger_timeline(s, topo, comp, "sync")
    asyn = collectives.trigger_timeline(s, topo, comp, "async")
    assert all(v == 5e-3 for v in sync.allreduce_start.values())
    assert asyn.allreduce_start == comp
    # synchronous: everyone idles until the slowest device is done
    for d in "XY":
        assert sync.idle[d] >= 5e-3 - comp[d] - 1e-12
    assert asyn.makespan <= sync.makespan + 1e-12
    assert asyn.idle["X"] < sync.idle["X"]
    # equal compute times: both triggers give the same timeline
    same = {"X": 1e-3, "Y": 1e-3, "Z": 1e-3}
    a, b = collectives.trigger_timeline(s, topo, same, "sync"), collectives.trigger_timeline(s, topo, same, "async")
    assert a.end == pytest.approx(b.end) and a.idle == pytest.approx(b.idle)
    # with all starting together, the ring takes exactly its lock-step time on this ring
    est = collectives.schedule_time(s, topo)
    assert a.makespan == pytest.approx(1e-3 + est.seconds)
    for seg in sync.segments:
        assert seg.kind in ("compute", "idle", "communicate") and seg.end >= seg.start
    with pytest.raises(LabError):
        collectives.trigger_timeline(s, topo, {"X": 1.0}, "sync")
    with pytest.raises(LabError):
        collectives.trigger_timeline(s, topo, comp, "sometimes")


# ---------------------------------------------------------------------------------------------
# fitting alpha and beta
# ---------------------------------------------------------------------------------------------
def test_fit_recovers_alpha_beta_and_defines_geomean_error():
    n, alpha, beta = 4, 50e-6, 2e-9
    sizes = [4096 * 2 ** k for k in range(10)]
    times = [2 * (n - 1) * alpha + 2 * (n - 1) / n * s * beta for s in sizes]
    fit = collectives.fit_alpha_beta(n, sizes, times)
    assert fit.alpha == pytest.approx(alpha, rel=1e-6)
    assert fit.beta == pytest.approx(beta, rel=1e-6)
    assert fit.geomean_error == pytest.approx(0, abs=1e-9)
    f = collectives.AlphaBetaFit(2, 1, 1, (1, 2), (1.0, 2.0), (1.1, 2.0 / 1.1))
    assert f.geomean_error == pytest.approx(0.1)
    assert f.errors == pytest.approx((0.1, 1 / 1.1 - 1))
    with pytest.raises(LabError):
        collectives.fit_alpha_beta(4, [4096], [1e-3])


def test_identical_devices_get_names_the_lab_accepts_at_every_size():
    """The All-reduce page's "identical devices" builds any size its slider allows, and the topology cap: the
    default names pass the look-alike rule, which tells L from I as a reader does."""
    from lab.scenario.text import check_distinct, look_alike

    for n in range(2, 257):
        names = collectives.default_names(n)
        check_distinct(names, "test")
        assert len(names) == n and (n > 255 or len(collectives.uniform_star(n, 1e9, 1e-6).devices) == n + 1)  # and the host
    assert collectives.default_names(26)[11] == "L" and collectives.default_names(3) == ["A", "B", "C"]
    assert not any(look_alike(a, b) for i, a in enumerate(collectives.default_names(40)) for b in collectives.default_names(40)[:i])
