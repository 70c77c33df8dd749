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
    assert m.access.sign_in_teacher("teacher", TOKEN)
    yield m
    m._closed = True


def test_only_the_teacher_opens_hands_out_removes_and_closes(jm):
    for act in (lambda: jm.classroom.open_class("student"), lambda: jm.classroom.hand_out("student", "x"),
                lambda: jm.classroom.remove_student("student", "other"), lambda: jm.classroom.close_class("student")):
        with pytest.raises(LabError, match="only the teacher"):
            act()
    state = jm.classroom.open_class("teacher")
    assert len(state.code) == 6 and set(state.code) <= set(CODE_ALPHABET) and state.lesson is None
    jm.classroom.hand_out("teacher", "ring-allreduce")
    assert jm.store.class_book.class_state().lesson == "ring-allreduce"
    jm.classroom.hand_out("teacher", None)
    assert jm.store.class_book.class_state().lesson is None


def test_joining_needs_the_code_and_a_name_no_other_student_seems_to_have(jm):
    store: RunStore = jm.store
    with pytest.raises(LabError, match="no class is open"):
        store.class_book.join_class("a", "ABCDEF", "Ada")
    code = jm.classroom.open_class("teacher").code
    with pytest.raises(LabError, match="not the class's join code"):
        store.class_book.join_class("a", "WRONG1", "Ada")
    assert store.class_book.join_class("a", code.lower(), "  Ada  ") == "Ada"  # read aloud: any case, spaces trimmed
    with pytest.raises(LabError, match="looks like the name"):
        store.class_book.join_class("b", code, "ADA")
    with pytest.raises(LabError, match="looks like the name"):
        store.class_book.join_class("b", code, "Аda")  # a Cyrillic А
    for bad in ("", "a\u202eb", 42, None):
        with pytest.raises(LabError):
            store.class_book.join_class("b", code, bad)
    assert store.class_book.join_class("b", code, "<b>Bob</b>") == "<b>Bob</b>"  # any text, shown as text
    assert store.class_book.seats() == {"a": "Ada", "b": "<b>Bob</b>"}
    assert store.class_book.join_class("a", code, "Ada L.") == "Ada L." and store.class_book.seat("a") == "Ada L."  # renamed, one seat


def test_in_class_mode_only_seated_students_and_the_teacher_queue(jm):
    sc = default_scenario()
    jm.submit(sc, owner="visitor")  # no class: everyone queues
    code = jm.classroom.open_class("teacher").code
    with pytest.raises(LabError, match="join it on the Class page"):
        jm.submit(sc, owner="visitor")
    jm.store.class_book.join_class("seated", code, "Grace")
    assert jm.submit(sc, owner="seated").run_id
    assert jm.submit(sc, owner="teacher").run_id
    jm.classroom.close_class("teacher")
    assert jm.submit(sc, owner="visitor").run_id  # the class closed: as before


def test_a_removed_student_loses_the_seat_and_their_jobs_stop(jm):
    code = jm.classroom.open_class("teacher").code
    jm.store.class_book.join_class("s1", code, "Ada")
    jm.store.class_book.join_class("s2", code, "Bob")
    mine = [jm.submit(default_scenario(), owner="s1").run_id for _ in range(2)]
    other = jm.submit(default_scenario(), owner="s2").run_id
    stopped = jm.classroom.remove_student("teacher", "s1")
    assert sorted(stopped) == sorted(mine) and all(jm.store.status(r) == "stopped" for r in mine)
    assert jm.store.status(other) == "queued" and jm.store.class_book.seats() == {"s2": "Bob"}
    with pytest.raises(LabError, match="join it"):
        jm.submit(default_scenario(), owner="s1")


def test_a_new_class_starts_with_no_seats_and_a_new_code(jm):
    first = jm.classroom.open_class("teacher").code
    jm.store.class_book.join_class("s1", first, "Ada")
    second = jm.classroom.open_class("teacher").code
    assert jm.store.class_book.seats() == {}
    if second != first:
        with pytest.raises(LabError, match="join code"):
            jm.store.class_book.join_class("s1", first, "Ada")


