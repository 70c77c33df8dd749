"""Plotly builders for the Compression page: plain data in (lists of dicts), go.Figure out.

Units: densities and relative errors are dimensionless fractions (shown in %), sizes in bytes
(shown in kB = 1000 B), times in seconds (shown in ms or µs), entries are counts.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab.scenario.names import SPARSIFIERS, Sharing

COMPRESSOR_COLOURS = {"group_topk": "#2e7d32", "topk": "#1565c0", "randomk": "#ef6c00", "fp16": "#8e24aa",
                      "none": "#4c566a"}
SHARING_COLOURS = {Sharing.DENSE: "#4c566a", Sharing.SPARSE_RING: "#2e7d32", Sharing.SPARSE_ALLGATHER: "#1565c0"}
PHASE_COLOURS = {"reduce-scatter": "#2e7d32", "all-gather": "#1565c0"}


def _layout(fig: go.Figure, title: str, height: int = 420) -> go.Figure:
    fig.update_layout(title=dict(text=title, y=0.98, yanchor="top"), height=height,
                      margin=dict(l=60, r=20, t=100, b=50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig


def density_error_figure(rows: Sequence[Mapping]) -> go.Figure:
    """Relative error ||g - C(g)|| / ||g|| against kept density, one line per compressor."""
    fig = go.Figure()
    kinds = list(dict.fromkeys(r["compressor"] for r in rows))
    for kind in kinds:
        rs = sorted((r for r in rows if r["compressor"] == kind), key=lambda r: r["density"])
        fig.add_trace(go.Scatter(
            x=[100 * r["density"] for r in rs], y=[100 * r["rel_error"] for r in rs],
            mode="lines+markers", name=rs[0].get("label", kind),
            line=dict(color=COMPRESSOR_COLOURS.get(kind, "#444")), marker=dict(size=9),
            customdata=[[r["ratio"], r["kept"], r["bytes"]] for r in rs],
            hovertemplate="kept %{x:.3g} % (%{customdata[1]} entries)<br>relative error %{y:.3g} %"
                          "<br>ratio %{customdata[0]:g}<br>%{customdata[2]:,} B<extra>" + rs[0].get("label", kind)
                          + "</extra>"))
    fig.update_xaxes(title="kept density (% of entries)", type="log")
    fig.update_yaxes(title="relative error ||g − ĝ|| / ||g|| (%)", rangemode="tozero")
    fig = _layout(fig, "What each compressor keeps and what it loses", height=500)
    fig.update_layout(margin=dict(t=150))
    return fig


def _row_labels(rows: Sequence[Mapping]) -> list[str]:
    """'Group-TopK @ 0.01': a compressor's label, with the ratio where it keeps a fraction."""
    return [f"{r.get('label', r['compressor'])}" + (f" @ {r['ratio']:g}" if r["compressor"] in SPARSIFIERS else "")
            for r in rows]


def bytes_figure(rows: Sequence[Mapping]) -> go.Figure:
    """Wire bytes of one payload, per compressor and ratio."""
    labels = _row_labels(rows)
    fig = go.Figure(go.Bar(
        x=[r["bytes"] / 1e3 for r in rows], y=labels, orientation="h",
        marker_color=[COMPRESSOR_COLOURS.get(r["compressor"], "#444") for r in rows],
        customdata=[[r["bytes_per_entry"], r["wire_format"]] for r in rows],
        hovertemplate="%{x:,.3f} kB<br>%{customdata[1]}<extra></extra>"))
    fig.update_xaxes(title="payload on the wire (kB, header included)", type="log")
    fig.update_yaxes(title="compressor @ ratio", autorange="reversed")
    return _layout(fig, "Bytes one worker puts on the wire", height=max(320, 28 * len(rows) + 120))


def time_figure(rows: Sequence[Mapping]) -> go.Figure:
    """Compression time per compressor and ratio."""
    labels = _row_labels(rows)
    fig = go.Figure(go.Bar(x=[1e3 * r["t_compress"] for r in rows], y=labels, orientation="h",
                           marker_color=[COMPRESSOR_COLOURS.get(r["compressor"], "#444") for r in rows],
                           hovertemplate="%{x:.3g} ms<extra></extra>"))
    fig.update_xaxes(title="ms (best of 3)")
    fig.update_yaxes(title="compressor @ ratio", autorange="reversed")
    return _layout(fig, "Time to compress one gradient<br>on this machine", height=max(320, 28 * len(rows) + 120))


