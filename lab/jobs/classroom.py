"""The class the teacher opens: only the teacher opens, closes and hands out a lesson, or removes a student
(whose jobs stop and whose seat goes); while a class is open, only students with a seat (and the teacher) queue
jobs, so the per-student cap, the fair queue and the class view count people who joined, not cookies. Without a
class nothing here applies: a person alone or a design review queues as before."""

from __future__ import annotations

import math
import threading
import time

from lab.errors import LabError
from lab.jobs.access import ANONYMOUS, NO_ADDRESS, PROXY_LINES, Roster, client_bound
from lab.store.classroom import ClassState
from lab.store.runs import ACTIVE

MAX_FRESH = 10_000  # new identities remembered until they act; a flood of page loads pushes out the oldest


class Classroom:
    """The class of the job manager's server: its store, who the teacher is (``roster``), and how a removed
    student's jobs stop (``stop(run_id, owner, teacher=True, via=...)``, the manager's own Stop)."""

    def __init__(self, store, roster: Roster, stop):
        self.store, self.roster, self._stop = store, roster, stop
        # How fast one client address makes new students and takes seats
        self.new_identities, self.new_seats = client_bound(), client_bound()
        self._held: dict[str, float] = {}  # a new identity made faster than its address may -> may act from
        self._fresh: dict[str, str] = {}  # a new identity that has not acted yet -> its address
        self._lock = threading.Lock()

    def _teacher_only(self, owner: str | None, what: str) -> None:
        if not self.roster.is_teacher(owner):
            raise LabError(f"only the teacher may {what} (sign in on the Jobs page)", where="class")

    def open_class(self, owner: str | None) -> ClassState:
        self._teacher_only(owner, "open a class")
        return self.store.class_book.open_class()

    def close_class(self, owner: str | None) -> list[str]:
        """Close the class; the students' jobs run on, read-only to them as a visitor's."""
        self._teacher_only(owner, "close the class")
        return self.store.class_book.close_class()

    def new_class_code(self, owner: str | None) -> ClassState:
        """A new join code for the open class, its seats kept (after a removal, so that the code a removed
        student may have passed on no longer opens the class)."""
        self._teacher_only(owner, "change the join code")
        return self.store.class_book.new_class_code()

    def let_back(self, owner: str | None, student: str) -> bool:
        """The teacher lets a removed ``student`` join again."""
        self._teacher_only(owner, "let a student back in")
        return self.store.class_book.let_back(student)

    def hand_out(self, owner: str | None, lesson: str | None) -> None:
        """Hand ``lesson`` out to every joined student (None: release them from it)."""
        self._teacher_only(owner, "hand out a lesson")
        self.store.class_book.set_class_lesson(lesson)

    def remove_student(self, owner: str | None, student: str) -> list[str]:
        """The teacher removes ``student`` from the class: their queued and running jobs stop (returned), their seat
        goes and they may not join again until the teacher lets them back (:meth:`let_back`)."""
        self._teacher_only(owner, "remove a student")
        stopped = []
        for rid in self.store.list_runs(statuses=ACTIVE, owner=student).id:
            if self._stop(rid, owner, teacher=True, via="the teacher removed the student"):
                stopped.append(rid)
        self.store.class_book.remove_seat(student)
        return stopped

    # ----- how fast one client address makes students and takes seats ----------------------------
    def new_identity(self, owner: str, client: str | None) -> None:
        """A browser at ``client`` (its address; None: this machine) was given the new identity ``owner``. It is
        remembered, not counted: a page load costs its address nothing, so a script that loads pages without a
        cookie uses up no honest student's turn. The identity counts against its address the first time it does
        something that needs one (:meth:`_count`)."""
        if client is None:
            return
        with self._lock:
            self._fresh[str(owner)] = client
            while len(self._fresh) > MAX_FRESH:  # the oldest go first: uncounted, so they are merely not held
                del self._fresh[next(iter(self._fresh))]

    def _count(self, owner: str | None) -> None:
        """Count a new identity against its address the first time it queues a job or joins the class. Past the
        address's burst it may act only when its turn comes (held until then; the debt has a floor, so that is
        at most LAB_NEW_PER_CLIENT + 1 periods away)."""
        with self._lock:
            client = self._fresh.pop(str(owner), None)
        if client is None:
            return
        wait = self.new_identities.take(client, ahead=True)
        now = time.monotonic()
        with self._lock:
            for o in [o for o, at in self._held.items() if at <= now]:
                del self._held[o]
            if wait > 0:
                self._held[str(owner)] = now + wait

    def held_for(self, owner: str | None) -> float:
        """Seconds until the new identity ``owner`` may queue jobs or take a seat (0: it may)."""
        with self._lock:
            return max(0.0, self._held.get(str(owner), 0.0) - time.monotonic())

    def _held_message(self, owner: str | None, what: str) -> str | None:
        self._count(owner)
        left = self.held_for(owner)
        if left <= 0:
            return None
        return (f"this address made several new students just now: this one may {what} in {math.ceil(left)} s "
                "(the server bounds how fast one address makes students; a teacher whose class shares one address "
                "raises LAB_NEW_PER_CLIENT)")

    def join_class(self, owner: str, code, name, client: str | None = None) -> str:
        """``owner`` joins the open class as ``name`` with the join code ``code`` (lab.store.classroom), from
        ``client``: at most LAB_NEW_PER_CLIENT tries at once from one address, then one per LAB_NEW_EVERY_S, so
        neither seats nor guesses of the code come faster."""
        if client == NO_ADDRESS:
            raise LabError("this server is behind a reverse proxy that sends no client address, so it cannot tell "
                           f"students apart: the teacher sets it to send one ({PROXY_LINES})", where="class")
        if (held := self._held_message(owner, "join the class")) is not None:
            raise LabError(held, where="class")
        wait = self.new_seats.take(client)
        if wait > 0:
            raise LabError(f"this address joined the class several times just now: try again in {math.ceil(wait)} s",
                           where="class")
        return self.store.class_book.join_class(owner, code, name)

    def queue_refusal(self, owner: str) -> str | None:
        """Why ``owner`` may not queue a job now (a new identity made faster than its address may, or a class is
        open and they have no seat), or None."""
        if (held := self._held_message(owner, "queue jobs")) is not None:
            return held
        if owner == ANONYMOUS or self.store.class_book.class_state() is None or self.roster.is_teacher(owner):
            return None
        if self.store.class_book.seat(owner) is None:
            return ("a class is open on this server: join it on the Class page (the teacher gives the code) to run "
                    "jobs; without a seat you may look at everything and learn, not queue")
        return None


__all__ = ["Classroom"]
