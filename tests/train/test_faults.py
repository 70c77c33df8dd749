"""Faults: every injected kind (kill, raise, hang) under both policies (fail, recover), a frozen
worker (SIGSTOP from outside), a parameter server that dies, and a torchrun restart. Each run is
2 workers x 12 steps of the MLP with a checkpoint every 5 steps and the fault at step 7.

Asserted: the alarm names the worker and follows the fault (how soon depends on the machine's load and is
not asserted; typically < 1 s for kill/raise and about the 3 s heartbeat timeout for a hang);
'fail' ends the run with the root cause; 'recover' restarts from the step-5 checkpoint with the
remaining worker and the measurements continue (steps 1-5 kept, every step 0-12 exactly once), the
final model loads and scores what the run stored; with the same world size (parameter server,
torchrun) the resumed run equals the uninterrupted one exactly; no process of the run is left.
A job of the lab's own launcher runs with cold ranks (a new Python per rank: a launch inside this program)
and with ranks forked from a launcher the warm starter forked where the two differ (how a killed rank is
found), and forked alone where they do not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lab.scenario.document import Compression, Training, default_scenario
from lab.scenario.models import build_model
from lab.store.runs import JOB_WORKER, RunStore, new_run_id
from lab.train import data as data_mod
from lab.train.launcher import launch
from lab.train.launcher_record import processes_of
from lab.train.reference import single_process
from lab.train.warm import StarterHandle
from tests.conftest import ROOT, start_warm

pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.timeout(300)]
STEPS, CK, AT = 12, 5, 7
BASE = dict(workers=2, steps=STEPS, lr=0.01, checkpoint_every=CK, eval_every=4, fault_worker=1, fault_step=AT)
LOSSES: dict[str, np.ndarray] = {}  # job losses of steps 1..5 per test: identical across all of them


@pytest.fixture
def env(lab_db, monkeypatch):
    monkeypatch.setenv("LAB_HEARTBEAT_TIMEOUT", "3")
    monkeypatch.setenv("LAB_HEARTBEAT_EVERY", "0.2")
    monkeypatch.setenv("LAB_GLOO_TIMEOUT", "30")
    monkeypatch.setenv("LAB_FROZEN_TIMEOUT", "10")
    monkeypatch.setenv("LAB_FLUSH_EVERY", "1")  # every step stored at once: a restart has rows to discard
    return lab_db


@pytest.fixture(scope="module")
def starter():
    st = StarterHandle()
    assert st.wait_ready(240), "the warm starter did not get ready"
    yield st
    st.stop()


@pytest.fixture(params=["cold", "warm"])
def launch_job(request, env, tmp_path):
    """``launch_job(scenario, run_id=None)``: the job run to its end, cold (:func:`launch` in this
    process) or forked from the warm starter; its run id, status and restarts."""
    if request.param == "cold":
        return launch
    st = request.getfixturevalue("starter")

    def warm(sc, run_id=None):
        rid, p = start_warm(st, sc, tmp_path / f"{run_id or new_run_id()}.log", run_id=run_id)
        p.wait(timeout=240)
        store = RunStore(env)
        assert stage(store, rid, "started").detail.iloc[0]["start"] == "forked"
        return SimpleNamespace(run_id=rid, status=store.status(rid), restarts=len(stage(store, rid, "restart")))

    return warm


def scenario(**training):
    sc = default_scenario()
    return sc.replace(training=sc.training.replace(**{**BASE, **training}))


def stage(store, rid, name):
    ev = store.job_records.events(rid)
    return ev[ev.event == name]


def detection_seconds(store, rid) -> float:
    fault, alarm = stage(store, rid, "fault"), stage(store, rid, "alarm")
    assert len(alarm) == 1, store.job_records.events(rid)[["stage", "detail"]].to_string()
    return float(alarm.t.iloc[0] - (fault.t.iloc[0] if len(fault) else alarm.t.iloc[0]))


def check_no_process_left(store, rid):
    assert processes_of(rid, exclude=(os.getpid(),)) == []
    rel = stage(store, rid, "released")
    assert len(rel) and rel.detail.iloc[-1]["worker_processes_left"] == 0


def check_early_steps_kept(store, rid, key):
    job = store.metrics(rid, worker=JOB_WORKER).set_index("step")
    early = job.loss.loc[1:CK].to_numpy()
    assert len(early) == CK and np.isfinite(early).all()
    LOSSES[key] = early
    for other in LOSSES.values():  # the same deterministic trajectory in every run up to the checkpoint
        np.testing.assert_allclose(early, other, rtol=1e-6)


def check_checkpoint_matches_reference(store, rid):
    ck = torch.load(store.checkpoint_dir(rid) / f"step{CK:06d}.pt", weights_only=True)
    ref = single_process(Training(workers=2, steps=CK, lr=0.01))
    for k in ref:
        assert (ck["model"][k] - ref[k]).abs().max().item() < 1e-5, k


def final_model_is_valid(store, rid):
    ck = torch.load(store.checkpoint_dir(rid) / "final.pt", weights_only=True)
    assert ck["step"] == STEPS
    ds = data_mod.load_dataset("digits", 4096, 0)
    model = build_model("mlp", ds.in_features, ds.classes, seed=0)
    model.load_state_dict(ck["model"], strict=True)
    assert all(torch.isfinite(v).all() for v in ck["model"].values())
    with torch.no_grad():
        acc = float((model(ds.x_test).argmax(1) == ds.y_test).float().mean())
    stored = store.metrics(rid, worker=JOB_WORKER).set_index("step").test_acc[STEPS]
    assert acc == pytest.approx(stored, abs=1e-6) and acc > 0.2  # chance is 0.1
    return ck


EXPECT = {"kill": "was killed by signal SIGKILL", "raise": "injected fault: worker 1 raised at step 7",
          "hang": "hangs at step 7"}


# Warm and cold start ranks differently (a forked child, a new process), so a killed rank is found through two
# different handles: a kill runs both ways. An error file, a hang and a heartbeat are read the same way for both.
BOTH_STARTS_FOR_A_KILL = [("kill", "cold"), ("kill", "warm"), ("raise", "warm"), ("hang", "warm")]


@pytest.mark.parametrize("fault, launch_job", BOTH_STARTS_FOR_A_KILL, indirect=["launch_job"])
def test_fail_policy_ends_the_job_with_the_root_cause(env, launch_job, fault):
    res = launch_job(scenario(fault=fault, fault_policy="fail"))
    store = RunStore(env)
    run = store.get_run(res.run_id)
    assert res.status == run["status"] == "failed", run["error"]
    assert EXPECT[fault] in run["error"] and "worker 1" in run["error"]
    alarm = stage(store, res.run_id, "alarm").iloc[0]
    assert alarm.worker == 1 and alarm.detail["action"] == "fail the job"
    assert alarm.detail["kind"] == {"kill": "killed", "raise": "error", "hang": "hung"}[fault]
    assert detection_seconds(store, res.run_id) >= 0  # the alarm follows the fault
    assert res.restarts == 0 and stage(store, res.run_id, "restart").empty
    check_early_steps_kept(store, res.run_id, f"fail-{fault}")
    check_no_process_left(store, res.run_id)


@pytest.mark.parametrize("fault, launch_job", BOTH_STARTS_FOR_A_KILL, indirect=["launch_job"])
def test_recover_policy_restarts_from_the_checkpoint_with_the_remaining_worker(env, launch_job, fault):
    res = launch_job(scenario(fault=fault, fault_policy="recover"))
    store = RunStore(env)
    rid = res.run_id
    run = store.get_run(rid)
    assert res.status == "done" and res.restarts == 1, run["error"]
    assert detection_seconds(store, rid) >= 0  # the alarm follows the fault
    alarm = stage(store, rid, "alarm").iloc[0]
    assert alarm.worker == 1 and "restart from the checkpoint at step 5 with 1 worker(s)" in alarm.detail["action"]
    restart = stage(store, rid, "restart").iloc[0]
    assert restart.step == CK and restart.attempt == 1
    assert restart.detail["workers"] == 1 and restart.detail["exact"] is False  # data re-split over 1 worker
    running = stage(store, rid, "running")
    assert list(running.step) == [0, CK] and list(running.attempt) == [0, 1]
    m = store.metrics(rid)
    job = m[m.worker == JOB_WORKER]
    # Every step exactly once, no gap, no repeat: what attempt 0 stored past the checkpoint was discarded. How many
    # rows that was (restart.detail["discarded_rows"]) depends on timing: rank 0 can be stopped between its
    # all-reduce of step 6 and its write.
    assert list(job.step) == list(range(0, STEPS + 1))
    assert set(m[m.worker == 1].step) == set(range(1, CK + 1))  # the failed worker's rows end at the checkpoint
    assert set(m[m.worker == 0].step) == set(range(1, STEPS + 1))
    wall = job.set_index("step").wall
    assert wall[CK + 1] > wall[CK]  # the clock continues from the first attempt
    assert run["info"]["workers"] == 1 and run["info"]["attempt"] == 1
    check_early_steps_kept(store, rid, f"recover-{fault}")
    check_checkpoint_matches_reference(store, rid)
    final_model_is_valid(store, rid)
    check_no_process_left(store, rid)


@pytest.mark.parametrize("launch_job", ["warm"], indirect=True)  # a heartbeat reads the same for both starts
def test_a_frozen_worker_is_found_by_its_heartbeat(env, launch_job, monkeypatch):
    """SIGSTOP from outside: no error, no exit, the heartbeat thread stops too."""
    monkeypatch.setenv("LAB_FROZEN_TIMEOUT", "5")  # 25 heartbeats missed: no busy machine starves a rank this long
    store = RunStore(env)
    out = {}
    # launch() installs signal handlers, which only the main thread may do: the freezer is the thread
    stopper = threading.Thread(target=_freeze_worker_when_running, args=(store, "frozen-1", out), daemon=True)
    stopper.start()
    res = launch_job(scenario(steps=100_000, fault_policy="fail"), run_id="frozen-1")
    stopper.join(timeout=10)
    run = store.get_run(res.run_id)
    assert res.status == "failed" and "froze at step" in run["error"], run["error"]
    assert "worker 1" in run["error"]
    alarm = stage(store, res.run_id, "alarm").iloc[0]
    assert alarm.detail["kind"] == "frozen"
    assert alarm.t > out["stopped_at"]  # the alarm follows the freeze (how soon depends on the load, not asserted)
    check_no_process_left(store, res.run_id)


def _freeze_worker_when_running(store, rid, out):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if store.progress(rid) >= 3:
                break
        except Exception:  # noqa: BLE001 - the run may not exist yet
            pass
        time.sleep(0.1)
    pids = store.job_records.events(rid)
    started = pids[pids.event == "started"].detail.iloc[0]["pids"]
    out["stopped_at"] = time.time()
    os.kill(started[1], signal.SIGSTOP)


def test_a_dead_parameter_server_migrates_and_the_run_equals_the_uninterrupted_one(env, launch_job):
    sc = scenario(sync="param_server", fault="kill", fault_worker=2, fault_policy="recover")
    res = launch_job(sc)
    store = RunStore(env)
    rid = res.run_id
    assert res.status == "done" and res.restarts == 1, store.get_run(rid)["error"]
    restart = stage(store, rid, "restart").iloc[0]
    assert restart.detail["workers"] == 2 and restart.detail["world"] == 3 and restart.detail["exact"] is True
    assert stage(store, rid, "alarm").iloc[0].worker == 2
    ck = final_model_is_valid(store, rid)
    ref = single_process(Training(workers=2, steps=STEPS, lr=0.01))
    for k in ref:  # every rank's state restored: the same model as a run without the fault
        assert (ck["model"][k] - ref[k]).abs().max().item() < 1e-5, k
    check_no_process_left(store, rid)


def test_torchrun_restarts_the_job_from_its_checkpoint(env):
    """torchrun --max-restarts 1: rank 1 raises at step 7 in the first attempt; torchrun ends the
    other rank and starts both again; they resume from step 5 with every rank's exact state, so the
    run ends where an uninterrupted one does."""
    cmd = [str(ROOT / ".venv/bin/torchrun"), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
           "--monitor-interval", "0.5", "-m", "lab.train", "--steps", str(STEPS), "--lr", "0.01",
           "--set", f"checkpoint_every={CK}", "--set", "eval_every=4", "--set", "fault=raise",
           "--set", "fault_worker=1", "--set", f"fault_step={AT}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rid = proc.stdout.strip().splitlines()[-1].split()[1]
    store = RunStore(env)
    run = store.get_run(rid)
    assert run["status"] == "done" and run["info"]["launcher"] == "torchrun"
    assert run["info"]["elastic_run_id"]
    assert list(stage(store, rid, "started").attempt) == [0, 1]
    alarms = stage(store, rid, "alarm")
    assert 1 in set(alarms.worker) and "injected fault" in " ".join(d["summary"] for d in alarms.detail)
    restart = stage(store, rid, "restart").iloc[0]
    assert restart.step == CK and restart.detail["exact"] is True and restart.detail["launcher"] == "torchrun"
    job = store.metrics(rid, worker=JOB_WORKER)
    assert list(job.step) == list(range(0, STEPS + 1))
    check_early_steps_kept(store, rid, "torchrun")
    ck = final_model_is_valid(store, rid)
    ref = single_process(Training(workers=2, steps=STEPS, lr=0.01))
    for k in ref:
        assert (ck["model"][k] - ref[k]).abs().max().item() < 1e-5, k
    assert processes_of(rid, exclude=(os.getpid(),)) == []


@pytest.mark.parametrize("comp,key", [
    (Compression(kind="group_topk", ratio=0.01, group_size=64, error_feedback=True), "ef_residual"),
    (Compression(kind="powersgd", rank=2, warmup=3), "powersgd")])
def test_torchrun_restart_keeps_the_error_feedback_residual(env, tmp_path, comp, key):
    """Compressed training (Group-TopK 1 % with error feedback; PowerSGD, past its warm-up by step 5): each rank's
    checkpoint holds its compression memory (the residual; PowerSGD's too, with its warm-start matrices and its
    generator), so the torchrun restart from step 5 ends where the uninterrupted run ends (without it the
    restarted run would send different entries from step 6 on)."""
    ref = launch(scenario(compression=comp))
    assert ref.status == "done"
    path = tmp_path / "compressed.json"
    path.write_text(scenario(compression=comp, fault="raise").to_json())
    cmd = [str(ROOT / ".venv/bin/torchrun"), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
           "--monitor-interval", "0.5", "-m", "lab.train", "--scenario", str(path)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rid = proc.stdout.strip().splitlines()[-1].split()[1]
    store = RunStore(env)
    restart = stage(store, rid, "restart").iloc[0]
    assert restart.step == CK and restart.detail["exact"] is True
    assert restart.detail["compression_state_reset"] is False
    files = sorted(p.name for p in store.checkpoint_dir(rid).glob("*rank*"))
    assert files and all(key in torch.load(store.checkpoint_dir(rid) / f, weights_only=True) for f in files)
    got, want = final_model_is_valid(store, rid), final_model_is_valid(store, ref.run_id)
    for k in want["model"]:
        assert torch.equal(got["model"][k], want["model"][k]), k
    assert processes_of(rid, exclude=(os.getpid(),)) == []


def test_a_killed_worker_seen_ending_after_its_peers_connection_error_is_still_the_root_cause(tmp_path):
    """A peer of a SIGKILLed worker can write its "connection reset" error and exit before the kernel has made the
    killed one a zombie: the watch then sees only the consequence, and must wait to see the kill."""
    from lab.train.watch import watch_ranks

    class Peer:  # exited with an error about the connection its killed peer closed
        pid, returncode = 11, 1

        def poll(self):
            return 1

    class Killed:  # still being torn down for the first polls, then ended by SIGKILL
        pid, returncode, polls = 12, None, 0

        def poll(self):
            self.polls += 1
            if self.polls > 3:
                self.returncode = -9
            return self.returncode

    (tmp_path / "rank0.err").write_text(json.dumps({
        "rank": 0, "step": 115, "type": "RuntimeError", "secondary": True, "traceback": "",
        "summary": "worker 0 failed at step 115: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error: "
                   "Connection reset by peer"}))
    killed = Killed()
    f = watch_ranks([Peer(), killed], tmp_path)
    assert killed.polls > 3
    assert (f.rank, f.kind) == (1, "killed") and "was killed by signal SIGKILL" in f.error


def test_a_setting_error_is_not_retried(tmp_path):
    """A worker's LabError (a wrong setting) is deterministic: 'recover' does not restart for it;
    any other error is worth a restart."""
    from lab.train.watch import root_cause

    class P:
        pid, returncode = 1, 1

        def poll(self):
            return 1

    tmp = tmp_path
    (tmp / "rank0.err").write_text(json.dumps({"rank": 0, "step": 3, "type": "LabError", "summary": "bad setting",
                                               "secondary": False, "traceback": ""}))
    f = root_cause([P()], [0], tmp)
    assert f.retryable is False and f.error == "bad setting"
    (tmp / "rank0.err").write_text(json.dumps({"rank": 0, "step": 3, "type": "RuntimeError", "summary": "boom",
                                               "secondary": False, "traceback": ""}))
    assert root_cause([P()], [0], tmp).retryable is True


def test_a_launcher_leaves_who_it_is_and_its_heartbeat_in_the_store(env):
    """What a job manager needs to tell a live launcher from one killed with SIGKILL: its pid, process
    group, creation time, host and boot, its scratch folder (gone after a normal end) and a heartbeat
    that moves."""
    from lab.train.launcher_record import identity, launcher_gone

    res = launch(scenario(fault="none", steps=STEPS))
    store = RunStore(env)
    rec = store.job_records.launcher(res.run_id)
    assert res.status == "done"
    assert {k: rec[k] for k in ("pid", "pgid", "created", "host", "boot")} == identity()  # this process ran it
    assert launcher_gone(rec) is None  # and it still runs
    assert rec["scratch"] and not os.path.exists(rec["scratch"])  # removed by the launcher at its end
    assert rec["beat"] >= rec["started"]
    check_no_process_left(store, res.run_id)
