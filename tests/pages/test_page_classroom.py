"""The Class page under AppTest, a teacher and two students in three sessions of one server: the teacher opens a
class and hands out a lesson, the students join by code and name, each then opens straight into the lesson with
no switch to leave it, the teacher sees both names (as text) and removes one."""
from __future__ import annotations

import pytest

from tests.conftest import app_test, assert_no_exception

PAGE = "pages/classroom.py"
TOKEN = "Zq3-uV8_kP1wYt6Rb0sLm4"


@pytest.fixture
def server(lab_db, monkeypatch):
    monkeypatch.setenv("LAB_TEACHER_TOKEN", TOKEN)
    monkeypatch.setenv("LAB_WARM", "0")
    from lab.jobs import manager

    manager._SHARED.clear()
    yield manager.shared()
    for m in manager._SHARED.values():
        m.shutdown()
    manager._SHARED.clear()


def _join(code: str, name: str, ok: bool = True):
    at = app_test(PAGE)
    at.text_input(key="cls_code").input(code)
    at.text_input(key="cls_name").input(name)
    at.button(key="cls_join_form_run").click().run()
    assert not at.exception
    if ok:
        assert_no_exception(at)
    return at


def test_a_teacher_and_two_students(server, spawns):
    teacher = app_test(PAGE)
    assert_no_exception(teacher)
    assert any("No class is open" in i.value for i in teacher.info)  # a student's view until signed in
    assert server.access.sign_in_teacher(teacher.session_state["job_owner"], TOKEN)
    teacher.run()
    teacher.button(key="cls_open").click().run()
    assert_no_exception(teacher)
    code = server.store.class_book.class_state().code
    assert any(m.value == " ".join(code) for m in teacher.metric)

    ada = _join(code.lower(), "Ada <b>L</b>")
    bob = _join(code, "Bob")
    with pytest.raises(Exception):
        bob.text_input(key="cls_code")  # seated: the form is gone
    assert any("You are in the class as Bob" in s.value for s in bob.success)
    wrong = _join("ZZZZZZ", "Eve", ok=False)
    assert any("not the class's join code" in e.value for e in wrong.error) and "Eve" not in server.store.class_book.seats().values()

    teacher.run()
    names = list(teacher.dataframe[0].value["student"])
    assert names == ["Ada <b>L</b>", "Bob"]  # as typed, in a table: text
    lesson = list(__import__("lab.view.classroom", fromlist=["x"]).lessons(__import__("ui").LESSONS))[1]
    teacher.selectbox(key="cls_lesson").set_value(lesson)
    teacher.button(key="cls_hand").click().run()
    assert_no_exception(teacher)
    assert server.store.class_book.class_state().lesson == lesson
    steps = next(d.value for d in teacher.dataframe if "not ticked yet" in d.value.columns)
    assert set(steps["not ticked yet"]) == {"Ada <b>L</b>, Bob"} and "None" not in set(steps["answered right"])
    other = app_test(PAGE)  # the teacher in another tab: the lesson box shows the lesson handed out, not the first
    assert server.access.sign_in_teacher(other.session_state["job_owner"], TOKEN)
    other.run()
    assert_no_exception(other)
    assert other.selectbox(key="cls_lesson").value == lesson

    ada.run()  # the lesson opens on its page, in lesson mode, with no switch to leave it
    assert_no_exception(ada)
    assert ada.session_state["lesson_active"] == lesson
    toggle = ada.toggle(key="lesson_widget") if "lesson_widget" in ada.session_state else None
    assert toggle is None or (toggle.value and toggle.disabled)

    owners = {v: k for k, v in server.store.class_book.seats().items()}
    teacher.selectbox(key="cls_remove").set_value(owners["Bob"])
    teacher.button(key="cls_remove_go").click().run()
    assert_no_exception(teacher)
    assert list(server.store.class_book.seats().values()) == ["Ada <b>L</b>"]
    assert list(teacher.dataframe[0].value["student"]) == ["Ada <b>L</b>"]  # the roster says so at once
    assert [s.value.replace("\\", "") for s in teacher.success] == [
        "Removed Bob; 0 job(s) stopped. They may not join again until you let them back in."]
    teacher.button(key="cls_release").click().run()
    assert server.store.class_book.class_state().lesson is None

    # Bob, removed, tries again in the same browser: refused with why, until the teacher lets him back
    bob.run()
    bob.text_input(key="cls_code").input(code)
    bob.text_input(key="cls_name").input("Robert")
    bob.button(key="cls_join_form_run").click().run()
    assert any("the teacher removed you" in e.value for e in bob.error) and not bob.exception
    assert "Robert" not in server.store.class_book.seats().values()
    teacher.run()
    assert any(list(df.value.get("student", [])) == ["Bob"] for df in teacher.dataframe[1:])  # the Removed table
    teacher.selectbox(key="cls_back").set_value(owners["Bob"])
    teacher.button(key="cls_back_go").click().run()
    assert_no_exception(teacher)
    assert server.store.class_book.removed() == {}
    bob.button(key="cls_join_form_run").click().run()
    assert_no_exception(bob)
    assert "Robert" in server.store.class_book.seats().values()

    # a new join code keeps the seats; the old code no longer opens the class
    teacher.button(key="cls_new_code").click().run()
    assert_no_exception(teacher)
    assert server.store.class_book.class_state().code != code and len(server.store.class_book.seats()) == 2
    late = _join(code, "Late", ok=False)
    assert any("not the class's join code" in e.value for e in late.error)

    # closing asks once more: the confirming button sits in its popover
    teacher.button(key="cls_close").click().run()
    assert_no_exception(teacher)
    assert server.store.class_book.class_state() is None
