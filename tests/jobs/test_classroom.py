"""A class the teacher opens: join codes, display names, seats that gate the queue, a lesson handed out, a student
removed with their jobs stopped; only the teacher acts on the class."""
from __future__ import annotations

import pytest

from lab.errors import LabError
from lab.jobs.manager import JobManager
from lab.scenario.document import default_scenario
from lab.store.classroom import CODE_ALPHABET
from lab.store.runs import RunStore

TOKEN = "Zq3-uV8_kP1wYt6Rb0sLm4"


@pytest.fixture
def jm(lab_db, monkeypatch):
    monkeypatch.setenv("LAB_TEACHER_TOKEN", TOKEN)
    m = JobManager(lab_db, warm=False)
    m._start = lambda spec: None  # what is queued is under test, not a launch
    assert m.sign_in_teacher("teacher", TOKEN)
    yield m
    m._closed = True


def test_only_the_teacher_opens_hands_out_removes_and_closes(jm):
    for act in (lambda: jm.open_class("student"), lambda: jm.hand_out("student", "x"),
                lambda: jm.remove_student("student", "other"), lambda: jm.close_class("student")):
        with pytest.raises(LabError, match="only the teacher"):
            act()
    state = jm.open_class("teacher")
    assert len(state.code) == 6 and set(state.code) <= set(CODE_ALPHABET) and state.lesson is None
    jm.hand_out("teacher", "ring-allreduce")
    assert jm.store.class_state().lesson == "ring-allreduce"
    jm.hand_out("teacher", None)
    assert jm.store.class_state().lesson is None


def test_joining_needs_the_code_and_a_name_no_other_student_seems_to_have(jm):
    store: RunStore = jm.store
    with pytest.raises(LabError, match="no class is open"):
        store.join_class("a", "ABCDEF", "Ada")
    code = jm.open_class("teacher").code
    with pytest.raises(LabError, match="not the class's join code"):
        store.join_class("a", "WRONG1", "Ada")
    assert store.join_class("a", code.lower(), "  Ada  ") == "Ada"  # read aloud: any case, spaces trimmed
    with pytest.raises(LabError, match="looks like the name"):
        store.join_class("b", code, "ADA")
    with pytest.raises(LabError, match="looks like the name"):
        store.join_class("b", code, "Аda")  # a Cyrillic А
    for bad in ("", "a\u202eb", 42, None):
        with pytest.raises(LabError):
            store.join_class("b", code, bad)
    assert store.join_class("b", code, "<b>Bob</b>") == "<b>Bob</b>"  # any text, shown as text
    assert store.seats() == {"a": "Ada", "b": "<b>Bob</b>"}
    assert store.join_class("a", code, "Ada L.") == "Ada L." and store.seat("a") == "Ada L."  # renamed, one seat


def test_in_class_mode_only_seated_students_and_the_teacher_queue(jm):
    sc = default_scenario()
    jm.submit(sc, owner="visitor")  # no class: everyone queues
    code = jm.open_class("teacher").code
    with pytest.raises(LabError, match="join it on the Class page"):
        jm.submit(sc, owner="visitor")
    jm.store.join_class("seated", code, "Grace")
    assert jm.submit(sc, owner="seated").run_id
    assert jm.submit(sc, owner="teacher").run_id
    jm.close_class("teacher")
    assert jm.submit(sc, owner="visitor").run_id  # the class closed: as before


def test_a_removed_student_loses_the_seat_and_their_jobs_stop(jm):
    code = jm.open_class("teacher").code
    jm.store.join_class("s1", code, "Ada")
    jm.store.join_class("s2", code, "Bob")
    mine = [jm.submit(default_scenario(), owner="s1").run_id for _ in range(2)]
    other = jm.submit(default_scenario(), owner="s2").run_id
    stopped = jm.remove_student("teacher", "s1")
    assert sorted(stopped) == sorted(mine) and all(jm.store.status(r) == "stopped" for r in mine)
    assert jm.store.status(other) == "queued" and jm.store.seats() == {"s2": "Bob"}
    with pytest.raises(LabError, match="join it"):
        jm.submit(default_scenario(), owner="s1")


def test_a_new_class_starts_with_no_seats_and_a_new_code(jm):
    first = jm.open_class("teacher").code
    jm.store.join_class("s1", first, "Ada")
    second = jm.open_class("teacher").code
    assert jm.store.seats() == {}
    if second != first:
        with pytest.raises(LabError, match="join code"):
            jm.store.join_class("s1", first, "Ada")


