"""The session: its one Scenario (from the ``?s=`` link when it carries one) and every page control's value, kept
while its page is not shown and read from the link's ``?v=``."""

from __future__ import annotations

import streamlit as st

from lab.errors import LabError
from lab.scenario.document import Scenario, default_scenario
from lab.view import state as viewstate
from ui.text import plain

SCENARIO_KEY = "scenario"
URL_PARAM = "s"
VIEW_PARAM = "v"  # the page's controls (lab.view.state), beside the scenario in a link
VIEW_SHADOW = "_view_values"  # every control's last value, kept while its page is not shown
VIEW_NOTICES = "_view_notices"


def scenario() -> Scenario:
    """The session's Scenario, created on first use (from the page link when it carries one)."""
    if SCENARIO_KEY not in st.session_state:
        sc = default_scenario()
        param = st.query_params.get(URL_PARAM)
        if param:
            try:
                sc = Scenario.from_url_param(param)
            except LabError as exc:
                st.warning("The scenario in this link could not be read, so the default is shown. "
                           + plain(str(exc)))
        st.session_state[SCENARIO_KEY] = sc
    return st.session_state[SCENARIO_KEY]


def set_scenario(sc: Scenario) -> None:
    st.session_state[SCENARIO_KEY] = sc


def route_through_app() -> None:
    """Until app.py's ``st.navigation`` has run once in the server process, Streamlit treats the
    ``pages/`` folder as an old-style multipage app: a server whose first request is a deep link
    (``/allreduce?lesson=1``) would run that file on its own, without app.py (no page titles in
    the sidebar, no wide layout). Turn that mode off and rerun, so app.py routes the request."""
    try:
        from streamlit import config
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # another Streamlit: nothing to undo
        return
    if config.get_option("global.appTest"):  # AppTest sets the old mode again before every run
        return
    if getattr(PagesManager, "uses_pages_directory", False):
        PagesManager.uses_pages_directory = False
        st.rerun()


_SCENARIO_SEEN = "_scenario_seen"


def sync_view(sc: Scenario) -> None:
    """Keep every control of every page set while its page is not shown.

    Streamlit forgets a widget's value once a run does not draw it (another page is open). The
    last value of every control of :data:`lab.view.state.VIEW` is kept in a shadow and put back
    before the page draws its widgets; a control never touched gets its default from the table.
    On a session's first run, the link's ``?v=`` fills the shadow (checked against the table)."""
    ss = st.session_state
    shadow = ss.setdefault(VIEW_SHADOW, {})
    for key in list(ss.keys()):
        if isinstance(key, str) and viewstate.linked(key) is not None:
            # Set it again as a plain value, so that Streamlit keeps it (not its first value) once
            # its widget is not drawn.
            ss[key] = shadow[key] = ss[key]
    if not ss.get("_view_link_read"):
        ss["_view_link_read"] = True
        values, notices = viewstate.decode(st.query_params.get(VIEW_PARAM))
        shadow.update(values)
        if notices:
            ss[VIEW_NOTICES] = notices
    for key, value in {**viewstate.defaults(sc), **shadow}.items():
        if key not in ss:
            ss[key] = list(value) if isinstance(value, tuple) else value
    # a control that follows the scenario (Placement's model) takes what the scenario changed to on any page
    for key, value in viewstate.followed(ss.get(_SCENARIO_SEEN, {}), sc).items():
        ss[key] = shadow[key] = value
    ss[_SCENARIO_SEEN] = viewstate.from_scenario(sc)


def remember(key: str, value) -> None:
    """Keep the value a control's widget has in this run (a widget inside a fragment: the page's full runs,
    which keep every control, do not see a fragment's runs)."""
    st.session_state.setdefault(VIEW_SHADOW, {})[key] = value


def view_value(key: str):
    """The current value of control ``key`` (before or after its widget is drawn)."""
    return st.session_state.get(key, st.session_state.get(VIEW_SHADOW, {}).get(key))


def set_view(key: str, value, notice: str | None = None) -> None:
    """Set control ``key`` before its widget is drawn in this run (a page re-deriving a choice that
    no longer fits, a lesson opening its view), with an optional one-line notice, shown as text (it
    names the old choice, which may come from a link)."""
    st.session_state[key] = list(value) if isinstance(value, tuple) else value
    st.session_state.setdefault(VIEW_SHADOW, {})[key] = value
    if notice:
        st.info(plain(notice), icon=":material/info:")
