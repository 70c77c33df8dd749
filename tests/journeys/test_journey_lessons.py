"""Browser journey through a lesson: open it from Home, tick a step, answer its question (a wrong answer, then the
right one, which ticks its step), visit another page and come back (the ticks stay), reload (they stay: they are
this student's), share the link (it carries them, and they become the ticks of whoever opens it); the teacher's view on Home counts the class's progress
without naming anyone."""

from pathlib import Path

import pytest

from lab.store.runs import RunStore
from tests.conftest import WAIT_MS, lab_server, settle
from tests.journey import nav, new_page, no_error_boxes

pytestmark = pytest.mark.timeout(420)
TOKEN = "lesson-teacher-9c1e"
QUESTION = "In the bytes table, how many times S did each device send (sent / S)?"


def ticked(pg) -> list[bool]:
    panel = pg.locator(".st-key-lesson_panel")
    panel.get_by_role("checkbox").last.wait_for(timeout=WAIT_MS)
    settle(pg)
    return [cb.is_checked() for cb in panel.get_by_role("checkbox").all()]


def answer(pg, value: str) -> str:
    panel = pg.locator(".st-key-lesson_panel")
    box = panel.get_by_label(QUESTION)
    box.fill(value)
    box.press("Enter")
    settle(pg)
    panel.get_by_role("button", name="Check").click()
    settle(pg)
    return panel.inner_text()


def test_a_lessons_ticks_and_answers_stay_with_the_student_and_the_teacher_counts_them(browser, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_TEACHER_TOKEN", TOKEN)
    with lab_server(tmp_path) as base:
        pg = new_page(browser)
        try:
            pg.goto(base + "/")
            settle(pg)
            pg.get_by_role("button", name="Open this lesson").first.click()
            settle(pg)
            panel = pg.locator(".st-key-lesson_panel")
            panel.wait_for(timeout=WAIT_MS)
            assert "Ring all-reduce, step by step" in panel.inner_text() and "(0 of 5 steps done)" in panel.inner_text()
            panel.get_by_role("checkbox").nth(0).check(force=True)
            settle(pg)
            assert "Not quite" in answer(pg, "2")
            assert ticked(pg)[2] is False
            text = answer(pg, "1.5")
            assert "Right." in text and "(2 of 5 steps done)" in text, text
            assert ticked(pg) == [True, False, True, False, False]
            nav(pg, "Topology")
            nav(pg, "All-reduce")
            pg.locator(".st-key-lesson_panel").wait_for(timeout=WAIT_MS)
            assert ticked(pg) == [True, False, True, False, False]  # kept across pages
            pg.reload()
            settle(pg)
            pg.locator(".st-key-lesson_panel").wait_for(timeout=WAIT_MS)
            assert ticked(pg) == [True, False, True, False, False]  # and across a reload: this student's
            pg.get_by_role("button", name="Put this view in the page link").click()
            pg.wait_for_function("() => window.location.search.includes('lt=')", timeout=WAIT_MS)
            url = pg.url
            assert "lt=0.2" in url and "l=ring-allreduce" in url
            no_error_boxes(pg)
        finally:
            pg.context.close()

        other = new_page(browser)  # another student opens the shared link: its ticks show
        try:
            other.goto(url)
            settle(other)
            other.locator(".st-key-lesson_panel").wait_for(timeout=WAIT_MS)
            assert ticked(other) == [True, False, True, False, False]
        finally:
            other.context.close()

        teacher = new_page(browser)
        try:
            teacher.goto(base + "/jobs")
            settle(teacher)
            teacher.get_by_text("Teacher", exact=True).first.click()
            teacher.locator("input[type='password']").first.fill(TOKEN)
            teacher.get_by_role("button", name="Sign in as the teacher").click()
            settle(teacher)
            teacher.get_by_text("Teacher: you see and manage every session's jobs.").wait_for(timeout=WAIT_MS)
            nav(teacher, "Home")  # the class's progress is open for the teacher, above the lesson cards
            body = teacher.locator("[data-testid='stMain']").inner_text()
            assert body.index("The class's progress (teacher)") < body.index("Open this lesson")
            assert "Per student (numbered in the order they started; no ids)" in body
            no_error_boxes(teacher)
            # the class's progress is a view the teacher can take away: Home's report holds its two tables
            with teacher.expect_download() as got:
                teacher.get_by_role("button", name="Download this view as a report").click()
            report = Path(got.value.path()).read_text()
            assert report.count("<table") == 2 and "Per step: how many students ticked it" in report
        finally:
            teacher.context.close()
    rows = RunStore(tmp_path / "runs.db").lessons.lesson_progress()
    mine = rows[rows.lesson == "ring-allreduce"]
    assert mine.owner.nunique() == 2  # the student who opened the shared link holds its ticks as their own
    for _, theirs in mine.groupby("owner"):
        assert sorted(theirs[theirs.ticked == 1].step) == [0, 2]
    answered = mine[mine.tries > 0].set_index("step")
    assert len(answered) == 1 and (answered.tries[2], answered.correct[2]) == (2, 1)
