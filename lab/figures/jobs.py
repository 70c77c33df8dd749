"""Plotly builders for the Jobs page: plain data in, go.Figure out (no store, no streamlit).

* :func:`timeline_figure` -- which job held which resource when (a Gantt chart): the real jobs on
  this machine's cores (measured) or a simulated schedule on a topology's groups (modelled).
* :func:`events_figure` -- each job's lifecycle events on one time axis.
* :func:`heartbeat_figure` -- seconds since each worker's step last moved, against the timeout.

User-supplied names (job names) are HTML-escaped before plotly sees them: plotly renders a few
HTML tags in its text.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import plotly.graph_objects as go
from plotly.colors import qualitative

from lab.figures.style import esc, esc_lines

# 10 distinct colours, then 24 more, then the same with a hatch: two jobs never look alike below 68.
PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
           "#bab0ac"] + list(qualitative.Dark24)
PATTERNS = ["", "/"]


def job_style(i: int) -> tuple[str, str]:
    """The colour and fill pattern of the i-th job of a figure."""
    return PALETTE[i % len(PALETTE)], PATTERNS[(i // len(PALETTE)) % len(PATTERNS)]


EVENT_COLOURS = {"submitted": "#bab0ac", "parsed": "#9d755d", "scheduled": "#72b7b2", "started": "#4c78a8",
                 "data": "#54a24b", "running": "#2ca02c", "fault": "#e45756", "alarm": "#d62728",
                 "restart": "#f58518", "stop": "#b279a2", "ended": "#1f1f1f", "released": "#7f7f7f"}
EVENT_SYMBOLS = {"fault": "x", "alarm": "triangle-up", "restart": "star", "stop": "square"}
LEGEND_ROW = 22  # pixels


def legend_rows(names: Sequence[str], width: int = 320) -> int:
    """How many rows a horizontal legend of ``names`` takes at most in a chart ``width`` pixels wide (a half
    column at 1024 pixels): the room a figure adds below its plot, so the plot keeps its height."""
    if len(names) < 2:
        return 0  # one trace: plotly shows no legend
    per_row = max(1, width // (7 * max(len(n) for n in names) + 40))
    return -(-len(names) // per_row)


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, height: int, legend: int = 0) -> go.Figure:
    # The title sits above the plot and pushes the top margin as far as its lines need (a title anchored to the
    # top of the figure is cut off there once it wraps); the legend sits below the x axis's title and pushes
    # the bottom margin, so neither ever covers an axis, its title or the other.
    fig.update_layout(title=dict(text=esc_lines(title), x=0, xanchor="left", xref="container", y=1, yanchor="bottom",
                                 yref="paper", pad=dict(b=12, l=10), automargin=True),
                      height=height + 40 + LEGEND_ROW * legend, margin=dict(l=10, r=10, t=40, b=50),
                      legend=dict(orientation="h", x=0, xanchor="left", y=0, yanchor="bottom", yref="container"),
                      barmode="overlay")
    fig.update_xaxes(title=x_title)
    fig.update_yaxes(title=y_title)
    return fig


def timeline_figure(rows: Sequence[Mapping], *, title: str = "Which job held what, when",
                    x_title: str = "time (s)", resources: Sequence[str] | None = None) -> go.Figure:
    """Gantt chart. ``rows``: dicts with job, resource, start, end (seconds) and optional label.
    ``resources`` fixes the order (and shows idle ones); default: order of appearance."""
    order = list(resources) if resources is not None else list(dict.fromkeys(r["resource"] for r in rows))
    jobs = list(dict.fromkeys(r["job"] for r in rows))
    fig = go.Figure()
    labels = []
    for i, job in enumerate(jobs):
        mine = [r for r in rows if r["job"] == job]
        labels.append(str(mine[0].get("label", job)))
        label = esc(labels[-1])
        fig.add_trace(go.Bar(
            y=[esc(r["resource"]) for r in mine], x=[max(0.0, r["end"] - r["start"]) for r in mine],
            base=[r["start"] for r in mine], orientation="h", name=label,
            marker=dict(color=job_style(i)[0], pattern_shape=job_style(i)[1]),
            customdata=[[r["start"], r["end"]] for r in mine],
            hovertemplate=f"{label}<br>%{{y}}<br>%{{customdata[0]:.2f}} s to %{{customdata[1]:.2f}} s<extra></extra>"))
    fig = _layout(fig, title, x_title, "resource", max(260, 60 + 22 * len(order)),
                  legend_rows(labels))
    fig.update_yaxes(categoryorder="array", categoryarray=[esc(r) for r in order][::-1], type="category")
    if not rows:
        fig.add_annotation(text="no jobs yet", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def events_figure(events: Iterable[Mapping], labels: Mapping[str, str] | None = None, t0: float | None = None,
                  title: str = "Lifecycle of each job") -> go.Figure:
    """Events (dicts with run_id, t in Unix seconds, event, attempt, step) as markers on one line per
    job, x = seconds since ``t0`` (default: the earliest event)."""
    events = list(events)
    labels = labels or {}
    t0 = min((e["t"] for e in events), default=0.0) if t0 is None else t0
    runs = list(dict.fromkeys(e["run_id"] for e in events))
    fig = go.Figure()
    for rid in runs:
        ev = sorted((e for e in events if e["run_id"] == rid), key=lambda e: e["t"])
        fig.add_trace(go.Scatter(x=[e["t"] - t0 for e in ev], y=[esc(labels.get(rid, rid))] * len(ev), mode="lines",
                                 line=dict(color="#d0d0d0", width=6), showlegend=False, hoverinfo="skip"))
    for event, colour in EVENT_COLOURS.items():
        ev = [e for e in events if e["event"] == event]
        if not ev:
            continue
        text = [f"{event} (attempt {e.get('attempt', 0)}"
                + (f", step {int(e['step'])}" if e.get("step") is not None and e.get("step") == e.get("step") else "")
                + ")" for e in ev]
        fig.add_trace(go.Scatter(
            x=[e["t"] - t0 for e in ev], y=[esc(labels.get(e["run_id"], e["run_id"])) for e in ev], mode="markers",
            name=event, marker=dict(color=colour, size=12 if event in EVENT_SYMBOLS else 9,
                                    symbol=EVENT_SYMBOLS.get(event, "circle")),
            text=text, hovertemplate="%{y}<br>%{text}<br>%{x:.2f} s<extra></extra>"))
    shown = [s for s in EVENT_COLOURS if any(e["event"] == s for e in events)]
    return _layout(fig, title, "time since the first event shown (s)", "job", max(240, 80 + 40 * len(runs)),
                   legend_rows(shown))


def heartbeat_figure(workers: Sequence[int], ages: Sequence[float], phases: Sequence[str], timeout: float,
                     title: str = "Heartbeats: time since each worker's step last moved") -> go.Figure:
    """One bar per worker (seconds since its step last changed), coloured by phase, with the
    heartbeat timeout as a line: a busy worker past the line is declared hung."""
    colours = {"comm": "#72b7b2", "busy": "#4c78a8"}
    fig = go.Figure(go.Bar(
        x=[f"worker {w}" for w in workers], y=list(ages), marker_color=[colours.get(p, "#bab0ac") for p in phases],
        text=[p or "?" for p in phases], textposition="outside",
        hovertemplate="%{x}: %{y:.2f} s since progress (%{text})<extra></extra>"))
    fig.add_hline(y=timeout, line=dict(color="#d62728", dash="dash"),
                  annotation_text=f"timeout {timeout:g} s", annotation_position="top left")
    top = max([timeout * 1.2, *[a * 1.1 for a in ages]] or [1.0])
    fig = _layout(fig, title, "worker (rank)", "seconds since its step last moved (s)", 280)
    fig.update_yaxes(range=[0, top])
    return fig


__all__ = ["timeline_figure", "events_figure", "heartbeat_figure", "legend_rows", "esc"]
