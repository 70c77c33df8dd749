"""A live part of a page: a fragment that refreshes itself while something runs, and backs off when its own
render is slow (:func:`lab.view.live.interval`)."""
from __future__ import annotations

import functools
import time
from typing import Callable

import streamlit as st

from lab.view.live import interval

_INTERVAL = "_live_interval_{}"
_RENDER = "_live_render_{}"
#: Set by a page run that answered a click with a notice (ui.runs.submit_once's "Already queued"): the next
#: slow render keeps the page as drawn, so the answer stays on screen; the longer interval waits one run.
KEEP_ANSWER = "_live_keep_answer"


def every(key: str, base_s: float) -> float:
    """The interval the live part ``key`` refreshes at, from its last render's time."""
    iv = interval(base_s, st.session_state.get(_RENDER.format(key)))
    st.session_state[_INTERVAL.format(key)] = iv
    return iv


def live(key: str, base_s: float, active: bool) -> Callable:
    """Decorate a page's live part: while ``active``, a fragment that reruns every ``base_s`` seconds or longer.

    Its interval is set when the page runs; a render slow for that interval reruns the page once, which sets the
    longer one (a fragment's own reruns cannot change their interval), unless the page run answered a click with
    a notice (:data:`KEEP_ANSWER`), which a rerun would wipe before it is read."""
    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        @st.fragment(run_every=every(key, base_s) if active else None)
        @functools.wraps(fn)
        def part() -> None:
            t0 = time.perf_counter()
            fn()
            took = time.perf_counter() - t0
            st.session_state[_RENDER.format(key)] = took
            keep = st.session_state.pop(KEEP_ANSWER, False)
            if active and not keep and interval(base_s, took) > st.session_state.get(_INTERVAL.format(key), base_s):
                st.rerun()
        return part
    return wrap
