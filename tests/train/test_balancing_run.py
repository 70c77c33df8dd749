"""The load-balancing design's loop run for real: a placement run that re-plans every round from each device's
measured waiting, through the launcher like any run; its rounds are stored, every round's weights follow from
the round before by the rule, the run ends when the plan has settled, and nothing is left running."""
from __future__ import annotations

import os
import math

import numpy as np
import pytest

from lab.errors import LabError
from lab.modelled.balance import device_work, model_loop, weighted_plan
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.scenario.models import build_model
from lab.store.runs import JOB_WORKER, RunStore
from lab.train import placement_run
from lab.train.launcher import preflight
from lab.train.launcher_record import processes_of
from lab.train.placement_run.rounds import Rounds
from lab.train.step_record import StepRecord
from tests.conftest import run_command

pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.timeout(300)]


def four_devices() -> dict:
    """The CXL preset without its DPU: a balancing run starts a process per device, and a test at most 4."""
    d = preset("cxl").to_dict()
    d["devices"] = [x for x in d["devices"] if x["name"] != "dpu"]
    d["links"] = [x for x in d["links"] if "dpu" not in (x["a"], x["b"])]
    return d


def scenario(**training) -> Scenario:
    from lab.scenario.topology import Topology

    tr = Training(model="cnn", parallel="placement", strategy="greedy_eft", balance="throughput", round_steps=3,
                  steps=24, batch_size=32, micro_batches=2, emulate=True, balance_patience=2, eval_every=24,
                  slowdown={"gpu": 40.0}).replace(**training)
    return Scenario("balance", Topology.from_dict(four_devices()), tr)


@pytest.mark.parametrize("rule,schedule", [("throughput", "gpipe"), ("wait", "gpipe"), ("wait", "1f1b")])
def test_the_balancing_loop_runs_its_rounds_and_each_rounds_weights_follow_from_the_last(rule, schedule, lab_db,
                                                                                          monkeypatch):
    monkeypatch.setenv("LAB_FLUSH_EVERY", "1")
    # The slowed GPU waits 39 times its measured compute, which a loaded machine inflates: a stage's send has
    # waited past gloo's 60 s for it. This test checks the rounds, not gloo's timeout.
    monkeypatch.setenv("LAB_GLOO_TIMEOUT", "600")
    sc = scenario(balance=rule, schedule=schedule)
    res = run_command(sc)
    store = RunStore(lab_db)
    run = store.get_run(res.run_id)
    assert res.status == run["status"] == "done", run["error"]
    bal = run["info"]["balance"]
    assert bal["rule"] == rule and bal["nodes"] == ["host", "gpu", "fpga", "asic"]
    rounds = bal["rounds"]
    assert len(rounds) >= 2 and bal["done"]
    assert [r["round"] for r in rounds] == list(range(1, len(rounds) + 1))
    assert [r["step"] for r in rounds] == [3 * r["round"] for r in rounds]
    # The run ends when the plan has not changed for `patience` rounds, or after its steps.
    assert bal["converged"] == (rounds[-1]["unchanged"] >= 2)
    steps = store.metrics(res.run_id, worker=JOB_WORKER).step
    assert steps.max() == (rounds[-1]["step"] if bal["converged"] else 24)
    assert sorted(steps) == list(range(1, int(steps.max()) + 1))  # every step stored
    # Replaying the stored measurements through the same loop gives the stored weights and plans of every round.
    ds_model = build_model("cnn", 64, 10)
    plan = placement_run.resolve(preflight(sc).scenario, ds_model, 64)
    g = plan.tasks
    loop = model_loop(g, rule, tolerance=sc.training.balance_tolerance, patience=2, max_rounds=8)
    assert rounds[0]["plan"] == [plan.assignment[t] for t in g.tasks]
    kept = None
    for r in rounds:
        assert np.allclose(r["weights"], loop.weights, rtol=1e-12)
        # a round runs the plan the last round made, or the one before it when the schedule could not run that
        made = [weighted_plan(g, loop.weights, "greedy_eft").slots[t][0] for t in g.tasks]
        assert r["plan"] == (kept if kept is not None else made)
        kept = r["plan"] if r.get("kept") else None
        if r.get("kept"):
            assert "1F1B runs one piece per device" in r["kept"]
        taken = sc.training.replace(placement=dict(zip(g.tasks, r["plan"])), balance="off")
        placement_run.check_placement(sc.replace(training=taken))  # every plan run is one the schedule runs
        assert all(w == pytest.approx(max(r["round_time"] - b, 0.0)) for w, b in zip(r["waits"], r["busy"]))
        loop.observe(tuple(r["plan"]), r["busy"], device_work(g, tuple(r["plan"])), r["round_time"])
    # The slowed GPU is measured slower: its busy time per unit of modelled work is the largest.
    first = rounds[0]
    work = device_work(g, tuple(first["plan"]))
    per_work = {n: b / w for n, b, w in zip(bal["nodes"], first["busy"], work) if w > 0}
    if "gpu" in per_work and len(per_work) > 1:
        assert max(per_work, key=per_work.get) == "gpu"
    assert math.isfinite(res.test_accuracy)
    assert processes_of(res.run_id, exclude=(os.getpid(),)) == []
    assert run["info"]["placement"] == dict(zip(g.tasks, rounds[-1]["plan"])) or not bal["converged"]


