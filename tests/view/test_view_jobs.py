"""lab.view.jobs: the Jobs page's model, on a run store of its own and a job manager that starts nothing: the
what-if against lab.modelled.scheduling, the job list with its stages, heartbeats, alarms and log tails, who
sees whose owner id, Stop and Release with their owner checks, and the teacher's sign-in and limits."""
from __future__ import annotations

import os
import time

import pytest

from lab.errors import LabError
from lab.jobs.access import TEACHER
from lab.jobs.manager import JobManager
from lab.modelled.scheduling import POLICY_LABELS, JobRequest, compare_policies, resource_groups, simulate
from lab.scenario.catalogue import preset
from lab.scenario.document import default_scenario
from lab.store.runs import RunStore
from lab.view import jobs as view
from tests.view.sections import by_key, figure_json

HOSTILE = "<img src=x onerror=alert(1)> **bold** [link](javascript:alert(1))"
EVENTS = ["submitted", "parsed", "scheduled", "started", "data", "running", "ended", "released"]
TOKEN = "Zq3-uV8_kP1wYt6Rb0sLm4"


def default_jobs():
    return [JobRequest(n, t, o, s, work=w * 1e15) for n, o, t, w, s in [
        ("A-1", "A", 4, 2.0, 0.0), ("A-2", "A", 2, 1.0, 0.0), ("B-1", "B", 3, 1.5, 0.0), ("C-1", "C", 1, 0.3, 5.0),
        ("B-2", "B", 4, 2.0, 10.0), ("C-2", "C", 2, 0.5, 20.0)]]


def fake_finished_run(store: RunStore, name: str, owner: str = "me") -> str:
    """A finished two-worker run of ``owner`` with every lifecycle event, two worker logs (one holding a tag)
    and an intermediate and a final checkpoint."""
    rid = store.create_run(default_scenario(), name=name, status="queued", info={"owner": owner})
    store.set_status(rid, "running")
    for st, detail in [("submitted", {"owner": owner}), ("parsed", {"workers": 2}),
                       ("scheduled", {"policy": "uniform", "groups": {"cpu0": 1, "cpu1": 1},
                                      "slots": {"cpu0": ["cpu0/slot0"], "cpu1": ["cpu1/slot0"]}, "rank_cpus": [0, 1]}),
                       ("started", {"world": 2, "pids": [1, 2]}), ("data", {"shard_sizes": [674, 673]}),
                       ("running", {}), ("ended", {"status": "done"}), ("released", {"by": "launcher"})]:
        store.job_records.add_event(rid, st, detail=detail)
        time.sleep(0.01)
    store.set_status(rid, "done")
    logs = store.data_dir() / "logs" / rid
    logs.mkdir(parents=True)
    (logs / "rank0.log").write_text("rank 0: step 10: local loss 1.2345\n<script>alert(2)</script>\n")
    (logs / "rank1.log").write_text("rank 1: step 10: local loss 1.3456\n")
    ck = store.checkpoint_dir(rid)
    (ck / "step000005.pt").write_bytes(b"x")
    (ck / "final.pt").write_bytes(b"x")
    return rid


@pytest.fixture
def jm(lab_db):
    return JobManager(lab_db, warm=False, ray_address="")


def desk(jm, owner: str = "me") -> view.Desk:
    return view.Desk(jm, owner)


# ----- the what-if --------------------------------------------------------------------------------
def test_the_what_if_shows_both_policies_as_lab_scheduling_computes_them():
    sc = default_scenario()
    what = view.what_if(sc, "gpu-npu")
    groups = resource_groups(preset("gpu-npu"))
    assert [r["group"] for r in what.table.table] == [g.name for g in groups]
    assert what.columns["type"]["options"] == ["any"] + sorted({g.type for g in groups})
    ref = compare_policies(groups, default_jobs())
    policies = what.policies(view.whatif_start(), 0)
    assert [p.metrics for p in policies] == [view.whatif_metrics(ref["uniform"]), view.whatif_metrics(
        ref["resource_state"])]
    assert policies[0].metrics[0] == ("Makespan (s)", f"{ref['uniform'].makespan:.1f}")
    assert ref["resource_state"].makespan < ref["uniform"].makespan  # the lesson of the default set
    titles = [figure_json(p.chart)["layout"]["title"]["text"].replace("<br>", " ") for p in policies]
    assert titles == [POLICY_LABELS["uniform"], POLICY_LABELS["resource_state"]]
    assert all(p.chart.kind == "modelled" and not p.after.notices for p in policies)
    one = simulate(groups, default_jobs(), "uniform", max_running=1)
    assert what.policies(view.whatif_start(), 1)[0].metrics[0][1] == f"{one.makespan:.1f}"
    assert view.what_if(sc, "scenario").groups == tuple(resource_groups(sc.topology))
    assert view.topology_label("scenario") == "the scenario's topology" and view.topology_label("cxl").startswith("(")


