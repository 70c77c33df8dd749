"""What a page shows, as data: a page model is a list of :class:`Section` objects that a page draws in order
with ``ui.show``. A section holds a header, the lab's own Markdown, a figure (the name of a pure builder in
``lab.figures`` and its input), a table, a caption with its measured / modelled / emulated badge, and notices.

User text never goes into a section's Markdown directly: a Markdown field may hold ``{name}`` fields, filled from
``values`` after each value is made safe text by the one function that does that (``ui.plain``); a notice is
always shown as text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from lab.scenario.text import plain

KINDS = ("measured", "modelled", "emulated")
LEVELS = ("info", "warning", "error", "success")


@dataclass(frozen=True)
class Notice:
    """A message beside a section, shown as text (it may quote a user's names)."""

    text: str
    level: str = "info"
    icon: str | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"a notice's level is one of {LEVELS}, not {self.level!r}")


@dataclass(frozen=True)
class Section:
    """One part of a page, drawn in this order: header, intro, notices, figure, table, caption, text, metrics.

    ``chart`` names a builder as ``"module.function"`` of ``lab.figures`` (``chart_input`` its keyword arguments);
    ``table`` is a list of rows with ``columns`` as :func:`ui.column_config` takes them; ``metrics`` is a list of
    (label, value) pairs, or (label, value, help) triples; ``kind`` is what the figure and table are (measured,
    modelled or emulated)."""

    key: str
    header: str | None = None
    level: str = "header"  # or "subheader"
    intro: str | None = None
    chart: str | None = None
    chart_input: Mapping[str, Any] = field(default_factory=dict)
    table: list[dict] | None = None
    columns: Mapping[str, Mapping[str, Any]] | None = None
    kind: str | None = None
    caption: str | None = None
    text: str | None = None
    metrics: tuple[tuple[str, ...], ...] = ()
    notices: tuple[Notice, ...] = ()
    values: Mapping[str, Any] = field(default_factory=dict)
    side: str | None = None  # "left" or "right": beside the next or the previous section, in two columns
    missing: str | None = None  # what an empty cell of ``table`` shows (None: Streamlit's own "None")
    # pixels per row of ``table``; taller than 64 wraps a long text cell onto more lines (None: one line a row)
    row_height: int | None = None

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"a section's kind is one of {KINDS}, not {self.kind!r}")
        if self.caption is not None and self.kind is None and self.chart:
            raise ValueError(f"section {self.key!r}: a figure's caption says what it is (measured, modelled or "
                             "emulated)")
        if self.side not in (None, "left", "right"):
            raise ValueError(f"a section's side is 'left' or 'right', not {self.side!r}")
        module, _, fn = (self.chart or "x.x").partition(".")
        if not module.isidentifier() or not fn.isidentifier():
            raise ValueError(f"a figure builder is named 'module.function' of lab.figures, not {self.chart!r}")


def filled(section: Section, text: str) -> str:
    """The lab's Markdown ``text`` of ``section`` with its ``{name}`` fields filled with its values as text."""
    return text.format(**{k: plain(v) for k, v in section.values.items()}) if section.values else text


def row_widths(row) -> dict[str, int]:
    """A form row's control keys with their widths: an item is a key (width 1) or a ``(key, width)`` pair."""
    return dict(item if isinstance(item, tuple) else (item, 1) for item in row)


def form_keys(rows) -> list[str]:
    """Every control key of a form's rows, in order."""
    return [k for row in rows for k in row_widths(row)]


__all__ = ["KINDS", "LEVELS", "Notice", "Section", "filled", "row_widths", "form_keys"]
