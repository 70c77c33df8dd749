"""The scheduling core against brute force and hand-checked cases."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from lab.errors import LabError
from lab.modelled.opgraph import trace
from lab.view.placement.plans import schedule_runs
from lab.modelled.placement import (
    STRATEGIES,
    PlacementSchedule,
    TaskGraph,
    chain_dp,
    chain_partition,
    coarsen,
    compare_plans,
    compare_strategies,
    device_usage,
    even_rounds,
    even_split,
    greedy_eft,
    heft,
    model_task_graph,
    optimal,
    partition_chain,
    plan_record,
    reasons,
    replay,
    round_robin,
    schedule_assignment,
    schedule_table,
    single_fastest,
    transfer_rows,
    type_rule,
    why,
)
from lab.scenario.catalogue import preset

# ----- helpers ---------------------------------------------------------------------------------------

def rand_graph(n: int, m: int, seed: int, p: float = 0.4, pair_links: bool = False, twins: bool = False) -> TaskGraph:
    """A random DAG: tasks t0..t(n-1) (edges only forward), devices d0..d(m-1), some without kernels.
    ``pair_links``: transfers in bytes with a device-pair-dependent link_time. ``twins``: the last
    device is an exact copy of the first (symmetric links)."""
    rng = random.Random(seed)
    devs = [f"d{j}" for j in range(m)]
    base = devs[:-1] if twins and m > 1 else devs
    comp = {}
    for i in range(n):
        row = {d: round(rng.uniform(1, 10), 3) for d in base if rng.random() > 0.2}
        if not row:
            row = {base[rng.randrange(len(base))]: round(rng.uniform(1, 10), 3)}
        if twins and m > 1 and devs[0] in row:
            row[devs[-1]] = row[devs[0]]
        comp[f"t{i}"] = row
    tr = {(f"t{i}", f"t{j}"): round(rng.uniform(0, 6), 3) for i in range(n) for j in range(i + 1, n)
          if rng.random() < p}
    if pair_links:
        lat = {(a, b): rng.uniform(0, 2) for a in devs for b in devs}
        if twins and m > 1:
            for c in devs:
                lat[(devs[-1], c if c != devs[0] else devs[-1])] = lat[(devs[0], c)]
                lat[(c if c != devs[0] else devs[-1], devs[-1])] = lat[(c, devs[0])]

        def link_time(a, b, nbytes):
            return lat[(a, b)] + nbytes / 2.0

        return TaskGraph(comp, tr, link_time, devices=devs)
    return TaskGraph(comp, tr, devices=devs)


def brute_force(g: TaskGraph) -> float:
    """Minimum makespan over every assignment to capable devices and every topological order, each
    task appended to its device's queue as early as possible."""
    preds = {t: [u for (u, v) in g.transfer if v == t] for t in g.tasks}
    orders = []
    for perm in itertools.permutations(g.tasks):
        done: set = set()
        if all(not (set(preds[t]) - done) and not done.add(t) for t in perm):
            orders.append(perm)
    caps = [[d for d in g.devices if g.can_run(t, d)] for t in g.tasks]
    best = math.inf
    for choice in itertools.product(*caps):
        a = dict(zip(g.tasks, choice))
        for perm in orders:
            avail = dict.fromkeys(g.devices, 0.0)
            fin: dict = {}
            for t in perm:
                d = a[t]
                r = max([fin[p] + g.transfer_time(p, t, a[p], d) for p in preds[t]], default=0.0)
                fin[t] = max(avail[d], r) + g.compute_time(t, d)
                avail[d] = fin[t]
            best = min(best, max(fin.values()))
    return best


CASES = [(seed, random.Random(seed).randint(2, 5), random.Random(seed + 99).randint(1, 3)) for seed in range(36)]


# ----- brute force ----------------------------------------------------------------------------------

@pytest.mark.parametrize("seed,n,m", CASES)
def test_optimal_equals_exhaustive_search_and_heuristics_never_beat_it(seed, n, m):
    g = rand_graph(n, m, seed, p=random.Random(seed).random(), pair_links=seed % 3 == 0, twins=seed % 4 == 1)
    want = brute_force(g)
    opt = optimal(g).validate(g)
    assert opt.makespan == pytest.approx(want, rel=1e-9)
    for strategy in (greedy_eft, heft, single_fastest, round_robin, even_split, chain_dp):
        try:
            s = strategy(g)
        except LabError:
            continue
        s.validate(g)
        assert s.makespan >= want * (1 - 1e-9), s.strategy


