"""Jobs on a Ray cluster: Ray's own multi-node test cluster on this machine (a head that runs no rank and two
worker nodes of two CPUs, one of which declares an FPGA and a GPU), the job manager handing its jobs to it."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from lab.errors import LabError
from lab.jobs.manager import Job, JobManager
from lab.jobs.nodes import ClusterNodes
from lab.store.runs import JOB_WORKER, RunStore
from lab.settings import ROOT
from lab.view.jobs.page import cluster_nodes
from tests.conftest import RAY_NODE_MEMORY, default_with, ray_test_cluster, wait_for

# every test here starts processes, and one Ray cluster at a time runs on this machine (one test worker)
pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.xdist_group("ray")]

pytest.importorskip("ray.cluster_utils")

NODE = dict(num_cpus=2, object_store_memory=RAY_NODE_MEMORY)
SPECIAL = {"fpga": 1, "gpu": 1}  # what the second worker node stands for


@pytest.fixture(scope="module")
def cluster():
    with ray_test_cluster(dict(num_cpus=2), dict(num_cpus=2, resources=SPECIAL)) as c:
        c.fpga = c.nodes_added[1]
        yield c


@pytest.fixture
def jm(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_DB", str(tmp_path / "runs.db"))
    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    m = JobManager(tmp_path / "runs.db", ray_address=cluster.address)
    yield m
    m.shutdown()


def actor_processes() -> list[psutil.Process]:
    """Ray worker processes of rank actors, a job's or the pool's idle ones (Ray titles them after the actor)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any("RankActor" in part for part in p.info["cmdline"] or ()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def held(cluster) -> dict:
    """What the cluster holds for the lab (the pool's idle actors' processes, placement groups), asked as the bench
    asks, by a process of its own."""
    done = subprocess.run([sys.executable, "-m", "lab.train.ray_pool", cluster.address, "--held"], cwd=str(ROOT),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


#: The pool's warm ranks on this module's cluster: one per CPU of its two worker nodes (the head runs no rank).
POOL = 4


def rank_processes() -> list[psutil.Process]:
    """Rank actor processes that run a job's rank (Ray titles a worker after the method it runs)."""
    out = []
    for p in actor_processes():
        try:
            if any("RankActor.run" in part for part in p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def warm_ranks(cluster) -> int:
    """The pool's idle warm ranks, once it refilled (a warm rank still loading torch counts)."""
    return sum(held(cluster)["idle"].values())


def nothing_left(cluster) -> None:
    """After a job: no rank of it runs, no rank actor beyond the pool's (one per CPU), no placement group."""
    wait_for(lambda: not rank_processes(), 120, "the job's ranks to end")
    wait_for(lambda: len(actor_processes()) <= POOL, 120, "no rank actor beyond the pool's")
    assert held(cluster)["placement_groups"] == 0


def started(store: RunStore, run_id: str) -> dict:
    st = store.job_records.events(run_id)
    rows = st[st.event == "started"]
    return rows.iloc[-1].detail if len(rows) else {}


def losses(store: RunStore, run_id: str):
    m = store.metrics(run_id)
    return m[m.worker != JOB_WORKER][["step", "worker", "loss"]].reset_index(drop=True)


def on_ray_and_here(jm: JobManager, sc, tmp_path) -> tuple[str, str]:
    """The run ids of ``sc`` run to its end on the cluster and then on this machine (the same store)."""
    on_ray = jm.submit(sc, "on ray")
    assert jm.wait(on_ray.run_id, 300) == "done", jm.store.get_run(on_ray.run_id)["error"]
    here = JobManager(tmp_path / "runs.db", ray_address="")
    try:
        local = here.submit(sc, "here")
        assert here.wait(local.run_id, 300) == "done", here.store.get_run(local.run_id)["error"]
    finally:
        here.shutdown()
    return on_ray.run_id, local.run_id


def test_a_two_rank_job_on_ray_trains_to_the_same_bits_as_on_this_machine(jm, tmp_path):
    ray_id, local_id = on_ray_and_here(jm, default_with(workers=2, steps=40), tmp_path)
    on_ray, local = Job(ray_id), Job(local_id)
    assert started(jm.store, on_ray.run_id)["start"] == "ray"
    assert started(jm.store, local.run_id)["start"] != "ray"
    ray_loss, local_loss = losses(jm.store, on_ray.run_id), losses(jm.store, local.run_id)
    assert len(ray_loss) == 2 * 40 and ray_loss.step.nunique() == 40  # every step of every rank reached the store
    assert ray_loss.step.tolist() == local_loss.step.tolist()
    assert ray_loss.loss.tolist() == local_loss.loss.tolist()  # bit for bit, same seed
    acc = jm.store.metrics(on_ray.run_id, worker=JOB_WORKER).test_acc.dropna()
    assert acc.iloc[-1] == jm.store.metrics(local.run_id, worker=JOB_WORKER).test_acc.dropna().iloc[-1]
    # Every node of the test cluster is this machine: the Ray ranks' CPU, which Ray's own daemon holds and no
    # process of the launcher's tree does, is the job's own as the forked ranks' is (two ranks of 40 steps: about
    # 0.2 CPU-seconds on warm actors, which loaded torch before the job).
    ray_load, local_load = (jm.store.get_run(r)["info"]["load"] for r in (ray_id, local_id))
    assert ray_load["outside_cpu_s"] > 0.05 and ray_load["own_cpu_s"] >= ray_load["outside_cpu_s"], ray_load
    # Ranks forked from the warm starter have torch loaded already: 40 small steps of two ranks cost about 0.15
    # CPU-seconds on a quick machine, far above what a meter that booked none of it would show.
    assert local_load["outside_cpu_s"] == 0.0 and local_load["own_cpu_s"] > 0.05, local_load


def test_a_job_larger_than_a_node_spans_two_and_an_fpga_rank_lands_on_the_fpga_node(jm, cluster):
    fpga_node = cluster.fpga.node_id
    job = jm.submit(default_with(workers=3, steps=20, worker_devices=("fpga", "host", "gpu")), "three ranks")
    assert jm.wait(job.run_id, 300) == "done", jm.store.get_run(job.run_id)["error"]
    nodes = started(jm.store, job.run_id)["nodes"]
    assert [n["rank"] for n in nodes] == [0, 1, 2]
    assert len({n["node"] for n in nodes}) == 2  # two CPUs a node: three ranks need two nodes
    assert nodes[0]["node"] == fpga_node
    nothing_left(cluster)


def test_two_owners_cannot_stop_each_others_jobs_on_the_cluster(jm, cluster):
    job = jm.submit(default_with(workers=2, steps=100000), "long", owner="alice")
    wait_for(lambda: len(jm.store.metrics(job.run_id)) > 0, 300, "the job to train")
    with pytest.raises(LabError):
        jm.stop(job.run_id, "bob")
    assert jm.store.status(job.run_id) == "running"
    assert jm.stop(job.run_id, "alice")
    assert jm.wait(job.run_id, 120) == "stopped"
    nothing_left(cluster)


@contextlib.contextmanager
def a_node_of(job_id: str, jm: JobManager, cluster):
    """Once the job trains, remove a worker node that holds one of its ranks; put one like it back after."""
    wait_for(lambda: len(jm.store.metrics(job_id)) > 0, 300, "the job to train")
    used = {n["node"] for n in started(jm.store, job_id)["nodes"]}
    victim = next(n for n in cluster.list_all_nodes() if n.node_id in used and n is not cluster.head_node)
    cluster.remove_node(victim)
    try:
        yield victim
    finally:  # the cluster as it was, for the tests after this one
        if victim is cluster.fpga:
            cluster.fpga = cluster.add_node(**NODE, resources=SPECIAL)
        else:
            cluster.add_node(**NODE)
        cluster.wait_for_nodes()


def test_a_lost_node_interrupts_its_run_and_leaves_no_process(jm, cluster):
    job = jm.submit(default_with(workers=3, steps=100000), "lost node")
    with a_node_of(job.run_id, jm, cluster):
        t0 = time.time()
        assert jm.wait(job.run_id, 180) == "interrupted"
        run = jm.store.get_run(job.run_id)
        assert "left the cluster" in run["error"]
        st = jm.store.job_records.events(job.run_id)
        assert st[st.event == "alarm"].iloc[-1].detail["kind"] == "lost"
        assert run["end"] - t0 < 180
        wait_for(lambda: not rank_processes(), 60, "the job's rank processes to end")
        assert len(jm.store.metrics(job.run_id)) > 0  # what it stored before stays
    nothing_left(cluster)


def test_a_job_that_recovers_restarts_on_the_nodes_left_when_one_is_lost(jm, cluster, monkeypatch):
    # A restarted rank is a fresh Ray worker that loads torch again, and its heartbeats reach the launcher through
    # the job's writer actor: on a busy machine (a CI run with every core taken) a rank's beat at its first step
    # arrived 73 s late, past the default 30 s that counts a rank as frozen or hung. Limits on waiting, not a
    # timing claim.
    monkeypatch.setenv("LAB_HEARTBEAT_TIMEOUT", "120")
    monkeypatch.setenv("LAB_FROZEN_TIMEOUT", "120")
    job = jm.submit(default_with(workers=3, steps=1500, fault_policy="recover"), "recovers")
    with a_node_of(job.run_id, jm, cluster) as victim:
        assert jm.wait(job.run_id, 300) == "done", jm.store.get_run(job.run_id)["error"]
        st = jm.store.job_records.events(job.run_id)
        alarm = st[st.event == "alarm"].iloc[-1].detail
        assert alarm["kind"] == "lost" and "restart" in alarm["action"]
        again = started(jm.store, job.run_id)
        assert again["workers"] == 2 and victim.node_id not in {n["node"] for n in again["nodes"]}


def test_jobs_reach_the_cluster_in_the_fair_queues_order(jm, monkeypatch):
    monkeypatch.setenv("LAB_RAY_WAITING", "1")  # one job at a time waits on the cluster: the order is the lab's
    jobs = jm.submit_many([(default_with(workers=2, steps=60), f"job {k}") for k in range(3)], owner="carol")
    assert [jm.wait(j.run_id, 300) for j in jobs] == ["done"] * 3
    starts = [started(jm.store, j.run_id) for j in jobs]
    assert all(s["start"] == "ray" for s in starts)
    first_started = [jm.store.job_records.last_event(j.run_id, "started")["t"] for j in jobs]
    assert first_started == sorted(first_started)


def test_a_placement_run_places_its_stages_on_the_cluster_and_computes_what_it_computes_here(jm, cluster, tmp_path):
    from lab.modelled.opgraph import trace
    from lab.scenario.models import build_model

    sc = default_with(parallel="placement", steps=12, batch_size=24, micro_batches=3)
    ops = trace(build_model(sc.training.model, 64, 10), 24, 64).names
    devices = ["gpu", "host"]
    sc = sc.replace(training=sc.training.replace(
        placement={op: devices[i * 2 // len(ops)] for i, op in enumerate(ops)}))
    ray_id, local_id = on_ray_and_here(jm, sc, tmp_path)
    nodes = started(jm.store, ray_id)["nodes"]
    assert len(nodes) == 2 and nodes[0]["node"] == cluster.fpga.node_id  # the GPU's stage on the node with one
    job_loss = [jm.store.metrics(r, worker=JOB_WORKER).loss.dropna().tolist() for r in (ray_id, local_id)]
    assert len(job_loss[0]) > 0 and job_loss[0] == job_loss[1]


def test_a_client_address_is_refused_with_a_message_and_the_run_fails_cleanly(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_DB", str(tmp_path / "runs.db"))
    jm = JobManager(tmp_path / "runs.db", ray_address="ray://head:10001")
    try:
        job = jm.submit(default_with(workers=2, steps=10), "client")
        assert jm.wait(job.run_id, 120) == "failed"
        error = jm.store.get_run(job.run_id)["error"]
        assert "ray://" in error and "node of the cluster" in error and "Traceback" not in error
    finally:
        jm.shutdown()


@pytest.mark.parametrize("fault, kind", [("kill", "killed"), ("raise", "error"), ("hang", "hung")])
def test_a_rank_that_fails_on_the_cluster_is_found_and_named_as_on_this_machine(jm, cluster, monkeypatch, fault, kind):
    monkeypatch.setenv("LAB_HEARTBEAT_TIMEOUT", "5")
    job = jm.submit(default_with(workers=2, steps=100000, fault=fault, fault_worker=1, fault_step=5), fault)
    assert jm.wait(job.run_id, 180) == "failed"
    run = jm.store.get_run(job.run_id)
    st = jm.store.job_records.events(job.run_id)
    alarm = st[st.event == "alarm"].iloc[-1]
    assert alarm.detail["kind"] == kind and alarm.worker == 1
    assert run["error"].startswith("worker 1")
    if fault == "raise":
        assert "injected fault" in run["error"]
    nothing_left(cluster)
    wait_for(lambda: warm_ranks(cluster) == POOL, 120, "the pool refilled")
    # A killed rank cannot remove its scratch folder; the next ranks on its node do (the test cluster's nodes share
    # this machine's temporary directory)
    left = lambda: sorted(Path(tempfile.gettempdir()).glob(f"lab-rank-{job.run_id}-*"))  # noqa: E731
    if left():
        after = jm.submit(default_with(workers=2, steps=3), "after")
        assert jm.wait(after.run_id, 180) == "done"
    assert left() == []


def test_the_teacher_sees_the_clusters_nodes_their_device_kinds_and_a_lost_one(jm, cluster):
    def answer(nodes: ClusterNodes) -> list[dict]:
        nodes.latest()  # asks in the background
        assert nodes.wait(120)
        rows, error, age = nodes.latest()
        assert error is None and rows is not None and age is not None, error
        return rows

    rows = answer(ClusterNodes(cluster.address, every_s=0))
    alive = [r for r in rows if r["alive"]]
    assert sorted(r["CPUs"] for r in alive) == [0.0, 2.0, 2.0]  # the head runs no rank
    assert [r["device kinds"] for r in alive if r["device kinds"]] == ["fpga, gpu"]
    assert next(r for r in alive if r["device kinds"])["node"] == cluster.fpga.node_id[:12]
    extra = cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    cluster.remove_node(extra)
    # Ray marks a node dead once its heartbeats stop: the node stays listed, not alive
    wait_for(lambda: any(r["node"] == extra.node_id[:12] and not r["alive"]
                         for r in answer(ClusterNodes(cluster.address, every_s=0))), 120, "the lost node listed")
    # the Jobs page draws them from the job manager's own answer, never waiting for Ray
    jm.nodes.latest()
    assert jm.nodes.wait(120)
    (section,) = cluster_nodes(jm)
    assert section.kind == "measured" and len(section.table) >= 3 and not section.notices


# ---- the warm ranks --------------------------------------------------------------------------------------------

def warm_pool(cluster) -> None:
    """Fill the cluster's pool of warm ranks and wait for them, as the bench does before its clock starts."""
    done = subprocess.run([sys.executable, "-m", "lab.train.ray_pool", cluster.address], cwd=str(ROOT),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def placement_scenario(steps: int):
    from lab.modelled.opgraph import trace
    from lab.scenario.models import build_model

    sc = default_with(parallel="placement", steps=steps, batch_size=24, micro_batches=3)
    ops = trace(build_model(sc.training.model, 64, 10), 24, 64).names
    return sc.replace(training=sc.training.replace(placement={op: ("gpu", "host")[i * 2 // len(ops)]
                                                              for i, op in enumerate(ops)}))


def test_jobs_run_on_warm_ranks_one_after_another_and_compute_the_bits_of_fresh_ones(jm, cluster, tmp_path):
    warm_pool(cluster)
    assert len(held(cluster)["pids"]) == POOL  # warm, each answers with its process
    dp, plan = default_with(workers=2, steps=30), placement_scenario(12)
    ids = []
    for sc, name in ((dp, "data parallel"), (plan, "placement"), (dp, "data parallel again")):
        job = jm.submit(sc, name)
        assert jm.wait(job.run_id, 300) == "done", jm.store.get_run(job.run_id)["error"]
        ids.append(job.run_id)
    nodes = [started(jm.store, r)["nodes"] for r in ids]
    assert all(n["warm"] for ns in nodes for n in ns)
    pids = [{n["pid"] for n in ns} for ns in nodes]
    assert pids[0] & pids[1] or pids[1] & pids[2] or pids[0] & pids[2]  # a process ran more than one job
    # The data-parallel job after a placement job on the same processes is the first one, bit for bit...
    assert losses(jm.store, ids[0]).loss.tolist() == losses(jm.store, ids[2]).loss.tolist()
    # ...and both jobs are what fresh processes on this machine compute.
    here = JobManager(tmp_path / "runs.db", ray_address="")
    try:
        local = [here.submit(sc, f"{name} here") for sc, name in ((dp, "dp"), (plan, "plan"))]
        assert [here.wait(j.run_id, 300) for j in local] == ["done", "done"]
    finally:
        here.shutdown()
    assert losses(jm.store, ids[0]).loss.tolist() == losses(jm.store, local[0].run_id).loss.tolist()
    plan_loss = [jm.store.metrics(r, worker=JOB_WORKER).loss.dropna().tolist() for r in (ids[1], local[1].run_id)]
    assert len(plan_loss[0]) > 0 and plan_loss[0] == plan_loss[1]
    nothing_left(cluster)
    assert warm_ranks(cluster) == POOL  # given back, no more kept than the nodes' CPUs


def test_a_warm_rank_killed_while_it_waits_is_replaced_and_the_next_job_runs(jm, cluster):
    import os
    import signal

    warm_pool(cluster)
    victim = held(cluster)["pids"][0]
    os.kill(victim, signal.SIGKILL)
    job = jm.submit(default_with(workers=2, steps=20), "after a warm rank died")
    assert jm.wait(job.run_id, 300) == "done", jm.store.get_run(job.run_id)["error"]
    assert victim not in {n["pid"] for n in started(jm.store, job.run_id)["nodes"]}
    nothing_left(cluster)
    wait_for(lambda: warm_ranks(cluster) == POOL, 120, "the pool refilled")


def test_a_killed_launcher_leaves_no_rank_of_its_job_training_on_warm_actors(jm, cluster):
    import os
    import signal

    warm_pool(cluster)
    job = jm.submit(default_with(workers=2, steps=100000), "its launcher dies")
    wait_for(lambda: len(jm.store.metrics(job.run_id)) > 0, 300, "the job to train")
    assert all(n["warm"] for n in started(jm.store, job.run_id)["nodes"])
    os.kill(started(jm.store, job.run_id)["launcher_pid"], signal.SIGKILL)
    # Ray removes a dead driver's placement group; the ranks on the pool's actors then end themselves, and the pool
    # starts others in their place.
    wait_for(lambda: not rank_processes(), 120, "the dead launcher's ranks to end")
    nothing_left(cluster)
    wait_for(lambda: warm_ranks(cluster) == POOL, 120, "the pool refilled")