def test_a_job_too_large_for_a_policy_is_a_warning_that_names_it():
    cxl = view.what_if(default_scenario(), "cxl").policies(view.whatif_start(), 0)  # no group holds 4 tasks
    warned = [n for p in cxl for n in p.after.notices]
    assert warned and all(n.level == "warning" and "never start" in n.text for n in warned)
    assert any("A-1" in n.text for n in warned)  # the name as a notice: shown as text


# ----- the opening and the job list -------------------------------------------------------------------
def test_the_opening_says_the_queue_rules_and_a_failure_that_keeps_coming_back(jm):
    s = by_key(desk(jm).opening())
    assert list(s) == ["jobs_rules"] and "at most 1 job(s) at a time" in s["jobs_rules"].caption
    now = time.time()
    jm.failures = [(now - k, f"the scheduler: OSError: disk full {k}") for k in range(3)]
    failing = by_key(desk(jm).opening())["jobs_failing"].notices[0]
    assert failing.level == "error" and failing.text.startswith("The job manager keeps failing")


def test_no_jobs_yet_says_where_to_start_one(jm):
    board = desk(jm).board(everyone=False)
    assert not board.labels and not board.active
    assert "No jobs of yours yet" in board.sections[0].notices[0].text
    assert desk(jm).board(everyone=True).sections[0].notices[0].text.startswith("No jobs yet")


def test_the_job_list_holds_the_runs_stages_slots_and_names_as_text(jm):
    rid = fake_finished_run(jm.store, HOSTILE)
    board = desk(jm).board(everyone=False)
    s = by_key(board.sections)
    assert list(s) == ["jobs", "jobs_timeline"] and all(x.kind == "measured" for x in s.values())
    row = s["jobs"].table[0]
    assert (row["id"], row["name"], row["owner"], row["status"], row["event"]) == (rid, HOSTILE, "you", "done",
                                                                                   "released")
    assert row["resources"] == "cpu0: 1 slot, cpu1: 1 slot" and row["queue"] is None
    assert s["jobs"].missing == view.MISSING == "—"  # an empty cell reads as a dash, not as "None"
    assert s["jobs"].columns == view.JOB_COLUMNS and "local worker slots" in s["jobs"].caption
    timeline = figure_json(s["jobs_timeline"])
    assert timeline["layout"]["title"]["text"].startswith("Which job held which of the local")
    assert [t["y"] for t in timeline["data"]] == [["cpu0/slot0", "cpu1/slot0"]]
    assert board.labels == {rid: f"{rid} · done · you · {HOSTILE}"} and not board.active


def test_an_alarm_and_the_heartbeats_of_a_running_job_and_another_sessions_job(jm):
    fake_finished_run(jm.store, "mine")
    live = jm.store.create_run(default_scenario(), name="live one", status="running", info={"owner": "other"})
    jm.store.update_run(live, pid=os.getpid())  # alive: the sweep leaves it running
    jm.store.job_records.add_event(live, "alarm", attempt=0, step=7, worker=1,
                       detail={"summary": "worker 1 hangs at step 7 in inject()", "action": "restart from step 5"})
    now = time.time()
    jm.store.job_records.set_heartbeats(live, [{"worker": 0, "step": 7, "phase": "comm", "t": now, "progress_t": now - 4},
                                   {"worker": 1, "step": 7, "phase": "busy", "t": now, "progress_t": now - 4}])
    assert live not in desk(jm).board(everyone=False).labels  # another session's job: not in this session's view
    assert desk(jm).polling(everyone=True) and not desk(jm).polling(everyone=False)
    board = desk(jm).board(everyone=True)
    table = {r["id"]: r for r in by_key(board.sections)["jobs"].table}
    assert table[live]["owner"] == "another session" and board.active
    alarm = by_key(board.sections)["jobs"].notices[0]
    assert alarm.level == "error" and alarm.text == ("Alarm, job " + live + ", attempt 0: worker 1 hangs at step 7 "
                                                     "in inject() → restart from step 5")
    job = desk(jm).job(live)
    assert not job.manageable and "Read-only" in job.read_only and job.active
    beats = figure_json(by_key(job.sections)["jobs_beats"])
    assert "heartbeat" in beats["layout"]["title"]["text"].lower()
    assert [b["x"] for b in beats["data"]] == [["worker 0", "worker 1"]]


def test_a_jobs_details_list_its_stages_in_order_and_its_log_tails(jm):
    rid = fake_finished_run(jm.store, HOSTILE)
    job = desk(jm).job(rid)
    assert (job.title, job.name, job.manageable, job.finished, job.active) == (f"Job {rid}", f"Name: {HOSTILE}", True,
                                                                               True, False)
    s = by_key(job.sections)
    assert list(s) == ["jobs_stage", "jobs_logs"]
    stages = s["jobs_stage"].table
    assert [r["event"] for r in stages] == EVENTS and s["jobs_stage"].missing == "—"
    times = [r["time since submitted (s)"] for r in stages]
    assert times[0] == 0.0 and times == sorted(times)
    assert stages[0]["detail"] == "owner: you"  # this session's own job
    assert [t["name"] for t in figure_json(s["jobs_stage"])["data"][1:]] == EVENTS
    assert job.tails["rank 0"].count("<script>") == 1 and "step 10: local loss 1.2345" in job.tails["rank 0"]


