"""What the run store keeps of a class: whether the teacher opened one (its join code, the lesson handed out),
the seats of the students who joined it (their display names), and each student's view of each page, so that a
reload, a new tab or a page opened by its address shows what they were looking at."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass

from lab.errors import LabError
from lab.scenario.text import check_name, look_alike, shown

#: Join codes: letters and digits a person reads aloud without confusion (no I, L, O, 0, 1).
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
SEAT_NAME_MAX = 40
MAX_SEATS = 200
MAX_VIEW_CHARS = 40_000


@dataclass(frozen=True)
class ClassState:
    """The open class: its join code, the lesson handed out (None: none), when it opened, and when the lesson was
    handed out (a lesson handed out again is a new hand-out: it opens again for every student)."""

    code: str
    lesson: str | None
    opened: float
    handed: float | None = None


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


class ClassBook:
    """The class, its seats and the students' views: the run store's ``class_book``, on its connection (``db``: the
    :class:`lab.store.runs.RunStore` it belongs to)."""

    def __init__(self, db):
        self._conn, self._write = db._conn, db._write

    # ----- the class ---------------------------------------------------------------------------
    def open_class(self) -> ClassState:
        """Open a class with a new join code (the seats and the removals of an earlier class are gone)."""
        with self._write() as c:
            c.execute("DELETE FROM seats")
            c.execute("DELETE FROM removed")
            c.execute("INSERT OR REPLACE INTO classroom (id, code, lesson, opened, handed) VALUES (1, ?, NULL, ?, NULL)",
                      (new_code(), time.time()))
        return self.class_state()

    def new_class_code(self) -> ClassState:
        """Give the open class a new join code and keep its seats: whoever had only the old code must ask again."""
        with self._write() as c:
            if c.execute("UPDATE classroom SET code=? WHERE id=1", (new_code(),)).rowcount == 0:
                raise LabError("no class is open", where="class")
        return self.class_state()

    def close_class(self) -> list[str]:
        """Close the class: every seat goes; returns the owners who held one."""
        with self._write() as c:
            owners = [r["owner"] for r in c.execute("SELECT owner FROM seats").fetchall()]
            c.execute("DELETE FROM seats")
            c.execute("DELETE FROM removed")
            c.execute("DELETE FROM classroom")
        return owners

    def class_state(self) -> ClassState | None:
        row = self._conn().execute("SELECT code, lesson, opened, handed FROM classroom WHERE id=1").fetchone()
        return None if row is None else ClassState(row["code"], row["lesson"], row["opened"], row["handed"])

    def set_class_lesson(self, lesson: str | None) -> None:
        """Hand a lesson out to the class (None: release it)."""
        with self._write() as c:
            if c.execute("UPDATE classroom SET lesson=?, handed=? WHERE id=1",
                         (lesson, None if lesson is None else time.time())).rowcount == 0:
                raise LabError("no class is open", where="class")

    def open_hand_out(self, owner: str | None) -> bool:
        """Whether ``owner`` (a seated student) is to be taken to the lesson handed out now: True once per hand-out,
        whatever their sessions, tabs and reloads, so a reload keeps the view they made of it since."""
        if not owner:
            return False
        # every page run of a seated student asks: a read answers all but the first, without the write lock
        seen = self._conn().execute(
            "SELECT 1 FROM seats, classroom WHERE seats.owner=? AND classroom.id=1 AND classroom.lesson IS NOT NULL "
            "AND IFNULL(seats.opened, -1) = IFNULL(classroom.handed, 0)", (str(owner),)).fetchone()
        if seen is not None:
            return False
        with self._write() as c:
            # a lesson handed out by an older lab has no time: it counts as one hand-out at time 0
            row = c.execute("SELECT IFNULL(handed, 0) AS handed FROM classroom WHERE id=1 AND lesson IS NOT NULL"
                            ).fetchone()
            if row is None:
                return False
            return c.execute("UPDATE seats SET opened=? WHERE owner=? AND IFNULL(opened, -1) != ?",
                             (row["handed"], str(owner), row["handed"])).rowcount > 0

    # ----- seats -------------------------------------------------------------------------------
    def join_class(self, owner: str, code, name) -> str:
        """Give ``owner`` a seat under ``name`` when ``code`` is the open class's; returns the name kept. A name
        that only looks like another student's is refused; joining again renames the seat."""
        name = check_name(name if not isinstance(name, str) else name.strip(), "class.name", what="your name",
                          max_len=SEAT_NAME_MAX)
        code = code.strip().upper() if isinstance(code, str) else code
        with self._write() as c:
            row = c.execute("SELECT code FROM classroom WHERE id=1").fetchone()
            if row is None:
                raise LabError("no class is open on this server: the teacher opens one", where="class")
            if not isinstance(code, str) or not secrets.compare_digest(code.encode(), row["code"].encode()):
                raise LabError("that is not the class's join code: ask the teacher for it", where="class")
            if c.execute("SELECT 1 FROM removed WHERE owner=?", (str(owner),)).fetchone() is not None:
                raise LabError("the teacher removed you from this class: ask the teacher to let you back in",
                               where="class")
            others = c.execute("SELECT owner, name FROM seats WHERE owner != ?", (str(owner),)).fetchall()
            for r in others:
                if look_alike(r["name"], name):
                    raise LabError(f"{shown(name, 50)} looks like the name of a student already in the class: "
                                   "add your second name or an initial", where="class")
            if len(others) >= MAX_SEATS:
                raise LabError(f"the class is full ({MAX_SEATS} seats)", where="class")
            # joining again renames the seat and keeps which hand-out the student has opened
            c.execute("INSERT INTO seats (owner, name, joined) VALUES (?, ?, ?) ON CONFLICT (owner) DO UPDATE "
                      "SET name=excluded.name, joined=excluded.joined", (str(owner), name, time.time()))
        return name

    def seat(self, owner: str | None) -> str | None:
        """The display name of ``owner``'s seat, or None."""
        if not owner:
            return None
        row = self._conn().execute("SELECT name FROM seats WHERE owner=?", (str(owner),)).fetchone()
        return None if row is None else row["name"]

    def seats(self) -> dict[str, str]:
        """owner -> display name, in the order they joined."""
        rows = self._conn().execute("SELECT owner, name FROM seats ORDER BY joined").fetchall()
        return {r["owner"]: r["name"] for r in rows}

    def remove_seat(self, owner: str) -> bool:
        """Take ``owner``'s seat and keep them out of this class (their joins are refused) until
        :meth:`let_back`; returns whether they had a seat."""
        with self._write() as c:
            row = c.execute("SELECT name FROM seats WHERE owner=?", (str(owner),)).fetchone()
            if row is not None:
                c.execute("DELETE FROM seats WHERE owner=?", (str(owner),))
                c.execute("INSERT OR REPLACE INTO removed (owner, name, removed) VALUES (?, ?, ?)",
                          (str(owner), row["name"], time.time()))
            return row is not None

    def removed(self) -> dict[str, str]:
        """owner -> the name they had, of the students removed from this class, in the order they were removed."""
        rows = self._conn().execute("SELECT owner, name FROM removed ORDER BY removed").fetchall()
        return {r["owner"]: r["name"] for r in rows}

    def let_back(self, owner: str) -> bool:
        """Let a removed student join again (with the code); returns whether they were removed."""
        with self._write() as c:
            return c.execute("DELETE FROM removed WHERE owner=?", (str(owner),)).rowcount > 0

    # ----- each student's view -----------------------------------------------------------------
    def save_view(self, owner: str, page: str, view: dict) -> None:
        """Keep what ``owner`` looks at on ``page`` (the page link's parameters), replacing the last."""
        text = json.dumps(view, sort_keys=True)
        if len(text) > MAX_VIEW_CHARS:
            return  # a view this large comes from no page of the lab: it is not kept
        with self._write() as c:
            c.execute("INSERT OR REPLACE INTO student_views (owner, page, view, t) VALUES (?, ?, ?, ?)",
                      (str(owner)[:64], str(page)[:64], text, time.time()))

    def saved_view(self, owner: str, page: str) -> dict | None:
        row = self._conn().execute("SELECT view FROM student_views WHERE owner=? AND page=?",
                                   (str(owner)[:64], str(page)[:64])).fetchone()
        if row is None:
            return None
        try:
            view = json.loads(row["view"])
        except ValueError:
            return None
        return view if isinstance(view, dict) else None


__all__ = ["CODE_ALPHABET", "ClassBook", "ClassState", "new_code"]
