"""The class the teacher opens: only the teacher opens, closes and hands out a lesson, or removes a student
(whose jobs stop and whose seat goes); while a class is open, only students with a seat (and the teacher) queue
jobs, so the per-student cap, the fair queue and the class view count people who joined, not cookies. Without a
class nothing here applies: a person alone or a design review queues as before."""

from __future__ import annotations

import math
import time

from lab.errors import LabError
from lab.jobs.access import ANONYMOUS
from lab.store.classroom import ClassState
from lab.store.runs import ACTIVE


class Classroom:
    """The class, part of :class:`lab.jobs.manager.JobManager`."""

    def _teacher_only(self, owner: str | None, what: str) -> None:
        if not self.is_teacher(owner):
            raise LabError(f"only the teacher may {what} (sign in on the Jobs page)", where="class")

    def open_class(self, owner: str | None) -> ClassState:
        self._teacher_only(owner, "open a class")
        return self.store.open_class()

    def close_class(self, owner: str | None) -> list[str]:
        """Close the class; the students' jobs run on, read-only to them as a visitor's."""
        self._teacher_only(owner, "close the class")
        return self.store.close_class()

    def hand_out(self, owner: str | None, lesson: str | None) -> None:
        """Hand ``lesson`` out to every joined student (None: release them from it)."""
        self._teacher_only(owner, "hand out a lesson")
        self.store.set_class_lesson(lesson)

    def remove_student(self, owner: str | None, student: str) -> list[str]:
        """The teacher removes ``student`` from the class: their queued and running jobs stop (returned) and
        their seat goes."""
        self._teacher_only(owner, "remove a student")
        stopped = []
        for rid in self.store.list_runs(statuses=ACTIVE, owner=student).id:
            if self.stop(rid, owner, teacher=True, via="the teacher removed the student"):
                stopped.append(rid)
        self.store.remove_seat(student)
        return stopped

    # ----- how fast one client address makes students and takes seats ----------------------------
    def new_identity(self, owner: str, client: str | None) -> float:
        """A browser at ``client`` (its address; None: this machine) was given the new identity ``owner``. Past
        the address's burst the identity is made all the same, but it may queue jobs or take a seat only when
        its turn comes: returns the seconds until then (0: now)."""
        wait = self.new_identities.take(client, ahead=True)
        now = time.monotonic()
        with self._lock:
            for o in [o for o, at in self._held.items() if at <= now]:
                del self._held[o]
            if wait > 0:
                self._held[str(owner)] = now + wait
        return wait

    def held_for(self, owner: str | None) -> float:
        """Seconds until the new identity ``owner`` may queue jobs or take a seat (0: it may)."""
        with self._lock:
            return max(0.0, self._held.get(str(owner), 0.0) - time.monotonic())

    def _held_message(self, owner: str | None, what: str) -> str | None:
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
        if (held := self._held_message(owner, "join the class")) is not None:
            raise LabError(held, where="class")
        wait = self.new_seats.take(client)
        if wait > 0:
            raise LabError(f"this address joined the class several times just now: try again in {math.ceil(wait)} s",
                           where="class")
        return self.store.join_class(owner, code, name)

    def queue_refusal(self, owner: str) -> str | None:
        """Why ``owner`` may not queue a job now (a new identity made faster than its address may, or a class is
        open and they have no seat), or None."""
        if (held := self._held_message(owner, "queue jobs")) is not None:
            return held
        if owner == ANONYMOUS or self.store.class_state() is None or self.is_teacher(owner):
            return None
        if self.store.seat(owner) is None:
            return ("a class is open on this server: join it on the Class page (the teacher gives the code) to run "
                    "jobs; without a seat you may look at everything and learn, not queue")
        return None


__all__ = ["Classroom"]
