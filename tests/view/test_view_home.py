"""lab.view.home: the Home page's links, lessons and the teacher's view of the class."""
from __future__ import annotations

from pathlib import Path

from lab.store.runs import RunStore
from lab.view import home
from lab.view.lessons import load_lessons

LESSONS = Path(__file__).resolve().parents[2] / "assets" / "lessons"
PAGES = [("pages/home.py", "Home", ":material/home:"), ("pages/topology.py", "Topology", ":material/hub:"),
         ("pages/allreduce.py", "All-reduce", ":material/sync:")]


def test_every_page_but_home_gets_its_line():
    links = home.page_links(PAGES)
    assert [f for f, _, _ in links] == ["pages/topology.py", "pages/allreduce.py"]
    assert links[0][1] == "**Topology**: " + home.DESCRIPTIONS["Topology"] and links[0][2] == ":material/hub:"


def test_every_lesson_is_listed_with_its_steps_and_one_whose_page_is_missing_says_so():
    got = home.lessons(LESSONS, PAGES)
    assert [x.id for x, *_ in got] == [x.id for x in load_lessons(LESSONS)] and len(got) >= 20
    for lesson, text, steps, missing in got:
        assert steps == [f"{i + 1}. {s}" for i, s in enumerate(lesson.steps)] and text
        assert (missing is None) == (lesson.page in {f for f, _, _ in PAGES})
        if missing:
            assert lesson.page in missing


def test_the_class_progress_counts_a_students_tick(tmp_path):
    store = RunStore(tmp_path / "runs.db")
    lesson = load_lessons(LESSONS)[0]
    store.lessons.record_lesson("a" * 12, lesson.id, 0, ticked=True)
    steps, students = home.class_progress(LESSONS, store)
    first = next(r for r in steps if r["lesson"] == lesson.title and r["step"] == 1)
    assert first["ticked (students)"] == 1
    assert sum(r["ticked (students)"] for r in steps) == 1
    assert students == [{"student": "student 1", lesson.title: f"1 of {len(lesson.steps)}, up to step 1"}]
    shown = home.class_sections(LESSONS, store)  # as the page shows them, and a report keeps them
    assert [s.table for s in shown] == [steps, students]
    assert [s.caption for s in shown] == [home.CLASS_STEPS_CAPTION, home.CLASS_STUDENTS_CAPTION]


def test_a_teachers_class_progress_comes_before_the_pages_and_the_lesson_cards():
    assert home.parts(teacher=True) == ("class", "pages", "lessons")
    assert home.parts(teacher=False) == ("pages", "lessons")  # a student has no class progress to see


def test_the_class_step_table_fits_a_projector_with_its_text_wrapped(tmp_path):
    steps, students = home.class_sections(LESSONS, RunStore(tmp_path / "runs.db"))
    columns = list(steps.table[0])
    assert set(steps.columns) == set(columns)  # every column has its width, so none runs off the screen
    # beside the sidebar a 1024-pixel window leaves about 670 pixels: every column is in view at once
    assert sum(steps.columns[c]["width"] for c in columns) <= 670
    assert steps.row_height > 64  # Streamlit wraps a cell's text only in rows taller than 64 pixels
    longest = max(len(s) for x in load_lessons(LESSONS) for s in x.steps)
    assert longest > 96 and max(len(r["what"]) for r in steps.table) == 97  # cut, with its "…", to three lines
    assert students.columns["student"]["pinned"] is True