@pytest.mark.parametrize("seed", range(6))
def test_optimal_on_larger_graphs_is_valid_and_below_heuristics(seed):
    g = rand_graph(9, 3, 100 + seed, p=0.3, twins=seed % 2 == 0)
    opt = optimal(g).validate(g)
    assert opt.makespan <= heft(g).makespan + 1e-12
    assert opt.makespan <= greedy_eft(g).makespan + 1e-12
    assert opt.extra["search_nodes"] >= 1


def test_optimal_refuses_big_graphs_with_a_clear_message():
    g = rand_graph(13, 2, 1)
    with pytest.raises(LabError, match="limited to 12 tasks.*13"):
        optimal(g)
    with pytest.raises(LabError, match="did not finish"):
        optimal(rand_graph(12, 4, 7, p=0.1), node_limit=5)


# ----- hand-checked cases ---------------------------------------------------------------------------

def test_two_tasks_worth_splitting():
    g = TaskGraph({"a": {"x": 1, "y": 5}, "b": {"x": 5, "y": 1}}, {("a", "b"): 1.0})
    for s in (greedy_eft(g), heft(g), optimal(g)):
        s.validate(g)
        assert s.makespan == pytest.approx(3.0)
        assert s.assignment == {"a": "x", "b": "y"}
    assert single_fastest(g).makespan == 6.0


def test_greedy_appends_while_heft_inserts_into_a_gap():
    # b waits 3 s for a's output on Q; c (0.5 s, Q only) fits in the idle gap before b.
    g = TaskGraph({"a": {"P": 1}, "b": {"Q": 1}, "c": {"Q": 0.5}}, {("a", "b"): 3.0})
    gr, he, op = greedy_eft(g), heft(g), optimal(g)
    assert gr.slots["c"] == ("Q", 5.0, 5.5) and gr.makespan == 5.5
    assert he.slots["c"] == ("Q", 0.0, 0.5) and he.makespan == 5.0
    assert op.makespan == 5.0
    for s in (gr, he, op):
        s.validate(g)


def test_greedy_keeps_the_given_order_where_dependencies_allow():
    g = TaskGraph({"z": {"d": 1}, "y": {"d": 2}, "x": {"d": 3}})
    s = greedy_eft(g)
    assert [s.slots[t][1] for t in ("z", "y", "x")] == [0.0, 1.0, 3.0]
    g2 = TaskGraph({"z": {"d": 1}, "y": {"d": 2}, "x": {"d": 3}}, {("x", "z"): 0.0})
    s2 = greedy_eft(g2)
    # the lexicographically smallest topological order: y (given before x) first, z once x is done
    assert g2.topological_order() == ["y", "x", "z"]
    assert (s2.slots["y"][1], s2.slots["x"][1], s2.slots["z"][1]) == (0.0, 2.0, 5.0)


def test_greedy_counts_the_queue_and_input_arrival():
    # Both devices equally fast; the second task lands on the idle device, the third waits for input.
    g = TaskGraph({"a": {"p": 2, "q": 2}, "b": {"p": 2, "q": 2}, "c": {"p": 1, "q": 1}},
                  {("a", "c"): 0.5, ("b", "c"): 0.5})
    s = greedy_eft(g).validate(g)
    assert s.slots["a"] == ("p", 0.0, 2.0)
    assert s.slots["b"] == ("q", 0.0, 2.0)
    assert s.slots["c"] == ("p", 2.5, 3.5)  # input from b on q arrives at 2.5


def test_heft_rank_order():
    g = TaskGraph({"a": {"p": 4, "q": 2}, "b": {"p": 1, "q": 1}, "c": {"p": 3, "q": 3}}, {("a", "b"): 2.0})
    from lab.modelled.placement import upward_ranks

    r = upward_ranks(g)
    assert r == pytest.approx([3 + 2 + 1, 1, 3])


def test_pair_dependent_transfers():
    lat = {("p", "q"): 1.0, ("q", "p"): 10.0}
    g = TaskGraph({"a": {"p": 1, "q": 1}, "b": {"p": 1, "q": 1}}, {("a", "b"): 100.0},
                  lambda u, v, nbytes: lat[(u, v)] + nbytes / 100.0, devices=["p", "q"])
    assert g.transfer_time("a", "b", "p", "q") == 2.0
    assert g.transfer_time("a", "b", "q", "p") == 11.0
    assert g.transfer_time("a", "b", "q", "q") == 0.0
    s = schedule_assignment(g, {"a": "q", "b": "p"})
    assert s.slots["b"] == ("p", 12.0, 13.0)


