"""The job lifecycle through lab.jobs.manager: every event in order, placement on this machine's cores,
the fair queue across sessions, two managers starting jobs at the same moment, a controller
that dies (the app restarted), and releasing what a finished job holds. Jobs are tiny (MLP, 1-2
workers, a few steps); long ones are stopped as soon as they have shown what is needed."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.jobs.access import ANONYMOUS
from lab.view import jobs as job_views
from lab.jobs.manager import JobManager
from lab.store.runs import JOB_WORKER, RunStore
from lab.train.launcher import listening_socket
from lab.train.launcher_record import processes_of, scratch_prefix
from tests.conftest import ROOT, default_with, wait_for

pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.timeout(300)]
CPUS = sorted(os.sched_getaffinity(0))


def scenario(**training):
    return default_with(**{"workers": 1, "steps": 4, **training})



def stages(store, rid):
    return list(store.job_records.events(rid).event)


def test_a_job_goes_through_every_stage_then_is_released(lab_db):
    jm = JobManager(lab_db, cpus=CPUS[:2])
    job = jm.submit(scenario(workers=2, steps=6, checkpoint_every=2), name="<b>bold</b> job", owner="alice")
    assert jm.wait(job.run_id, timeout=240) == "done"
    store = RunStore(lab_db)
    ev = store.job_records.events(job.run_id)
    assert list(ev.event) == ["submitted", "parsed", "scheduled", "started", "data", "running", "ended",
                              "released", "released"]
    assert list(ev.t) == sorted(ev.t)
    d = {s: ev[ev.event == s].detail.iloc[0] for s in ("submitted", "parsed", "scheduled", "started", "data")}
    assert d["submitted"]["owner"] == "alice"
    assert [r["role"] for r in d["parsed"]["roles"]] == ["task manager", "compute worker", "compute worker"]
    assert d["scheduled"]["policy"] == "uniform" and len(d["scheduled"]["rank_cpus"]) == 2
    if len(CPUS) >= 2:  # uniform: one rank per core
        assert sorted(d["scheduled"]["rank_cpus"]) == sorted(CPUS[:2])
    assert d["started"]["world"] == 2 and d["started"]["cpus"] == d["scheduled"]["rank_cpus"]
    assert d["data"]["shard_sizes"] == [674, 673]
    released = ev[ev.event == "released"].detail
    assert {r["by"] for r in released} == {"launcher", "job manager"}
    assert all(r["worker_processes_left"] == 0 for r in released)
    assert ev[ev.event == "ended"].detail.iloc[0]["status"] == "done"
    assert store.job_records.heartbeats(job.run_id).empty  # the launcher cleared them at the end
    assert jm.book.held == {}
    logs = jm.launcher.worker_logs(job.run_id)
    assert sorted(logs) == [0, 1] and "step 6" in logs[0].read_text()
    table = job_views.overview(store, jm, owner="alice")
    row = table.set_index("id").loc[job.run_id]
    assert row.owner == "you" and row.status == "done" and row.event == "released" and row.restarts == 0
    assert "slot" in row.resources and row.ran_s > 0 and row.queued_s >= 0
    assert job_views.overview(store, jm, owner="bob").empty  # bob sees only his own jobs by default
    assert job_views.overview(store, jm, owner="bob", everyone=True).set_index("id").owner[job.run_id] == \
        "another session"
    assert job_views.overview(store, jm, owner="bob", everyone=True, show_ids=True).set_index("id").owner[
        job.run_id] == "session alice"
    rows, _ = job_views.slot_timeline(store, [job.run_id])
    assert len(rows) == 2 and all(r["end"] > r["start"] >= 0 for r in rows)
    # release: intermediate checkpoints go, the final model and the logs stay
    ck = store.checkpoint_dir(job.run_id)
    assert list(ck.glob("step*.pt"))
    out = jm.release(job.run_id, "alice")
    assert out["killed"] == [] and out["checkpoint_files_removed"] > 0
    assert not list(ck.glob("step*.pt")) and (ck / "final.pt").exists() and logs[0].exists()
    assert stages(store, job.run_id)[-1] == "released"


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two cores to tell the policies apart")
def test_resource_state_pins_a_whole_job_to_one_core(lab_db):
    jm = JobManager(lab_db, policy="resource_state", cpus=CPUS[:2], slots_per_cpu=2)
    job = jm.submit(scenario(workers=2, steps=100_000))
    store = RunStore(lab_db)
    try:
        wait_for(lambda: store.progress(job.run_id) >= 2, what="progress")
        sched = store.job_records.events(job.run_id).set_index("event").detail
        assert len(sched["scheduled"]["groups"]) == 1 and len(set(sched["scheduled"]["rank_cpus"])) == 1
        cpu = sched["scheduled"]["rank_cpus"][0]
        base = os.getpriority(os.PRIO_PROCESS, 0)
        for pid in sched["started"]["pids"]:  # the kernel's view of each worker process
            allowed = [ln for ln in open(f"/proc/{pid}/status") if ln.startswith("Cpus_allowed_list")][0]
            assert allowed.split()[-1] == str(cpu)
            assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, base + 10)  # batch work yields to the pages
    finally:
        jm.stop(job.run_id, ANONYMOUS)
    wait_for(lambda: processes_of(job.run_id) == [], timeout=15, what="every process to end")


def test_the_queue_is_fair_across_sessions(lab_db):
    jm = JobManager(lab_db, capacity=1)
    store = RunStore(lab_db)
    blocker = jm.submit(scenario(steps=100_000), owner="A")
    try:
        wait_for(lambda: store.status(blocker.run_id) == "running", what="the first job to run")
        a2, a3 = jm.submit_many([(scenario(), "A2"), (scenario(), "A3")], owner="A")
        b1 = jm.submit(scenario(), "B1", owner="B")
        c1 = jm.submit(scenario(), "C1", owner="C")
        # A has just been served: B, then C, then A's next two
        assert jm.queued() == [b1.run_id, c1.run_id, a2.run_id, a3.run_id]
        assert [jm.queue_info(j.run_id)["position"] for j in (b1, c1, a2, a3)] == [1, 2, 3, 4]
        assert jm.queue_info(blocker.run_id) is None
        table = job_views.overview(store, jm, owner="B", everyone=True).set_index("id")
        assert table.queue[b1.run_id] == 1 and table.owner[b1.run_id] == "you"
        assert table.owner[a2.run_id] == "another session"
        jm.stop(blocker.run_id, "A")
        wait_for(lambda: "scheduled" in stages(store, b1.run_id), what="the next job to be scheduled")
        assert "scheduled" not in stages(store, c1.run_id) + stages(store, a2.run_id)
        # B has nothing left, yet the turn passes on to C (not back to A, who queued most)
        assert jm.queued() == [c1.run_id, a2.run_id, a3.run_id]
    finally:
        jm.shutdown()
    for j in (blocker, a2, a3, b1, c1):
        wait_for(lambda: processes_of(j.run_id) == [], timeout=15, what="no process left")
    assert store.status(a3.run_id) == "stopped" and stages(store, a3.run_id)[-2:] == ["stop", "ended"]


def test_two_sessions_start_jobs_at_the_same_moment(lab_db):
    """Two managers (two app processes' worth) submit in the same instant: distinct ports held by
    their launchers, each job complete and only its own rows, nothing left running."""
    managers = [JobManager(lab_db), JobManager(lab_db)]
    barrier = threading.Barrier(2)
    jobs: dict[int, str] = {}

    def go(k):
        barrier.wait()
        jobs[k] = managers[k].submit(scenario(workers=2, steps=8), name=f"session {k}", owner=f"s{k}").run_id

    threads = [threading.Thread(target=go, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(set(jobs.values())) == 2
    store = RunStore(lab_db)
    for k, rid in jobs.items():
        assert managers[k].wait(rid, timeout=240) == "done", store.get_run(rid)["error"]
    started = [store.job_records.events(rid).set_index("event").detail["started"] for rid in jobs.values()]
    assert started[0]["port"] != started[1]["port"]
    assert not set(started[0]["pids"]) & set(started[1]["pids"])
    for rid in jobs.values():
        m = store.metrics(rid)
        assert list(m[m.worker == JOB_WORKER].step) == list(range(0, 9))
        assert sorted(m[m.worker >= 0].groupby("worker").step.count().to_dict().items()) == [(0, 8), (1, 8)]
        assert stages(store, rid).count("started") == 1 and processes_of(rid) == []


def test_concurrent_submits_on_one_shared_manager_keep_the_store_consistent(lab_db):
    jm = JobManager(lab_db, capacity=1)
    store = RunStore(lab_db)
    blocker = jm.submit(scenario(steps=100_000), owner="x")
    ids: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def go(k):
        barrier.wait()
        rid = jm.submit(scenario(), f"t{k}", owner=f"s{k}").run_id
        with lock:
            ids.append(rid)

    try:
        threads = [threading.Thread(target=go, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(set(ids)) == 6
        assert sorted(jm.queued()) == sorted(ids) or store.status(blocker.run_id) != "running"
        for rid in ids:
            st = stages(store, rid)
            assert st.count("submitted") == 1 and st.count("parsed") == 1
    finally:
        jm.shutdown()
    wait_for(lambda: all(processes_of(r) == [] for r in ids + [blocker.run_id]), timeout=20, what="no process left")


def test_listening_sockets_hold_distinct_ports():
    socks = [listening_socket() for _ in range(200)]
    try:
        ports = [s.getsockname()[1] for s in socks]
        assert len(set(ports)) == 200
        with socket.socket() as other, pytest.raises(OSError) as e:
            other.bind(("127.0.0.1", ports[0]))
        assert e.value.errno == errno.EADDRINUSE
    finally:
        for s in socks:
            s.close()


APP = """
import sys, time
from lab.jobs.manager import JobManager
from lab.store.runs import RunStore
from lab.scenario.document import default_scenario
sc = default_scenario()
sc = sc.replace(training=sc.training.replace(workers=1, steps=100000))
jm = JobManager(sys.argv[1])
a = jm.submit(sc, owner="app").run_id
b = jm.submit(sc.replace(training=sc.training.replace(steps=3)), owner="app").run_id
store = RunStore(sys.argv[1])
while store.progress(a) < 2:
    time.sleep(0.1)
print(a, b, flush=True)
time.sleep(600)
"""


def test_a_dead_controller_is_noticed_at_the_next_start(lab_db):
    app = subprocess.Popen([sys.executable, "-c", APP, str(lab_db)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        running, queued = app.stdout.readline().split()
    finally:
        app.kill()  # the app dies (kill -9); its launcher runs in its own session and goes on
        app.wait(timeout=10)
    store = RunStore(lab_db)
    jm = JobManager(lab_db, capacity=2)  # room for the queued job beside the one the dead app left running
    # the queued job is taken over by the next manager and runs; the running one still has its launcher and
    # counts against the capacity until it ends
    assert jm.mark_interrupted() == [] and jm.sweeper.orphans() == [running]
    assert jm.sweeper.adopted == [queued] and "requeued" in stages(store, queued)
    assert jm.wait(queued, timeout=180) == "done"
    assert store.get_run(queued)["info"]["owner"] == "app"  # still its owner's
    assert store.status(running) == "running"
    launcher = store.get_run(running)["pid"]
    assert launcher in processes_of(running)
    # the machine "restarts": the whole job is killed without a word
    os.killpg(launcher, signal.SIGKILL)
    wait_for(lambda: processes_of(running) == [], timeout=20, what="the workers to die with their launcher")
    assert store.status(running) == "running"  # nobody could record anything
    left = list(Path(tempfile.gettempdir()).glob(scratch_prefix(running) + "*"))
    assert left  # the killed launcher could not clean up its scratch folder
    assert JobManager(lab_db).mark_interrupted() == [running]
    assert not list(Path(tempfile.gettempdir()).glob(scratch_prefix(running) + "*"))  # the next start does
    run = store.get_run(running)
    assert run["status"] == "interrupted" and "without reporting" in run["error"]
    assert jm.release(running, "app")["killed"] == []  # nothing was left to kill


def test_release_refuses_an_active_job(lab_db):
    jm = JobManager(lab_db, capacity=1)
    blocker = jm.submit(scenario(steps=100_000))
    queued = jm.submit(scenario())
    try:
        with pytest.raises(LabError, match="stop it"):
            jm.release(queued.run_id, ANONYMOUS)
        with pytest.raises(LabError, match="stop it"):
            jm.release(blocker.run_id, ANONYMOUS)
    finally:
        jm.shutdown()
    wait_for(lambda: processes_of(blocker.run_id) == [], timeout=20, what="no process left")


def test_killing_the_warm_starter_while_a_job_runs_wedges_no_queue(lab_db):
    """The starter that forked a running job's launcher is killed: the job goes on, its end is still
    noticed (the exit it would have reported is lost with it), and the jobs queued after it all run."""
    from lab.train.warm import StartedLauncher, StarterHandle

    jm = JobManager(lab_db, capacity=1, warm=False)
    jm.launcher.starter = StarterHandle()  # its own starter, so that killing it touches no other test
    store = RunStore(lab_db)
    try:
        assert jm.launcher.starter.wait_ready(240)
        first = jm.submit(scenario(steps=1500), "long", owner="A").run_id
        wait_for(lambda: store.status(first) == "running", what="the first job to run")
        assert isinstance(jm.jobs.get(first).process, StartedLauncher)  # forked warm
        dead = jm.launcher.starter.pid
        os.kill(dead, signal.SIGKILL)
        rest = [jm.submit(scenario(steps=3), f"short {o}", owner=o).run_id for o in ("A", "B", "C")]
        for rid in [first] + rest:
            assert jm.wait(rid, timeout=240) == "done", (rid, store.get_run(rid)["error"])
        assert jm.launcher.starter.restarts >= 1 and jm.launcher.starter.pid != dead
        wait_for(lambda: not jm.jobs.ids() and not jm.drains.ids(), timeout=30, what="every job released")
        assert not jm.queued()
    finally:
        jm.shutdown()
        jm.launcher.starter.stop()
    for rid in [first] + rest:
        assert processes_of(rid) == []
