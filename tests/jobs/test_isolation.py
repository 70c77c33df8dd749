"""Thirty students on one server: a session stops and releases only its own jobs (the teacher any),
and the store says who stopped what. Launchers killed with SIGKILL (from the command line and from
the app) are found while the app runs: their runs become interrupted, their workers are gone and
their scratch folders removed. Jobs are tiny (MLP, at most 2 workers: at most 3 processes)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.view import jobs as job_views
from lab.jobs.access import TEACHER, Roster, can_manage, is_teacher, new_token, owner_id, valid_token
from lab.jobs.manager import JobManager
from lab.scenario.document import default_scenario
from lab.store.runs import RunStore
from lab.processes import boot_id
from lab.train.launcher_record import identity, launcher_gone, processes_of
from tests.conftest import ROOT, default_with, wait_for

pytestmark = pytest.mark.timeout(300)


def scenario(**training):
    return default_with(**{"workers": 1, "steps": 4, **training})



def reap(run_id: str) -> None:
    """Whatever a failed test left of a run: killed."""
    for pid in processes_of(run_id, exclude=(os.getpid(),)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ----- who may stop and release -----------------------------------------------------------------
def test_the_teacher_is_who_knows_the_servers_token(monkeypatch):
    monkeypatch.delenv("LAB_TEACHER_TOKEN", raising=False)
    assert not is_teacher("") and not is_teacher("anything") and not is_teacher(None)  # no token: no teacher
    monkeypatch.setenv("LAB_TEACHER_TOKEN", "s3cret-Token")
    assert is_teacher("s3cret-Token")
    for claim in ("", "s3cret-token", "s3cret-Token ", "s3cret", None, ["s3cret-Token"], 1):
        assert not is_teacher(claim), claim
    roster = Roster()
    assert not roster.sign_in("owner-c", "wrong") and not roster.is_teacher("owner-c")
    assert not roster.sign_in("", "s3cret-Token") and not roster.sign_in("-", "s3cret-Token")  # nobody's id
    assert roster.sign_in("owner-a", "s3cret-Token")
    assert roster.is_teacher("owner-a") and not roster.is_teacher("owner-b")  # the owner id, not a page
    monkeypatch.setenv("LAB_TEACHER_TOKEN", "a-new-Token")
    assert not roster.is_teacher("owner-a")  # a new token on the server: signed in with the old one
    assert roster.sign_in("owner-a", "a-new-Token") and roster.is_teacher("owner-a")
    roster.sign_out("owner-a")
    assert not roster.is_teacher("owner-a")
    assert roster.sign_in("owner-a", "a-new-Token")
    monkeypatch.delenv("LAB_TEACHER_TOKEN")
    assert not roster.is_teacher("owner-a")  # the server took the token away
    assert can_manage("a", "a") and not can_manage("a", "b") and can_manage("a", "b", teacher=True)
    assert not can_manage(None, "b") and can_manage(None, "b", teacher=True)  # a command-line run
    assert not can_manage("a", None)


def test_a_session_cannot_stop_or_release_another_sessions_job_the_teacher_can(lab_db, spawns):
    jm = JobManager(lab_db, capacity=1)
    store = RunStore(lab_db)
    running = jm.submit(scenario(steps=100_000), "A's long run", owner="A")
    queued = jm.submit(scenario(), "A's next run", owner="A")
    try:
        wait_for(lambda: store.status(running.run_id) == "running", what="A's job to run")
        for rid in (running.run_id, queued.run_id):
            with pytest.raises(LabError, match="another session's job"):
                jm.stop(rid, "B")
            with pytest.raises(LabError, match="another session's job"):
                jm.release(rid, "B")
        assert store.status(running.run_id) == "running" and store.status(queued.run_id) == "queued"
        assert jm.queued() == [queued.run_id]
        assert "stop" not in list(store.job_records.events(running.run_id).event)
        # A stops its own queued job; the teacher stops A's running one
        assert jm.stop(queued.run_id, "A")
        assert jm.stop(running.run_id, "T-session", teacher=True)
    finally:
        jm.shutdown()
    wait_for(lambda: processes_of(running.run_id) == [], timeout=30, what="A's processes to end")
    for rid, who, error in ((queued.run_id, "A", "stopped by session A before it started"),
                            (running.run_id, TEACHER, "stopped by the teacher")):
        run = store.get_run(rid)
        stop = store.job_records.events(rid).set_index("event").detail["stop"]
        assert run["status"] == "stopped" and run["error"] == error
        assert stop["by"] == who and run["info"]["stopped_by"] == who
    assert store.job_records.events(running.run_id).set_index("event").detail["stop"]["session"] == "T-session"
    # releasing a finished job: not B, but its owner and the teacher
    with pytest.raises(LabError, match="another session's job"):
        jm.release(running.run_id, "B")
    assert store.job_records.last_event(running.run_id)["detail"].get("released_by") is None
    assert jm.release(running.run_id, "A")["released_by"] == "A"
    assert jm.release(queued.run_id, "someone", teacher=True)["released_by"] == TEACHER


def test_a_students_id_comes_from_a_secret_token_it_does_not_give_back():
    tokens = {new_token() for _ in range(200)}
    assert len(tokens) == 200 and all(valid_token(t) for t in tokens)
    t = next(iter(tokens))
    assert owner_id(t) == owner_id(t) and len(owner_id(t)) == 12  # the same browser: the same student
    assert len({owner_id(x) for x in tokens}) == 200
    assert t not in owner_id(t) and owner_id(t) not in t
    forged = "A" * 43 + "." + "A" * 22  # the right form, not this server's signature
    other = t.split(".")[0] + "." + next(iter(tokens - {t})).split(".")[1]  # a real signature of another body
    for bad in ("", "short", "x" * 65, "a" * 31, "a b" * 20, None, 12, ["a" * 40], "ä" * 40, "a" * 39 + ";",
                "A" * 43, forged, other, t + "x", t.replace(".", "")):
        assert not valid_token(bad), bad
        with pytest.raises(LabError):
            owner_id(bad)
    assert not valid_token(owner_id(t))  # an id read off a page is no token


def test_only_a_runs_owner_or_the_teacher_deletes_it_and_a_refusal_deletes_nothing(lab_db, monkeypatch):
    monkeypatch.setenv("LAB_TEACHER_TOKEN", "s3cret-Token")
    store = RunStore(lab_db)
    a1 = store.create_run(default_scenario(), name="a1", status="done", info={"owner": "A"})
    a2 = store.create_run(default_scenario(), name="a2", status="failed", info={"owner": "A"})
    b1 = store.create_run(default_scenario(), name="b1", status="done", info={"owner": "B"})
    cli = store.create_run(default_scenario(), name="cli", status="done")
    busy = store.create_run(default_scenario(), name="busy", status="running", info={"owner": "A"})
    store.add_metrics(a1, [{"step": 1, "worker": 0, "loss": 1.0}])
    jm = JobManager(lab_db)
    for who, ids, why in (("B", [a1], "another session's job"), ("B", [b1, a2], "another session's job"),
                          ("A", [cli], "command-line run"), ("A", [a1, busy], "stop it"), (None, [a1], "another")):
        with pytest.raises(LabError, match=why):
            jm.delete(ids, who)
    assert set(store.list_runs().id) == {a1, a2, b1, cli, busy}  # every refusal deleted nothing
    assert len(store.metrics(a1)) == 1
    assert jm.delete([a1, a2], "A") == [a1, a2]
    assert set(store.list_runs().id) == {b1, cli, busy} and len(store.metrics(a1)) == 0
    with pytest.raises(LabError, match="another session's job"):
        jm.delete([b1], "T")  # not yet the teacher
    assert jm.access.sign_in_teacher("T", "s3cret-Token")
    assert jm.delete([b1, cli], "T") == [b1, cli]  # the teacher deletes anyone's finished run
    assert list(store.list_runs().id) == [busy]


def test_a_student_has_a_bounded_number_of_jobs_queued_or_running(lab_db, monkeypatch, spawns):
    monkeypatch.setenv("LAB_MAX_ACTIVE_PER_OWNER", "3")
    store = RunStore(lab_db)
    for i in range(2):
        store.create_run(default_scenario(), name=f"q{i}", status="queued",
                         info={"owner": "A", "queued_by": {"pid": os.getpid()}})
    jm = JobManager(lab_db, warm=False)
    with pytest.raises(LabError, match="at most 3"):
        jm.submit_many([(scenario(), "x"), (scenario(), "y")], owner="A")
    assert len(store.list_runs(owner="A")) == 2  # the refused batch queued nothing
    try:
        jobs = jm.submit_many([(scenario(), "b")] * 3, owner="B")  # another student is not counted with A
        assert len(jobs) == 3
    finally:
        jm.shutdown()


def test_a_command_line_run_is_the_teachers_to_stop(lab_db):
    store = RunStore(lab_db)
    rid = store.create_run(default_scenario(), status="done")  # no owner: started by hand
    jm = JobManager(lab_db)
    with pytest.raises(LabError, match="command-line run"):
        jm.release(rid, "A")
    assert jm.release(rid, "A", teacher=True)["released_by"] == TEACHER


def test_each_session_sees_its_own_jobs_and_the_class_on_request(lab_db):
    store = RunStore(lab_db)
    a = store.create_run(default_scenario(), name="a", status="done", info={"owner": "A"})
    b = store.create_run(default_scenario(), name="b", status="running", info={"owner": "B"})
    cli = store.create_run(default_scenario(), name="cli", status="done")
    assert list(store.list_runs(owner="A").id) == [a]
    assert list(store.list_runs(statuses=("running",), owner="A").id) == []
    table = job_views.overview(store, owner="A")
    assert list(table.id) == [a] and list(table.owner) == ["you"]
    everyone = job_views.overview(store, owner="A", everyone=True).set_index("id").owner
    assert everyone.to_dict() == {a: "you", b: "another session", cli: "command line"}
    assert not job_views.has_active(store, "A") and job_views.has_active(store, "A", everyone=True)
    assert job_views.has_active(store, "B")


# ----- launchers that die without a word --------------------------------------------------------
def test_a_launcher_record_names_one_process_of_one_boot(spawns):
    me = identity()
    assert launcher_gone({**me, "beat": time.time()}) is None
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert "gone" in launcher_gone({**me, "pid": dead.pid})
    assert "gone" in launcher_gone({**me, "created": me["created"] + 1})  # the pid was reused
    if boot_id():
        assert "restarted" in launcher_gone({**me, "boot": "another-boot"})
    elsewhere = {**me, "host": socket.gethostname() + "-elsewhere"}  # only the heartbeat can tell
    assert launcher_gone({**elsewhere, "beat": time.time() - 1}) is None
    assert "has not beaten" in launcher_gone({**elsewhere, "beat": time.time() - 3600})


def check_swept(jm: JobManager, store: RunStore, rid: str, scratch: Path) -> None:
    """A sweep marks the run interrupted; once its workers are gone its scratch is removed."""
    wait_for(lambda: (jm.sweep(min_interval=0.0), store.status(rid))[1] == "interrupted", timeout=60,
             what="a sweep to mark the run interrupted")
    run = store.get_run(rid)
    assert "without reporting" in run["error"] or "SIGKILL" in run["error"], run["error"]
    wait_for(lambda: (jm.sweep(min_interval=0.0), rid not in jm.drains.ids())[1], timeout=60,
             what="the workers to exit and the job to be released")
    assert processes_of(rid) == []
    assert not scratch.exists()
    released = store.job_records.events(rid)
    released = released[released.event == "released"].detail.iloc[-1]
    assert released["worker_processes_left"] == 0 and released["scratch_folders_removed"] == 1
    ended = store.job_records.events(rid)
    assert ended[ended.event == "ended"].detail.iloc[-1]["status"] == "interrupted"
    assert store.job_records.heartbeats(rid).empty and jm.book.held == {}
    assert not job_views.has_active(store, everyone=True)  # the Jobs page stops polling


def test_a_command_line_launcher_killed_with_sigkill_is_found_while_the_app_runs(lab_db, tmp_path, spawns):
    tmp = tmp_path / "tmp"  # the launcher's temporary directory is not this process's
    tmp.mkdir()
    rid = "cli-killed-1"
    env = dict(os.environ, LAB_DB=str(lab_db), TMPDIR=str(tmp), LAB_HEARTBEAT_EVERY="0.2")
    launcher = subprocess.Popen([sys.executable, "-m", "lab.train", "--workers", "2", "--steps", "400",
                                 "--run-id", rid, "--quiet"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    store = RunStore(lab_db)
    jm = JobManager(lab_db)  # the app, already up
    try:
        wait_for(lambda: launcher.poll() is None and store.progress(rid) >= 3 if _exists(store, rid) else False,
                 what="the command-line run to make progress")
        rec = store.job_records.launcher(rid)
        assert rec["pid"] == launcher.pid and rec["host"] == socket.gethostname()
        scratch = Path(rec["scratch"])
        assert scratch.parent == tmp and scratch.is_dir()
        assert len(processes_of(rid)) == 3  # the launcher and its two workers
        assert jm.sweep(min_interval=0.0) == [] and store.status(rid) == "running"  # alive: left alone
        os.kill(launcher.pid, signal.SIGKILL)  # only the launcher
        launcher.wait(timeout=10)  # its shell reaps it
        check_swept(jm, store, rid, scratch)
        assert store.status(rid) == "interrupted"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=10)
        reap(rid)
        jm.shutdown()


def test_an_app_launcher_killed_with_sigkill_is_released_after_its_workers(lab_db, spawns):
    jm = JobManager(lab_db, capacity=1)
    store = RunStore(lab_db)
    job = jm.submit(scenario(workers=2, steps=400), "killed from outside", owner="A")
    rid = job.run_id
    try:
        wait_for(lambda: store.progress(rid) >= 3, what="the job to make progress")
        rec = store.job_records.launcher(rid)
        scratch = Path(rec["scratch"])
        assert scratch.is_dir() and len(processes_of(rid)) == 3
        assert jm.book.held  # it holds its local slots
        os.kill(rec["pid"], signal.SIGKILL)  # only the launcher; the manager is its parent and reaps it
        check_swept(jm, store, rid, scratch)
        run = store.get_run(rid)
        assert "SIGKILL" in run["error"] and jm.jobs.ids() == []
    finally:
        reap(rid)
        jm.shutdown()


def _exists(store: RunStore, rid: str) -> bool:
    try:
        store.get_run(rid)
        return True
    except LabError:
        return False


def test_a_run_without_a_launcher_record_is_given_time_before_it_is_interrupted(lab_db, monkeypatch, spawns):
    """Under torchrun rank 0 writes the run and torchrun may restart it with a new pid: a run with
    no launcher record is interrupted only once its process has been gone for LAB_LAUNCHER_STALE s."""
    store = RunStore(lab_db)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    rid = store.create_run(default_scenario(), status="running")
    store.update_run(rid, pid=dead.pid)
    monkeypatch.setenv("LAB_LAUNCHER_STALE", "3600")
    jm = JobManager(lab_db)
    assert jm.sweep(min_interval=0.0) == [] and store.status(rid) == "running"
    monkeypatch.setenv("LAB_LAUNCHER_STALE", "0")
    assert jm.sweep(min_interval=0.0) == [rid]
    run = store.get_run(rid)
    assert run["status"] == "interrupted" and "has been gone" in run["error"]
    assert store.job_records.events(rid).event.iloc[-1] == "released"  # nothing of it was left to wait for


def test_a_run_name_is_checked_like_every_name_before_anything_is_queued(lab_db):
    jm = JobManager(lab_db, warm=False)
    for bad in ("evil\u202eexe", "bell\x07", "\u3164", "\ud800", "x" * 201, 42):
        with pytest.raises(LabError):
            jm.submit(scenario(), bad, owner="A")
    assert RunStore(lab_db).list_runs().empty and not jm.queued()