def test_baselines_on_a_model():
    topo = preset("cxl")
    g = model_task_graph("cnn", topo, batch_size=16)
    s = type_rule(g).validate(g)
    want = {"conv": "fpga", "elementwise": "asic", "matmul": "gpu", "pool": "host"}
    for t, d in s.assignment.items():
        assert d == want[g.task_class(t)], t
    rr = round_robin(g).validate(g)
    topo_order = g.topological_order()
    assert rr.assignment[topo_order[0]] == "host"
    assert rr.assignment[topo_order[1]] == "gpu"  # act1 after conv1 on the next device with a kernel
    sf = single_fastest(g).validate(g)
    assert set(sf.assignment.values()) == {"gpu"}
    ev = even_split(g).validate(g)
    devs = [ev.assignment[t] for t in topo_order]
    assert devs == ["host"] * 5 + ["gpu"] * 4  # host and gpu have every kernel: 9 layers -> 5 + 4
    er = even_rounds(g).validate(g)
    devs = [er.assignment[t] for t in topo_order]
    assert devs == ["host"] * 3 + ["gpu"] * 2 + ["host"] * 2 + ["gpu"] * 2  # 9 layers in 4 blocks, round twice


def test_even_rounds_is_the_plan_interleaved_1f1b_runs_and_1f1b_does_not():
    g = TaskGraph({f"l{i}": {"p": 1.0, "q": 1.0, "r": 1.0} for i in range(13)},
                  {(f"l{i}", f"l{i + 1}"): 4.0 for i in range(12)})
    devs = [even_rounds(g).assignment[t] for t in g.topological_order()]
    pieces = [d for i, d in enumerate(devs) if i == 0 or d != devs[i - 1]]
    assert pieces == ["p", "q", "r"] * 2  # six stretches, piece k on device k mod 3
    assert [len(list(run)) for _, run in itertools.groupby(devs)] == [3, 2, 2, 2, 2, 2]  # 13 tasks, even blocks
    assert schedule_runs(g, even_rounds(g).assignment, "interleaved_1f1b", 4)
    assert not schedule_runs(g, even_rounds(g).assignment, "1f1b", 4)
    assert schedule_runs(g, even_split(g).assignment, "1f1b", 4)
    # Fewer tasks than twice the devices: one block per task, still round the devices.
    small = TaskGraph({f"l{i}": {"p": 1.0, "q": 1.0} for i in range(3)}, {("l0", "l1"): 1.0, ("l1", "l2"): 1.0})
    assert [even_rounds(small).assignment[t] for t in ("l0", "l1", "l2")] == ["p", "q", "p"]


def test_round_robin_skips_devices_without_a_kernel():
    g = TaskGraph({"a": {"p": 1, "q": 1}, "b": {"p": 1}, "c": {"p": 1, "q": 1}, "d": {"p": 1, "q": 1}})
    assert round_robin(g).assignment == {"a": "p", "b": "p", "c": "q", "d": "p"}


def test_type_rule_needs_classes():
    with pytest.raises(LabError, match="operator class"):
        type_rule(TaskGraph({"a": {"p": 1}}))


def test_from_model_uses_the_cost_model():
    topo = preset("pcie")
    og = trace("mlp", 8)
    g = TaskGraph.from_model(og, topo, speed={"gpu": 0.5})
    op = og.op("net_0")
    assert g.compute_time("net_0", "gpu") == pytest.approx(op.flops / (19.5e12 * 0.5))
    assert g.compute_time("net_0", "host") == pytest.approx(op.flops / 2e12)
    assert not g.can_run("net_0", "fpga")
    assert g.transfer[("net_0", "net_1")] == og.op("net_0").out_bytes
    assert g.transfer_time("net_0", "net_1", "gpu", "fpga") == pytest.approx(
        topo.transfer_time("gpu", "fpga", og.op("net_0").out_bytes))
    assert g.capacity[g.devices.index("asic")] == topo.device("asic").memory


def test_model_needing_a_missing_kernel_is_a_clear_error():
    from lab.scenario.topology import Device, Topology

    only_conv = Topology("t", (Device("f", "fpga", throughput={"conv": 1e12}),), ())
    with pytest.raises(LabError, match="no device .* 'matmul' kernel"):
        model_task_graph("mlp", only_conv)


