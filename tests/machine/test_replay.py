"""Replaying a recorded placement step through the core model (lab.machine.replay): it uses the run's own task
times and message deliveries, and it never ends after the step it replays (it leaves out only the gaps)."""
from __future__ import annotations

import json
import math

import pytest

from lab.comm.spawn import run_local
from lab.errors import LabError
from lab.machine.replay import message_of, replay, replay_error
from lab.modelled.placement.order import BACKWARD, FORWARD, Message
from lab.modelled.placement.core_tasks import Send
from lab.modelled.placement.executor import StepCosts, tasks
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.testing.plan_workers import plan_worker
from lab.train import placement_run


def _rows():
    """Two processes: A computes 0-1, sends at 1.1; B asked at 0.5, got it at 1.4, computes 1.5-2.5, sends back
    at 2.6; A asked at 1.2, got it at 3.0 (with an emulated wait of 0.2), optimises 3.0-3.5."""
    return [
        {"rank": 0, "kind": "forward", "op": "a", "piece": 0, "micro": 0, "device": "A", "start": 0.0, "end": 1.0},
        {"rank": 1, "kind": "activation", "src": "A", "dst": "B", "piece": 1, "micro": 0, "device": "B",
         "start": 1.1, "end": 1.4, "called": 0.5, "wait": 0.0, "bytes": 8.0, "from_piece": 0, "output": 0},
        {"rank": 1, "kind": "forward", "op": "b", "piece": 1, "micro": 0, "device": "B", "start": 1.5, "end": 2.5},
        {"rank": 0, "kind": "gradient", "src": "B", "dst": "A", "piece": 0, "micro": 0, "device": "A",
         "start": 2.6, "end": 3.0, "called": 1.2, "wait": 0.2, "bytes": 8.0, "from_piece": 1, "output": 0},
        {"rank": 0, "kind": "optimizer", "op": None, "piece": -1, "micro": -1, "device": "A", "start": 3.0,
         "end": 3.5},
    ]


def test_a_replay_runs_the_recorded_tasks_with_their_own_times():
    sched, measured, err = replay_error(_rows(), ["A", "B"])
    got = {(r["kind"], r.get("op")): r["end"] - r["start"] for r in sched.rows if r["kind"] != "activation"
           and r["kind"] != "gradient"}
    assert got == {("forward", "a"): pytest.approx(1.0), ("forward", "b"): pytest.approx(1.0),
                   ("optimizer", None): pytest.approx(0.5)}
    # Deliveries as measured: 0.3 forward (sent 1.1, asked earlier); 0.4 - 0.2 waited = 0.2 back, then the wait.
    # The replay starts each task as soon as it may: 0-1 a, arrive 1.3, b 1.3-2.3, back 2.5, wait to 2.7, opt 3.2.
    assert sched.makespan == pytest.approx(3.2)
    assert measured == pytest.approx(3.5)
    assert err == pytest.approx(3.5 / 3.2 - 1)
    msgs = [r for r in sched.rows if r["kind"] in ("activation", "gradient")]
    assert len(msgs) == 2 and {m["bytes"] for m in msgs} == {8.0}


def test_a_replay_without_receive_times_counts_from_the_send():
    rows = [dict(r, called=None) for r in _rows()]
    sched = replay(rows, ["A", "B"])
    assert sched.makespan == pytest.approx(3.2)


def test_a_recorded_message_has_the_executors_name_and_an_older_record_still_replays():
    rows = _rows()
    assert [message_of(r, ["A", "B"]) for r in rows if r["kind"] in ("activation", "gradient")] == [
        Message(FORWARD, 0, 0, 0, 1), Message(BACKWARD, 0, 0, 0, 1)]  # the activation and its gradient: one reader
    older = [{k: v for k, v in r.items() if k not in ("from_piece", "output")} for r in rows]
    assert [message_of(r, ["A", "B"]) for r in older] == [None] * len(rows)
    assert replay(older, ["A", "B"]).makespan == pytest.approx(replay(rows, ["A", "B"]).makespan)


def test_a_replay_names_a_device_the_run_does_not_have():
    rows = _rows()
    rows[1]["src"] = "Z"
    with pytest.raises(LabError, match="not both devices"):
        replay(rows, ["A", "B"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_recorded_step_replays_with_its_own_times_and_no_later(tmp_path):
    d = preset("cxl").to_dict()
    d["devices"] = [x for x in d["devices"] if x["name"] != "dpu"]
    d["links"] = [x for x in d["links"] if "dpu" not in (x["a"], x["b"])]
    from lab.scenario.topology import Topology

    tr = Training(model="cnn", parallel="placement", strategy="round_robin", batch_size=24, micro_batches=3,
                  steps=1, emulate=True)
    sc = placement_run.resolved(Scenario("replay", Topology.from_dict(d), tr))
    world = placement_run.stage_count(sc)
    run_local(plan_worker, world, (sc.to_json(), 1, str(tmp_path), "float32"), timeout_s=240)
    rows = [e for r in range(world) for e in json.loads((tmp_path / f"plan{r}.json").read_text())["events"]]
    devices = placement_run.stage_devices(sc)
    sched, measured, err = replay_error(rows, devices)
    recorded = sorted(round(r["end"] - r["start"], 12) for r in rows
                      if r["kind"] in ("forward", "backward", "loss", "optimizer"))
    replayed = sorted(round(r["end"] - r["start"], 12) for r in sched.rows
                      if r["kind"] in ("forward", "backward", "loss", "optimizer"))
    assert replayed == pytest.approx(recorded, abs=1e-9)
    assert sum(r["kind"] in ("activation", "gradient") for r in sched.rows) == \
        sum(r["kind"] in ("activation", "gradient") for r in rows)
    # Each recorded message has the name the model of the executor sends it by, and every one it sends was recorded.
    ds, model = placement_run.model_for(sc)
    cut, _ = placement_run.pieces(model, placement_run.resolve(sc, model, ds.in_features))
    sent = [t.key for lst in tasks(cut, devices, tr.micro_batches, StepCosts()) for t in lst if isinstance(t, Send)]
    assert sorted(message_of(r, devices) for r in rows if r["kind"] in ("activation", "gradient")) == sorted(sent)
    # Every task starts as soon as the recorded order allows: never after the recorded step ends.
    assert sched.makespan <= measured + 1e-9 and math.isfinite(err) and err >= -1e-9
