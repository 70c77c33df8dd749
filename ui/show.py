"""Showing a page's parts: a page model's sections (``show``), the measured / modelled / emulated badge of every
figure, captions, table column configs, and ``guarded``, which shows a LabError as its message and anything unexpected as a short message,
never a traceback."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import pandas as pd
import streamlit as st

from lab.errors import LabError
from lab.figures import build
from lab.view.section import Section, filled
from ui import report
from ui.text import plain

log = logging.getLogger("lab.ui")

KIND_BADGES = {
    "measured": ":green-badge[:material/straighten: measured]",
    "modelled": ":blue-badge[:material/functions: modelled]",
    "emulated": ":orange-badge[:material/hourglass: emulated]",
}


def badge(kind: str) -> str:
    return KIND_BADGES[kind]


def caption(kind: str, text: str) -> None:
    """A figure caption that starts with the measured/modelled/emulated badge."""
    st.caption(f"{badge(kind)} {text}")


def column_config(columns: dict) -> dict:
    """Streamlit column configs from a plain column description (a table's columns as lab/view declares them):
    column -> {"kind": "number" | "datetime" | "select" | "text", and "label", "format", "min", "max", "step",
    "options" as the kind takes them}."""
    make = {"number": st.column_config.NumberColumn, "datetime": st.column_config.DatetimeColumn,
            "select": st.column_config.SelectboxColumn, "text": st.column_config.TextColumn}
    names = {"min": "min_value", "max": "max_value"}
    return {col: make[c["kind"]](**{names.get(k, k): v for k, v in c.items() if k != "kind"})
            for col, c in columns.items()}


@contextlib.contextmanager
def guarded(what: str = "this step") -> Iterator[None]:
    """Show a LabError as its message and any other exception as a short message, no traceback;
    either as text (a refusal quotes the names it refuses)."""
    try:
        yield
    except LabError as exc:
        st.error(plain(str(exc)), icon=":material/error:")
    except Exception as exc:  # noqa: BLE001 - the user must never see a traceback
        log.exception("unexpected error in %s", what)
        st.error(plain(f"Something went wrong in {what}: {type(exc).__name__}: {exc}"), icon=":material/error:")


def figure(section: Section):
    """The section's figure, built by its pure builder in ``lab.figures`` from its input (None when it has none)."""
    return build(section.chart, section.chart_input)


def _md(section: Section, text: str) -> str:
    """The lab's Markdown with the section's values filled in as text."""
    return filled(section, text)


def show(section: Section, where=None) -> None:
    """Draw one section of a page model in ``where`` (the page by default): header, intro, notices, figure,
    table, caption with its badge, text, metrics."""
    where = st if where is None else where
    report.keep(section)
    if section.header:
        (where.subheader if section.level == "subheader" else where.header)(_md(section, section.header))
    if section.intro:
        where.markdown(_md(section, section.intro))
    for n in section.notices:
        getattr(where, n.level)(plain(n.text), icon=n.icon)
    fig = figure(section)
    if fig is not None:
        where.plotly_chart(fig, key=f"{section.key}_fig")
    if section.table is not None:
        where.dataframe(pd.DataFrame(section.table), hide_index=True, key=f"{section.key}_table",
                        column_config=column_config(section.columns or {}), placeholder=section.missing,
                        row_height=section.row_height)
    if section.caption:
        text = _md(section, section.caption)
        where.caption(f"{badge(section.kind)} {text}" if section.kind else text)
    if section.text:
        where.markdown(_md(section, section.text))
    if section.metrics:
        for col, (label, value, *about) in zip(where.columns(len(section.metrics)), section.metrics):
            col.metric(plain(label), value, help=about[0] if about else None)


def show_all(sections) -> None:
    """Draw a page model's sections in order; a "left" section and the "right" ones after it share a row."""
    row = None
    for s in sections:
        if s.side == "left" or (s.side == "right" and row is None):
            row = st.columns(2)
        show(s, row[1 if s.side == "right" else 0] if s.side else None)
        if s.side is None:
            row = None
