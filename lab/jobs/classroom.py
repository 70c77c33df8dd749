"""The class the teacher opens: only the teacher opens, closes and hands out a lesson, or removes a student
(whose jobs stop and whose seat goes); while a class is open, only students with a seat (and the teacher) queue
jobs, so the per-student cap, the fair queue and the class view count people who joined, not cookies. Without a
class nothing here applies: a person alone or a design review queues as before."""

from __future__ import annotations

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

    def queue_refusal(self, owner: str) -> str | None:
        """Why ``owner`` may not queue a job now (a class is open and they have no seat), or None."""
        if owner == ANONYMOUS or self.store.class_state() is None or self.is_teacher(owner):
            return None
        if self.store.seat(owner) is None:
            return ("a class is open on this server: join it on the Class page (the teacher gives the code) to run "
                    "jobs; without a seat you may look at everything and learn, not queue")
        return None


__all__ = ["Classroom"]
