"""Plotly builders for prediction beside measurement (Fidelity page, Training and Compare pages).

Plain data in (lists of dicts, seconds inside), go.Figure out; milliseconds on the axes.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab.figures.style import esc
from lab.machine.predict import PART_LABELS

PART_COLOURS = {"compute": "#4c78a8", "compress": "#54a24b", "comm": "#f58518", "idle": "#bab0ac",
                "step": "#333333"}
GROUP_COLOURS = {"dense": "#4c78a8", "compressed": "#54a24b", "emulated": "#e45756", "emulated, compressed": "#b279a2"}
MODEL_SYMBOLS = {"mlp": "circle", "cnn": "square", "resnet": "diamond", "transformer": "triangle-up"}


def _ms(x: float) -> float:
    return x * 1e3 if x is not None and math.isfinite(x) else math.nan


def _range(values: Sequence[float]) -> tuple[float, float]:
    v = [x for x in values if x and math.isfinite(x) and x > 0]
    if not v:
        return 0.01, 100.0
    return min(v) / 1.6, max(v) * 1.6


def _identity_band(fig: go.Figure, lo: float, hi: float, band: float, row=None, col=None, legend=True) -> None:
    kw = {} if row is None else {"row": row, "col": col}
    xs = [lo, hi]
    fig.add_trace(go.Scatter(x=xs + xs[::-1], y=[lo * (1 + band), hi * (1 + band), hi * (1 - band), lo * (1 - band)],
                             fill="toself", fillcolor="rgba(120,120,120,0.12)", line=dict(width=0), hoverinfo="skip",
                             name=f"within ±{band * 100:.0f}%", showlegend=legend), **kw)
    fig.add_trace(go.Scatter(x=xs, y=xs, mode="lines", line=dict(color="#555", dash="dash"), name="y = x",
                             hoverinfo="skip", showlegend=legend), **kw)


def group_of(row: Mapping) -> str:
    comp = bool(row.get("compressed"))
    emu = bool(row.get("emulated"))
    if emu and comp:
        return "emulated, compressed"
    return "emulated" if emu else ("compressed" if comp else "dense")


def step_scatter(rows: Sequence[Mapping], band: float = 0.15, title: str | None = None) -> go.Figure:
    """Predicted against measured step time per run (log-log), the y = x line and a ±band region.

    ``rows``: {"name", "predicted" (s), "measured" (s), "model", "workers", "compressed", "emulated"}."""
    fig = go.Figure()
    vals = [_ms(r["predicted"]) for r in rows] + [_ms(r["measured"]) for r in rows]
    lo, hi = _range(vals)
    _identity_band(fig, lo, hi, band)
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(group_of(r), []).append(r)
    for g, rs in groups.items():
        fig.add_trace(go.Scatter(
            x=[_ms(r["measured"]) for r in rs], y=[_ms(r["predicted"]) for r in rs], mode="markers", name=g,
            marker=dict(size=11, color=GROUP_COLOURS.get(g, "#888"), line=dict(width=1, color="white"),
                        symbol=[MODEL_SYMBOLS.get(str(r.get("model")), "circle") for r in rs]),
            text=[esc(r["name"]) for r in rs],
            customdata=[[r.get("workers"), (r["predicted"] / r["measured"] - 1) * 100 if r["measured"] else math.nan]
                        for r in rs],
            hovertemplate="%{text}<br>measured %{x:.2f} ms<br>predicted %{y:.2f} ms<br>workers %{customdata[0]}"
                          "<br>error %{customdata[1]:+.0f}%<extra></extra>"))
    fig.update_xaxes(type="log", title="measured step time (ms, mean over steps)", range=[math.log10(lo), math.log10(hi)])
    fig.update_yaxes(type="log", title="predicted step time (ms, cost model)", range=[math.log10(lo), math.log10(hi)],
                     scaleanchor="x")
    fig.update_layout(title=esc(title or "Step time: predicted against measured"), height=460,
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.2))
    return fig


def parts_scatter(rows: Sequence[Mapping], parts: Sequence[str] = ("compute", "compress", "comm", "idle"),
                  band: float = 0.15) -> go.Figure:
    """One predicted-against-measured panel per part (ms, linear axes from 0).

    ``rows``: {"name", "parts_predicted": {part: s}, "parts_measured": {part: s}, ...}."""
    fig = make_subplots(rows=1, cols=len(parts), subplot_titles=[PART_LABELS[p] for p in parts],
                        horizontal_spacing=0.06)
    for i, p in enumerate(parts, start=1):
        xs = [_ms(r["parts_measured"].get(p, math.nan)) for r in rows]
        ys = [_ms(r["parts_predicted"].get(p, math.nan)) for r in rows]
        top = max([v for v in xs + ys if math.isfinite(v)] + [0.01]) * 1.1
        _identity_band(fig, 1e-6, top, band, row=1, col=i, legend=(i == 1))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", showlegend=False,
                                 text=[esc(r["name"]) for r in rows], marker=dict(size=8, color=PART_COLOURS[p]),
                                 hovertemplate="%{text}<br>measured %{x:.2f} ms<br>predicted %{y:.2f} ms<extra></extra>"),
                      row=1, col=i)
        fig.update_xaxes(title="measured (ms)", range=[0, top], row=1, col=i)
        fig.update_yaxes(title="predicted (ms)" if i == 1 else None, range=[0, top], row=1, col=i)
    fig.update_layout(title="Parts of the step: predicted against measured (mean over workers of the means)",
                      height=340, margin=dict(l=10, r=10, t=70, b=10), legend=dict(orientation="h", y=-0.3))
    return fig


def error_bars(rows: Sequence[Mapping], band: float = 0.15) -> go.Figure:
    """Relative error of the step time per run (predicted / measured - 1, %), with the ±band lines."""
    names = [esc(r["name"]) for r in rows]  # the y axis's categories, so its tick labels
    errs = [(r["predicted"] / r["measured"] - 1) * 100 if r["measured"] else math.nan for r in rows]
    colours = [GROUP_COLOURS.get(group_of(r), "#888") for r in rows]
    fig = go.Figure(go.Bar(x=errs, y=names, orientation="h", marker_color=colours,
                           hovertemplate="%{y}: %{x:+.1f}%<extra></extra>"))
    for x in (-band * 100, band * 100):
        fig.add_vline(x=x, line=dict(color="#777", dash="dot"))
    fig.update_xaxes(title="step-time error (%, predicted / measured − 1)")
    fig.update_yaxes(title=None, autorange="reversed")
    fig.update_layout(title="Error per run", height=max(260, 24 * len(rows) + 90), margin=dict(l=10, r=10, t=50, b=10))
    return fig


def parts_bars(predicted: Mapping[str, float], measured: Mapping[str, float],
               parts: Sequence[str] = ("compute", "compress", "comm", "idle", "step"), title: str | None = None) -> go.Figure:
    """One run: predicted and measured seconds of each part side by side (ms)."""
    labels = [PART_LABELS[p] for p in parts]
    fig = go.Figure([
        go.Bar(name="predicted (modelled)", x=labels, y=[_ms(predicted.get(p, math.nan)) for p in parts],
               marker_color="#4c78a8", hovertemplate="%{x}: %{y:.2f} ms<extra>predicted</extra>"),
        go.Bar(name="measured", x=labels, y=[_ms(measured.get(p, math.nan)) for p in parts],
               marker_color="#f58518", hovertemplate="%{x}: %{y:.2f} ms<extra>measured</extra>"),
    ])
    fig.update_layout(barmode="group", title=esc(title or "Predicted beside measured, per step"), height=320,
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.25))
    fig.update_yaxes(title="time per step (ms)")
    return fig


def prediction_figure(table, title: str | None = None) -> go.Figure:
    """:func:`lab.machine.fidelity.prediction_table`'s DataFrame (part, predicted_ms, measured_ms, error_pct) as
    grouped bars, the error written over each pair."""
    parts = list(table["part"])
    fig = go.Figure([
        go.Bar(name="predicted (modelled)", x=parts, y=list(table["predicted_ms"]), marker_color="#4c78a8",
               hovertemplate="%{x}: %{y:.2f} ms<extra>predicted</extra>"),
        go.Bar(name="measured", x=parts, y=list(table["measured_ms"]), marker_color="#f58518",
               hovertemplate="%{x}: %{y:.2f} ms<extra>measured</extra>"),
    ])
    for part, p, m, e in zip(parts, table["predicted_ms"], table["measured_ms"], table["error_pct"]):
        if e is not None and math.isfinite(e):
            fig.add_annotation(x=part, y=max(p, m), text=f"{e:+.0f}%", showarrow=False, yshift=12)
    fig.update_layout(barmode="group", title=esc(title or "Predicted beside measured, per step"), height=320,
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.25))
    fig.update_yaxes(title="time per step (ms)")
    return fig


def add_profile_models(fig: go.Figure, fits: Mapping[str, object], sizes: Sequence[float], procs: int,
                       created: str) -> go.Figure:
    """Dotted lines of the saved machine profile's alpha-beta model (``fits``: impl -> CommFit) over
    ``sizes`` (bytes), for the All-reduce page's measured-against-modelled chart (time in seconds)."""
    colours = {"ring": "#e45756", "gloo": "#4c78a8"}
    xs = sorted(sizes)
    for impl, f in fits.items():
        fig.add_trace(go.Scatter(x=xs, y=[f.time(procs, s) for s in xs], mode="lines",
                                 name=f"{impl}: machine profile ({created[:10]})",
                                 line=dict(color=colours.get(impl, "#888"), dash="dot", width=2)))
    return fig