@pytest.mark.parametrize("topo", ["cxl", "pcie", "two-pools", "gpu-npu", "edge"])
@pytest.mark.parametrize("model", ["mlp", "cnn", "resnet", "transformer"])
def test_every_strategy_gives_a_valid_schedule_on_every_preset(topo, model):
    g = model_task_graph(model, preset(topo), batch_size=64)
    coarse, groups = coarsen(g, 12)
    rows = compare_strategies(coarse)
    opt = next(r for r in rows if r["strategy"] == "optimal")["makespan"]
    assert opt is not None
    for r in rows:
        if r["makespan"] is not None:
            assert r["makespan"] >= opt * (1 - 1e-9), r
    for name in ("greedy_eft", "heft", "type_rule", "single_fastest", "round_robin", "even_split"):
        STRATEGIES[name](g).validate(g)


# ----- validation ------------------------------------------------------------------------------------

def _g():
    return TaskGraph({"a": {"p": 1, "q": 2}, "b": {"p": 1}}, {("a", "b"): 1.0})


@pytest.mark.parametrize("slots,match", [
    ({"a": ("p", 0, 1)}, "without a slot"),
    ({"a": ("q", 0, 2), "b": ("p", 2, 3)}, "before its input"),
    ({"a": ("p", 0, 1), "b": ("p", 0.5, 1.5)}, "before its input|overlap"),
    ({"a": ("p", 0, 1), "b": ("q", 1, 2)}, "no kernel"),
    ({"a": ("p", 0, 2), "b": ("p", 2, 3)}, "lasts"),
    ({"a": ("z", 0, 1), "b": ("p", 1, 2)}, "not a device"),
])
def test_validate_names_the_broken_rule(slots, match):
    span = max(f for _, _, f in slots.values())
    with pytest.raises(LabError, match=match):
        PlacementSchedule("hand", slots, span).validate(_g())


def test_validate_catches_overlap_and_wrong_makespan():
    g = TaskGraph({"a": {"p": 1}, "b": {"p": 1}})
    with pytest.raises(LabError, match="overlap"):
        PlacementSchedule("x", {"a": ("p", 0, 1), "b": ("p", 0.5, 1.5)}, 1.5).validate(g)
    with pytest.raises(LabError, match="makespan"):
        PlacementSchedule("x", {"a": ("p", 0, 1), "b": ("p", 1, 2)}, 3.0).validate(g)
    PlacementSchedule("x", {"a": ("p", 0, 1), "b": ("p", 1, 2)}, 2.0).validate(g)


@pytest.mark.parametrize("compute,transfer,match", [
    ({}, None, "non-empty"),
    ({"a": {"p": 1}, "b": {"p": 1}}, {("a", "b"): 1, ("b", "a"): 1}, "cycle"),
    ({"a": {"p": math.inf}}, None, "no device with a kernel"),
    ({"a": {"p": -1}}, None, "non-negative"),
    ({"a": {"p": 1}}, {("a", "z"): 1}, "not a task"),
    ({"a": {"p": 1}}, {("a", "a"): 1}, "itself"),
    ({"a": {"p": 1}, "b": {"p": 1}}, {("a", "b"): float("nan")}, "non-negative"),
])
def test_task_graph_rejects_bad_input(compute, transfer, match):
    with pytest.raises(LabError, match=match):
        TaskGraph(compute, transfer)


# ----- chain partition -------------------------------------------------------------------------------

def _chain_brute(times, cut, mem, cap, any_order=False):
    L, M = times.shape
    best = math.inf
    for assign in itertools.product(range(M), repeat=L):
        runs = [assign[0]] + [b for a, b in zip(assign, assign[1:]) if a != b]
        if len(set(runs)) != len(runs):
            continue  # a device used for two separate blocks
        if not any_order and runs != sorted(runs):
            continue
        val, ok = 0.0, True
        for j in set(assign):
            idx = [l for l in range(L) if assign[l] == j]
            if sum(mem[idx]) > cap[j] or not np.isfinite(times[idx, j]).all():
                ok = False
            val = max(val, float(sum(times[idx, j])))
        for k in range(L - 1):
            if assign[k] != assign[k + 1]:
                val = max(val, float(cut[k, assign[k], assign[k + 1]]))
        if ok:
            best = min(best, val)
    return best


