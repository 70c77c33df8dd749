"""Lesson questions the lab checks, a student's progress kept in the run store, and the teacher's anonymous view."""
from __future__ import annotations

import json

import pytest

from lab.errors import LabError
from lab.store.runs import RunStore
from lab.view.lessons import Lesson, Question, _lesson, class_view, ticks_from_param, ticks_param


def test_a_number_is_right_within_its_tolerance_and_a_choice_only_when_it_is_the_answer():
    q = Question("How many values?", "number", 2080.0, tolerance=0.01)
    assert q.check(2080) and q.check(2100) and not q.check(2110) and not q.check(None) and not q.check(True)
    assert q.check(float("nan")) is False and q.feedback(2100) == "Right."
    c = Question("Which?", "choice", "ring", choices=("ring", "tree"))
    assert c.check("ring") and not c.check("tree") and not c.check(None)


def test_a_lesson_with_a_question_on_a_step_it_does_not_have_or_an_unknown_control_is_refused():
    base = {"id": "x", "title": "X", "page": "pages/allreduce.py", "scenario": "s.json", "text": "t.md",
            "steps": ["one", "two"]}
    ok = _lesson(dict(base, questions=[{"step": 2, "ask": "N?", "kind": "number", "answer": 4}], hide=["ar_order"]), 0)
    assert ok.questions[1].answer == 4.0 and ok.hide == ("ar_order",)
    for bad in ({"questions": [{"step": 3, "ask": "N?", "kind": "number", "answer": 4}]},
                {"questions": [{"step": 1, "ask": "?", "kind": "choice", "choices": ["a", "b"], "answer": "c"}]},
                {"questions": [{"step": 1, "ask": "?", "kind": "essay"}]},
                {"hide": ["no_such_control"]}):
        with pytest.raises(LabError):
            _lesson(dict(base, **bad), 0)


def test_ticks_in_a_link_keep_only_the_lessons_steps():
    assert ticks_param({3, 0, 2}) == "0.2.3"
    got, notice = ticks_from_param("0.2.3.99.x.-1", 4)
    assert got == {0, 2, 3} and "99.x.-1" in notice
    assert ticks_from_param(None, 4) == (set(), None) and ticks_from_param("0.1", 4) == ({0, 1}, None)
    assert ticks_from_param("1" * 500, 4)[0] == set() and ticks_from_param(["0"], 4)[0] == set()


def test_progress_is_kept_per_student_and_the_teacher_sees_the_class_without_ids(tmp_path):
    st = RunStore(tmp_path / "runs.db")
    lesson = Lesson("ring", "Ring", "pages/allreduce.py", "s.json", "t.md", ("a", "b", "c"),
                    questions={2: Question("N?", "number", 4.0)})
    st.lessons.record_lesson("alice", "ring", 0, ticked=True)
    st.lessons.record_lesson("alice", "ring", 2, answered=False)
    st.lessons.record_lesson("alice", "ring", 2, answered=True)  # a right answer ticks the step
    st.lessons.record_lesson("bob", "ring", 0, ticked=True)
    st.lessons.record_lesson("bob", "ring", 0, ticked=False)
    st.lessons.record_lesson("bob", "ring", 2, answered=False)
    assert st.lessons.lesson_ticks("alice", "ring") == {0, 2} and st.lessons.lesson_ticks("bob", "ring") == set()
    steps, students = class_view(st.lessons.lesson_progress(), [lesson])
    assert [(r["step"], r["ticked (students)"], r["tried the question"], r["answered right"]) for r in steps] == [
        (1, 1, None, None), (2, 0, None, None), (3, 1, 2, 1)]
    assert students == [{"student": "student 1", "Ring": "2 of 3, up to step 3"}, {"student": "student 2",
                                                                                   "Ring": "0 of 3"}]
    assert "alice" not in json.dumps([steps, students]) and "bob" not in json.dumps([steps, students])


def test_every_unicode_digit_that_is_not_ascii_is_a_notice_never_a_step_or_an_error():
    """Brute force over every code point Python's isdigit or isdecimal accepts: "²" crashed int(), "٣" ticked
    step 4. Alone, doubled, or beside a good step, each is dropped with a notice."""
    import sys

    digits = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isdigit() and not chr(c).isascii()]
    assert len(digits) > 600 and "²" in digits and "٣" in digits
    for d in digits:
        for text in (d, d + d, "1." + d, d + ".1"):
            got, notice = ticks_from_param(text, 10)
            assert got <= {1} and notice and "no step" in notice, text
