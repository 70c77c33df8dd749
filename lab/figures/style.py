"""What every figure shares: user text shown as text, units that read well, one colour per optimiser.

The builders in this package import from here so that a time, a rate or an optimiser looks the same
on every page.
"""

from __future__ import annotations

import html
from typing import Any

# Every figure's units, the same as the sentences beside it (lab.scenario.units).
from lab.scenario.units import bytes_unit, fmt_bytes, fmt_rate, fmt_seconds, time_unit  # noqa: F401

#: One colour per optimiser key (lab.scenario.names.OPTIMIZERS), the same on every figure.
OPTIMIZER_COLOURS = {"adam": "#d62728", "adabelief": "#1f77b4", "maxadabelief": "#2ca02c",
                     "maxadabelief-corrected": "#9467bd"}


def esc(text: Any) -> str:
    """User text (device, run, job, topology names, and any title or label that may quote them) as
    plotly shows it: plotly reads a subset of HTML (links, bold, line breaks) in ``text``,
    ``hovertext``, hover templates, legend names, titles, annotations and tick labels, and a
    categorical axis's tick labels are the data values themselves. ``<``, ``>`` and ``&`` escaped
    read as themselves in every one of those places, and no tag survives."""
    return html.escape(str(text), quote=False)


def esc_lines(text: Any, width: int = 40) -> str:
    """:func:`esc` of ``text`` broken into lines of at most about ``width`` characters at spaces (plotly draws a
    title on one line and cuts what does not fit: a chart in a narrow column on a projector)."""
    lines, line = [], ""
    for word in str(text).split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "<br>".join(esc(x) for x in lines)