@pytest.mark.parametrize("seed", range(30))
def test_chain_dp_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    L, M = int(rng.integers(1, 7)), int(rng.integers(1, 4))
    times = rng.uniform(0.5, 5, (L, M))
    times[rng.random((L, M)) < 0.15] = math.inf
    cut = rng.uniform(0, 4, (max(L - 1, 0), M, M))
    mem = rng.uniform(0, 3, L)
    cap = rng.uniform(2, 12, M)
    want = _chain_brute(times, cut, mem, cap)
    if math.isinf(want):
        with pytest.raises(LabError):
            partition_chain(times, cut, mem, cap)
        return
    got, stages = partition_chain(times, cut, mem, cap)
    assert got == pytest.approx(want)
    # the stages returned achieve the value and respect order, contiguity and memory
    assert stages[0][1] == 0 and stages[-1][2] == L
    assert [s[0] for s in stages] == sorted({s[0] for s in stages})
    val = 0.0
    for (j, a, b), nxt in itertools.zip_longest(stages, stages[1:]):
        assert mem[a:b].sum() <= cap[j] + 1e-12
        val = max(val, times[a:b, j].sum())
        if nxt:
            assert nxt[1] == b
            val = max(val, cut[b - 1, j, nxt[0]])
    assert val == pytest.approx(want)


def test_chain_best_order_equals_brute_force_over_orders():
    rng = np.random.default_rng(5)
    comp = {f"l{i}": {f"d{j}": float(rng.uniform(1, 5)) for j in range(3)} for i in range(6)}
    tr = {(f"l{i}", f"l{i + 1}"): float(rng.uniform(0, 3)) for i in range(5)}
    g = TaskGraph(comp, tr)
    times = g.C[g.topo]
    cut = np.zeros((5, 3, 3))
    for k in range(5):
        cut[k] = tr[(f"l{k}", f"l{k + 1}")]
    plan = chain_partition(g, best_order=True)
    assert plan.searched_orders == 6
    assert plan.bottleneck == pytest.approx(_chain_brute(times, cut, np.zeros(6), np.full(3, np.inf), any_order=True))
    fixed = chain_partition(g)
    assert fixed.bottleneck >= plan.bottleneck - 1e-12
    s = chain_dp(g).validate(g)
    assert s.extra["bottleneck"] == pytest.approx(plan.bottleneck)


def test_chain_cut_counts_skip_edges_and_pair_links():
    # a -> b -> c with a skip edge a -> c: the cut between b and c carries both a's and b's output.
    g = TaskGraph({"a": {"p": 1, "q": 1}, "b": {"p": 1, "q": 1}, "c": {"p": 1, "q": 1}},
                  {("a", "b"): 10.0, ("b", "c"): 20.0, ("a", "c"): 30.0},
                  lambda u, v, nbytes: 0.5 + nbytes, devices=["p", "q"])
    from lab.modelled.placement.search import _chain_arrays

    _, cut = _chain_arrays(g)
    assert cut[0, 0, 1] == pytest.approx(2 * 0.5 + 40.0)  # after a: a->b and a->c
    assert cut[1, 0, 1] == pytest.approx(2 * 0.5 + 50.0)  # after b: b->c and a->c


def test_chain_respects_memory():
    g = TaskGraph({f"l{i}": {"p": 1.0, "q": 1.0} for i in range(4)}, {}, memory={f"l{i}": 1.0 for i in range(4)},
                  capacity={"p": 1.0, "q": 3.0})
    plan = chain_partition(g)
    assert [len(ts) for _, ts in plan.stages] == [1, 3]
    g2 = TaskGraph({f"l{i}": {"p": 1.0} for i in range(2)}, {}, memory={"l0": 2, "l1": 2}, capacity={"p": 3})
    with pytest.raises(LabError, match="no contiguous split"):
        chain_partition(g2)


# ----- coarsening, replay, tables ------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_coarsen_keeps_a_valid_dag_and_bounds_the_optimum_from_above(seed):
    g = rand_graph(8, 2, 300 + seed, p=0.35)
    cg, groups = coarsen(g, 5)
    assert len(cg) <= 5
    assert sorted(t for ms in groups.values() for t in ms) == sorted(g.tasks)
    for name, ms in groups.items():
        for d in g.devices:
            want = sum(g.compute_time(t, d) for t in ms)
            assert cg.compute_time(name, d) == pytest.approx(want) or (math.isinf(want) and not cg.can_run(name, d))
    assert optimal(cg).makespan >= optimal(g).makespan - 1e-9


def test_replay_of_an_append_schedule_reproduces_it():
    g = rand_graph(10, 3, 42, p=0.3)
    s = greedy_eft(g)
    r = replay(g, s)
    for t in g.tasks:
        assert r.slots[t][0] == s.slots[t][0]
        assert r.slots[t][1] == pytest.approx(s.slots[t][1])
    slower = g.scaled(lambda t, d: 2.0)
    assert replay(slower, s).makespan >= s.makespan