def fill_in_figure(fill_rows: Sequence[Mapping], hop_rows: Sequence[Mapping]) -> go.Figure:
    """Top: every block's entries hop by hop round the ring (fill-in). Bottom: bytes per hop."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1, row_heights=[0.62, 0.38],
                        subplot_titles=("entries of each block as it travels",
                                        "bytes on the wire per hop, all workers"))
    hops = sorted({(r["index"], r["hop"]) for r in fill_rows})
    order = [h for _, h in hops]
    blocks = sorted({r["block"] for r in fill_rows})
    palette = ["#2e7d32", "#1565c0", "#ef6c00", "#8e24aa", "#c62828", "#00838f", "#6d4c41", "#546e7a"]
    for b in blocks:
        rs = sorted((r for r in fill_rows if r["block"] == b), key=lambda r: r["index"])
        colour = palette[b % len(palette)]
        fig.add_trace(go.Scatter(x=[r["hop"] for r in rs], y=[r["entries"] for r in rs], mode="lines+markers",
                                 name=f"block {b}", line=dict(color=colour),
                                 hovertemplate="block " + str(b) + ", hop %{x}: %{y} entries<extra></extra>"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=[order[0], order[-1]], y=[rs[0]["no_overlap_bound"]] * 2, mode="lines",
                                 line=dict(color=colour, dash="dot", width=1), showlegend=b == blocks[0],
                                 name="sum of the workers' entries (no overlap)", legendgroup="bound",
                                 hovertemplate="block " + str(b) + ": no-overlap bound %{y}<extra></extra>"),
                      row=1, col=1)
    fig.add_trace(go.Bar(x=[r["hop"] for r in hop_rows], y=[r["bytes"] / 1e3 for r in hop_rows],
                         marker_color=[PHASE_COLOURS.get(r["phase"], "#444") for r in hop_rows], showlegend=False,
                         hovertemplate="hop %{x}: %{y:.3f} kB<extra></extra>"), row=2, col=1)
    fig.update_xaxes(categoryorder="array", categoryarray=order)
    fig.update_xaxes(title="hop (a: reduce-scatter, b: all-gather; a0 = start)", row=2, col=1)
    fig.update_yaxes(title="entries (count)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title="kB", rangemode="tozero", row=2, col=1)
    return _layout(fig, "Fill-in round the edge-compression design's sparse ring", height=620)


def sharing_bytes_figure(method_rows: Sequence[Mapping]) -> go.Figure:
    """Bytes each worker sends per step, mean and most loaded worker, per sharing method."""
    fig = go.Figure()
    fig.add_trace(go.Bar(x=[r["label"] for r in method_rows], y=[r["bytes_sent_mean"] / 1e3 for r in method_rows],
                         name="mean over workers",
                         marker_color=[SHARING_COLOURS.get(r["method"], "#444") for r in method_rows],
                         text=[f"{r['vs_dense']:.1%} of dense" for r in method_rows], textposition="outside",
                         hovertemplate="%{x}: %{y:,.3f} kB per worker<extra></extra>"))
    fig.add_trace(go.Scatter(x=[r["label"] for r in method_rows], y=[r["bytes_sent_max"] / 1e3 for r in method_rows],
                             mode="markers", name="most loaded worker", marker=dict(symbol="line-ew-open", size=30,
                                                                                    color="black"),
                             hovertemplate="%{x}: max %{y:,.3f} kB<extra></extra>"))
    fig.update_yaxes(title="bytes sent per worker per step (kB)", type="log")
    fig.update_xaxes(title="sharing method")
    return _layout(fig, "Bytes per worker per step, by sharing method")


def cholesky_figure(rows: Sequence[Mapping]) -> go.Figure:
    """Bytes and pack+unpack time of dense, lower triangle and Cholesky factor."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("bytes sent", "time to pack + unpack"))
    colours = ["#4c566a", "#1565c0", "#c62828"]
    names = [r["method"] for r in rows]
    fig.add_trace(go.Bar(x=names, y=[r["bytes"] / 1e3 for r in rows], marker_color=colours, showlegend=False,
                         hovertemplate="%{x}: %{y:.3f} kB<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(x=names, y=[1e6 * (r["t_pack"] + r["t_unpack"]) for r in rows], marker_color=colours,
                         showlegend=False, hovertemplate="%{x}: %{y:.3g} µs<extra></extra>"), row=1, col=2)
    fig.update_yaxes(title="kB", row=1, col=1)
    fig.update_yaxes(title="µs (best of repeats)", row=1, col=2)
    fig.update_xaxes(title="what is sent")
    return _layout(fig, "Sending a symmetric matrix: triangle against factor", height=400)