def test_a_students_view_is_kept_per_page_and_a_huge_one_is_not(lab_db):
    store = RunStore(lab_db)
    store.class_book.save_view("s1", "compare", {"sc": "x", "v": "y"})
    store.class_book.save_view("s1", "compare", {"sc": "x2"})
    store.class_book.save_view("s2", "compare", {"sc": "z"})
    assert store.class_book.saved_view("s1", "compare") == {"sc": "x2"} and store.class_book.saved_view("s2", "compare") == {"sc": "z"}
    assert store.class_book.saved_view("s1", "training") is None
    store.class_book.save_view("s1", "training", {"v": "x" * 50_000})
    assert store.class_book.saved_view("s1", "training") is None


def test_the_teachers_job_list_names_joined_students_as_the_class_page_does(jm):
    from lab.view import jobs as job_views

    code = jm.classroom.open_class("teacher").code
    jm.store.class_book.join_class("s1", code, "Ada <i>L</i>")
    a = jm.submit(default_scenario(), owner="s1").run_id
    jm.classroom.close_class("teacher")
    b = jm.submit(default_scenario(), owner="s2").run_id  # no seat: the teacher reads the session's id
    jm.classroom.open_class("teacher")
    jm.store.class_book.join_class("s1", jm.store.class_book.class_state().code, "Ada <i>L</i>")
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
    assert m.access.sign_in_teacher("teacher", TOKEN)
    sc = default_scenario()
    # one person's private windows: a page load makes an identity and costs nothing; the first two to act take
    # the address's burst, the third may act in 10 minutes
    for o in ("w1", "w2", "w3"):
        m.classroom.new_identity(o, "10.0.0.5")
    assert m.classroom.held_for("w3") == 0.0  # not counted yet
    assert m.submit(sc, owner="w1").run_id and m.classroom.held_for("w1") == 0.0
    assert m.submit(sc, owner="w3").run_id  # the second to act, whenever its page was loaded
    with pytest.raises(LabError, match="may queue jobs in 6\\d\\d s"):
        m.submit(sc, owner="w2")
    # a student beside them, from another address or from this machine, is not held by it
    m.classroom.new_identity("other", "10.0.0.9")
    m.classroom.new_identity("local", None)
    assert m.submit(sc, owner="other").run_id and m.submit(sc, owner="local").run_id
    # seats and guesses of the code: two tries at once from one address, then one per period
    code = m.classroom.open_class("teacher").code
    with pytest.raises(LabError, match="may join the class in"):
        m.classroom.join_class("w2", code, "Second", "10.0.0.5")
    with pytest.raises(LabError, match="not the class's join code"):
        m.classroom.join_class("w1", "WRONG1", "One", "10.0.0.5")
    assert m.classroom.join_class("w1", code, "One", "10.0.0.5") == "One"
    m.classroom.new_identity("w4", "10.0.0.5")
    with pytest.raises(LabError, match="try again in 600 s|may join the class in"):
        m.classroom.join_class("w4", code, "Four", "10.0.0.5")
    assert m.classroom.join_class("other", code, "Other", "10.0.0.9") == "Other"
    assert m.store.class_book.seats() == {"w1": "One", "other": "Other"}
    m._closed = True


def test_the_debt_of_turns_taken_ahead_has_a_floor_of_one_burst():
    from lab.jobs.access import RateBound

    now = [0.0]
    bound = RateBound(2, 10.0, clock=lambda: now[0])
    waits = [bound.take("10.0.0.5", ahead=True) for _ in range(1000)]  # a script's thousand identities act
    assert waits[:2] == [0.0, 0.0] and waits[2:4] == [pytest.approx(10.0), pytest.approx(20.0)]
    assert max(waits) == pytest.approx(30.0) == pytest.approx(bound.longest_wait_s)
    assert bound.take("10.0.0.5") == pytest.approx(30.0)  # the next honest student: (burst + 1) periods, no more
    now[0] += 30.0
    assert bound.take("10.0.0.5") == 0.0


def test_a_thousand_page_loads_without_a_cookie_cost_the_next_student_from_the_address_nothing(lab_db, monkeypatch):
    monkeypatch.setenv("LAB_NEW_PER_CLIENT", "2")
    monkeypatch.setenv("LAB_NEW_EVERY_S", "600")
    m = JobManager(lab_db, warm=False)
    m._start = lambda spec: None
    for k in range(1000):
        m.classroom.new_identity(f"load{k}", "10.0.0.5")
    m.classroom.new_identity("honest", "10.0.0.5")
    assert m.submit(default_scenario(), owner="honest").run_id and m.classroom.held_for("honest") == 0.0
    # and a script whose thousand identities each try to queue holds the next one at most (burst + 1) periods
    for k in range(1000):
        try:
            m.submit(default_scenario(), owner=f"load{k}")
        except LabError:
            pass
    m.classroom.new_identity("next", "10.0.0.5")
    with pytest.raises(LabError, match="may queue jobs in"):
        m.submit(default_scenario(), owner="next")
    assert 0 < m.classroom.held_for("next") <= m.classroom.new_identities.longest_wait_s == 1800.0
    m._closed = True


