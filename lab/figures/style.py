"""What every figure shares: user text shown as text, units that read well, one colour per optimiser.

The builders in this package import from here so that a time, a rate or an optimiser looks the same
on every page.
"""

from __future__ import annotations

import html
import math
from typing import Any

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


def time_unit(seconds: float) -> tuple[float, str]:
    """(scale, unit) so that ``seconds * scale`` reads well: s, ms, µs or ns."""
    x = abs(seconds) if seconds and math.isfinite(seconds) else 0.0
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if x * scale >= 1.0:
            return scale, unit
    return 1e9, "ns"


def bytes_unit(nbytes: float) -> tuple[float, str]:
    """(scale, unit) so that ``nbytes * scale`` reads well: GB, MB, kB or B (powers of ten)."""
    x = abs(nbytes) if nbytes and math.isfinite(nbytes) else 0.0
    for scale, unit in ((1e-9, "GB"), (1e-6, "MB"), (1e-3, "kB")):
        if x * scale >= 1.0:
            return scale, unit
    return 1.0, "B"


def fmt_seconds(x: float) -> str:
    """A duration with three significant digits in s, ms, µs or ns; ∞ for no finite time."""
    if not math.isfinite(x):
        return "∞"
    if x == 0:
        return "0 s"
    scale, unit = time_unit(x)
    return f"{x * scale:.3g} {unit}"


def fmt_rate(x: float) -> str:
    """A bandwidth with three significant digits in TB/s down to B/s; ∞ for an unlimited one."""
    if not math.isfinite(x):
        return "∞"
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} B/s"


def fmt_bytes(x: float) -> str:
    """A size with three significant digits in GB down to B; "unlimited" for an infinite one."""
    if not math.isfinite(x):
        return "unlimited"
    scale, unit = bytes_unit(x)
    return f"{x * scale:.3g} {unit}"
