"""The Jobs page under AppTest: the what-if against lab.modelled.scheduling, jobs from the store with their
stages, heartbeats, alarms and log tails, the Stop and Release buttons, the place in the fair queue
(also on the Training page), and user-supplied names shown as text, never as markup."""

from __future__ import annotations

import os
import time

import pytest

import ui
from lab.jobs import manager as jobs_mod
from lab.modelled.scheduling import JobRequest, compare_policies, resource_groups, simulate
from lab.scenario.catalogue import preset
from lab.scenario.document import default_scenario
from lab.store.runs import RunStore
from lab.train.launcher_record import processes_of
from tests.conftest import ROOT, app_test, assert_no_exception, wait_for

pytestmark = pytest.mark.timeout(300)
HOSTILE = "<img src=x onerror=alert(1)> **bold** [link](javascript:alert(1))"


def marked_up(at) -> str:
    """Every element rendered as markdown (where markup or HTML would take effect)."""
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [t.value for t in at.title]
    parts += [s.value for s in at.subheader] + [s.value for s in at.header]
    for kind in (at.error, at.warning, at.info, at.success):
        parts += [str(e.value) for e in kind]
    return "\n".join(parts)


def frame(at, column: str):
    """The first dataframe on the page with this column (plain dataframes carry no key in AppTest)."""
    for d in at.dataframe:
        if column in d.value.columns:
            return d.value
    raise AssertionError(f"no dataframe with column {column!r}")


def default_jobs():
    return [JobRequest(n, t, o, s, work=w * 1e15) for n, o, t, w, s in [
        ("A-1", "A", 4, 2.0, 0.0), ("A-2", "A", 2, 1.0, 0.0), ("B-1", "B", 3, 1.5, 0.0), ("C-1", "C", 1, 0.3, 5.0),
        ("B-2", "B", 4, 2.0, 10.0), ("C-2", "C", 2, 0.5, 20.0)]]


