"""The link that reproduces a view: this page's scenario, every control and the lesson (the sidebar's button, a
student's saved view, the report's address)."""

from __future__ import annotations

import streamlit as st

from lab.scenario.document import Scenario
from lab.view import state as viewstate
from lab.view.lessons import ticks_param
from ui.lessons import LESSON_ACTIVE, LESSON_ID_PARAM, LESSON_PARAM, LESSON_TICKS, LESSON_TICKS_PARAM, lesson_mode
from ui.session import URL_PARAM, VIEW_PARAM, VIEW_SHADOW


def view_link_params(sc: Scenario) -> dict[str, str]:
    """The query parameters that reproduce this view: the scenario, every control, lesson mode."""
    shadow = dict(st.session_state.get(VIEW_SHADOW, {}))
    for key in list(st.session_state.keys()):
        if isinstance(key, str) and viewstate.linked(key) is not None:
            shadow[key] = st.session_state[key]
    params = {URL_PARAM: sc.to_url_param(), VIEW_PARAM: viewstate.encode(shadow, sc)}
    if lesson_mode():
        params[LESSON_PARAM] = "1"
    if st.session_state.get(LESSON_ACTIVE):
        params[LESSON_ID_PARAM] = st.session_state[LESSON_ACTIVE]
        ticks = st.session_state.get(LESSON_TICKS, {}).get(params[LESSON_ID_PARAM])
        if ticks:
            params[LESSON_TICKS_PARAM] = ticks_param(ticks)
    return params