def test_a_removed_student_stays_out_until_let_back_and_a_new_code_keeps_the_seats(jm):
    code = jm.classroom.open_class("teacher").code
    assert jm.classroom.join_class("ada", code, "Ada") == "Ada" and jm.classroom.join_class("bob", code, "Bob") == "Bob"
    jm.classroom.remove_student("teacher", "bob")
    assert jm.store.class_book.seats() == {"ada": "Ada"} and jm.store.class_book.removed() == {"bob": "Bob"}
    for name in ("Bob", "Robert"):  # with the same code, under any name
        with pytest.raises(LabError, match="the teacher removed you"):
            jm.classroom.join_class("bob", code, name)
    for act in (lambda: jm.classroom.let_back("bob", "bob"), lambda: jm.classroom.new_class_code("ada")):
        with pytest.raises(LabError, match="only the teacher"):
            act()
    new = jm.classroom.new_class_code("teacher").code
    assert new != code and jm.store.class_book.seats() == {"ada": "Ada"}  # the seats stay
    with pytest.raises(LabError, match="not the class's join code"):
        jm.classroom.join_class("carol", code, "Carol")  # whoever had the old code only
    assert jm.classroom.let_back("teacher", "bob") and jm.store.class_book.removed() == {}
    assert jm.classroom.join_class("bob", new, "Bob") == "Bob"
    jm.classroom.remove_student("teacher", "bob")
    jm.classroom.open_class("teacher")  # a new class: removals are the old class's
    assert jm.store.class_book.removed() == {} and jm.classroom.join_class("bob", jm.store.class_book.class_state().code, "Bob") == "Bob"


def test_a_hand_out_opens_once_for_each_student_whatever_their_reloads(jm):
    store: RunStore = jm.store
    code = jm.classroom.open_class("teacher").code
    store.class_book.join_class("ada", code, "Ada")
    store.class_book.join_class("bob", code, "Bob")
    assert not store.class_book.open_hand_out("ada")  # nothing handed out
    jm.classroom.hand_out("teacher", "ring-allreduce")
    first = store.class_book.class_state().handed
    assert store.class_book.open_hand_out("ada") and not store.class_book.open_hand_out("ada")  # a reload keeps Ada's own view
    store.class_book.join_class("ada", code, "Ada L.")  # renaming the seat is not a new hand-out
    assert not store.class_book.open_hand_out("ada")
    assert store.class_book.open_hand_out("bob")  # Bob's first page since is taken to the lesson: his own once
    assert not store.class_book.open_hand_out("cy") and not store.class_book.open_hand_out(None)  # no seat: nothing to open
    jm.classroom.hand_out("teacher", "ring-allreduce")  # handed out again: a new hand-out, opened again by each
    assert store.class_book.class_state().handed != first
    assert store.class_book.open_hand_out("ada") and store.class_book.open_hand_out("bob")
    jm.classroom.hand_out("teacher", None)
    assert store.class_book.class_state().handed is None and not store.class_book.open_hand_out("ada")


def test_an_older_store_takes_the_hand_out_columns(tmp_path):
    import sqlite3

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as c:  # the class tables as a store written before hand-outs were counted
        c.executescript("CREATE TABLE classroom (id INTEGER PRIMARY KEY CHECK (id = 1), code TEXT NOT NULL, "
                        "lesson TEXT, opened REAL NOT NULL); CREATE TABLE seats (owner TEXT PRIMARY KEY, "
                        "name TEXT NOT NULL, joined REAL NOT NULL) WITHOUT ROWID; "
                        "INSERT INTO classroom VALUES (1, 'ABCDEF', 'ring-allreduce', 1.0); "
                        "INSERT INTO seats VALUES ('ada', 'Ada', 2.0);")
    store = RunStore(db)
    assert store.class_book.class_state().lesson == "ring-allreduce" and store.class_book.class_state().handed is None
    assert store.class_book.open_hand_out("ada") and not store.class_book.open_hand_out("ada")
