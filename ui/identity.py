"""Who this browser is: the student's owner id from the token their browser keeps in a cookie, the server's job
manager, and whether the student signed in as the teacher."""

from __future__ import annotations

import streamlit as st

OWNER_KEY = "job_owner"
# A student's cookie lasts a term, not a year. It is written by the page's script (Streamlit sets no cookie of
# its own), so it cannot be HttpOnly: the server signs it instead, and a value it did not sign is nobody.
COOKIE_MAX_AGE_S = 30 * 24 * 3600
_COOKIE_PENDING = "_owner_cookie_pending"


def owner() -> str:
    """This student's owner id: from the token their browser keeps in a cookie (lab.jobs.access says
    why a cookie and not the link), so a reload or a second tab is the same student. A browser
    without one gets a new token, written into its cookie by :func:`write_identity_cookie`."""
    from lab.jobs import access

    ss = st.session_state
    if OWNER_KEY not in ss:
        try:
            token = st.context.cookies.get(access.COOKIE)
        except RuntimeError:  # no server behind this run (AppTest has no runtime): no cookie to read
            token = None
        fresh = not access.valid_token(token)
        if fresh:
            token = access.new_token()
            ss[_COOKIE_PENDING] = token
        ss[OWNER_KEY] = access.owner_id(token)
        if fresh:  # how fast one address makes students is bounded (lab.jobs.classroom)
            from lab.jobs.manager import shared

            shared().classroom.new_identity(ss[OWNER_KEY], client())
    return ss[OWNER_KEY]


def client() -> str | None:
    """The browser's address as the server counts it (None: this machine, or no server behind this run); behind a
    reverse proxy, what lab.jobs.access.client_address reads of the proxy's headers."""
    from lab import settings
    from lab.jobs import access

    try:
        ip = st.context.ip_address
        headers = dict(st.context.headers.items()) if ip is None else {}
    except RuntimeError:
        return None
    return access.client_address(ip, headers, settings.flag("LAB_PROXY"))


def write_identity_cookie() -> None:
    """Write a new student's token into the browser's cookie (every run of the session that made it,
    until a reload reads it back). It is the lab's own constant script; the token is URL-safe."""
    from lab.jobs import access

    owner()
    token = st.session_state.get(_COOKIE_PENDING)
    if token and access.valid_token(token):
        st.html(f"<script>document.cookie = '{access.COOKIE}={token}; Path=/; Max-Age={COOKIE_MAX_AGE_S}; "
                "SameSite=Strict';</script>", unsafe_allow_javascript=True)


def job_manager():
    """(the server's one JobManager of the run store, shared by every session and page, with its fair
    queue; this student's owner id in that queue)."""
    from lab.jobs.manager import shared

    return shared(), owner()


def teacher() -> bool:
    """Whether this student signed in as the teacher (on the Jobs page) on this server."""
    jm, me = job_manager()
    return jm.access.is_teacher(me)
