"""What the Topology page computes for a topology at the size caps stays bounded and still right:
the CXL/PCIe comparison's rows are a bounded set of pairs while its range covers every pair (against
the routes pair by pair), the heatmap carries numbers, not a sentence per cell, and the drawing's
layout is a fixed-work one, computed once per graph."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from lab.figures import topology as figures
from lab.view import topology_tables as tables
from lab.scenario.catalogue import preset
from lab.testing.caps import cap_topology
from lab.view import topology as view


@pytest.fixture(scope="module")
def star():
    return cap_topology("star")


def test_the_comparison_draws_a_bounded_set_of_pairs_and_ranges_over_all(star):
    other = tables.as_pcie(star)
    df, span = tables.compare_designs(star, other, 1e6, ("mine", "pcie"))
    devices = [d.name for d in star.devices if d.type != "cpu"]
    shown, total = df.attrs["pairs"]
    assert total == len(devices) * (len(devices) - 1) // 2 and shown <= tables.MAX_COMPARED_PAIRS
    assert df.pair.nunique() == shown == len(df) // 2
    first = devices[:int((1 + (1 + 8 * shown) ** 0.5) / 2)]  # the pairs of the first devices, in order
    assert list(df.pair.unique()) == [f"{a}→{b}" for a, b in itertools.combinations(first, 2)]
    ratios = [other.path(a, b).time(1e6) / star.path(a, b).time(1e6) for a, b in itertools.combinations(devices, 2)]
    assert span == (min(ratios), max(ratios))
    text = view.comparison_text(span, 1.0, "PCIe", "B", df.attrs["pairs"])
    assert f"first {shown:,} of the {total:,} pairs" in text


def test_a_small_comparison_draws_every_pair_and_says_nothing_more():
    cxl = preset("cxl")
    df, span = tables.compare_designs(cxl, tables.as_pcie(cxl), 1e6, ("mine", "pcie"))
    assert df.attrs["pairs"] == (6, 6)
    assert "bars show" not in view.comparison_text(span, 1.0, "PCIe", "B", df.attrs["pairs"])


def test_the_heatmap_at_the_caps_carries_each_cells_numbers(star):
    m = star.path_matrix(1e6)
    trace = figures.path_heatmap(m, 1e6).data[0]
    assert trace.hovertext is None and "customdata[0]" in trace.hovertemplate
    data = np.asarray(trace.customdata)
    assert data.shape == (256, 256, 3)
    i, j = 3, 200
    assert list(data[i, j]) == [m["bottleneck"][i][j], m["latency"][i][j], m["hops"][i][j]]
    assert np.isnan(data[i, i, 0])
    assert np.asarray(trace.z)[i, j] == m["time"][i][j] * 1e6
    small = figures.path_heatmap(preset("two-pools").path_matrix(1e6), 1e6).data[0]
    assert "bottleneck" in small.hovertext[0][1]  # up to HOVER_TEXT_MAX devices: a sentence per cell


def test_the_layout_at_the_caps_is_computed_once_and_places_every_node(star, monkeypatch):
    first = figures.layout_positions(star)
    assert set(first) == set(star.graph.nodes) and all(np.isfinite(first[n]).all() for n in first)
    calls = []
    monkeypatch.setattr(figures.nx, "spring_layout", lambda *a, **k: calls.append(1))
    again = figures.layout_positions(cap_topology("star"))  # another session's equal topology
    assert again == first and calls == []


# ---- the All-reduce and Placement pages' work at the caps ----------------------------------------

def _reference_ring_key(topo, order):
    """The ring key as the ring search defines it, from each pair's route looked up one by one."""
    m = len(order)
    pairs = [(order[i], order[(i + 1) % m]) for i in range(m)]
    hops = {pr: [((u, v), l.bandwidth) for u, v, l in zip(topo.path(*pr).nodes, topo.path(*pr).nodes[1:],
                                                            topo.path(*pr).links)] for pr in pairs}
    use = {}
    for pr in pairs:
        for h, _ in hops[pr]:
            use[h] = use.get(h, 0) + 1
    slow = min(bw / use[h] for pr in pairs for h, bw in hops[pr])
    lats = [topo.path(*pr).latency for pr in pairs]
    return (-slow, round(max(lats), 12), round(sum(lats), 12))


def test_ring_keys_from_the_route_table_equal_routes_looked_up_one_by_one(star):
    from lab.modelled.collectives.explore import _RingEval

    names = [d.name for d in star.devices][:40]
    ev = _RingEval(star, names)
    rng = __import__("random").Random(1)
    for _ in range(20):
        order = rng.sample(names, len(names))
        assert ev.key(order) == _reference_ring_key(star, order)


