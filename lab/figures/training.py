"""Plotly builders for the Training and Compare pages: plain data in, go.Figure out.

Inputs are pandas DataFrames in the run store's metric layout (columns step, worker, loss, test_acc,
t_* in seconds, wall in seconds); nothing here touches the store, torch or streamlit.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd
import plotly.graph_objects as go

from lab.figures.style import OPTIMIZER_COLOURS, esc
from lab.scenario.names import COMPRESSOR_SHORT, OPTIMIZER_LABELS, SHARING_SHORT, TORCH_HOOKS, optimiser_implementation

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


#: The compressors as a sentence about one run names them: outside a comparison there is no dense
#: baseline to name, and Top-K needs "global" beside Group-TopK.
COMPRESSOR_NAMES = {**COMPRESSOR_SHORT, "none": "none (no compression)", "topk": "global Top-K"}
SHARING_NAMES = SHARING_SHORT


def compression_summary(comp: Mapping) -> str:
    """One line saying which compression a run uses, from a :class:`lab.scenario.document.Compression`'s
    dict (the current settings, or a stored run's ``scenario["training"]["compression"]``), e.g.
    "Group-TopK, 1 % per group of 1024, with error feedback, shared by sparse all-gather"."""
    kind = comp.get("kind", "none")
    if kind == "none":
        return "no compression"
    name = COMPRESSOR_NAMES.get(kind, str(kind))
    if kind == "powersgd":
        return (f"{name}, rank {int(comp.get('rank', 1))} after {int(comp.get('warmup', 0))} plain all-reduce steps, "
                "with error feedback and warm start: torch's powerSGD_hook arithmetic on the lab's ring")
    if kind in TORCH_HOOKS:
        half = "fp16" if kind == "fp16_hook" else "bf16"
        return f"{name}, every entry cast to {half} and averaged in {half}: torch's hook arithmetic on the lab's ring"
    pct = f"{100 * float(comp.get('ratio', 0.0)):.4g} %"
    kept = {"group_topk": f"{pct} per group of {int(comp.get('group_size', 0))}",
            "topk": f"{pct} of all entries", "randomk": f"{pct} of all entries, chosen at random",
            "fp16": "every entry at half precision"}.get(kind, pct)
    feedback = "with error feedback" if comp.get("error_feedback") else "without error feedback"
    sharing = SHARING_NAMES.get(comp.get("sharing", ""), str(comp.get("sharing", "")))
    return f"{name}, {kept}, {feedback}, shared by {sharing}"


def optimiser_summary(tr: Mapping) -> str:
    """One line saying which optimiser a run uses and which implementation of it ran, from a stored run's
    ``scenario["training"]`` dict, e.g. "AdaBelief, one fused pass per parameter (compiled by torch.compile)"."""
    name = OPTIMIZER_LABELS.get(tr.get("optimizer", ""), str(tr.get("optimizer", "")))
    if optimiser_implementation(bool(tr.get("fused")), str(tr.get("sync", ""))) == "fused":
        return f"{name}, one fused pass per parameter (compiled by torch.compile)"
    return f"{name}, multi-tensor (torch._foreach_* operations)"


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
