"""Lessons: a scenario, the exact view a lesson opens on, the steps a student ticks off, and the questions the
lab checks.

A lesson lives in ``assets/lessons``: its entry in ``index.json`` names the page, the scenario file,
the text, the view (controls of :data:`lab.view.state.VIEW`, checked against that table so a lesson
can only set controls that exist, to values they allow), the controls it hides for a focused exercise (as
TensorFlow Playground's ``_hide`` keys do), the steps, and for some steps a question whose answer the student
reads off the page: a number within a relative tolerance, or one of a few choices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.errors import LabError
from lab.scenario.text import shown
from lab.scenario.document import Scenario
from lab.view.state import checked, control_for

INDEX_FORMAT = "hetlab-lessons/1"


QUESTION_KINDS = ("number", "choice")


@dataclass(frozen=True)
class Question:
    """A question of one step: ``ask`` it, and check an answer against ``answer``."""

    ask: str
    kind: str
    answer: float | str
    tolerance: float = 0.0  # relative, for a number
    choices: tuple[str, ...] = ()
    unit: str = ""

    def check(self, value: Any) -> bool:
        """Whether ``value`` (a number typed, or a choice picked) is right."""
        if self.kind == "choice":
            return value == self.answer
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return False
        return abs(float(value) - float(self.answer)) <= self.tolerance * abs(float(self.answer)) + 1e-12

    def feedback(self, value: Any) -> str:
        """What the student reads after checking: right, or what was expected and how close."""
        if self.check(value):
            return "Right."
        if self.kind == "choice":
            return "Not this one: look at the page again."
        return (f"Not quite: the page says something else (within {self.tolerance:.0%})."
                if self.tolerance else "Not quite: the page says something else.")


def _question(d: Any, where: str) -> Question:
    if not isinstance(d, dict) or not isinstance(d.get("ask"), str) or d.get("kind") not in QUESTION_KINDS:
        raise LabError(f"a question needs a text 'ask' and a kind from {list(QUESTION_KINDS)}", where=where)
    if d["kind"] == "choice":
        choices = d.get("choices")
        if not (isinstance(choices, list) and len(choices) >= 2 and all(isinstance(c, str) for c in choices)
                and d.get("answer") in choices):
            raise LabError("a choice needs at least two choices (text) and its answer among them", where=where)
        return Question(d["ask"], "choice", d["answer"], choices=tuple(choices))
    answer, tol = d.get("answer"), d.get("tolerance", 0.0)
    if isinstance(answer, bool) or not isinstance(answer, (int, float)) or not isinstance(tol, (int, float)) \
            or not 0 <= tol < 1:
        raise LabError("a number question needs a number answer and a relative tolerance in [0, 1)", where=where)
    return Question(d["ask"], "number", float(answer), float(tol), unit=str(d.get("unit", "")))


@dataclass(frozen=True)
class Lesson:
    id: str
    title: str
    page: str
    scenario_file: str
    text_file: str
    steps: tuple[str, ...]
    view: dict[str, Any] = field(default_factory=dict)
    questions: dict[int, Question] = field(default_factory=dict)  # step index -> its question
    hide: tuple[str, ...] = ()  # controls of its page the lesson does not draw (their view value stays)
    claim: str = ""  # the About page's claim it tests, if any

    def scenario(self, folder: Path) -> Scenario:
        return Scenario.from_json((folder / self.scenario_file).read_text())

    def text(self, folder: Path) -> str:
        return (folder / self.text_file).read_text()


def _lesson(d: Any, i: int) -> Lesson:
    where = f"lesson {i + 1}"
    if not isinstance(d, dict):
        raise LabError("must be a table", where=where)
    for k in ("id", "title", "page", "scenario", "text"):
        if not isinstance(d.get(k), str) or not d[k]:
            raise LabError(f"needs a text field {k!r}", where=where)
    steps = d.get("steps", [])
    if not isinstance(steps, list) or not steps or not all(isinstance(s, str) and s for s in steps):
        raise LabError("needs a non-empty list of steps (text)", where=where)
    view, notices = checked(d.get("view", {}))
    if notices:
        raise LabError("; ".join(notices), where=f"{where} view")
    questions = {}
    for q in d.get("questions", []):
        step = q.get("step") if isinstance(q, dict) else None
        if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= len(steps) or step - 1 in questions:
            raise LabError(f"a question names step {step!r}; steps are 1 to {len(steps)}, one question each",
                           where=f"{where} questions")
        questions[step - 1] = _question(q, f"{where} question of step {step}")
    hide = d.get("hide", [])
    if not isinstance(hide, list) or not all(isinstance(k, str) and control_for(k) is not None for k in hide):
        raise LabError("hides a control the lab does not have", where=f"{where} hide")
    claim = d.get("claim", "")
    if not isinstance(claim, str):
        raise LabError("its claim must be text", where=where)
    return Lesson(d["id"], d["title"], d["page"], d["scenario"], d["text"], tuple(steps), view, questions,
                  tuple(hide), claim)


def load_lessons(folder: Path) -> list[Lesson]:
    """Every lesson of ``folder/index.json``, checked (a LabError names the lesson at fault)."""
    data = json.loads((folder / "index.json").read_text())
    if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT:
        raise LabError(f"the lesson index must have format {INDEX_FORMAT!r}", where=str(folder / "index.json"))
    lessons = [_lesson(d, i) for i, d in enumerate(data.get("lessons", []))]
    ids = [x.id for x in lessons]
    if len(set(ids)) != len(ids):
        raise LabError("two lessons share an id", where=str(folder / "index.json"))
    return lessons


MAX_SHOWN_ID = 80  # a link's lesson id is quoted up to this many characters


def unknown_lesson_notice(lesson_id: Any) -> str:
    """The one line a page shows when a link's ``?l=`` names no lesson (the id as given, cut short)."""
    shown = str(lesson_id)
    if len(shown) > MAX_SHOWN_ID:
        shown = shown[:MAX_SHOWN_ID - 1] + "…"
    return (f"The lesson in this link ({shown}) does not exist; the page opens without a lesson's steps "
            "(the lessons are on the Home page).")


