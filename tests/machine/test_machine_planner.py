"""The planners on this machine's costs (lab.machine.calibrated_model with the executor measured): a crossing
costs the executor's messages, so when they are dear the plans cross less, and when they are free the plans are
those of the topology's links."""
from __future__ import annotations

import dataclasses

import pytest

from lab.machine.calibrate import synthetic_profile
from lab.machine.calibrated_model import CalibratedModel, MachineLinkCost
from lab.machine.profile import ExecutorFit
from lab.modelled.opgraph import trace
from lab.modelled.placement import TaskGraph, plan_assignment
from lab.scenario.catalogue import preset


def crossings(g: TaskGraph, assignment: dict) -> int:
    return sum(assignment[u] != assignment[v] for u, v in g.edges)


def plan(executor: ExecutorFit | None, strategy: str = "greedy_eft", model: str = "cnn"):
    prof = dataclasses.replace(synthetic_profile(), executor=executor)
    og = trace(model, 32, 64)
    g = TaskGraph.from_model(og, preset("cxl"), model=CalibratedModel(prof))
    return g, plan_assignment(g, strategy)[0]


@pytest.mark.parametrize("strategy", ["greedy_eft", "heft"])
def test_dear_messages_make_plans_that_cross_less(strategy):
    g_free, free = plan(ExecutorFit(), strategy)
    g_dear, dear = plan(ExecutorFit(send_fixed=2e-3, recv_fixed=2e-3, wire_fixed=1e-3), strategy)
    assert crossings(g_free, free) > 0
    assert crossings(g_dear, dear) < crossings(g_free, free)


def test_free_messages_plan_as_the_topologys_links_do():
    g0, without = plan(None)
    g1, tiny = plan(ExecutorFit(send_fixed=1e-15, wire_fixed=1e-15))
    assert tiny == without


def test_a_crossing_costs_two_messages_per_part_of_the_batch():
    ex = ExecutorFit(send_fixed=10e-6, recv_fixed=20e-6, background_other=5e-6, wire_fixed=30e-6,
                     send_per_byte=1e-9, recv_per_byte=2e-9, wire_per_byte=3e-9)
    links = MachineLinkCost(preset("cxl"), ex, micro_batches=4)
    # 8 messages of 1/4 of the bytes: each (10 + 20 + 2 x 5 + 30) us and (1 + 2 + 3) ns per byte.
    assert links("host", "gpu", 4000.0) == pytest.approx(8 * 70e-6 + 4000.0 * 2 * 6e-9)
    assert links("gpu", "gpu", 4000.0) == 0.0
