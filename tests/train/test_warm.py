"""Warm starts (lab.train.warm, lab.train.starter): a job forked from the starter trains to the
very weights a cold one does, its processes look and end as a cold job's do, and the starter is
restarted when it dies and ends with the process that started it."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from lab import settings
from lab.scenario.document import default_scenario
from lab.store.runs import RunStore, new_run_id
from lab.train.launcher import launch
from lab.train.launcher_record import processes_of
from lab.train.warm import StarterHandle, rss_mb
from tests.conftest import ROOT, start_warm

pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def starter():
    st = StarterHandle()
    assert st.wait_ready(240), "the warm starter did not get ready"
    yield st
    st.stop()


def scenario(**training):
    sc = default_scenario()
    return sc.replace(training=sc.training.replace(**{"workers": 2, "steps": 15, "seed": 3, **training}))


def run_warm(st: StarterHandle, sc, folder, timeout=240.0) -> str:
    log = folder / f"{new_run_id()}.log"
    rid, p = start_warm(st, sc, log)
    assert p.wait(timeout=timeout) == 0, log.read_text()[-3000:]
    return rid


def final_weights(store: RunStore, rid: str) -> dict:
    return torch.load(store.checkpoint_dir(rid) / "final.pt", weights_only=True)["model"]


@pytest.mark.parametrize("training", [{}, {"optimizer": "maxadabelief", "compression": {
    "kind": "group_topk", "ratio": 0.05, "group_size": 256, "error_feedback": True, "sharing": "sparse_ring"}}],
    ids=["adam", "maxadabelief-compressed"])
def test_a_warm_job_trains_to_the_same_bits_as_a_cold_one(starter, lab_db, tmp_path, training):
    from lab.scenario.document import Compression

    extra = dict(training)
    if "compression" in extra:
        extra["compression"] = Compression(**extra["compression"])
    sc = scenario(**extra)
    store = RunStore(lab_db)
    cold = launch(sc)
    assert cold.status == "done", cold.error
    rid = run_warm(starter, sc, tmp_path)
    assert store.status(rid) == "done"
    for r, how in ((rid, "forked"), (cold.run_id, "cold")):  # the warm launcher forked its ranks
        ev = store.job_records.events(r)
        assert ev[ev.event == "started"].detail.iloc[0]["start"] == how
    a, b = final_weights(store, cold.run_id), final_weights(store, rid)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert processes_of(rid, exclude=(os.getpid(),)) == []
    for r in (cold.run_id, rid):  # each launcher measured the machine's other work while its job ran
        load = store.get_run(r)["info"]["load"]
        assert load["wall_s"] > 0 and load["cpus"] == os.cpu_count() and 0.0 <= load["others_share"] <= 1.0


def test_a_warm_jobs_processes_look_and_end_like_a_cold_jobs(starter, lab_db, tmp_path):
    store = RunStore(lab_db)
    rid, p = start_warm(starter, scenario(steps=100_000), tmp_path / "long.log")
    deadline = time.monotonic() + 120
    while store.progress(rid) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.progress(rid) >= 3
    pids = processes_of(rid)  # found by the launcher's process group, as a cold job's processes are
    assert p.pid in pids and len(pids) == 3  # the launcher and its two workers
    assert {os.getpgid(x) for x in pids} == {p.pid}  # one process group, led by the launcher
    os.killpg(p.pid, signal.SIGTERM)  # what the job manager's Stop does
    assert p.wait(timeout=60) is not None
    deadline = time.monotonic() + 30
    while processes_of(rid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(rid, exclude=(os.getpid(),)) == []
    assert store.status(rid) == "stopped"


def test_the_starter_is_restarted_after_being_killed_and_its_memory_is_bounded(lab_db, tmp_path):
    st = StarterHandle()
    try:
        assert st.wait_ready(240)
        first = st.pid
        assert 0 < rss_mb(first) < st.max_mb
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while st.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not st.alive() and not st.ready()
        st.check()
        assert st.wait_ready(240) and st.pid != first and st.restarts == 1
        rid = run_warm(st, scenario(steps=3), tmp_path)
        assert RunStore(lab_db).status(rid) == "done"
        st.max_mb = 1.0  # below what it holds: the next check replaces it
        second = st.pid
        st.check()
        assert st.wait_ready(240) and st.pid not in (first, second) and st.restarts == 2
    finally:
        st.stop()
    assert not st.alive()


def test_the_starter_ends_with_the_process_that_started_it(tmp_path):
    code = ("import sys, time; from lab.train.warm import StarterHandle; st = StarterHandle(); "
            "assert st.wait_ready(240); print(st.pid, flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=str(ROOT), env=settings.child_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert os.path.exists(f"/proc/{pid}")
        parent.kill()  # the app killed outright: nothing of it runs to stop the starter
        parent.wait()
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{pid}")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()
