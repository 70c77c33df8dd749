"""Who may manage a job: its owner (a browser session) or the teacher, who holds LAB_TEACHER_TOKEN."""
from __future__ import annotations

import hmac

from lab import settings

TEACHER = "teacher"  # how the store names the teacher as the one who stopped or released a job


def teacher_token() -> str:
    """The server's teacher secret (LAB_TEACHER_TOKEN); empty: there is no teacher."""
    return settings.raw("LAB_TEACHER_TOKEN")


def is_teacher(claim) -> bool:
    """Whether ``claim`` (the ``teacher`` value of a session's link) is the server's teacher token.
    Compared in constant time; no token set on the server, or none claimed: False."""
    token = teacher_token()
    if not token or not isinstance(claim, str) or not claim:
        return False
    return hmac.compare_digest(claim.encode(), token.encode())


def teacher_session(state, params, key: str = "job_teacher") -> bool:
    """The session's teacher flag, in ``state`` (a session-state mapping) once its link's
    ``params["teacher"]`` matched the token, so it lasts while the session moves between pages.
    The token is then dropped from the link, so it is not shared with a copied address."""
    claim = params.get("teacher") if params is not None else None
    if claim is not None:
        if is_teacher(claim):
            state[key] = True
        try:
            del params["teacher"]
        except (KeyError, TypeError):
            pass
    return bool(state.get(key, False)) and bool(teacher_token())


def can_manage(run_owner: str | None, owner: str | None, teacher: bool = False) -> bool:
    """Whether ``owner`` (acting, with the teacher flag) may stop or release a job of ``run_owner``:
    its own (never a command-line run, which has no owner), or any when the teacher."""
    return bool(teacher) or (run_owner is not None and owner is not None and str(owner) == str(run_owner))


ANONYMOUS = "-"
