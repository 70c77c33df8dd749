"""lab.train.resilience on its own: checkpoint files (atomic, newest, pruned, loaded without
pickles), heartbeat files, attempts, and the injected faults."""

import os
import pickle
import threading
import time

import pytest
import torch

from lab.scenario.document import Training
from lab.train import resilience


def test_checkpoints_newest_pruned_and_loaded_as_weights_only(tmp_path):
    for step in (5, 10, 15):
        resilience.save_atomic({"w": torch.full((3,), float(step)), "step": step}, tmp_path / resilience.main_name(step))
        resilience.save_atomic({"rank": 1}, tmp_path / resilience.rank_name(step, 1))
    (tmp_path / "step000099.pt.tmp").write_bytes(b"half a file")  # a save cut off: not a checkpoint
    assert resilience.latest_checkpoint(tmp_path) == 15
    got = resilience.load(tmp_path / resilience.main_name(15))
    assert torch.equal(got["w"], torch.full((3,), 15.0)) and got["step"] == 15
    resilience.prune(tmp_path, keep=2)
    assert sorted(f.name for f in tmp_path.glob("step*.pt")) == [
        resilience.main_name(10), resilience.rank_name(10, 1), resilience.main_name(15), resilience.rank_name(15, 1)]
    assert resilience.latest_checkpoint(tmp_path / "nothing here") is None


class Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_checkpoint_holding_code_is_refused(tmp_path):
    path = tmp_path / resilience.main_name(1)
    with open(path, "wb") as f:
        torch.save({"evil": Boom()}, f)
    with pytest.raises(pickle.UnpicklingError):
        resilience.load(path)


def test_heartbeat_file_follows_the_step_and_says_goodbye(tmp_path):
    step = {"n": 3}
    path = tmp_path / "beat.json"
    hb = resilience.Heartbeat(path, lambda: step["n"], every=30.0).start()  # a long period: the test beats by hand
    try:
        first = resilience.read_heartbeat(path)
        assert first["step"] == 3 and first["pid"] == os.getpid() and first["phase"] in ("busy", "comm")
        time.sleep(0.01)
        hb.beat()
        assert resilience.read_heartbeat(path)["progress_t"] == first["progress_t"]  # same step: no progress
        step["n"] = 4
        hb.beat()
        now = resilience.read_heartbeat(path)
        assert now["step"] == 4 and now["progress_t"] > first["progress_t"]
    finally:
        hb.stop("exiting")
    assert resilience.read_heartbeat(path)["phase"] == "exiting"
    path.write_text("{not json")
    assert resilience.read_heartbeat(path) is None and resilience.read_heartbeat(tmp_path / "missing") is None


def test_work_inside_a_step_a_planned_wait_and_the_end_of_a_wait_for_peers_move_the_heartbeat(tmp_path):
    from lab.comm.peers import waiting_for_peers

    path = tmp_path / "beat.json"
    hb = resilience.Heartbeat(path, lambda: 7, every=30.0).start()  # the step never changes; the test beats by hand

    def moved_since(before: dict) -> bool:
        time.sleep(0.01)
        hb.beat()
        return resilience.read_heartbeat(path)["progress_t"] > before["progress_t"]

    try:
        idle = resilience.read_heartbeat(path)
        assert not moved_since(idle)
        resilience.progressed()  # an operator of a placement run done
        assert moved_since(idle)
        before = resilience.read_heartbeat(path)
        with resilience.planned_wait(3600.0):  # an emulated device's hour: every beat inside it moves
            assert moved_since(before)
            inside = resilience.read_heartbeat(path)
            assert moved_since(inside)
        after = resilience.read_heartbeat(path)
        assert moved_since(after)  # the wait's end is work done
        done = resilience.read_heartbeat(path)
        assert not moved_since(done)
        with resilience.planned_wait(0.0):  # a planned wait past its end moves nothing until it ends
            assert not moved_since(resilience.read_heartbeat(path))
        assert moved_since(resilience.read_heartbeat(path))  # ... and its end is work done
        before = resilience.read_heartbeat(path)
        with waiting_for_peers():  # however long a wait for peers lasts, it moves nothing while it lasts
            assert not moved_since(before)
            assert resilience.read_heartbeat(path)["phase"] == "comm"
        assert moved_since(before)  # its end does: the worker is back at work
        after = resilience.read_heartbeat(path)
        assert not moved_since(after)
        with waiting_for_peers():  # a wait no beat saw (a heartbeat thread starved for as long as it lasted)
            pass
        assert moved_since(after)  # ... ended all the same
        assert not moved_since(resilience.read_heartbeat(path))
    finally:
        hb.stop("exiting")