def test_a_students_view_is_kept_per_page_and_a_huge_one_is_not(lab_db):
    store = RunStore(lab_db)
    store.save_view("s1", "compare", {"sc": "x", "v": "y"})
    store.save_view("s1", "compare", {"sc": "x2"})
    store.save_view("s2", "compare", {"sc": "z"})
    assert store.saved_view("s1", "compare") == {"sc": "x2"} and store.saved_view("s2", "compare") == {"sc": "z"}
    assert store.saved_view("s1", "training") is None
    store.save_view("s1", "training", {"v": "x" * 50_000})
    assert store.saved_view("s1", "training") is None


def test_the_teachers_job_list_names_joined_students_as_the_class_page_does(jm):
    from lab.view import jobs as job_views

    code = jm.open_class("teacher").code
    jm.store.join_class("s1", code, "Ada <i>L</i>")
    a = jm.submit(default_scenario(), owner="s1").run_id
    jm.close_class("teacher")
    b = jm.submit(default_scenario(), owner="s2").run_id  # no seat: the teacher reads the session's id
    jm.open_class("teacher")
    jm.store.join_class("s1", jm.store.class_state().code, "Ada <i>L</i>")
    seen = job_views.overview(jm.store, owner="teacher", everyone=True, show_ids=True).set_index("id").owner
    assert seen[a] == "Ada <i>L</i>" and seen[b] == "session s2"
    student = job_views.overview(jm.store, owner="s2", everyone=True).set_index("id").owner
    assert student[a] == "another session" and student[b] == "you"  # no names or ids for a student


def test_a_rate_bound_gives_a_burst_then_one_per_period_per_address_and_spares_this_machine():
    from lab.jobs.access import RateBound

    now = [0.0]
    bound = RateBound(3, 10.0, clock=lambda: now[0])
    assert [bound.take("10.0.0.5") for _ in range(3)] == [0.0, 0.0, 0.0]
    # a refusal counts nothing: the next try waits as long
    assert bound.take("10.0.0.5") == pytest.approx(10.0) and bound.take("10.0.0.5") == pytest.approx(10.0)
    assert bound.take("10.0.0.6") == 0.0 and all(bound.take(None) == 0.0 for _ in range(50))
    now[0] = 25.0  # two and a half periods later: two more, and half of the next
    assert [bound.take("10.0.0.5") for _ in range(3)] == [0.0, 0.0, pytest.approx(5.0)]
    ahead = [bound.take("10.0.0.5", ahead=True) for _ in range(3)]  # counted anyway: each turn after the last
    assert ahead == [pytest.approx(5.0), pytest.approx(15.0), pytest.approx(25.0)]
    with pytest.raises(LabError, match="burst"):
        RateBound(0, 1.0)


def test_new_students_from_one_address_past_its_burst_wait_to_queue_and_join(jm, monkeypatch):
    monkeypatch.setenv("LAB_NEW_PER_CLIENT", "2")
    monkeypatch.setenv("LAB_NEW_EVERY_S", "600")
    m = JobManager(jm.store.path, warm=False)
    m._start = lambda spec: None
    assert m.sign_in_teacher("teacher", TOKEN)
    sc = default_scenario()
    # one person's private windows: the third new identity from the address is made, but may act in 10 minutes
    assert [m.new_identity(o, "10.0.0.5") for o in ("w1", "w2")] == [0.0, 0.0]
    assert m.new_identity("w3", "10.0.0.5") == pytest.approx(600.0, abs=1.0)
    with pytest.raises(LabError, match="may queue jobs in 6\\d\\d s"):
        m.submit(sc, owner="w3")
    assert m.submit(sc, owner="w1").run_id and m.held_for("w1") == 0.0
    # a student beside them, from another address or from this machine, is not held by it
    assert m.new_identity("other", "10.0.0.9") == 0.0 and m.submit(sc, owner="other").run_id
    assert m.new_identity("local", None) == 0.0 and m.submit(sc, owner="local").run_id
    # seats and guesses of the code: two tries at once from one address, then one per period
    code = m.open_class("teacher").code
    with pytest.raises(LabError, match="may join the class in"):
        m.join_class("w3", code, "Third", "10.0.0.5")
    with pytest.raises(LabError, match="not the class's join code"):
        m.join_class("w1", "WRONG1", "One", "10.0.0.5")
    assert m.join_class("w1", code, "One", "10.0.0.5") == "One"
    with pytest.raises(LabError, match="try again in 600 s"):
        m.join_class("w2", code, "Two", "10.0.0.5")
    assert m.join_class("other", code, "Other", "10.0.0.9") == "Other"
    assert m.store.seats() == {"w1": "One", "other": "Other"}
    m._closed = True
