"""The report of the view: every section ``ui.show`` drew in this run is kept, and the sidebar's button turns them
into one HTML file (:mod:`lab.report`) when it is clicked."""

from __future__ import annotations

from urllib.parse import urlencode

import streamlit as st

from lab.report import render
from lab.report.about import about
from lab.report.link import safe_link
from lab.view.section import Section
from lab.view.state import VIEW

SHOWN = "_report_sections"


def start() -> None:
    """A page run begins: no section shown yet."""
    st.session_state[SHOWN] = {}


def keep(section: Section) -> None:
    """``section`` was drawn (a fragment's rerun replaces its own sections)."""
    st.session_state.setdefault(SHOWN, {})[section.key] = section


def shown() -> list[Section]:
    return list(st.session_state.get(SHOWN, {}).values())


def page_link(params: dict[str, str]) -> str:
    """The address that reopens this view: this page's address with the view's parameters, or "" when the
    address the browser reports is not an http or https one (the report then leaves the link out)."""
    base = str(st.context.url or "").split("?", 1)[0]
    return safe_link(f"{base}?{urlencode(params)}") or ""


def report_button(title: str, page: str) -> None:
    """The sidebar's "Download this view as a report" for the page file ``page`` titled ``title``."""
    kept = st.session_state.get(SHOWN)
    if not kept:
        return
    from ui.link import view_link_params
    from ui.session import scenario

    sc = scenario()
    link = page_link(view_link_params(sc))
    values = {k: st.session_state[k] for k in VIEW if k in st.session_state}

    def build() -> str:  # on the click, in Streamlit's own thread: figures are drawn only for a download
        # the sections as they are then: a fragment that reran since (a run's live view) has replaced its own
        return render(about(title, page, link, values, sc), list(kept.values()))

    st.sidebar.download_button("Download this view as a report", data=build, file_name=f"{page}-report.html",
                               mime="text/html", key="ui_report", icon=":material/description:",
                               help="One HTML file: the figures, their badges, the settings, the machine and the "
                                    "link that reopens this view; it opens offline and prints to PDF")
