"""The Placement page's helpers in lab.modelled.placement.explain: the graph a strategy runs on, the
comparison of every strategy, a plan's headline numbers, operator labels and over-full devices."""

from __future__ import annotations

import pytest

from lab.modelled.placement import (
    OPTIMAL_MAX_TASKS,
    STRATEGIES,
    TaskGraph,
    device_usage,
    graph_for,
    greedy_eft,
    model_task_graph,
    over_full,
    plan_metrics,
    strategy_comparison,
    task_labels,
    transfer_rows,
)
from lab.scenario.catalogue import preset


def _chain(n: int) -> TaskGraph:
    """n tasks in a chain, 1 s on p and 2 s on q, 0.5 s per transfer."""
    return TaskGraph({f"t{i}": {"p": 1.0, "q": 2.0} for i in range(n)},
                     {(f"t{i}", f"t{i + 1}"): 0.5 for i in range(n - 1)})


def test_graph_for_coarsens_only_the_exact_optimum_on_a_big_graph():
    big = _chain(14)
    assert OPTIMAL_MAX_TASKS == 12
    shown, note = graph_for("optimal", big)
    assert len(shown) == 12
    assert note == ("The exact search handles at most 12 tasks; this model has 14 operators, so it runs on a "
                    "coarsened graph of 12 groups (each group stays on one device, so this optimum is an upper "
                    "bound on the true one).")
    assert graph_for("heft", big) == (big, None)
    small = _chain(5)
    assert graph_for("optimal", small) == (small, None)


def test_strategy_comparison_on_a_small_graph_runs_every_strategy_once():
    rows, note = strategy_comparison(_chain(3))
    assert note is None
    assert [r["strategy"] for r in rows] == list(STRATEGIES)
    assert {r["graph"] for r in rows} == {"full graph (3 operators)"}
    by = {r["strategy"]: r for r in rows}
    assert by["optimal"]["makespan"] == 3.0 and by["optimal"]["gap"] == 0.0
    assert by["type_rule"]["makespan"] is None  # no device types: the rule cannot place anything


def test_strategy_comparison_on_a_big_graph_adds_the_coarsened_graph():
    rows, note = strategy_comparison(_chain(14))
    full = [r for r in rows if r["graph"] == "full graph (14 operators)"]
    coarse = [r for r in rows if r["graph"] == "coarsened graph (12 groups)"]
    assert len(full) + len(coarse) == len(rows)
    assert [r["strategy"] for r in full] == [n for n in STRATEGIES if n != "optimal"]
    assert [r["strategy"] for r in coarse] == list(STRATEGIES)
    assert all(r["gap"] is None for r in full)  # no optimum on the full graph
    by = {r["strategy"]: r for r in coarse}
    assert by["optimal"]["makespan"] == 14.0
    assert by["round_robin"]["makespan"] == 26.5 and by["round_robin"]["gap"] == pytest.approx(12.5 / 14)
    assert note == ("This model has 14 operators, more than the exact search takes, so every strategy also runs on "
                    "a coarsened graph of 12 groups (chains merged first; a group stays on one device). The "
                    "optimum and the gaps are for that graph.")


def test_plan_metrics_name_the_unit_and_count_devices_and_transfers():
    g = TaskGraph({"a": {"p": 1, "q": 5}, "b": {"p": 5, "q": 1}}, {("a", "b"): 1.0})
    s = greedy_eft(g)
    assert s.assignment == {"a": "p", "b": "q"} and s.makespan == 3.0
    assert plan_metrics(s, 7, transfer_rows(g, s), 1e3, "ms") == [
        ("Makespan (ms)", "3000"), ("Operators", 7), ("Devices used", 2), ("Transfers between devices", 1)]
    one = TaskGraph({"a": {"p": 1.23456}})
    assert plan_metrics(greedy_eft(one), 1, [], 1.0, "s") == [
        ("Makespan (s)", "1.235"), ("Operators", 1), ("Devices used", 1), ("Transfers between devices", 0)]


def test_task_labels_say_class_and_flops():
    g = model_task_graph("mlp", preset("pcie"), batch_size=32)
    labels = task_labels(g)
    assert list(labels) == g.tasks
    assert labels["net_0"] == f"matmul, {2 * 32 * 64 * 128:.3g} FLOPs" == "matmul, 5.24e+05 FLOPs"
    bare = TaskGraph({"a": {"p": 1}, "b": {"p": 1}}, info={"a": {"flops": 1234567}})
    assert task_labels(bare) == {"a": "None, 1.23e+06 FLOPs", "b": "None, 0 FLOPs"}


def test_over_full_lists_the_devices_holding_more_than_their_memory():
    g = TaskGraph({"a": {"p": 1, "q": 1}, "b": {"p": 1, "q": 1}}, memory={"a": 5, "b": 5},
                  capacity={"p": 4, "q": 100})
    usage = device_usage(g, greedy_eft(g))
    assert [(u["device"], u["memory"], u["over"]) for u in usage] == [("p", 5.0, True), ("q", 5.0, False)]
    assert over_full(usage) == ["p"]
    assert over_full([{"device": "x", "over": False}]) == []


def test_graphs_from_equal_inputs_share_a_fingerprint_and_any_change_a_strategy_reads_changes_it():
    a, b = model_task_graph("mlp", preset("pcie"), batch_size=32), model_task_graph("mlp", preset("pcie"), batch_size=32)
    assert a is not b and a.fingerprint() == b.fingerprint()
    op, dev = a.tasks[0], a.devices[0]
    assert a.with_pins({op: dev}).fingerprint() != a.fingerprint()  # a pin
    assert model_task_graph("mlp", preset("pcie"), batch_size=64).fingerprint() != a.fingerprint()  # compute times
    assert model_task_graph("mlp", preset("pcie"), batch_size=32, speed={dev: 0.5}).fingerprint() != a.fingerprint()
    assert model_task_graph("mlp", preset("cxl"), batch_size=32).fingerprint() != a.fingerprint()  # the links
    assert _chain(3).fingerprint() == _chain(3).fingerprint() != _chain(4).fingerprint()
    # A link cost that is only a function: its numbers are not in the digest, so nothing is shared.
    opaque = TaskGraph({"t0": {"p": 1.0, "q": 1.0}, "t1": {"p": 1.0, "q": 1.0}}, {("t0", "t1"): 8.0},
                       link_time=lambda u, v, n: 0.0 if u == v else n * 1e-3)
    assert opaque.fingerprint() is None


def test_the_strategy_comparison_is_computed_once_per_graph_and_its_rows_are_the_callers(monkeypatch):
    from lab.modelled.placement import explain

    explain._COMPARISONS.clear()
    calls = []
    real = explain._strategy_comparison
    monkeypatch.setattr(explain, "_strategy_comparison", lambda g: calls.append(g) or real(g))
    first = strategy_comparison(model_task_graph("mlp", preset("pcie"), batch_size=32))
    first[0][0]["makespan"] = -1.0  # a caller writing into its rows
    again = strategy_comparison(model_task_graph("mlp", preset("pcie"), batch_size=32))  # another session's graph
    assert len(calls) == 1
    assert again == real(model_task_graph("mlp", preset("pcie"), batch_size=32))  # as computed afresh
    assert again[0][0]["makespan"] != -1.0
    strategy_comparison(_chain(3))
    assert len(calls) == 2  # another graph is computed
