"""Plotly builders for comparisons of variants: colour = optimiser, line style = compression, a band
over the repeats, small multiples by compression when the curves are many, a fixed readable height.

Plain data in (curves with label, hover, optimizer, compression, band and repeats, as
:class:`lab.jobs.comparison.VariantCurve` has them), go.Figure out.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab.figures.style import OPTIMIZER_COLOURS, esc

OTHER_COLOURS = ["#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]
#: Each optimiser's markers, set along its line at staggered points, so two variants whose lines coincide (AdaBelief
#: and Max-AdaBelief early on) both stay visible: their markers alternate on the one line.
SYMBOLS = {"adam": "circle", "adabelief": "square", "maxadabelief": "diamond", "maxadabelief-corrected": "x"}
MARKERS_PER_LINE = 12
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
X_TITLES = {"step": "step (count)", "wall": "wall time (s), mean over repeats"}
MAX_CURVES_PER_PANEL = 6
PANEL_HEIGHT = 320  # px: a panel keeps this height whatever the number of runs


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


def band_figure(curves: list, x: str, y_title: str, title: str, y_scale: float = 1.0) -> go.Figure:
    """Mean lines with min–max bands; one panel per compression when there are more than six curves."""
    compressions = sorted(dict.fromkeys(c.compression for c in curves), key=lambda k: k != "dense")  # dense: solid
    panels = compressions if len(curves) > MAX_CURVES_PER_PANEL else ["all"]
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = make_subplots(rows=rows, cols=cols, shared_yaxes=True, horizontal_spacing=0.04, vertical_spacing=0.12,
                        subplot_titles=None if panels == ["all"] else [esc(p) for p in panels])
    others = iter(OTHER_COLOURS * 4)
    colours: dict[str, str] = {}
    dash = {comp: DASHES[i % len(DASHES)] for i, comp in enumerate(compressions)}
    shown: set[str] = set()
    for c in curves:
        colour = colours.setdefault(c.optimizer, OPTIMIZER_COLOURS.get(c.optimizer) or next(others))
        k = 0 if panels == ["all"] else panels.index(c.compression)
        r, col = k // cols + 1, k % cols + 1
        b = c.band
        if c.repeats > 1 and len(b):
            fig.add_trace(go.Scatter(x=list(b[x]) + list(b[x])[::-1],
                                     y=list(b["max"] * y_scale) + list(b["min"] * y_scale)[::-1],
                                     fill="toself", fillcolor=_rgba(colour, 0.15), line=dict(width=0),
                                     hoverinfo="skip", showlegend=False, legendgroup=esc(c.label)), row=r, col=col)
        n = len(b)
        every = max(1, n // MARKERS_PER_LINE)
        rank = list(SYMBOLS).index(c.optimizer) if c.optimizer in SYMBOLS else 0
        first = rank * every // len(SYMBOLS)  # staggered: each optimiser marks other points of a shared line
        sizes = [9 if i % every == first else 0 for i in range(n)]
        fig.add_trace(go.Scatter(
            x=b[x], y=b["mean"] * y_scale, mode="lines+markers", name=esc(c.label), legendgroup=esc(c.label),
            showlegend=c.label not in shown, line=dict(color=colour, dash=dash[c.compression], width=2),
            marker=dict(symbol=SYMBOLS.get(c.optimizer, "circle"), size=sizes, color=colour,
                        line=dict(width=1, color="white")),
            hovertemplate=f"<b>{esc(c.label)}</b><br>{esc(c.hover)}<br>{c.repeats} repeat(s)<br>"
                          f"{X_TITLES.get(x, x)}: %{{x:.4g}}<br>mean: %{{y:.4g}}<extra></extra>"), row=r, col=col)
        shown.add(c.label)
    fig.update_layout(
        title=dict(text=esc(title), x=0, xanchor="left", y=0.98, yanchor="top", font=dict(size=15)),
        height=PANEL_HEIGHT * rows + 150, margin=dict(t=60, b=120, l=60, r=10),
        legend=dict(orientation="h", x=0, xanchor="left", y=-0.18 if rows == 1 else -0.08, yanchor="top",
                    font=dict(size=11)),
        hovermode="closest")
    for k in range(len(panels)):
        r, col = k // cols + 1, k % cols + 1
        fig.update_xaxes(title_text=X_TITLES.get(x, x) if r == rows else None, row=r, col=col)
    fig.update_yaxes(title_text=y_title, row=1, col=1)
    if rows > 1:
        for r in range(2, rows + 1):
            fig.update_yaxes(title_text=y_title, row=r, col=1)
    return fig
