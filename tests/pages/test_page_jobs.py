"""The Jobs page under AppTest, rendered whole from its model, and what lives in Streamlit: the class switch, the
choice of job, the Stop, Release and fault-drill buttons, the teacher's forms, the place in the fair queue (also on
the Training page), and user-supplied names shown as text, never as markup. What the model holds is tested
fast in tests/view/test_view_jobs.py."""

from __future__ import annotations

import os
import re
import time

import pytest

import ui
from lab.jobs import manager as jobs_mod
from lab.scenario.document import default_scenario
from lab.store.runs import RunStore
from lab.train.launcher_record import processes_of
from lab.view import jobs as view
from lab.view.state import VIEW
from tests.conftest import ROOT, app_test, assert_no_exception, wait_for
from tests.view.test_view_jobs import HOSTILE, TOKEN, fake_finished_run

pytestmark = pytest.mark.timeout(300)


def marked_up(at) -> str:
    """Every element rendered as markdown (where markup or HTML would take effect)."""
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [t.value for t in at.title]
    parts += [s.value for s in at.subheader] + [s.value for s in at.header]
    for kind in (at.error, at.warning, at.info, at.success):
        parts += [str(e.value) for e in kind]
    return "\n".join(parts)


def read(markdown: str) -> str:
    """What a person reads of Markdown that ui.plain made text: the escapes and word joiners dropped."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")


def frame(at, column: str):
    """The first dataframe on the page with this column (plain dataframes carry no key in AppTest)."""
    for d in at.dataframe:
        if column in d.value.columns:
            return d
    raise AssertionError(f"no dataframe with column {column!r}")


def app(owner: str | None = None, page: str = "pages/jobs.py", state: dict | None = None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    for k, v in {**({"job_owner": owner} if owner else {}), **(state or {})}.items():
        at.session_state[k] = v
    at.run()
    at.switch_page(page)
    at.run()
    return at


def test_the_page_draws_its_model_whole_and_its_controls_from_the_table(lab_db, spawns):
    at = app_test("pages/jobs.py")
    assert_no_exception(at)
    assert [t.value for t in at.title] == ["Jobs"] and [h.value for h in at.header] == [view.HEADER]
    assert any("No jobs of yours yet" in i.value for i in at.info)
    assert "measured" in marked_up(at) and "modelled" in marked_up(at)
    assert [e.label for e in at.expander] == [view.DRILL]  # no teacher on a server without LAB_TEACHER_TOKEN
    model = view.what_if(default_scenario(), "gpu-npu").policies(view.whatif_start(), 0)
    assert [(m.label, m.value) for m in at.metric] == [m for p in model for m in p.metrics]
    assert len(at.get("plotly_chart")) == 2 and list(frame(at, "group").value.group)
    for key in ("jobs_maxrun", "jobs_fault_step", "jobs_fault_ck"):
        w, setting = at.number_input(key=key), VIEW[key].setting
        assert (w.label, w.min, w.max, w.value) == (setting.label, setting.min, setting.max, setting.default), key
    assert at.toggle(key="jobs_class").label == VIEW["jobs_class"].setting.label
    assert at.selectbox(key="jobs_topo").options[0] == "the scenario's topology"
    at.number_input(key="jobs_maxrun").set_value(1).run()
    assert_no_exception(at)
    one = view.what_if(default_scenario(), "gpu-npu").policies(view.whatif_start(), 1)
    assert at.metric[0].value == one[0].metrics[0][1]
    at.selectbox(key="jobs_topo").set_value("cxl").run()  # the 4-task jobs fit no single group there
    assert not at.exception
    assert any("never start" in w.value and ui.plain("A-1") in w.value for w in at.warning)  # the name as text


def test_jobs_with_stages_logs_alarms_and_hostile_names(lab_db, spawns):
    store = RunStore(lab_db)
    rid = fake_finished_run(store, HOSTILE)
    at = app("me")
    assert_no_exception(at)
    jobs = frame(at, "owner")
    assert jobs.value.set_index("id").loc[rid, "name"] == HOSTILE  # a dataframe cell: plain text
    assert jobs.proto.placeholder == "—"  # an empty cell (the queue of a finished job) reads as a dash
    assert HOSTILE not in marked_up(at) and "<img" not in marked_up(at)
    assert any(t.value == f"Name: {HOSTILE}" for t in at.text)
    assert at.selectbox(key="jobs_pick").value == rid
    assert frame(at, "time since submitted (s)").proto.placeholder == "—"
    codes = [c.value for c in at.code]
    assert any("step 10: local loss 1.2345" in c and "<script>" in c for c in codes)  # code blocks: text
    assert len(at.get("plotly_chart")) >= 4  # slot timeline, stages, and the two what-if timelines
    # another session's running job, with an alarm and heartbeats: read-only, under the class switch
    live = store.create_run(default_scenario(), name="live one", status="running", info={"owner": "other"})
    store.update_run(live, pid=os.getpid())
    store.job_records.add_event(live, "alarm", attempt=0, step=7, worker=1,
                    detail={"summary": "worker 1 hangs at step 7 in inject()", "action": "restart from step 5"})
    now = time.time()
    store.job_records.set_heartbeats(live, [{"worker": 0, "step": 7, "phase": "comm", "t": now, "progress_t": now - 4},
                                {"worker": 1, "step": 7, "phase": "busy", "t": now, "progress_t": now - 4}])
    at.run()
    assert not at.exception and live not in set(frame(at, "owner").value.id)
    at.toggle(key="jobs_class").set_value(True).run()  # the whole class, read-only
    assert not at.exception
    assert frame(at, "owner").value.set_index("id").owner[live] == "another session"
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


def test_the_teacher_signs_in_with_the_form_sets_the_limits_and_signs_out(lab_db, spawns, monkeypatch):
    monkeypatch.setenv("LAB_TEACHER_TOKEN", TOKEN)
    jm = jobs_mod.shared(lab_db)
    try:
        at = app("t-owner")
        assert_no_exception(at)
        assert [e.label for e in at.expander] == [view.DRILL, "Teacher"] and not at.toggle(key="jobs_class").value
        at.text_input(key="jobs_teacher_token").input("not it")
        at.button(key="FormSubmitter:jobs_teacher_form-Sign in as the teacher").click().run()
        assert not at.exception and any(view.WRONG_TOKEN in e.value for e in at.error)
        at.text_input(key="jobs_teacher_token").input(TOKEN)
        at.button(key="FormSubmitter:jobs_teacher_form-Sign in as the teacher").click().run()
        assert not at.exception  # too soon after a wrong token: a message, not a traceback
        assert any("too many wrong teacher tokens" in e.value for e in at.error)
        time.sleep(1.1)
        at.text_input(key="jobs_teacher_token").input(TOKEN)
        at.button(key="FormSubmitter:jobs_teacher_form-Sign in as the teacher").click().run()
        assert not at.exception and view.TEACHER_LINE in [i.value for i in at.info]
        assert not [t for t in at.toggle if t.key == "jobs_class"]  # the teacher sees every job
        assert at.number_input(key="jobs_max_steps").value == jm.access.limits.max_steps
        at.number_input(key="jobs_max_steps").set_value(50)
        at.button(key="FormSubmitter:jobs_limits_form-Set the limits").click().run()
        assert not at.exception and jm.access.limits.max_steps == 50
        at.button(key="jobs_teacher_out").click().run()
        assert not at.exception and not jm.access.is_teacher("t-owner") and view.TEACHER_LINE not in [i.value for i in at.info]
    finally:
        jm.shutdown()


def test_hostile_names_are_text_on_the_training_and_compare_pages(lab_db, spawns):
    store = RunStore(lab_db)
    rid = fake_finished_run(store, HOSTILE)
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
        assert f"Your job {mine.run_id} is number 1 in the queue." in [read(i.value) for i in at.info]
        tr = app("me", "pages/training.py", {"train_watch": mine.run_id})
        assert not tr.exception
        line = next(read(i.value) for i in tr.info if read(i.value).startswith("Your job: "))
        assert line.startswith("Your job: number 1 in the queue; another student's job runs ("), line
        assert "yields to yours" in line  # this student has no job running: theirs starts beside after the slice
        # another session's Training page does not show this job as its own (nor at all)
        other = app("someone else", "pages/training.py", {"train_watch": mine.run_id})
        assert not other.exception
        assert not [i.value for i in other.info if "in the queue" in i.value]
        assert f"Run {mine.run_id}" not in [read(s.value) for s in other.subheader]
        at.selectbox(key="jobs_pick").set_value(mine.run_id).run()
        at.button(key="jobs_stop").click().run()
        assert not at.exception
        assert store.status(mine.run_id) == "stopped" and store.job_records.last_event(mine.run_id)["event"] == "ended"
        stop = store.job_records.events(mine.run_id).set_index("event").detail["stop"]
        assert stop["by"] == "me" and store.get_run(mine.run_id)["info"]["stopped_by"] == "me"
        assert blocker.run_id not in set(frame(at, "owner").value.id)  # not mine: not in my list
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
        assert frame(at, "owner").value.set_index("id").alarms[rid] == 1
    finally:
        jm.shutdown()
    assert processes_of(rid) == []
