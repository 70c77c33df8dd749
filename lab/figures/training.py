"""Plotly builders for the Training and Compare pages: plain data in, go.Figure out.

Inputs are pandas DataFrames in the run store's metric layout (columns step, worker, loss, test_acc,
t_* in seconds, wall in seconds); nothing here touches the store, torch or streamlit.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd
import plotly.graph_objects as go

from lab.figures.style import OPTIMIZER_COLOURS, esc

PALETTE = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
X_TITLES = {"step": "step (count)", "wall": "wall time (s)"}

#: Time-split segments: (label, colour, pattern). Emulated waits are hatched.
SEGMENTS = [
    ("compute (measured)", "#4c78a8", ""),
    ("device wait (emulated)", "#4c78a8", "/"),
    ("communication (measured)", "#f58518", ""),
    ("link wait (emulated)", "#f58518", "/"),
    ("compression (measured)", "#54a24b", ""),
    ("idle, waiting for the slowest (measured)", "#bab0ac", ""),
]


from lab.scenario.summaries import COMPRESSOR_NAMES, SHARING_NAMES, compression_summary, optimiser_summary  # noqa: F401 - re-exported


def _colour(i: int, key: str | None = None) -> str:
    return OPTIMIZER_COLOURS.get(key or "", PALETTE[i % len(PALETTE)])


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, height: int = 360) -> go.Figure:
    fig.update_layout(title=esc(title), height=height, margin=dict(l=10, r=10, t=50, b=10),
                      legend=dict(orientation="h", y=-0.25), hovermode="x unified")
    fig.update_xaxes(title=x_title)
    fig.update_yaxes(title=y_title)
    return fig


def curves_figure(runs: Mapping[str, pd.DataFrame], y: str, *, x: str = "step", y_title: str,
                  title: str, colour_keys: Mapping[str, str] | None = None, log_y: bool = False,
                  scale: float = 1.0) -> go.Figure:
    """One line per run of column ``y`` (job-level rows) against ``x`` ("step" or "wall")."""
    fig = go.Figure()
    for i, (label, df) in enumerate(runs.items()):
        d = df[[x, y]].dropna()
        fig.add_trace(go.Scatter(x=d[x], y=d[y] * scale, mode="lines+markers" if len(d) < 40 else "lines",
                                 name=esc(label), line=dict(color=_colour(i, (colour_keys or {}).get(label)))))
    fig = _layout(fig, title, X_TITLES.get(x, x), y_title)
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def loss_figure(runs: Mapping[str, pd.DataFrame], *, x: str = "step", colour_keys=None, title: str = "") -> go.Figure:
    return curves_figure(runs, "loss", x=x, y_title="training loss (cross-entropy, nats)",
                         title=title or "Training loss over the combined batch", colour_keys=colour_keys)


def accuracy_figure(runs: Mapping[str, pd.DataFrame], *, x: str = "step", colour_keys=None,
                    title: str = "") -> go.Figure:
    fig = curves_figure(runs, "test_acc", x=x, y_title="test accuracy (%)", scale=100.0,
                        title=title or "Test accuracy (held-out set)", colour_keys=colour_keys)
    fig.update_yaxes(range=[0, 100])
    return fig


def time_split_table(per_worker: pd.DataFrame) -> pd.DataFrame:
    """Seconds per worker in each segment of :data:`SEGMENTS` (sums over the steps given).

    A step's collective time is its communication plus its idle wait for the slowest worker, and the
    emulated link wait is part of it: a link wait longer than the communication overlapped the idle
    wait, so that overlap leaves the idle segment and the segments add up to the step."""
    r = per_worker
    link = r.t_emul_comm.clip(upper=r.t_comm + r.t_idle)
    rows = pd.DataFrame({
        SEGMENTS[0][0]: (r.t_compute - r.t_emul_compute).clip(lower=0),
        SEGMENTS[1][0]: r.t_emul_compute,
        SEGMENTS[2][0]: (r.t_comm - r.t_emul_comm).clip(lower=0),
        SEGMENTS[3][0]: link,
        SEGMENTS[4][0]: r.t_compress,
        SEGMENTS[5][0]: (r.t_idle - (link - r.t_comm).clip(lower=0)).clip(lower=0),
        "worker": r.worker,
    })
    return rows.groupby("worker").sum()


def time_split_figure(per_worker: pd.DataFrame, worker_labels: Mapping[int, str] | None = None,
                      title: str = "Where each worker's time went") -> go.Figure:
    """Stacked horizontal bars, one per worker: compute, emulated device wait, communication,
    emulated link wait, compression and idle, in seconds summed over the run so far."""
    tab = time_split_table(per_worker)
    # Worker labels name the devices the workers stand for; they are the y axis's categories.
    names = [esc((worker_labels or {}).get(int(w), f"worker {int(w)}")) for w in tab.index]
    fig = go.Figure()
    for label, colour, pattern in SEGMENTS:
        vals = tab[label].tolist()
        if pattern and not any(v > 0 for v in vals):
            continue  # no emulation: leave the emulated segments out of the legend
        fig.add_trace(go.Bar(y=names, x=vals, name=label, orientation="h",
                             marker=dict(color=colour, pattern=dict(shape=pattern)),
                             hovertemplate="%{y}: %{x:.3f} s<extra>" + label + "</extra>"))
    fig.update_layout(barmode="stack")
    fig = _layout(fig, title, "time (s, summed over the steps)", "", height=170 + 40 * len(names))
    fig.update_layout(hovermode="closest", legend=dict(orientation="v", x=1.02, y=1, yanchor="top"))
    fig.update_yaxes(autorange="reversed")
    return fig


def throughput_figure(runs: Mapping[str, pd.DataFrame], *, x: str = "step", colour_keys=None) -> go.Figure:
    return curves_figure(runs, "samples_per_s", x=x, y_title="throughput (samples/s)",
                         title="Training throughput of the whole job", colour_keys=colour_keys)