@pytest.mark.parametrize("seed", range(6))
def test_the_ring_search_limit_never_binds_up_to_16_devices(seed):
    from tests.modelled.test_collectives import random_topology

    from lab.modelled import collectives

    topo = random_topology(300 + seed, 12 + seed % 5)
    names = topo.device_names
    bounded, free = collectives.heuristic_ring_order(topo, names), collectives.heuristic_ring_order(topo, names, work=10 ** 12)
    assert (bounded.names, bounded.evaluated) == (free.names, free.evaluated)
    assert "work limit" not in bounded.method


def test_the_ring_search_at_the_caps_stops_at_its_limit_with_a_valid_ring(star):
    from lab.modelled import collectives
    from lab.modelled.collectives.explore import RING_SEARCH_WORK

    names = collectives.default_participants(star)
    assert len(names) == 64
    r = collectives.heuristic_ring_order(star, names)
    assert "work limit" in r.method and r.evaluated * len(names) <= RING_SEARCH_WORK
    assert sorted(r.names) == sorted(names) and r.names[0] == names[0]
    assert -_reference_ring_key(star, list(r.names))[0] == r.slowest_hop_bandwidth


def test_sweeps_with_shared_routes_equal_each_schedule_timed_alone(star):
    from lab.modelled import collectives

    names = collectives.default_participants(star)[:20]
    setup = collectives.Setup(tuple(names), None, tuple(map(tuple, collectives.topology_groups(star, names))),
                    collectives.default_host(star, names))
    curves = {a: (a, setup) for a in collectives.ALGORITHMS}
    sizes = [4096, 1 << 20, 3 * (1 << 20) + 12]
    swept = collectives.sweep_sizes(star, curves, sizes)
    for label, (alg, s) in curves.items():
        assert swept[label] == (sizes, [collectives.schedule_time(s.schedule(alg, n), star).seconds for n in sizes])
    by_n = collectives.sweep_devices(star, curves, 1 << 20)
    from lab.modelled.collectives.explore import sweep_ns

    for label, (alg, s) in curves.items():
        assert by_n[label][0] == sweep_ns(20) == list(range(2, 21))
        assert by_n[label][1] == [collectives.schedule_time(s.prefix(k).schedule(alg, 1 << 20), star).seconds
                                  for k in by_n[label][0]]
    # and the messages of one step, with and without the kept routes
    sched = setup.schedule("ring", 1 << 20)
    shares: dict = {}
    for st in sched.steps[:3]:
        msgs = collectives.timing.step_messages(sched, st)
        assert collectives.messages_time(star, msgs, shares) == collectives.messages_time(star, msgs)


def test_sweep_against_n_takes_a_bounded_spread_of_n():
    from lab.modelled.collectives.explore import SWEEP_N_POINTS, sweep_ns

    assert sweep_ns(5) == [2, 3, 4, 5]
    for n in (26, 64, 256):
        ns = sweep_ns(n)
        assert ns[0] == 2 and ns[-1] == n and len(ns) <= SWEEP_N_POINTS and ns == sorted(set(ns))


def test_the_allreduce_page_explores_at_most_64_devices(star):
    from lab.errors import LabError
    from lab.modelled import collectives

    collectives.check_explored(collectives.default_participants(star))
    with pytest.raises(LabError, match="at least two"):
        collectives.check_explored(["d001"])
    with pytest.raises(LabError, match="at most 64 devices"):
        collectives.check_explored(star.device_names[:65])


def test_the_step_through_draws_one_step_whatever_the_schedules_size():
    """The page's one step control picks the step: the figure holds that step only (no frames of every step),
    so a schedule of 64 devices costs what a small one does per step."""
    from lab.figures.allreduce import step_figure
    from lab.modelled import collectives

    for n in (8, 64):
        s = collectives.build_schedule("ring", n, 1 << 20, with_state=True)
        fig = step_figure(s, 1, "ring")
        assert not fig.frames and not fig.layout.sliders and not fig.layout.updatemenus
        assert len(fig.data[3].y) == n  # the grid: one row per device


def test_the_placement_link_model_at_the_caps_equals_transfer_times():
    from lab.modelled.datasheet import LinkCost

    for shape in ("chain", "mesh"):
        topo = cap_topology(shape)
        cost = LinkCost(topo)
        rng = __import__("random").Random(2)
        for a, b in (rng.sample(topo.device_names, 2) for _ in range(200)):
            assert cost(a, b, 3e6) == pytest.approx(topo.transfer_time(a, b, 3e6), rel=1e-15)
            assert cost(a, a, 3e6) == 0.0
