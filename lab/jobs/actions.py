"""Who may act on a job, a part of the job manager with its own state: the teacher's roster and the limits the
teacher sets on a job; stopping, releasing or deleting a run is refused for another student's run unless the
actor is the teacher."""

from __future__ import annotations

from lab.errors import LabError
from lab.jobs.access import TEACHER, Roster, can_manage, check_manage
from lab.jobs.limits import Limits

LIMIT = "limit"  # who stopped a job that ran past the time limit


class Access:
    """The teacher (``roster``), the job ``limits``, and who may act on which run. ``owner_of(run_id)`` is the
    manager's: a queued run's student, else the one its run records."""

    def __init__(self, store, owner_of):
        self.store, self.owner_of = store, owner_of
        self.roster = Roster()  # the owners that signed in as the teacher
        self.limits = Limits.from_settings()

    def sign_in_teacher(self, owner: str, claim, client: str | None = None) -> bool:
        """Make ``owner``, at the address ``client``, the teacher for this server when ``claim`` is
        LAB_TEACHER_TOKEN."""
        return self.roster.sign_in(owner, claim, client)

    def is_teacher(self, owner: str | None) -> bool:
        """Whether ``owner`` signed in as the teacher (and the server still has that token)."""
        return self.roster.is_teacher(owner)

    def set_limits(self, owner: str | None, limits: Limits) -> Limits:
        """The teacher sets what one job may ask of the server; anyone else is refused."""
        if not self.is_teacher(owner):
            raise LabError("only the teacher sets the job limits (sign in on the Jobs page)", where="job limits")
        self.limits = limits.checked()
        return self.limits

    def may_manage(self, run_owner: str | None, owner: str | None, teacher: bool = False) -> bool:
        return can_manage(run_owner, owner, teacher or self.is_teacher(owner))

    def check(self, run_id: str, owner: str | None, teacher: bool, what: str) -> dict:
        """The run, when ``owner`` (with the teacher flag, or signed in as the teacher) may ``what`` it; else a
        LabError."""
        run = self.store.get_run(run_id)
        check_manage(run_id, self.owner_of(run_id), owner, teacher or self.is_teacher(owner), what)
        return run

    def actor(self, owner: str | None, teacher: bool) -> str:
        """Who acts, as the store records it: "teacher", or the student's id."""
        return TEACHER if teacher or self.is_teacher(owner) else str(owner)


def who(by: str) -> str:
    """How a stop reads in the run's error: the teacher, its session, or the lab itself."""
    if by == TEACHER:
        return "the teacher"
    if by in ("shutdown",):
        return "the lab shutting down"
    if by == LIMIT:
        return "the time limit the teacher set for a job"
    return f"session {by}"
