"""A placement run whose stage process is killed, or frozen from outside, fails with the stage named (its
device and operators) as every other run detects a fault, and leaves no process behind."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.store.runs import RunStore
from lab.train.launcher import launch
from lab.train.launcher_record import processes_of

pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.timeout(300)]
PLAN = {"net_0": "edge0", "net_1": "edge0", "net_2": "edge1", "net_3": "edge1", "net_4": "edge1"}


@pytest.fixture
def env(lab_db, monkeypatch):
    monkeypatch.setenv("LAB_HEARTBEAT_TIMEOUT", "3")
    monkeypatch.setenv("LAB_HEARTBEAT_EVERY", "0.2")
    monkeypatch.setenv("LAB_GLOO_TIMEOUT", "60")  # the heartbeat (10 s frozen) must win by far on a busy machine
    monkeypatch.setenv("LAB_FROZEN_TIMEOUT", "10")
    monkeypatch.setenv("LAB_FLUSH_EVERY", "1")
    return lab_db


def scenario(**training) -> Scenario:
    tr = Training(model="mlp", parallel="placement", placement=PLAN, steps=12, batch_size=32, micro_batches=2,
                  fault_worker=1, fault_step=5).replace(**training)
    return Scenario("stages", preset("edge"), tr)


def alarm(store, rid):
    ev = store.job_records.events(rid)
    return ev[ev.event == "alarm"].iloc[0]


def check_no_process_left(store, rid):
    assert processes_of(rid, exclude=(os.getpid(),)) == []
    ev = store.job_records.events(rid)
    rel = ev[ev.event == "released"]
    assert len(rel) and rel.detail.iloc[-1]["worker_processes_left"] == 0


def test_a_killed_stage_process_fails_the_run_with_its_device_named(env):
    res = launch(scenario(fault="kill"))
    store = RunStore(env)
    run = store.get_run(res.run_id)
    assert res.status == run["status"] == "failed", run["error"]
    assert "the stage process of device edge1 (rank 1: net_2, net_3, net_4)" in run["error"]
    assert "was killed by signal SIGKILL" in run["error"]
    a = alarm(store, res.run_id)
    ev = store.job_records.events(res.run_id)
    fault = ev[ev.event == "fault"]
    assert a.worker == 1 and a.detail["action"] == "fail the job"
    assert a.t >= fault.t.iloc[0]  # the alarm follows the fault (how soon depends on the load)
    assert store.progress(res.run_id) >= 4  # the steps before the fault are kept
    check_no_process_left(store, res.run_id)


def test_a_frozen_stage_process_is_found_by_its_heartbeat(env):
    store = RunStore(env)
    out: dict = {}
    stopper = threading.Thread(target=_freeze_when_running, args=(store, "frozen-stage", out), daemon=True)
    stopper.start()
    res = launch(scenario(steps=100_000), run_id="frozen-stage")
    stopper.join(timeout=10)
    run = store.get_run(res.run_id)
    assert res.status == "failed" and "froze at step" in run["error"], run["error"]
    assert "the stage process of device edge1" in run["error"]
    a = alarm(store, res.run_id)
    assert a.detail["kind"] == "frozen" and a.t > out["stopped_at"]
    check_no_process_left(store, res.run_id)


def _freeze_when_running(store, rid, out):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if store.progress(rid) >= 3:
                break
        except Exception:  # noqa: BLE001 - the run may not exist yet
            pass
        time.sleep(0.1)
    ev = store.job_records.events(rid)
    pids = ev[ev.event == "started"].detail.iloc[0]["pids"]
    out["stopped_at"] = time.time()
    os.kill(pids[1], signal.SIGSTOP)


def test_an_emulated_link_slower_than_the_heartbeat_timeout_is_waited_for_not_taken_for_a_hang(env, monkeypatch):
    # Every message between the two stages is due 16 s after it was sent, past the 15 s heartbeat timeout: while
    # the receiver waits that planned time and the sender waits for it, neither step moves, which is what a
    # deadlock looks like. A planned wait counts as moving until its end, and so does the end of a peer's wait for
    # it, so the run ends done. (15 s, not the file's 3: a stage starved of CPU on a loaded machine can go
    # seconds between two events.)
    monkeypatch.setenv("LAB_HEARTBEAT_TIMEOUT", "15")
    topo = preset("edge").to_dict()
    for link in topo["links"]:
        if link["a"] == "edge1":
            link["latency"] = 16.0
    from lab.scenario.topology import Topology

    sc = Scenario("slow link", Topology.from_dict(topo), scenario(steps=1, micro_batches=1, emulate=True).training)
    res = launch(sc)
    store = RunStore(env)
    run = store.get_run(res.run_id)
    assert res.status == run["status"] == "done", run["error"]
    ev = store.job_records.events(res.run_id)
    assert not (ev.event == "alarm").any()
    check_no_process_left(store, res.run_id)
