"""Jobs: a run as its own process group, a queue that runs one job at a time, stop, and runs whose
process vanished."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from lab.jobs.access import ANONYMOUS
from lab.jobs.manager import JobManager
from lab.scenario.document import default_scenario
from lab.store.runs import RunStore
from lab.train.launcher_record import processes_of
from tests.conftest import default_with, wait_for

pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.timeout(240)]


def scenario(**training):
    return default_with(**training)



def test_queue_runs_jobs_one_after_another(lab_db):
    jm = JobManager(lab_db, capacity=1)
    jobs = jm.submit_many([(scenario(workers=1, steps=3, optimizer=o), f"cmp-{o}")
                           for o in ("adam", "adabelief", "maxadabelief")])
    ids = [j.run_id for j in jobs]
    store = RunStore(lab_db)
    most = 0
    deadline, st = time.monotonic() + 600, []
    while True:
        assert time.monotonic() < deadline, f"the three jobs did not end within 600 s: {st}"
        st = [store.status(r) for r in ids]
        most = max(most, st.count("running"), len(jm.jobs.ids()))
        if all(s not in ("queued", "running") for s in st) and not jm.jobs.ids():
            break
        time.sleep(0.05)
    assert most == 1
    runs = [store.get_run(r) for r in ids]
    assert [r["status"] for r in runs] == ["done"] * 3, [r["error"] for r in runs]
    ev = store.job_records.events(ids)
    seq = {(r.run_id, r.event): r.seq for r in ev.itertuples()}
    for prev, nxt in zip(ids, ids[1:]):  # one at a time, in order: each starts after the one before ended
        assert seq[(nxt, "scheduled")] > seq[(prev, "ended")]
    assert [r["scenario"]["training"]["optimizer"] for r in runs] == ["adam", "adabelief", "maxadabelief"]
    assert all(jm.launcher.log_path(r).exists() for r in ids)
    assert not list((store.data_dir() / "jobs").glob("*.json"))  # scenario files cleaned up
    for r in ids:
        assert processes_of(r) == []


def test_stop_ends_the_whole_process_group_and_a_queued_job_never_starts(lab_db):
    jm = JobManager(lab_db, capacity=1)
    first, second = jm.submit_many([(scenario(workers=2, steps=100_000), "long"), (scenario(steps=5), "next")])
    store = RunStore(lab_db)
    wait_for(lambda: store.progress(first.run_id) >= 10, what="the first job to make progress")
    pids = processes_of(first.run_id)
    assert len(pids) == 3  # launcher and two workers
    assert store.status(second.run_id) == "queued"
    assert jm.stop(second.run_id, ANONYMOUS)
    assert jm.stop(first.run_id, ANONYMOUS)
    wait_for(lambda: processes_of(first.run_id) == [], timeout=30, what="every process to end")
    assert store.status(first.run_id) == "stopped"
    run2 = store.get_run(second.run_id)
    assert run2["status"] == "stopped" and run2["start"] is None
    jm._schedule()  # the scheduler's next pass: a stopped job is not started
    assert jm.jobs.ids() == [] and store.status(second.run_id) == "stopped"


def test_a_worker_killed_from_outside_fails_the_job_with_no_process_left(lab_db):
    jm = JobManager(lab_db)
    job = jm.submit(scenario(workers=2, steps=100_000))
    store = RunStore(lab_db)
    wait_for(lambda: store.progress(job.run_id) >= 5, what="progress")
    launcher = store.get_run(job.run_id)["pid"]
    workers = [p for p in processes_of(job.run_id) if p != launcher]
    assert len(workers) == 2
    os.kill(workers[1], signal.SIGKILL)
    assert jm.wait(job.run_id, timeout=30) == "failed"
    run = store.get_run(job.run_id)
    assert "was killed by signal SIGKILL" in run["error"]
    assert processes_of(job.run_id) == []


def test_killing_the_launcher_takes_its_workers_and_the_run_is_not_left_running(lab_db):
    jm = JobManager(lab_db)
    job = jm.submit(scenario(workers=2, steps=100_000))
    store = RunStore(lab_db)
    wait_for(lambda: store.progress(job.run_id) >= 5, what="progress")
    os.kill(store.get_run(job.run_id)["pid"], signal.SIGKILL)  # only the launcher
    assert jm.wait(job.run_id, timeout=30) == "interrupted"  # it could not report: not a failure of the run
    assert "SIGKILL" in store.get_run(job.run_id)["error"]
    wait_for(lambda: processes_of(job.run_id) == [], timeout=10, what="workers to die with their launcher")


def test_running_runs_whose_process_is_gone_become_interrupted(lab_db):
    store = RunStore(lab_db)
    dead = subprocess.Popen(["true"])
    dead.wait()
    a = store.create_run(default_scenario(), status="running")
    store.update_run(a, pid=dead.pid)
    b = store.create_run(default_scenario(), status="running")
    store.update_run(b, pid=os.getpid())  # alive, but not a training job
    c = store.create_run(default_scenario(), status="queued")  # queued by no live process: taken over
    jm = JobManager(lab_db, capacity=1)
    d = store.create_run(default_scenario(), status="done")
    try:
        assert sorted(jm.mark_interrupted()) == sorted([a, b])
        assert {store.status(r) for r in (a, b)} == {"interrupted"} and store.status(d) == "done"
        assert jm.sweeper.adopted == [c] and c in jm.queued() + jm.jobs.ids()
    finally:
        jm.shutdown()
    assert store.status(c) in ("stopped", "done")


def test_bad_scenarios_are_refused_before_queueing(lab_db):
    from lab.errors import LabError

    jm = JobManager(lab_db)
    with pytest.raises(LabError, match="worker_devices"):
        jm.submit(scenario(emulate=True))
    assert RunStore(lab_db).list_runs().empty
