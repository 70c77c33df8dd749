"""The Class page's model: for the teacher, opening a class, its join code, the joined students by their display
names with their jobs and their progress through the lesson handed out; for a student, joining with the code and a
name, or where they sit. Names are the students' own text: every table and notice shows them as text. The join
code is for the room: the page shows it, and a report of the page (made to be handed on) withholds it."""

from __future__ import annotations

from pathlib import Path

from lab.scenario.text import Withheld
from lab.store.runs import ACTIVE
from lab.store.runs import run_store
from lab.view.desk import Desk
from lab.view.lessons import Lesson, find_lesson, load_lessons
from lab.view.section import Notice, Section

INTRO = ("A class on this server: the teacher opens it and reads out its join code; each student joins with the code "
         "and a name the teacher sees. While a class is open only joined students (and the teacher) run jobs; anyone "
         "may look at every page and learn. A lesson the teacher hands out opens on every joined student's lab, in "
         "lesson mode with no switch to leave it, until the teacher releases it.")
JOIN_FORM = (("cls_code", "cls_name"),)
NEW_CLASS_WARNING = ("A new class has a new join code and no seats: every student joins again, and removed students "
                     "may join again too. Their jobs run on.")
CLOSE_WARNING = ("Closing the class takes every seat; the students' jobs run on, read-only to them. Anyone may then "
                 "queue jobs again.")
NO_CLASS = "No class is open on this server: the lab works for you alone, as it always does."


def lessons(folder: Path) -> dict[str, str]:
    """lesson id -> title, for the teacher's choice."""
    return {x.id: x.title for x in load_lessons(folder)}


def student(owner: str, store=None) -> list[Section]:
    """A student's view: nothing open, the join form's notice, or their seat and the lesson handed out."""
    store = store if store is not None else run_store()
    state = store.class_book.class_state()
    if state is None:
        return [Section("cls_none", notices=(Notice(NO_CLASS),))]
    name = store.class_book.seat(owner)
    if name is None:
        return [Section("cls_join", header="Join the class", level="subheader",
                        intro="Type the join code the teacher gives and your name (the teacher sees it).")]
    return [Section("cls_seat", notices=(Notice(f"You are in the class as {name}.", "success", ":material/school:"),))]


def teacher(folder: Path, store=None) -> list[Section]:
    """The teacher's view of the open class (or of none)."""
    store = store if store is not None else run_store()
    state = store.class_book.class_state()
    if state is None:
        return [Section("cls_closed", notices=(Notice("No class is open. Opening one makes a join code; while it is "
                                                     "open only joined students queue jobs."),))]
    seats = store.class_book.seats()
    lesson = find_lesson(folder, state.lesson) if state.lesson else None
    code = Withheld(" ".join(state.code))  # anyone who reads it could take a seat
    out = [Section("cls_code_shown", metrics=(("Join code", code), ("Students joined", str(len(seats))),
                                               ("Lesson handed out", lesson.title if lesson else "none")))]
    out.append(Section("cls_students", header="Students", level="subheader", table=roster(store, seats, lesson),
                       caption="Each joined student by the name they typed, with their jobs and, when a lesson is "
                               "handed out, the steps they ticked.",
                       notices=() if seats else (Notice("Nobody has joined yet."),)))
    removed = store.class_book.removed()
    if removed:
        out.append(Section("cls_removed", header="Removed", level="subheader",
                           table=[{"student": name} for name in removed.values()],
                           caption="Students removed from this class: their joins are refused until you let them "
                                   "back in. A new join code (seats kept) also shuts out whoever they passed the "
                                   "code to."))
    if lesson is not None:
        out.append(Section("cls_steps", header="Lesson: {title}", level="subheader", values={"title": lesson.title},
                           table=steps(store, seats, lesson),
                           caption="Per step of the lesson handed out: how many joined students ticked it and "
                                   "answered its question right."))
    return out