def test_tables():
    g = model_task_graph("mlp", preset("cxl"), batch_size=8)
    s = heft(g)
    rows = schedule_table(g, s)
    assert [r["task"] for r in rows] == g.topological_order()
    assert rows[0]["class"] == "matmul" and rows[0]["flops"] == 2 * 8 * 64 * 128
    assert set(rows[0]["times"]) == set(g.devices)
    use = device_usage(g, s)
    for u in use:
        assert u["busy"] + u["idle"] == pytest.approx(s.makespan)
        assert not u["over"]
    tiny = TaskGraph({"a": {"p": 1}}, memory={"a": 10}, capacity={"p": 5})
    assert device_usage(tiny, greedy_eft(tiny))[0]["over"]


# ----- pins ----------------------------------------------------------------------------------------------

def brute_force_pinned(g: TaskGraph, pins: dict) -> float:
    """:func:`brute_force` over the assignments of the unpinned graph that honour ``pins``, written
    independently of TaskGraph.with_pins."""
    preds = {t: [u for (u, v) in g.transfer if v == t] for t in g.tasks}
    orders = [perm for perm in itertools.permutations(g.tasks)
              if all(set(preds[t]) <= set(perm[:k]) for k, t in enumerate(perm))]
    caps = [[pins[t]] if t in pins else [d for d in g.devices if g.can_run(t, d)] for t in g.tasks]
    best = math.inf
    for choice in itertools.product(*caps):
        a = dict(zip(g.tasks, choice))
        for perm in orders:
            avail = dict.fromkeys(g.devices, 0.0)
            fin: dict = {}
            for t in perm:
                d = a[t]
                r = max([fin[p] + g.transfer_time(p, t, a[p], d) for p in preds[t]], default=0.0)
                fin[t] = max(avail[d], r) + g.compute_time(t, d)
                avail[d] = fin[t]
            best = min(best, max(fin.values()))
    return best


def random_pins(g: TaskGraph, seed: int) -> dict:
    rng = random.Random(seed)
    pins = {}
    for t in g.tasks:
        if rng.random() < 0.4:
            pins[t] = rng.choice([d for d in g.devices if g.can_run(t, d)])
    return pins


PIN_CASES = [(seed, random.Random(seed).randint(2, 5), random.Random(seed + 7).randint(2, 3)) for seed in range(30)]


@pytest.mark.parametrize("seed,n,m", PIN_CASES)
def test_every_strategy_honours_the_pins_and_optimal_is_the_pinned_brute_force(seed, n, m):
    g = rand_graph(n, m, seed, p=random.Random(seed).random(), pair_links=seed % 3 == 0)
    pins = random_pins(g, seed)
    gp = g.with_pins(pins)
    assert gp.pins == pins and g.pins == {}
    want = brute_force_pinned(g, pins)
    opt = optimal(gp).validate(gp).validate(g)
    assert opt.makespan == pytest.approx(want, rel=1e-9)
    assert all(opt.slots[t][0] == d for t, d in pins.items())
    assert brute_force(g) <= want * (1 + 1e-9)  # a pin can only cost
    for strategy in (greedy_eft, heft, single_fastest, round_robin, even_split, chain_dp):
        try:
            s = strategy(gp)
        except LabError as exc:
            # only the strategies that need one device for everything, or contiguous stages, may refuse
            assert strategy in (single_fastest, even_split, chain_dp), exc
            continue
        s.validate(g)
        assert all(s.slots[t][0] == d for t, d in pins.items()), s.strategy
        assert s.makespan >= want * (1 - 1e-9), s.strategy
        again = replay(gp, s)
        assert all(again.slots[t][0] == d for t, d in pins.items())


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
def test_every_named_strategy_honours_pins_on_a_model(model):
    g = model_task_graph(model, preset("cxl"))
    for seed in range(4):
        pins = random_pins(g, seed)
        gp = g.with_pins(pins)
        for name in STRATEGIES:
            try:
                if name == "optimal" and len(gp) > 12:
                    coarse, groups = coarsen(gp, 12)
                    cs = optimal(coarse).validate(coarse)
                    s = schedule_assignment(g, {t: cs.slots[k][0] for k, ms in groups.items() for t in ms})
                else:
                    s = STRATEGIES[name](gp).validate(g)
            except LabError as exc:  # contiguous stages cannot honour pins that interleave two devices
                assert name == "chain_dp" and "unbroken run of layers" in str(exc)
                continue
            assert {t: s.slots[t][0] for t in pins} == pins, name
        # the pins survive rescaling (the balancing loop re-plans with scaled times)
        s = greedy_eft(gp.scaled(lambda t, d: 3.0 if d == "gpu" else 1.0))
        assert {t: s.slots[t][0] for t in pins} == pins