def factor_sum_figure(true_sum: np.ndarray, factor_sum: np.ndarray, workers: int) -> go.Figure:
    """Heatmaps: the true sum of the workers' matrices, and what adding their factors (rescaled by
    1/N) rebuilds minus that sum. Values in the matrices' own units."""
    diff = factor_sum - true_sum
    lim = float(max(np.abs(true_sum).max(), 1e-30))
    dlim = float(max(np.abs(diff).max(), 1e-30))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16, subplot_titles=(
        "Σ Dᵢ: what the ring must deliver", f"(Σ Lᵢ)(Σ Lᵢ)ᵀ / {workers} − Σ Dᵢ: the error"))
    for col, (z, zl, bar_x) in enumerate(((true_sum, lim, 0.42), (diff, dlim, 1.0)), start=1):
        fig.add_trace(go.Heatmap(z=z, zmin=-zl, zmax=zl, zmid=0, colorscale="RdBu", reversescale=True,
                                 colorbar=dict(x=bar_x, len=0.9, title=dict(text="value", side="right")),
                                 hovertemplate="row %{y}, col %{x}: %{z:.3g}<extra></extra>"), row=1, col=col)
        fig.update_yaxes(autorange="reversed", title="row i" if col == 1 else None,
                         scaleanchor=f"x{col if col > 1 else ''}", row=1, col=col)
        fig.update_xaxes(title="column j", row=1, col=col)
    fig = _layout(fig, "Adding factors is not adding matrices", height=460)
    fig.update_layout(margin=dict(t=110))
    return fig


GRID_COLOURS = {"dense": "#4c566a", "gtk": "#66bb6a", "gtk_ef": "#1b5e20", "powersgd": "#6a1b9a",
                "fp16_hook": "#ef6c00", "bf16_hook": "#c62828"}


def grid_figure(rows: Sequence[Mapping]) -> go.Figure:
    """The preset grid's finished runs (lab.jobs.grid.grid_results rows): final test accuracy,
    time per step and bytes per worker per step, grouped by optimiser, one colour per variant."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=("final test accuracy", "time per step",
                                                        "sent per worker per step"), horizontal_spacing=0.08)
    for variant in dict.fromkeys(r["variant"] for r in rows):
        rs = [r for r in rows if r["variant"] == variant]
        x = [r["optimizer"] for r in rs]
        common = dict(name=rs[0]["label"], marker_color=GRID_COLOURS.get(variant, "#444"), legendgroup=variant)
        fig.add_trace(go.Bar(x=x, y=[100 * r["final_test_acc"] for r in rs], **common,
                             hovertemplate="%{x}: %{y:.2f} %<extra>" + rs[0]["label"] + "</extra>"), row=1, col=1)
        fig.add_trace(go.Bar(x=x, y=[1e3 * r["s_per_step"] for r in rs], showlegend=False, **common,
                             hovertemplate="%{x}: %{y:.2f} ms per step<extra>" + rs[0]["label"] + "</extra>"),
                      row=1, col=2)
        fig.add_trace(go.Bar(x=x, y=[r["bytes_per_worker_step"] / 1e3 for r in rs], showlegend=False, **common,
                             hovertemplate="%{x}: %{y:,.2f} kB<extra>" + rs[0]["label"] + "</extra>"), row=1, col=3)
    fig.update_layout(barmode="group")
    fig.update_xaxes(title="optimiser")
    fig.update_yaxes(title="test accuracy (%)", row=1, col=1)
    fig.update_yaxes(title="wall time per step (ms)", rangemode="tozero", row=1, col=2)
    fig.update_yaxes(title="bytes sent per worker per step (kB)", type="log", row=1, col=3)
    return _layout(fig, "The compressors in training (the grid)", height=440)