def class_throughput(rows: Sequence[Mapping]) -> go.Figure:
    """Achieved FLOP/s per operator class (GFLOP/s, log) and per-operator overhead (µs), per process count.

    ``rows``: {"procs", "class", "throughput" (FLOP/s of CPU time), "overhead" (s)}."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("achieved throughput (GFLOP/s of CPU time)",
                                                        "fixed cost per operator (µs of CPU time)"))
    procs = sorted({r["procs"] for r in rows})
    palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756"]
    for i, p in enumerate(procs):
        rs = [r for r in rows if r["procs"] == p]
        c = palette[i % len(palette)]
        fig.add_trace(go.Bar(name=f"{p} process(es)", x=[r["class"] for r in rs], marker_color=c,
                             y=[r["throughput"] / 1e9 if math.isfinite(r["throughput"]) else None for r in rs],
                             hovertemplate="%{x}: %{y:.2f} GFLOP/s<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Bar(name=f"{p} process(es)", x=[r["class"] for r in rs], marker_color=c, showlegend=False,
                             y=[r["overhead"] * 1e6 for r in rs], hovertemplate="%{x}: %{y:.1f} µs<extra></extra>"),
                      row=1, col=2)
    fig.update_yaxes(type="log", title="GFLOP/s", row=1, col=1)
    fig.update_yaxes(title="µs per operator", row=1, col=2)
    fig.update_xaxes(title="operator class", row=1, col=1)
    fig.update_xaxes(title="operator class", row=1, col=2)
    fig.update_layout(barmode="group", height=340, margin=dict(l=10, r=10, t=60, b=10),
                      legend=dict(orientation="h", y=-0.3))
    return fig


def calibration_fit(samples: Sequence[Mapping]) -> go.Figure:
    """The calibration networks: fitted against measured CPU time per step (ms), y = x line."""
    xs = [_ms(s["measured"]) for s in samples]
    ys = [_ms(s["fitted"]) for s in samples]
    lo, hi = _range(xs + ys)
    fig = go.Figure()
    _identity_band(fig, lo, hi, 0.15)
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name="calibration network",
                             text=[esc(f"{s['name']} batch {s['batch']}") for s in samples],
                             marker=dict(size=8, color="#333"),
                             hovertemplate="%{text}<br>measured %{x:.2f} ms<br>fitted %{y:.2f} ms<extra></extra>"))
    fig.update_xaxes(type="log", title="measured forward + backward (ms of CPU time)")
    fig.update_yaxes(type="log", title="fitted (ms of CPU time)")
    fig.update_layout(title="Calibration fit (the networks used to calibrate, not the presets)", height=360,
                      margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="h", y=-0.25))
    return fig


__all__ = ["step_scatter", "parts_scatter", "error_bars", "parts_bars", "prediction_figure", "add_profile_models",
           "class_throughput", "calibration_fit", "group_of"]