def test_a_balancing_run_is_refused_with_a_planner_it_cannot_re_plan_with():
    with pytest.raises(LabError, match="greedy earliest finish or HEFT"):
        preflight(scenario(strategy="type_rule"))
    with pytest.raises(LabError, match="at least one round"):
        preflight(scenario(round_steps=50))
    from lab.scenario.topology import Topology

    big = Scenario("big", Topology.from_dict(_nine_devices()), scenario(slowdown={}).training)
    with pytest.raises(LabError, match="at most 8"):
        preflight(big)


def _nine_devices() -> dict:
    d = preset("edge").to_dict()
    extra = dict(d["devices"][0], name="edge8")
    d["devices"].append(extra)
    d["links"].append(dict(d["links"][0], a="edge8"))
    return d


def test_a_re_made_plan_the_schedule_cannot_run_is_not_taken_and_the_round_says_why(monkeypatch):
    from lab.train.placement_run import rounds as rounds_module

    sc = preflight(scenario(schedule="1f1b")).scenario
    model = build_model("cnn", 64, 10)
    plan = placement_run.resolve(sc, model, 64)
    # Every device's records of the round, as the processes would gather them: the device holding the work measured
    # slow, the others idle, so the loop moves work off it
    slow = plan.assignment["conv1"]
    steps = range(1, sc.training.round_steps + 1)
    records = [[list(StepRecord(k, 1.0, 1.0 if d == slow else 0.0, 0.0, 0.0, 0.0, k - 1.0, math.nan, k * 1.0, 0.0,
                                0.0, 32.0, 0.0)) for k in steps] for d in plan.devices]
    monkeypatch.setattr(rounds_module, "gather", lambda recs, world: records)
    monkeypatch.setattr(rounds_module.dist, "broadcast_object_list", lambda objects, src: None)  # rank 0 decides

    def ended(refuses):
        rounds = Rounds(sc.training, plan, rank=0, world=len(plan.devices))
        written: list = []
        for k in steps:
            rounds.add(StepRecord.of(records[0][k - 1]))
        _, new = rounds.end(sc.training.round_steps, plan, written.append, refuses)
        return new, rounds.info[-1], written[-1]

    taken, info, _ = ended(lambda assignment: None)
    assert taken is not None and taken[0] != plan.assignment and info["kept"] is None
    why = "1F1B runs one piece per device, and this plan gives a device 2 pieces"
    new, info, written = ended(lambda assignment: why if assignment == taken[0] else None)
    assert new is None and info["kept"] == why
    assert written["placement"] == dict(plan.assignment)  # the stored plan is the one still running
