"""What the run store keeps of each student's lessons: the steps ticked and the questions answered."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


class LessonBook:
    """The lessons' progress: the run store's ``lessons``, on its connection (``db``: the
    :class:`lab.store.runs.RunStore` it belongs to)."""

    def __init__(self, db):
        self._conn, self._write = db._conn, db._write

    def record_lesson(self, owner: str, lesson: str, step: int, *, ticked: bool | None = None,
                      answered: bool | None = None) -> None:
        """A student (their owner id) ticked or unticked a lesson's step, or answered its question
        (``answered``: right or not); a right answer ticks the step."""
        with self._write() as c:
            c.execute("INSERT OR IGNORE INTO lesson_progress (owner, lesson, step, t) VALUES (?, ?, ?, ?)",
                      (str(owner)[:64], str(lesson)[:200], int(step), time.time()))
            if ticked is not None:
                c.execute("UPDATE lesson_progress SET ticked=?, t=? WHERE owner=? AND lesson=? AND step=?",
                          (int(bool(ticked)), time.time(), str(owner)[:64], str(lesson)[:200], int(step)))
            if answered is not None:
                c.execute("UPDATE lesson_progress SET tries=tries+1, correct=MAX(correct, ?), "
                          "ticked=MAX(ticked, ?), t=? WHERE owner=? AND lesson=? AND step=?",
                          (int(bool(answered)), int(bool(answered)), time.time(), str(owner)[:64],
                           str(lesson)[:200], int(step)))

    def lesson_ticks(self, owner: str, lesson: str) -> set[int]:
        """The steps of ``lesson`` this student has ticked (or answered right)."""
        rows = self._conn().execute("SELECT step FROM lesson_progress WHERE owner=? AND lesson=? AND ticked=1",
                                    (str(owner)[:64], str(lesson)[:200])).fetchall()
        return {int(r["step"]) for r in rows}

    def lesson_progress(self) -> pd.DataFrame:
        """Every student's progress row: owner, lesson, step, ticked, tries, correct, t (oldest first)."""
        import pandas as pd

        rows = self._conn().execute("SELECT * FROM lesson_progress ORDER BY t").fetchall()
        return pd.DataFrame([dict(r) for r in rows],
                            columns=["owner", "lesson", "step", "ticked", "tries", "correct", "t"])

    # ----- export ------------------------------------------------------------------------------