def app(owner: str | None = None, page: str = "pages/jobs.py", state: dict | None = None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    for k, v in {**({"job_owner": owner} if owner else {}), **(state or {})}.items():
        at.session_state[k] = v
    at.run()
    at.switch_page(page)
    at.run()
    return at


def test_the_what_if_shows_both_policies_as_lab_scheduling_computes_them(lab_db, spawns):
    at = app_test("pages/jobs.py")
    assert_no_exception(at)
    assert "No jobs of yours yet" in marked_up(at)
    groups = resource_groups(preset("gpu-npu"))
    ref = compare_policies(groups, default_jobs())
    metrics = [(m.label, m.value) for m in at.metric]
    assert metrics == [("Makespan (s)", f"{ref['uniform'].makespan:.1f}"),
                       ("Mean wait in the queue (s)", f"{ref['uniform'].mean_wait:.1f}"),
                       ("Device utilisation (%)", f"{100 * ref['uniform'].utilisation:.0f}"),
                       ("Makespan (s)", f"{ref['resource_state'].makespan:.1f}"),
                       ("Mean wait in the queue (s)", f"{ref['resource_state'].mean_wait:.1f}"),
                       ("Device utilisation (%)", f"{100 * ref['resource_state'].utilisation:.0f}")]
    assert ref["resource_state"].makespan < ref["uniform"].makespan  # the lesson of the default set
    assert len(at.get("plotly_chart")) == 2 and "modelled" in marked_up(at)
    at.number_input(key="jobs_maxrun").set_value(1).run()
    assert_no_exception(at)
    one = simulate(groups, default_jobs(), "uniform", max_running=1)
    assert at.metric[0].value == f"{one.makespan:.1f}"
    at.selectbox(key="jobs_topo").set_value("cxl").run()  # the 4-task jobs fit no single group there
    assert not at.exception
    assert any("never start" in w.value and ui.plain("A-1") in w.value for w in at.warning)  # the name as text


def _fake_finished_run(store: RunStore, name: str) -> str:
    rid = store.create_run(default_scenario(), name=name, status="queued", info={"owner": "me"})
    store.set_status(rid, "running")
    for st, detail in [("submitted", {"owner": "me"}), ("parsed", {"workers": 2}),
                       ("scheduled", {"policy": "uniform", "groups": {"cpu0": 1, "cpu1": 1},
                                      "slots": {"cpu0": ["cpu0/slot0"], "cpu1": ["cpu1/slot0"]}, "rank_cpus": [0, 1]}),
                       ("started", {"world": 2, "pids": [1, 2]}), ("data", {"shard_sizes": [674, 673]}),
                       ("running", {}), ("ended", {"status": "done"}), ("released", {"by": "launcher"})]:
        store.add_stage(rid, st, detail=detail)
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


def test_jobs_with_stages_logs_alarms_and_hostile_names(lab_db, spawns):
    store = RunStore(lab_db)
    rid = _fake_finished_run(store, HOSTILE)
    at = app("me")
    assert_no_exception(at)
    table = frame(at, "owner")
    assert table.set_index("id").loc[rid, "name"] == HOSTILE  # a dataframe cell: plain text
    assert table.set_index("id").loc[rid, "owner"] == "you"
    assert HOSTILE not in marked_up(at) and "<img" not in marked_up(at)
    assert any(t.value == f"Name: {HOSTILE}" for t in at.text)
    assert at.selectbox(key="jobs_pick").value == rid
    stages = frame(at, "time since submitted (s)")
    assert list(stages.stage) == ["submitted", "parsed", "scheduled", "started", "data", "running", "ended",
                                  "released"]
    assert (stages["time since submitted (s)"].diff().dropna() >= 0).all()
    codes = [c.value for c in at.code]
    assert any("step 10: local loss 1.2345" in c and "<script>" in c for c in codes)  # code blocks: text
    assert len(at.get("plotly_chart")) >= 4  # slot timeline, stages, and the two what-if timelines
    # an alarm on a running job is shown; its heartbeats are drawn
    live = store.create_run(default_scenario(), name="live one", status="running", info={"owner": "other"})
    store.update_run(live, pid=os.getpid())
    store.add_stage(live, "alarm", attempt=0, step=7, worker=1,
                    detail={"summary": "worker 1 hangs at step 7 in inject()", "action": "restart from step 5"})
    now = time.time()
    store.set_heartbeats(live, [{"worker": 0, "step": 7, "phase": "comm", "t": now, "progress_t": now - 4},
                                {"worker": 1, "step": 7, "phase": "busy", "t": now, "progress_t": now - 4}])
    at.run()
    assert not at.exception
    assert live not in set(frame(at, "owner").id)  # another session's job: not in this session's view
    at.toggle(key="jobs_class").set_value(True).run()  # the whole class, read-only
    assert not at.exception
    assert frame(at, "owner").set_index("id").owner[live] == "another session"
    assert any("Alarm" in e.value and "hangs at step 7" in e.value for e in at.error)
    at.selectbox(key="jobs_pick").set_value(live).run()
    assert not at.exception
    assert any("heartbeat" in str(c.proto.spec).lower() for c in at.get("plotly_chart"))
    assert not [b for b in at.button if b.key in ("jobs_stop", "jobs_release")]  # read-only
    assert any("Read-only" in c.value for c in at.caption)
    store.set_status(live, "interrupted")
    # Release: the finished job's intermediate checkpoint goes, final.pt stays
    at.selectbox(key="jobs_pick").set_value(rid).run()
    at.button(key="jobs_release").click().run()
    assert not at.exception
    assert any("Released" in s.value for s in at.success)
    ck = store.checkpoint_dir(rid)
    assert not (ck / "step000005.pt").exists() and (ck / "final.pt").exists()
    assert store.last_stage(rid)["detail"]["by"] == "release button"


def test_hostile_names_are_text_on_the_training_and_compare_pages(lab_db, spawns):
    store = RunStore(lab_db)
    rid = _fake_finished_run(store, HOSTILE)
    for page in ("pages/training.py", "pages/compare.py"):
        at = app("me", page, {"train_watch": rid, "cmp_runs": [rid]})
        assert not at.exception, page
        assert HOSTILE not in marked_up(at) and "<img" not in marked_up(at), page


def test_queue_place_and_stop_from_the_pages(lab_db, spawns):
    jm = jobs_mod.shared(lab_db)
    assert jm.capacity == 1
    sc = default_scenario()
    long = sc.replace(training=sc.training.replace(workers=1, steps=100_000))
    blocker = jm.submit(long, "blocker", owner="other")
    mine = jm.submit(sc.replace(training=sc.training.replace(workers=1, steps=3)), "mine", owner="me")
    try:
        store = RunStore(lab_db)
        assert store.status(mine.run_id) == "queued"
        # the blocker holds the server once it runs (a cold warm starter makes it wait in the queue first)
        wait_for(lambda: store.status(blocker.run_id) == "running", what="the blocker to start")
        at = app("me")
        assert not at.exception
        assert f"Your job {mine.run_id} is number 1 in the queue." in [i.value for i in at.info]
        tr = app("me", "pages/training.py", {"train_watch": mine.run_id})
        assert not tr.exception
        line = next(i.value for i in tr.info if i.value.startswith("Your job: "))
        assert line.startswith("Your job: number 1 in the queue; another student's job runs ("), line
        assert "yields to yours" in line  # this student has no job running: theirs starts beside after the slice
        # another session's Training page does not show this job as its own (nor at all)
        other = app("someone else", "pages/training.py", {"train_watch": mine.run_id})
        assert not other.exception
        assert not [i.value for i in other.info if "in the queue" in i.value]
        assert f"Run {mine.run_id}" not in [s.value for s in other.subheader]
        at.selectbox(key="jobs_pick").set_value(mine.run_id).run()
        at.button(key="jobs_stop").click().run()
        assert not at.exception
        assert store.status(mine.run_id) == "stopped" and store.last_stage(mine.run_id)["stage"] == "ended"
        stop = store.stages(mine.run_id).set_index("stage").detail["stop"]
        assert stop["by"] == "me" and store.get_run(mine.run_id)["info"]["stopped_by"] == "me"
        assert blocker.run_id not in set(frame(at, "owner").id)  # not mine: not in my list
        at.toggle(key="jobs_class").set_value(True).run()
        at.selectbox(key="jobs_pick").set_value(blocker.run_id).run()
        assert not at.exception
        assert not [b for b in at.button if b.key == "jobs_stop"]  # read-only: no Stop for another's job
        assert store.status(blocker.run_id) == "running"
        assert jm.stop(blocker.run_id, "other")
        assert store.status(blocker.run_id) == "stopped"
    finally:
        jm.shutdown()
    deadline = time.monotonic() + 20
    while processes_of(blocker.run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_of(blocker.run_id) == []


def test_a_fault_drill_is_started_from_the_page(lab_db, spawns):
    jm = jobs_mod.shared(lab_db)
    at = app("me")
    at.selectbox(key="jobs_fault").set_value("raise")
    at.number_input(key="jobs_fault_worker").set_value(1)
    at.number_input(key="jobs_fault_step").set_value(3)
    at.selectbox(key="jobs_fault_policy").set_value("fail")
    at.number_input(key="jobs_fault_ck").set_value(2)
    at.button(key="jobs_fault_run").click().run()
    assert not at.exception
    store = RunStore(lab_db)
    try:
        rid = at.session_state["jobs_pick"]
        run = store.get_run(rid)
        tr = run["scenario"]["training"]
        assert (tr["fault"], tr["fault_worker"], tr["fault_step"], tr["fault_policy"], tr["checkpoint_every"]) == \
            ("raise", 1, 3, "fail", 2)
        assert tr["workers"] == 2 and tr["steps"] >= 13 and run["info"]["owner"] == "me"
        assert jm.wait(rid, timeout=240) == "failed"
        assert "injected fault: worker 1 raised at step 3" in store.get_run(rid)["error"]
        at.run()
        assert not at.exception
        assert frame(at, "owner").set_index("id").alarms[rid] == 1
    finally:
        jm.shutdown()
    assert processes_of(rid) == []
