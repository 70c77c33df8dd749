"""A lesson link's outside values (``l=``, ``lt=``) on the page they open (AppTest): a bad one is a notice, never
an error box, and ticks a link brings are stored for the student who opened it."""
from __future__ import annotations

from pathlib import Path

import pytest

from lab.view.lessons import load_lessons
from tests.conftest import app_test, assert_no_exception

LESSON = load_lessons(Path(__file__).resolve().parents[2] / "assets" / "lessons")[0]


@pytest.mark.parametrize("ticks", ["²", "٣", "1.²", "-1", "9" * 500])
def test_a_link_with_ticks_that_are_not_step_numbers_gets_a_notice(ticks, lab_db, spawns):
    at = app_test(LESSON.page, query={"l": LESSON.id, "lt": ticks, "lesson": "1"})
    assert_no_exception(at)
    assert any("ticked steps" in i.value for i in at.info)
    ticked = [c.value for c in at.checkbox if c.key and c.key.startswith(f"lesson_tick_{LESSON.id}_")]
    assert ticked and ticked[1] == (ticks == "1.²") and not any(ticked[2:])


def test_ticks_a_link_brings_are_stored_for_the_student_who_opened_it(lab_db, spawns):
    from lab.store.runs import run_store

    at = app_test(LESSON.page, query={"l": LESSON.id, "lt": "0.1", "lesson": "1"})
    assert_no_exception(at)
    rows = run_store().lessons.lesson_progress()
    assert rows.owner.nunique() == 1
    assert run_store().lessons.lesson_ticks(rows.owner.iloc[0], LESSON.id) == {0, 1}
