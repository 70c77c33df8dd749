"""Lessons: a scenario, the exact view a lesson opens on, and the steps a student ticks off.

A lesson lives in ``assets/lessons``: its entry in ``index.json`` names the page, the scenario file,
the text, the view (controls of :data:`lab.view.state.VIEW`, checked against that table so a lesson
can only set controls that exist, to values they allow) and the steps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.errors import LabError
from lab.scenario.document import Scenario
from lab.view.state import checked

INDEX_FORMAT = "hetlab-lessons/1"


@dataclass(frozen=True)
class Lesson:
    id: str
    title: str
    page: str
    scenario_file: str
    text_file: str
    steps: tuple[str, ...]
    view: dict[str, Any] = field(default_factory=dict)

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
    return Lesson(d["id"], d["title"], d["page"], d["scenario"], d["text"], tuple(steps), view)


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


def find_lesson(folder: Path, lesson_id: Any) -> Lesson | None:
    """The lesson called ``lesson_id`` (from a link: anything), or None."""
    if not isinstance(lesson_id, str):
        return None
    return next((x for x in load_lessons(folder) if x.id == lesson_id), None)