WHAT_CHARS = 96  # of a step's text in the teacher's table: three lines of its narrow column on a projector


def class_view(progress, lessons: list[Lesson]) -> tuple[list[dict], list[dict]]:
    """The teacher's view of the class, with no owner ids: per lesson and step, how many students ticked it, tried
    its question and answered it right; per student (numbered in the order they started), how far each lesson
    is. ``progress``: the run store's :meth:`lesson_progress` rows."""
    by_id = {x.id: x for x in lessons}
    steps_rows = []
    for lesson in lessons:
        mine = progress[progress.lesson == lesson.id]
        for i, step in enumerate(lesson.steps):
            at = mine[mine.step == i]
            q = lesson.questions.get(i)
            steps_rows.append({"lesson": lesson.title, "step": i + 1,
                               "what": step[:WHAT_CHARS] + ("…" if len(step) > WHAT_CHARS else ""),
                               "ticked (students)": int(at.ticked.sum()),
                               "tried the question": int((at.tries > 0).sum()) if q else None,
                               "answered right": int(at.correct.sum()) if q else None})
    students = []
    for k, (owner, rows) in enumerate(sorted(progress.groupby("owner"), key=lambda g: g[1].t.min())):
        row = {"student": f"student {k + 1}"}
        for lid, lrows in rows.groupby("lesson"):
            if lid in by_id:
                done = lrows[lrows.ticked > 0]
                row[by_id[lid].title] = (f"{len(done)} of {len(by_id[lid].steps)}"
                                         + (f", up to step {int(done.step.max()) + 1}" if len(done) else ""))
        students.append(row)
    return steps_rows, students


def ticks_param(ticks: Any) -> str:
    """The ticked steps (0-based) of a lesson as the link carries them: "0.2.3"."""
    return ".".join(str(i) for i in sorted({int(i) for i in ticks}))


def ticks_from_param(text: Any, steps: int) -> tuple[set[int], str | None]:
    """The ticked steps of a link's ``lt=`` (anything): the valid step numbers in it, and a notice when it held
    anything else (which is dropped). Only ASCII digits are numbers here: "²" and "٣" are characters Python
    calls digits, and neither is a step a link of the lab's making holds."""
    if text is None or text == "":
        return set(), None
    if not isinstance(text, str) or len(text) > 400:
        return set(), "the link's ticked steps were not read (not a short list of step numbers)"
    out, bad = set(), []
    for part in text.split("."):
        if part.isascii() and part.isdigit() and len(part) < 4 and int(part) < steps:
            out.add(int(part))
        else:
            bad.append(part)
    return out, (f"the link's ticked steps held {shown('.'.join(bad), 40)}, which names no step of this lesson; "
                 "it was left out" if bad else None)


def find_lesson(folder: Path, lesson_id: Any) -> Lesson | None:
    """The lesson called ``lesson_id`` (from a link: anything), or None."""
    if not isinstance(lesson_id, str):
        return None
    return next((x for x in load_lessons(folder) if x.id == lesson_id), None)