def roster(store, seats: dict[str, str], lesson: Lesson | None) -> list[dict]:
    """One row per joined student: name, jobs queued or running, jobs in all, and the lesson's steps ticked."""
    runs = store.list_runs()
    progress = store.lessons.lesson_progress() if lesson is not None else None
    rows = []
    for owner, name in seats.items():
        mine = runs[runs.owner == owner]
        row = {"student": name, "jobs queued or running": int(mine.status.isin(ACTIVE).sum()), "jobs": len(mine)}
        if lesson is not None:
            done = progress[(progress.owner == owner) & (progress.lesson == lesson.id) & (progress.ticked > 0)]
            row["steps ticked"] = f"{len(done)} of {len(lesson.steps)}"
        rows.append(row)
    return rows


#: At most this many names in a cell of the step table; the rest are counted.
NAMES_SHOWN = 4


def names_of(owners, seats: dict[str, str]) -> str:
    """The students ``owners`` by their names, the first :data:`NAMES_SHOWN` and how many more."""
    names = [seats[o] for o in seats if o in set(owners)]
    if not names:
        return "—"
    more = len(names) - NAMES_SHOWN
    return ", ".join(names[:NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def steps(store, seats: dict[str, str], lesson: Lesson) -> list[dict]:
    """Per step of ``lesson``: how many joined students ticked it, who has not yet, and (a step with a question)
    how many answered right."""
    progress = store.lessons.lesson_progress()
    mine = progress[(progress.lesson == lesson.id) & progress.owner.isin(list(seats))]
    rows = []
    for i, step in enumerate(lesson.steps):
        at = mine[mine.step == i]
        ticked = set(at[at.ticked > 0].owner)
        rows.append({"step": i + 1, "what": step[:70] + ("…" if len(step) > 70 else ""),
                     "ticked": len(ticked), "not ticked yet": names_of(set(seats) - ticked, seats),
                     "answered right": str(int(at.correct.sum())) if i in lesson.questions else "no question"})
    return rows


def removed_line(name: str, stopped: int) -> str:
    """What the teacher reads after removing a student (their name is text the page shows as text)."""
    return (f"Removed {name}; {stopped} job(s) stopped. They may not join again until you let them back in.")


def owner_names(store=None) -> dict[str, str]:
    """owner id -> display name of every joined student (the Jobs page names the same students the same way)."""
    return (store if store is not None else run_store()).class_book.seats()


class ClassDesk(Desk):
    """The Class page's calls for one person: the teacher's on the class (the manager refuses them to anyone
    else), a student's to join it."""

    def state(self):
        """The open class (None when none is)."""
        return self.jm.store.class_book.class_state()

    def open(self) -> None:
        self.jm.classroom.open_class(self.owner)

    def close(self) -> None:
        self.jm.classroom.close_class(self.owner)

    def new_code(self) -> None:
        self.jm.classroom.new_class_code(self.owner)

    def hand_out(self, lesson: str | None) -> None:
        """Hand ``lesson`` out to the class (None: release the class from its lesson)."""
        self.jm.classroom.hand_out(self.owner, lesson)

    def seats(self) -> dict[str, str]:
        return self.jm.store.class_book.seats()

    def removed(self) -> dict[str, str]:
        return self.jm.store.class_book.removed()

    def remove(self, student: str) -> list[str]:
        """Take ``student``'s seat: the runs of theirs that were stopped."""
        return self.jm.classroom.remove_student(self.owner, student)

    def let_back(self, student: str) -> None:
        self.jm.classroom.let_back(self.owner, student)

    def join(self, code: str, name: str, client: str | None) -> str:
        return self.jm.classroom.join_class(self.owner, code, name, client)


__all__ = ["ClassDesk", "CLOSE_WARNING", "INTRO", "JOIN_FORM", "NEW_CLASS_WARNING", "NO_CLASS", "lessons", "student", "teacher", "roster", "steps", "owner_names",
           "names_of", "removed_line", "NAMES_SHOWN"]
