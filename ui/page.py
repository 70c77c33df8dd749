"""The frame every page shows: the sidebar with the scenario, the link that reproduces the whole view, the lesson
switch, and the active lesson's panel."""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

from lab.scenario.document import Scenario
from ui import report
from ui.identity import owner, write_identity_cookie
from ui.lessons import class_lesson, lesson_panel, lesson_toggle, open_lesson
from ui.link import view_link_params
from ui.session import URL_PARAM, VIEW_NOTICES, VIEW_PARAM, route_through_app, scenario, sync_view
from ui.text import plain


_SESSION_OPENED = "_session_opened"
_SAVED = "_view_saved"
_HAND_OUT_SEEN = "_hand_out_seen"
#: How often a seated student's page checks whether the teacher handed out or released a lesson (one read of
#: the class row: thirty students make six reads a second).
HAND_OUT_CHECK_S = 5.0


def _restore_saved_view() -> None:
    """A session's first run whose address carries no scenario and no view (a reload of a page whose link was
    not put in the address, a new tab, a page opened by its address): this student's last view, from the run
    store, as if its link had been opened. A link's own view always wins."""
    ss = st.session_state
    if ss.get(_SESSION_OPENED):
        return
    ss[_SESSION_OPENED] = True
    if URL_PARAM in st.query_params or VIEW_PARAM in st.query_params:
        return
    from lab.store.runs import run_store

    saved = run_store().class_book.saved_view(owner(), "*")
    if saved:
        for k, v in saved.items():
            if isinstance(k, str) and isinstance(v, str) and k not in st.query_params:
                st.query_params[k] = v


def _save_view(sc: Scenario) -> None:
    """Keep this student's view in the run store when it changed (the last run's widgets and scenario)."""
    params = view_link_params(sc)
    if st.session_state.get(_SAVED) != params:
        from lab.store.runs import run_store

        run_store().class_book.save_view(owner(), "*", params)
        st.session_state[_SAVED] = params


def _open_class_lesson() -> None:
    """A lesson the teacher handed out opens once per hand-out for each student, on its page with its scenario and
    view; a reload, a new tab or an address after that keeps the student's own view of it."""
    lesson = class_lesson()
    if lesson is None:
        return
    from lab.store.runs import run_store

    if run_store().class_book.open_hand_out(owner()):
        st.switch_page(lesson.page, query_params=open_lesson(lesson))


def _watch_hand_outs() -> None:
    """A seated student's open page takes a lesson handed out or released without a click: a check of the class
    every few seconds, which reruns the page when the hand-out changed."""
    from lab.store.runs import run_store

    if run_store().class_book.seat(owner()) is None:
        return

    def handed() -> tuple | None:
        state = run_store().class_book.class_state()
        return None if state is None else (state.lesson, state.handed)

    st.session_state[_HAND_OUT_SEEN] = handed()  # what this run of the page shows

    @st.fragment(run_every=HAND_OUT_CHECK_S)
    def check() -> None:
        now = handed()
        if now != st.session_state.get(_HAND_OUT_SEEN):
            st.session_state[_HAND_OUT_SEEN] = now
            st.rerun(scope="app")

    check()


def scenario_sidebar() -> Scenario:
    """The sidebar every page shows: the scenario's name and topology, and a link that reproduces the
    whole view (this page, the scenario, every control)."""
    route_through_app()
    report.start()
    write_identity_cookie()
    _restore_saved_view()
    _open_class_lesson()
    notice = st.container()  # always drawn, so the page's own elements keep their places when it is empty
    if "teacher" in st.query_params:
        # A token in an address stays in the browser's history and the server's logs: the teacher
        # signs in on the Jobs page instead, and a link's token is dropped unread.
        del st.query_params["teacher"]
        notice.warning("A teacher's token in a link is not accepted (it would stay in the browser's history): "
                       "sign in on the Jobs page instead.", icon=":material/key:")
    sc = scenario()
    sync_view(sc)
    _save_view(sc)
    with st.sidebar:
        st.markdown(f"**Scenario:** {plain(sc.name)}  \n**Topology:** {plain(sc.topology.name)} "
                    f"({len(sc.topology.devices)} devices)")
        if st.button("Put this view in the page link", key="ui_link",
                     help="The address bar then opens this page with this scenario and these controls"):
            st.query_params.from_dict(view_link_params(sc))
        lesson_toggle()
        _watch_hand_outs()
    for notice in st.session_state.pop(VIEW_NOTICES, []):
        st.info("From the link: " + plain(notice) + ".", icon=":material/info:")
    lesson_panel(Path(sys._getframe(1).f_code.co_filename).stem)  # the calling page's file
    return sc