def test_pinning_conv1_to_the_fpga_moves_it_there():
    g = model_task_graph("cnn", preset("cxl"))
    free = greedy_eft(g)
    assert free.slots["conv1"][0] != "fpga"
    pinned = greedy_eft(g.with_pins({"conv1": "fpga"}))
    assert pinned.slots["conv1"][0] == "fpga"
    assert pinned.makespan >= optimal(g).makespan * (1 - 1e-9)


def test_pins_carry_through_coarsening():
    g = model_task_graph("resnet", preset("cxl"))
    gp = g.with_pins({"blocks_1_conv1": "fpga"})
    coarse, groups = coarsen(gp, 12)
    group = next(k for k, ms in groups.items() if "blocks_1_conv1" in ms)
    assert coarse.pins == {group: "fpga"}
    s = optimal(coarse).validate(coarse)
    assert s.slots[group][0] == "fpga"


@pytest.mark.parametrize("pins,match", [
    ({"conv1": "asic"}, r"'conv1' cannot be pinned to 'asic': that device has no kernel for its class 'conv'"),
    ({"conv1": "tpu"}, r"'conv1' is pinned to 'tpu', which is not a device"),
    ({"embed": "gpu"}, r"'embed' is pinned to 'gpu', but this model has no operator 'embed'"),
])
def test_impossible_pins_are_clear_errors(pins, match):
    g = model_task_graph("cnn", preset("cxl"))
    with pytest.raises(LabError, match=match):
        g.with_pins(pins)


def test_schedule_assignment_refuses_to_break_a_pin():
    g = model_task_graph("cnn", preset("cxl")).with_pins({"conv1": "fpga"})
    a = greedy_eft(g).assignment | {"conv1": "gpu"}
    with pytest.raises(LabError, match="pinned to 'fpga'"):
        schedule_assignment(g, a)


# ----- why ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(12))
def test_why_adds_up_and_the_greedy_choice_is_the_earliest_finish(seed):
    g = rand_graph(random.Random(seed).randint(3, 8), 3, seed, p=0.5, pair_links=seed % 2 == 0)
    pins = random_pins(g, seed)
    gp = g.with_pins(pins)
    for s in (greedy_eft(gp), heft(gp), round_robin(gp)):
        for t in gp.tasks:
            rows = why(gp, s, t)
            assert [r["device"] for r in rows] == gp.devices
            chosen = [r for r in rows if r["chosen"]]
            assert len(chosen) == 1 and chosen[0]["device"] == s.slots[t][0]
            assert chosen[0]["finish"] == pytest.approx(s.slots[t][2], rel=1e-12, abs=1e-12)
            for r in rows:
                assert r["kernel"] == gp.can_run(t, r["device"]) or t in pins
                if r["kernel"]:
                    assert min(r["transfer"], r["wait"], r["compute"]) >= 0
                    assert r["inputs_at"] + r["transfer"] + r["wait"] + r["compute"] == pytest.approx(r["finish"])
                else:
                    assert r["finish"] is None
            allowed = [r["finish"] for r in rows if r["allowed"] and r["kernel"]]
            if s.strategy == "greedy_eft":
                assert chosen[0]["finish"] == min(allowed)
            if t in pins:
                assert [r["device"] for r in rows if r["allowed"]] == [pins[t]]


def test_reasons_name_the_candidates_and_the_pins():
    g = model_task_graph("cnn", preset("cxl")).with_pins({"conv1": "fpga"})
    s = greedy_eft(g)
    r = reasons(g, s)
    assert r["conv1"].startswith("pinned")
    assert "earliest finish of" in r["fc1"] and "next best" in r["fc1"]
    rows = why(g, s, "conv1")
    assert next(x for x in rows if x["device"] == "gpu")["allowed"] is False
    assert next(x for x in rows if x["device"] == "asic")["kernel"] is False


