"""A class shares one server: a student's short job does not wait for another student's long one to end (the
long one yields after its slice: it drops to the lowest priority and the short one starts beside it), a student's
own second job waits its turn, and the teacher's limits (steps, processes, seconds) hold."""

from __future__ import annotations


import pytest

from lab.errors import LabError
from lab.jobs.limits import Limits
from lab.jobs.manager import JobManager
from lab.view.jobs import queue_line
from lab.store.runs import ACTIVE, RunStore
from lab.train.launcher_record import processes_of
from tests.conftest import default_with, wait_for

pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.timeout(300)]


def scenario(**training):
    return default_with(**{"workers": 1, **training})



def stage_seq(store, rid, stage):
    ev = store.job_records.events(rid)
    hit = ev[ev.event == stage]
    return int(hit.seq.iloc[0]) if len(hit) else None


def nice_of(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[16])


def test_a_short_job_starts_beside_a_long_one_that_yields_and_a_students_own_second_job_waits(lab_db, monkeypatch):
    monkeypatch.setenv("LAB_SLICE_S", "1")
    jm = JobManager(lab_db, capacity=1, warm=False)
    store = RunStore(lab_db)
    long_id = jm.submit(scenario(steps=20000, eval_every=20000), "long", owner="alice").run_id
    wait_for(lambda: store.progress(long_id) > 0, what="the long job's first step")
    own = jm.submit(scenario(steps=5), "alice's second", owner="alice").run_id
    short = jm.submit(scenario(steps=5), "short", owner="bob").run_id
    wait_for(lambda: jm.queue_info(short) is None, what="bob's job to leave the queue")
    info = jm.queue_info(own)
    assert info is not None and info["student_running"]  # alice waits for her own long job
    assert "your own job runs" in queue_line(store, info)
    wait_for(lambda: store.status(short) not in ACTIVE, what="bob's short job to end")
    assert store.status(short) == "done", store.get_run(short)["error"]
    # bob's job ran while alice's long one was still running: it did not wait for its end
    assert store.status(long_id) == "running"
    assert stage_seq(store, long_id, "yielded") < stage_seq(store, short, "scheduled")
    assert all(nice_of(p) == 19 for p in processes_of(long_id))  # the long one yields the cores
    assert store.status(own) == "queued"  # a student's own second job does not start beside her first
    jm.stop(long_id, "alice")
    wait_for(lambda: store.status(own) not in ACTIVE, what="alice's second job")
    assert store.status(own) == "done"
    jm.shutdown()
    assert processes_of(long_id) == processes_of(short) == []


def test_the_teachers_limits_refuse_a_job_too_large_and_stop_one_that_runs_too_long(lab_db, monkeypatch):
    monkeypatch.setenv("LAB_TEACHER_TOKEN", "s3cret-token-for-the-test")
    jm = JobManager(lab_db, capacity=1, warm=False)
    with pytest.raises(LabError, match="only the teacher"):
        jm.access.set_limits("bob", Limits(100, 2.0, 2))
    assert jm.access.sign_in_teacher("teach", "s3cret-token-for-the-test")
    jm.access.set_limits("teach", Limits(100, 2.0, 2))
    with pytest.raises(LabError, match="at most 100"):
        jm.submit(scenario(steps=101), owner="bob")
    with pytest.raises(LabError, match="at most 2"):
        jm.submit(scenario(workers=3, steps=10), owner="bob")
    with pytest.raises(LabError, match="whole number"):
        jm.access.set_limits("teach", Limits(0, 1.0, 1))
    store = RunStore(lab_db)
    jm.access.set_limits("teach", Limits(20000, 2.0, 4))
    rid = jm.submit(scenario(steps=20000, eval_every=20000), owner="bob").run_id
    # the status is marked before the stop event is written, so the event is what is waited for
    wait_for(lambda: (store.job_records.events(rid).event == "stop").any(), what="the time limit to stop the job")
    run = store.get_run(rid)
    assert run["status"] == "stopped" and "time limit" in run["error"], run["error"]
    ev = store.job_records.events(rid)
    assert ev[ev.event == "stop"].detail.iloc[0]["limit_s"] == 2.0
    wait_for(lambda: processes_of(rid) == [], what="its processes to end")
    jm.shutdown()