def test_an_owner_id_reads_as_you_to_its_owner_as_another_student_to_others_and_as_itself_to_the_teacher(
        jm, monkeypatch):
    monkeypatch.setenv("LAB_TEACHER_TOKEN", TOKEN)
    rid = fake_finished_run(jm.store, "theirs", owner="abc123")
    jm.store.job_records.add_event(rid, "stop", detail={"by": "abc123", "session": "abc123", "via": "the Stop button"})
    jm.store.merge_info(rid, {"stopped_by": "abc123"})
    jm.store.set_status(rid, "stopped", error="stopped by session abc123")

    def seen(owner: str, teacher: bool = False):
        d = desk(jm, owner)
        assert not teacher or d.sign_in(TOKEN)
        job = d.job(rid)
        by_stage = {r["event"]: r["detail"] for r in by_key(job.sections)["jobs_stage"].table}
        return by_stage["submitted"], by_stage["stop"], job.stopped, by_key(job.sections)["jobs_error"].notices[0]

    assert seen("abc123")[:3] == ("owner: you", "by: you", "Stopped by: you")
    student = seen("zzz999")
    assert student[:3] == ("owner: another student", "by: another student", "Stopped by: another student")
    assert student[3].text == "stopped by another student" and student[3].level == "warning"
    assert "abc123" not in " ".join(map(str, student[:3])) + student[3].text
    teacher = seen("t-owner", teacher=True)
    assert teacher[:3] == ("owner: abc123", "by: abc123", "Stopped by: session abc123")
    assert teacher[3].text == "stopped by session abc123"
    # the words themselves
    assert [view.owner_word("a", "a", False), view.owner_word("a", "b", False), view.owner_word("a", "b", True),
            view.owner_word("-", "b", False)] == ["you", "another student", "a", "-"]
    assert [view.stopped_by(TEACHER, "me", False), view.stopped_by("x", "me", False)] == ["the teacher",
                                                                                          "another student"]
    assert view.event_summary({"by": "x"}, "me", False, event="ended") == "by: x"  # a component, not an owner


# ----- what a session does ----------------------------------------------------------------------------
def test_release_removes_the_intermediate_checkpoints_of_ones_own_job_only(jm):
    mine = fake_finished_run(jm.store, "mine")
    theirs = fake_finished_run(jm.store, "theirs", owner="other")
    with pytest.raises(LabError, match="only its own session or the teacher may release it"):
        desk(jm).release(theirs)
    with pytest.raises(LabError, match="only its own session or the teacher may stop it"):
        desk(jm).stop(theirs)
    assert desk(jm).release(mine).startswith("Released: 0 process(es) ended, 1 checkpoint file(s) removed")
    ck = jm.store.checkpoint_dir(mine)
    assert not (ck / "step000005.pt").exists() and (ck / "final.pt").exists()
    assert jm.store.job_records.last_event(mine)["detail"]["by"] == "release button"
    assert (jm.store.checkpoint_dir(theirs) / "step000005.pt").exists()


def test_the_teacher_signs_in_sets_the_limits_and_signs_out(jm, monkeypatch):
    monkeypatch.delenv("LAB_TEACHER_TOKEN", raising=False)
    assert not view.has_teacher() and not desk(jm).sign_in(TOKEN)
    monkeypatch.setenv("LAB_TEACHER_TOKEN", TOKEN)
    d = desk(jm, "t-owner")
    assert view.has_teacher() and not d.teacher
    with pytest.raises(LabError, match="only the teacher sets the job limits"):
        d.set_limits(10, 60.0, 2)
    guesser = desk(jm, "guesser")
    assert not guesser.sign_in("not it") and not guesser.teacher
    assert d.sign_in(TOKEN) and d.teacher
    d.set_limits(10, 60.0, 2)
    assert d.limits() == {"jobs_max_steps": 10, "jobs_max_s": 60.0, "jobs_max_procs": 2}
    d.sign_out()
    assert not d.teacher


def test_a_fault_drill_has_two_workers_and_outlasts_its_fault():
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(workers=1, steps=5))
    assert view.drill_workers(sc) == 2
    drill, name = view.fault_drill(sc, "raise", 1, 3, "fail", 2)
    tr = drill.training
    assert (tr.workers, tr.steps, tr.fault, tr.fault_worker, tr.fault_step, tr.fault_policy, tr.checkpoint_every) == \
        (2, 13, "raise", 1, 3, "fail", 2)
    assert name == f"{sc.name} · raise worker 1 at step 3"