def test_transfer_rows_are_the_edges_between_devices():
    g = model_task_graph("cnn", preset("cxl")).with_pins({"conv1": "fpga"})
    s = greedy_eft(g).validate(g)
    rows = transfer_rows(g, s)
    crossing = [(u, v) for (u, v) in g.transfer if s.slots[u][0] != s.slots[v][0]]
    assert [(r["producer"], r["consumer"]) for r in rows] == crossing and rows
    for r in rows:
        assert r["start"] == s.slots[r["producer"]][2]
        assert r["start"] < r["finish"] <= s.slots[r["consumer"]][1] + 1e-15
        assert r["bytes"] == g.transfer[(r["producer"], r["consumer"])]


def test_compare_plans_summarises_a_pin():
    g = model_task_graph("cnn", preset("cxl"))
    base = plan_record("cnn", 32, "greedy_eft", {}, greedy_eft(g))
    pinned = greedy_eft(g.with_pins({"conv1": "host"}))
    now = plan_record("cnn", 32, "greedy_eft", {"conv1": "host"}, pinned)
    summary, rows = compare_plans(base, now)
    rel = 100 * (pinned.makespan / base["makespan"] - 1)
    assert summary == f"conv1 pinned to host: makespan {rel:+.1f} %" and rel > 0
    by = {r["device"]: r for r in rows}
    assert by["makespan"]["now"] == pinned.makespan
    assert by["host"]["now"] == pytest.approx(pinned.busy()["host"])
    assert compare_plans(now, base)[0].startswith("conv1 unpinned: makespan -")


# ----- pins in the Scenario ---------------------------------------------------------------------------------

def test_pins_round_trip_through_dict_json_and_link():
    from lab.scenario.document import Scenario, default_scenario

    sc = default_scenario()
    pinned = sc.replace(training=sc.training.replace(pins={"fc1": "gpu", "conv1": "fpga"}))
    assert pinned.training.pins == (("conv1", "fpga"), ("fc1", "gpu"))
    assert pinned.to_dict()["training"]["pins"] == {"conv1": "fpga", "fc1": "gpu"}
    assert Scenario.from_dict(pinned.to_dict()) == pinned
    assert Scenario.from_json(pinned.to_json()) == pinned
    assert Scenario.from_url_param(pinned.to_url_param()) == pinned
    assert sc.training.pins == () and Scenario.from_json(sc.to_json()) == sc
    old = sc.to_dict()
    del old["training"]["pins"]  # a file written before pins existed
    assert Scenario.from_dict(old) == sc


@pytest.mark.parametrize("pins,match", [
    ({"conv1": "tpu"}, r"'conv1' is pinned to 'tpu', which is not a device of topology"),
    ({"conv1": 3}, "every device name must be a non-empty string"),
    ({"": "gpu"}, "every operator name must be a non-empty string"),
    ({"x" * 201: "gpu"}, "at most 200 characters"),
    ({f"op{i}": "gpu" for i in range(257)}, "at most 256"),
    (["conv1"], "must map operator names to device names"),
])
def test_bad_pins_in_a_scenario_file_are_clear_errors(pins, match):
    from lab.scenario.document import Scenario, default_scenario

    d = default_scenario().to_dict()
    d["training"]["pins"] = pins
    with pytest.raises(LabError, match=match):
        Scenario.from_dict(d)


def test_gantt_draws_transfers_on_receiving_lanes_and_marks_tiny_bars():
    from lab.figures.placement import MIN_VISIBLE, gantt_figure, receive_lane

    g = model_task_graph("cnn", preset("cxl")).with_pins({"conv1": "fpga"})
    s = type_rule(g)
    transfers = transfer_rows(g, s)
    why_line = reasons(g, s)
    fig = gantt_figure(schedule_table(g, s), g.devices, "t", transfers, why_line)
    moved = next(t for t in fig.data if t.name == "transfer (arriving)")
    assert sorted(moved.y) == sorted(receive_lane(t["dst"]) for t in transfers)
    lanes = list(fig.layout.yaxis.categoryarray)
    for d in {t["dst"] for t in transfers}:  # each receiving lane sits right under its device
        assert lanes.index(receive_lane(d)) == lanes.index(d) - 1
    hovers = " ".join(h for t in fig.data if t.type == "bar" for h in (t.hovertext or ()))
    assert why_line["conv1"] in hovers and "(conv)" in hovers
    span = max([r["finish"] for r in schedule_table(g, s)] + [t["finish"] for t in transfers])
    tiny = sum(1 for d, a, b in s.slots.values() if b - a < MIN_VISIBLE * span)
    tiny += sum(1 for t in transfers if t["finish"] - t["start"] < MIN_VISIBLE * span)
    markers = sum(len(t.x) for t in fig.data if t.type == "scatter")
    assert tiny > 0 and markers == tiny
