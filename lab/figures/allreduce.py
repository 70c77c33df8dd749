"""Plotly builders for the All-reduce page: plain data in, go.Figure out (no streamlit)."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab.modelled.collectives import (
    AlphaBetaFit,
    CollectiveSchedule,
    Timeline,
    contribution_letter,
)
from lab.figures.fidelity import add_profile_models
from lab.figures.style import esc

ALGO_COLOURS = {"ring": "#1f6feb", "ring (lab order)": "#0b3d91", "host": "#cf222e", "tree": "#2da44e",
                "hierarchical": "#8250df", "gloo": "#d29922"}
KIND_COLOURS = {"compute": "#8c959f", "communicate": "#1f6feb", "idle": "#f6c343"}
PHASE_COLOURS = {"reduce": "#cf222e", "copy": "#1f6feb"}


def _node_positions(s: CollectiveSchedule) -> dict[int, tuple[float, float]]:
    """Participants on a circle in ring order (first at the top, clockwise); an outside host in the middle."""
    pos = {}
    m = len(s.order)
    if s.algorithm == "tree":  # heap layout: root on top, level by level
        depth = max(1, (m).bit_length() - 1)
        for h, i in enumerate(s.order):
            d = (h + 1).bit_length() - 1
            j = h - (2 ** d - 1)
            pos[i] = (-1.1 + 2.2 * (j + 0.5) / 2 ** d, 1.0 - 2.0 * d / depth)
        return pos
    for k, i in enumerate(s.order):
        a = math.pi / 2 - 2 * math.pi * k / m
        pos[i] = (math.cos(a), math.sin(a))
    for i in range(s.n, len(s.nodes)):
        pos[i] = (0.0, 0.0)
    return pos


def _chunk_names(s: CollectiveSchedule) -> list[str]:
    return ["whole buffer"] if len(s.chunk_bytes) == 1 else [f"chunk {c}" for c in range(len(s.chunk_bytes))]


def _frame_data(s: CollectiveSchedule, step: int, pos: dict[int, tuple[float, float]]) -> list[go.BaseTraceType]:
    """Traces 1..3 for step ``step`` (0 = before the first step): arrows, arrow labels, chunk grid."""
    ax, ay, sizes, mx, my, mtext, hover = [], [], [], [], [], [], []
    if step > 0:
        st = s.steps[step - 1]
        prev = s.state_at(step - 1)
        merged: dict[tuple[int, int], list] = {}
        for t in st.transfers:
            merged.setdefault((t.src, t.dst), []).append(t)
        for (a, b), ts in merged.items():
            (x0, y0), (x1, y1) = pos[a], pos[b]
            length = math.hypot(x1 - x0, y1 - y0) or 1.0
            px, py = (y1 - y0) / length, -(x1 - x0) / length  # unit normal, to the right of the arrow
            # stop short of the nodes so the head shows; shift right so two-way arrows stay apart
            sx, sy = x0 + 0.12 * (x1 - x0) + 0.035 * px, y0 + 0.12 * (y1 - y0) + 0.035 * py
            ex, ey = x0 + 0.85 * (x1 - x0) + 0.035 * px, y0 + 0.85 * (y1 - y0) + 0.035 * py
            ax += [sx, ex, None]
            ay += [sy, ey, None]
            sizes += [0, 14, 0]
            what = ", ".join(s.label(prev[a][t.chunk], t.chunk) for t in ts) if len(ts) <= 2 else \
                f"{len(ts)} chunks"
            mx.append(sx + 0.4 * (ex - sx) + 0.11 * px)
            my.append(sy + 0.4 * (ey - sy) + 0.11 * py)
            mtext.append(what)
            hover.append(f"{esc(s.nodes[a])} → {esc(s.nodes[b])}: {what} ({ts[0].op}), "
                         f"{sum(t.nbytes for t in ts):,} B")
    state = s.state_at(step)
    full = max(1, s.n)
    z = [[bin(mask).count("1") / full for mask in row] for row in state]
    text = [[s.label(mask, c) for c, mask in enumerate(row)] for row in state]
    arrows = go.Scatter(x=ax, y=ay, mode="lines+markers", line=dict(color="#57606a", width=2),
                        marker=dict(symbol="arrow", angleref="previous", size=sizes, color="#57606a"),
                        hoverinfo="skip", showlegend=False)
    labels = go.Scatter(x=mx, y=my, mode="text", text=mtext, hovertext=hover, hoverinfo="text",
                        textfont=dict(size=11, color="#cf222e" if step and s.steps[step - 1].transfers[0].op == "reduce"
                                      else "#1f6feb"), showlegend=False)
    grid = go.Heatmap(z=z, x=_chunk_names(s), y=[esc(n) for n in s.nodes], text=text, texttemplate="%{text}",
                      zmin=0, zmax=1, colorscale="Blues", showscale=False, xgap=2, ygap=2,
                      hovertemplate="%{y}, %{x}: %{text}<extra></extra>")
    return [arrows, labels, grid]


def _step_title(s: CollectiveSchedule, step: int) -> str:
    if step == 0:
        return "before the first step: every device holds only its own contribution"
    st = s.steps[step - 1]
    return f"step {step} of {len(s.steps)}: {st.phase} ({'add' if st.transfers[0].op == 'reduce' else 'copy'})"


def step_figure(s: CollectiveSchedule, active: int = 0, title: str = "") -> go.Figure:
    """One step of the step-through: left, who sends what to whom; right, every device's chunks. The page's one
    step control (and its play) picks ``active`` (0 = the start; clamped to the schedule)."""
    if s.initial is None:
        raise ValueError("the step-through needs a schedule built with with_state=True")
    active = max(0, min(active, len(s.steps)))
    pos = _node_positions(s)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.42, 0.58], horizontal_spacing=0.06,
                        subplot_titles=("who sends what", "what every device holds (letter = device, number = chunk)"))
    xs = [pos[i][0] for i in range(len(s.nodes))]
    ys = [pos[i][1] for i in range(len(s.nodes))]
    node_text = [f"{esc(nm)}<br>({contribution_letter(i)})" if i < s.n else esc(nm) for i, nm in enumerate(s.nodes)]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers+text", text=node_text, textposition="middle center",
                             marker=dict(size=44, color=["#ddf4ff" if i < s.n else "#ffebe9" for i in range(len(xs))],
                                         line=dict(color="#0969da", width=1.5)),
                             hovertext=[esc(n) for n in s.nodes], hoverinfo="text", showlegend=False), row=1, col=1)
    for tr in _frame_data(s, active, pos):
        fig.add_trace(tr, row=1, col=1 if not isinstance(tr, go.Heatmap) else 2)
    fig.update_layout(title=f"{esc(title)}<br><sup>{_step_title(s, active)}</sup>",
                      height=440 + 14 * max(0, len(s.nodes) - 6), margin=dict(t=90, b=20, l=10, r=10))
    fig.update_xaxes(visible=False, range=[-1.35, 1.35], row=1, col=1)
    fig.update_yaxes(visible=False, range=[-1.3, 1.3], scaleanchor="x", row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=2)
    return fig


def _log_lines(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], xtitle: str, ytitle: str,
               title: str, log_x: bool = True) -> go.Figure:
    fig = go.Figure()
    for name, (x, y) in series.items():
        base = name.split(" [")[0]
        fig.add_trace(go.Scatter(x=list(x), y=list(y), mode="lines+markers", name=esc(name),
                                 line=dict(color=ALGO_COLOURS.get(base), dash="dot" if "lab order" in name else None)))
    fig.update_layout(title=esc(title), xaxis_title=xtitle, yaxis_title=ytitle, height=420,
                      legend=dict(orientation="h", y=-0.25), margin=dict(t=60))
    fig.update_xaxes(type="log" if log_x else "linear", exponentformat="SI")
    fig.update_yaxes(type="log", exponentformat="SI")
    return fig


def time_vs_size_figure(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], title: str) -> go.Figure:
    """Modelled all-reduce time (s) against buffer size (bytes), one line per algorithm."""
    return _log_lines(series, "buffer size per device S (bytes)", "modelled time (s)", title)


def time_vs_n_figure(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], title: str,
                     log_x: bool = False) -> go.Figure:
    """Modelled all-reduce time (s) against the number of devices."""
    return _log_lines(series, "devices N", "modelled time (s)", title, log_x=log_x)


def trigger_figure(timelines: Mapping[str, Timeline], scale: float = 1e3, unit: str = "ms") -> go.Figure:
    """Gantt-like bars per device for each trigger mode (rows): compute, communicate, idle."""
    modes = list(timelines)
    fig = make_subplots(rows=len(modes), cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[f"{m}: iteration ends at {timelines[m].makespan * scale:.3g} {unit}"
                                        for m in modes])
    shown = set()
    for r, m in enumerate(modes, start=1):
        tl = timelines[m]
        for kind in ("compute", "communicate", "idle"):
            segs = [g for g in tl.segments if g.kind == kind]
            if not segs:
                continue
            fig.add_trace(go.Bar(orientation="h", y=[esc(g.node) for g in segs],
                                 x=[(g.end - g.start) * scale for g in segs],
                                 base=[g.start * scale for g in segs], name=kind, marker_color=KIND_COLOURS[kind],
                                 legendgroup=kind, showlegend=kind not in shown,
                                 customdata=[g.end * scale for g in segs],
                                 hovertemplate=(f"%{{y}} {kind}: from %{{base:.4g}} to %{{customdata:.4g}} {unit} "
                                                f"(%{{x:.4g}} {unit} long)<extra></extra>")),
                          row=r, col=1)
            shown.add(kind)
        fig.update_yaxes(autorange="reversed", row=r, col=1)
    nodes = len(timelines[modes[0]].end)
    fig.update_layout(barmode="overlay", height=160 + len(modes) * (40 + 26 * nodes),
                      legend=dict(orientation="h", y=1.0, yanchor="bottom", x=1.0, xanchor="right"),
                      margin=dict(t=70))
    fig.update_xaxes(title_text=f"time since the iteration started ({unit})", row=len(modes), col=1)
    return fig


def measured_vs_model_figure(rows: Sequence[dict], fits: Mapping[str, AlphaBetaFit | None], title: str) -> go.Figure:
    """Measured median times (markers) and the fitted alpha-beta model (lines) per implementation; an
    implementation whose fit is None (one that cannot be right) has its markers and no line."""
    fig = go.Figure()
    for impl, fit in fits.items():
        colour = ALGO_COLOURS["ring" if impl == "ring" else "gloo"]
        sel = [r for r in rows if r["impl"] == impl]
        fig.add_trace(go.Scatter(
            x=[r["size"] for r in sel], y=[r["time"] for r in sel], mode="markers", name=f"{impl}: measured",
            marker=dict(color=colour, size=9),
            error_y=dict(type="data", symmetric=False, array=[r["time_max"] - r["time"] for r in sel],
                         arrayminus=[r["time"] - r["time_min"] for r in sel], thickness=1)))
        if fit is not None:
            fig.add_trace(go.Scatter(x=list(fit.sizes), y=list(fit.predicted), mode="lines", name=f"{impl}: model "
                                     f"(α={fit.alpha * 1e6:.3g} µs, β={fit.beta * 1e9:.3g} ns/B)",
                                     line=dict(color=colour, dash="dash")))
    fig.update_layout(title=esc(title), xaxis_title="buffer size per process S (bytes)", yaxis_title="time (s)",
                      height=420, legend=dict(orientation="h", y=-0.25), margin=dict(t=60))
    fig.update_xaxes(type="log", exponentformat="SI")
    fig.update_yaxes(type="log", exponentformat="SI")
    return fig


def measured_figure(rows: Sequence[dict], fits: Mapping[str, AlphaBetaFit | None], title: str,
                    profile: Mapping[str, object] | None = None, created: str = "") -> go.Figure:
    """:func:`measured_vs_model_figure`, with the saved machine profile's alpha-beta model (``profile``: impl ->
    CommFit, calibrated at ``created``) dotted beside it over the measured sizes."""
    fig = measured_vs_model_figure(rows, fits, title)
    if profile:
        add_profile_models(fig, profile, sorted({r["size"] for r in rows}), rows[0]["procs"], created)
    return fig
