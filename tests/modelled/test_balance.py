"""Batch splits and the dynamic load-balancing loop."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.errors import LabError
from lab.modelled.balance import (
    balance_data_parallel,
    balance_model_parallel,
    compute_shares,
    per_sample_times,
    split_batch,
)
from lab.modelled.opgraph import trace
from lab.modelled.placement import TaskGraph, greedy_eft
from lab.scenario.catalogue import preset

# ----- split_batch -----------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(total=st.integers(0, 10**6),
       weights=st.lists(st.floats(0, 1e6, allow_nan=False, allow_infinity=False), min_size=1, max_size=12))
def test_split_adds_up_exactly_and_stays_within_one_of_the_quota(total, weights):
    if sum(weights) == 0:
        with pytest.raises(LabError):
            split_batch(total, weights)
        return
    counts = split_batch(total, weights)
    assert sum(counts) == total
    assert len(counts) == len(weights)
    s = sum(Fraction(w) for w in weights)
    for c, w in zip(counts, weights):
        q = total * Fraction(w) / s
        assert c >= 0 and abs(c - q) < 1
        if w == 0:
            assert c == 0


@settings(max_examples=100, deadline=None)
@given(total=st.integers(0, 10**5), n=st.integers(1, 50))
def test_even_split(total, n):
    counts = split_batch(total, n)
    assert sum(counts) == total and max(counts) - min(counts) <= (1 if total % n else 0)
    assert counts == sorted(counts, reverse=True)  # the extra samples go to the first nodes


def test_split_examples():
    assert split_batch(10, [1, 1, 1]) == [4, 3, 3]
    assert split_batch(7, [0.5, 0.25, 0.25]) == [3, 2, 2]  # quotas 3.5, 1.75, 1.75: remainders .5 < .75
    assert split_batch(100, [1, 2, 4]) == [14, 29, 57]
    assert split_batch(0, [1, 2]) == [0, 0]
    assert split_batch(3, [1e-300, 1e-300, 1e-300]) == [1, 1, 1]


@pytest.mark.parametrize("total,weights", [(-1, [1]), (2.5, [1]), (5, []), (5, [1, -1]), (5, [math.nan]),
                                           (5, 0), (5, [0, 0])])
def test_split_rejects_bad_input(total, weights):
    with pytest.raises(LabError):
        split_batch(total, weights)


def test_compute_shares_follow_the_cost_model():
    topo = preset("gpu-npu")
    g = trace("mlp", 64)
    ps = per_sample_times(g, topo)
    assert set(ps) == set(topo.device_names)  # every device there can run the whole MLP
    shares = compute_shares(ps)
    assert sum(shares) == pytest.approx(1.0)
    by = dict(zip(ps, shares))
    assert by["npu0"] > by["gpu0"] > by["master"]
    # per-sample time is the sum of operator times at the batch, divided by the batch
    want = sum(op.flops / topo.device("gpu0").throughput[op.op_class] for op in g.ops) / 64
    assert ps["gpu0"] == pytest.approx(want)
    cxl = per_sample_times(trace("cnn", 8), preset("cxl"))
    assert set(cxl) == {"host", "gpu"}  # the FPGA has no matmul kernel, the ASIC no conv...
    with pytest.raises(LabError, match="cannot run the whole model"):
        per_sample_times(trace("cnn", 8), preset("cxl"), devices=["fpga"])


# ----- data-parallel balancing ------------------------------------------------------------------------

SLOW = {"a": 1.0, "b": 2.0, "c": 4.0}
PER_SAMPLE = {"a": 1e-3, "b": 1e-3, "c": 1e-3}


@pytest.mark.parametrize("rule", ["wait", "throughput"])
def test_data_parallel_converges_to_the_known_split(rule):
    res = balance_data_parallel(PER_SAMPLE, 700, SLOW, rule=rule, tolerance=0.0, patience=3, max_rounds=100)
    assert res.converged
    assert res.reference["plan"] == (400, 200, 100)  # shares proportional to true speed 1 : 1/2 : 1/4
    assert res.final.plan == (400, 200, 100)
    assert res.final.round_time == pytest.approx(0.4)
    assert res.final.max_wait == pytest.approx(0.0, abs=1e-12)
    first = res.rounds[0]
    assert first.plan == (234, 233, 233) and first.weights == pytest.approx((1 / 3,) * 3)
    assert first.round_time == pytest.approx(233 * 4e-3)
    assert first.waits == pytest.approx((0.932 - 0.234, 0.932 - 0.466, 0.0))
    assert first.max_wait == pytest.approx(0.698) and first.mean_wait == pytest.approx((0.698 + 0.466) / 3)
    # stops exactly `patience` unchanged rounds after the last change
    assert [r.unchanged for r in res.rounds[-3:]] == [1, 2, 3]
    if rule == "throughput":
        assert len(res.rounds) == 5  # measured once, right from round 2 on


def test_wait_rule_moves_load_from_the_slowest_node_without_overshoot():
    res = balance_data_parallel(PER_SAMPLE, 700, SLOW, rule="wait", tolerance=0.0, max_rounds=100)
    c_share = [r.weights[2] for r in res.rounds]
    assert all(x >= y - 1e-12 for x, y in zip(c_share, c_share[1:]))  # node c only ever loses share
    assert c_share[-1] == pytest.approx(1 / 7, abs=2e-3)


def test_good_enough_balance_keeps_the_weights():
    res = balance_data_parallel(PER_SAMPLE, 700, SLOW, rule="wait", tolerance=0.5)
    assert res.rounds[0].good_enough  # imbalance (0.698 - 0.388) / 0.932 = 0.33 <= 0.5
    assert all(r.plan == res.rounds[0].plan for r in res.rounds)
    assert len(res.rounds) == 4


def test_noise_is_seeded():
    a = balance_data_parallel(PER_SAMPLE, 700, SLOW, noise=0.1, seed=7)
    b = balance_data_parallel(PER_SAMPLE, 700, SLOW, noise=0.1, seed=7)
    c = balance_data_parallel(PER_SAMPLE, 700, SLOW, noise=0.1, seed=8)
    assert a == b
    assert a.rounds[0].busy != c.rounds[0].busy


def test_not_converged_is_reported():
    res = balance_data_parallel(PER_SAMPLE, 700, SLOW, rule="wait", tolerance=0.0, max_rounds=3)
    assert not res.converged and "not converged within 3 rounds" in res.reason


@pytest.mark.parametrize("kw,match", [({"rule": "magic"}, "unknown rule"), ({"step": 0}, "step"),
                                      ({"tolerance": 2}, "tolerance"), ({"patience": 0}, "patience"),
                                      ({"max_rounds": 0}, "max rounds"), ({"noise": -1}, "noise"),
                                      ({"slowdown": {"zz": 2}}, "not a device"),
                                      ({"slowdown": {"a": 0}}, "positive")])
def test_balance_rejects_bad_settings(kw, match):
    with pytest.raises(LabError, match=match):
        balance_data_parallel(PER_SAMPLE, 10, **kw)


# ----- model-parallel balancing -----------------------------------------------------------------------

def _twins():
    # Two identical devices; a chain of four tasks. The catalogue plan uses the first device only.
    comp = {f"t{i}": {"g0": 1.0, "g1": 1.0} for i in range(4)}
    return TaskGraph(comp, {(f"t{i}", f"t{i + 1}"): 0.5 for i in range(3)})


def test_model_parallel_throughput_rule_finds_the_slow_device():
    res = balance_model_parallel(_twins(), {"g0": 10.0}, rule="throughput", patience=2)
    assert res.converged
    assert res.rounds[0].plan == ("g0",) * 4
    assert res.rounds[0].round_time == pytest.approx(40.0)  # 4 tasks x 1 s x slowdown 10
    assert res.rounds[0].waits == pytest.approx((0.0, 40.0))
    assert res.rounds[1].weights == pytest.approx((0.1, 1.0))  # measured speed relative to the catalogue
    assert res.final.plan == ("g1",) * 4 == res.reference["plan"]
    assert res.final.round_time == pytest.approx(4.0)
    assert len(res.rounds) == 4


def test_model_parallel_matches_the_plan_made_with_true_speeds():
    topo = preset("cxl")
    g = TaskGraph.from_model(trace("cnn", 2048), topo)
    slow = {"gpu": 1000.0}
    res = balance_model_parallel(g, slow, rule="throughput")
    assert res.converged
    truth = greedy_eft(g.scaled(lambda t, d: slow.get(d, 1.0)))
    assert res.final.plan == tuple(truth.slots[t][0] for t in g.tasks)
    assert "gpu" in res.rounds[0].plan and "gpu" not in res.final.plan
    assert res.final.round_time == pytest.approx(truth.makespan)
    assert res.final.round_time < res.rounds[0].round_time / 10


def test_model_parallel_wait_rule_runs_and_records_every_round():
    g = TaskGraph.from_model(trace("mlp", 1024), preset("cxl"))
    res = balance_model_parallel(g, {"gpu": 1000.0}, rule="wait", max_rounds=40)
    for r in res.rounds:
        assert sum(r.weights) == pytest.approx(len(g.devices))  # the wait rule shifts, keeping the mean at 1
        assert len(r.waits) == len(g.devices)
        assert r.waits == pytest.approx(tuple(r.round_time - b for b in r.busy))  # idle includes waiting for inputs
    assert any(r.changes for r in res.rounds[1:])  # the loop does move operators off the slow GPU
    assert min(r.round_time for r in res.rounds) < res.rounds[0].round_time / 10