def test_attempt_reads_the_restart_count(monkeypatch):
    monkeypatch.delenv("LAB_ATTEMPT", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert resilience.attempt() == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert resilience.attempt() == 2
    monkeypatch.setenv("LAB_ATTEMPT", "1")
    assert resilience.attempt() == 1  # the lab's own launcher's count comes first
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "3")
    assert resilience.torchrun_restarts_left()


def test_a_fault_fires_once_where_the_scenario_puts_it(monkeypatch):
    monkeypatch.delenv("LAB_ATTEMPT", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    tr = Training(fault="raise", fault_worker=1, fault_step=7)
    seen = []
    resilience.inject(tr, rank=0, step=7, record=seen.append)
    resilience.inject(tr, rank=1, step=6, record=seen.append)
    assert seen == []
    with pytest.raises(RuntimeError, match="worker 1 raised at step 7"):
        resilience.inject(tr, rank=1, step=7, record=seen.append)
    assert seen == [{"kind": "raise", "rank": 1, "pid": os.getpid()}]
    monkeypatch.setenv("LAB_ATTEMPT", "1")
    resilience.inject(tr, rank=1, step=7, record=seen.append)  # a restarted job runs past it
    assert len(seen) == 1


def test_the_main_thread_says_when_it_waits_for_its_peers_whatever_its_functions_are_called():
    """Hang detection reads the phase the worker declares, not the names of its functions: a function called
    like a collective is busy, a wait declared under any name is comm."""
    import threading

    from lab.comm.peers import waiting_for_peers, waits_for_peers

    seen = {}

    def look(key):
        done = threading.Event()

        def from_heartbeat_thread():  # the heartbeat reads the main thread from its own thread
            seen[key] = resilience.main_thread_phase()[0]
            done.set()

        threading.Thread(target=from_heartbeat_thread).start()
        done.wait(10)

    def allreduce():  # the name of a collective, but its own work
        look("named like a collective")

    @waits_for_peers
    def something_else():
        look("declared")

    allreduce()
    something_else()
    with waiting_for_peers():
        with waiting_for_peers():
            pass
        look("nested")
    look("after")
    assert seen == {"named like a collective": "busy", "declared": "comm", "nested": "comm", "after": "busy"}


def test_a_worker_inside_torch_compile_is_in_the_compile_phase():
    # A function whose code says it comes from torch's inductor stands for a kernel being compiled.
    scope: dict = {}
    exec(compile("def build(started, ev):\n    started.set()\n    ev.wait(10)\n",
                 "/site-packages/torch/_inductor/codecache.py", "exec"), scope)
    started, ev = threading.Event(), threading.Event()
    t = threading.Thread(target=scope["build"], args=(started, ev))
    t.start()
    try:
        assert started.wait(10)
        assert resilience.main_thread_phase(t.ident)[0] == "compile"
    finally:
        ev.set()
        t.join()


def test_a_kernel_being_compiled_gets_the_start_timeout_and_busy_work_does_not(monkeypatch):
    from lab.train import watch

    monkeypatch.setenv("LAB_HEARTBEAT_TIMEOUT", "30")
    monkeypatch.setenv("LAB_START_TIMEOUT", "180")

    class Proc:
        pid = 4242

        def poll(self):
            return None

    now = 1000.0
    for phase, blamed in (("compile", False), ("busy", True)):
        beat = {"step": 1, "phase": phase, "where": "adam_update", "t": now, "progress_t": now - 40}
        got = watch.stuck([Proc()], [beat], now, now - 60)
        assert (got is not None) == blamed, phase
    beat = {"step": 1, "phase": "compile", "where": "adam_update", "t": now, "progress_t": now - 200}
    assert watch.stuck([Proc()], [beat], now, now - 300).kind == "hung"  # past the start timeout it is a hang


def test_a_placement_stage_waiting_for_its_messages_to_be_taken_waits_for_its_peers():
    """A stage's sends complete when the receiver takes them, and a receiver can be in an emulated link's planned
    wait for longer than the heartbeat timeout: the sender waits for its peer (comm), not in its own work, and the
    end of that wait moves its heartbeat."""
    from types import SimpleNamespace

    from lab.train.placement_run.executor import PlacementTrainer

    phases = []

    class Sent:  # a send handle: its wait() is what gloo's isend work blocks in
        def wait(self):
            phases.append(resilience.main_thread_phase(threading.get_ident())[0])

    stage = SimpleNamespace(outbox=[(Sent(), "buffer"), (Sent(), "buffer")])
    PlacementTrainer._wait_sent(stage)
    assert phases == ["comm", "comm"]
    assert stage.outbox == []
    assert resilience.main_thread_phase(threading.get_ident())[0] == "busy"
