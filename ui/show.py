"""Showing a page's parts: the measured / modelled / emulated badge of every figure, captions, table column
configs, and ``guarded``, which shows a LabError as its message and anything unexpected as a short message,
never a traceback."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import streamlit as st

from lab.errors import LabError
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


def column_config(spec: dict) -> dict:
    """Streamlit column configs from a plain column spec (a table's columns as lab/view declares them):
    column -> {"kind": "number" | "datetime" | "select", and "label", "format", "min", "max", "step",
    "options" as the kind takes them}."""
    make = {"number": st.column_config.NumberColumn, "datetime": st.column_config.DatetimeColumn,
            "select": st.column_config.SelectboxColumn}
    names = {"min": "min_value", "max": "max_value"}
    return {col: make[c["kind"]](**{names.get(k, k): v for k, v in c.items() if k != "kind"})
            for col, c in spec.items()}


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
