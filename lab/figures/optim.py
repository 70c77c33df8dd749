"""Plotly builders for the Optimisers page: plain data in, go.Figure out (no streamlit, no torch).

The playground functions are dimensionless, so the axes say "(dimensionless)"; steps are counts.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from lab.figures.style import OPTIMIZER_COLOURS

_DASHES = {"maxadabelief-corrected": "dot"}


def _colour(key: str) -> str:
    return OPTIMIZER_COLOURS.get(key, "#444444")

_LEVELS = 18
_BAND_SCALE = [[0.0, "rgb(110,110,110)"], [1.0, "rgb(250,250,250)"]]


def contour_image(z: np.ndarray, levels: int = _LEVELS) -> Image.Image:
    """z (rows = increasing y) as a greyscale image of filled bands, darker = lower, band edges drawn."""
    z = np.asarray(z, dtype=float)
    zmin, zmax = float(np.nanmin(z)), float(np.nanmax(z))
    q = np.floor((z - zmin) / max(zmax - zmin, 1e-300) * levels).clip(0, levels - 1)
    grey = 110.0 + q / max(levels - 1, 1) * 140.0
    edge = np.zeros(q.shape, dtype=bool)
    edge[:-1, :] |= q[:-1, :] != q[1:, :]
    edge[:, :-1] |= q[:, :-1] != q[:, 1:]
    grey[edge] -= 45.0
    return Image.fromarray(np.clip(grey, 0, 255).astype(np.uint8)[::-1])


def frame_indices(n_points: int, max_frames: int = 60) -> list[int]:
    """At most ``max_frames`` increasing indices into 0..n_points-1, always ending at the last."""
    if n_points <= 0:
        return []
    k = min(max_frames, n_points)
    return sorted({int(round(i)) for i in np.linspace(0, n_points - 1, k)})


def trajectory_figure(xs: np.ndarray, ys: np.ndarray, z: np.ndarray, paths: Mapping[str, np.ndarray],
                      labels: Mapping[str, str], *, minimum: tuple[float, float],
                      z_title: str = "f (dimensionless)", max_frames: int = 60,
                      title: str = "") -> go.Figure:
    """Filled contours of a 2-D function (a background image) with each optimiser's path, animated (play button + slider).

    ``paths[key]`` is an (n, 2) array of points (x, y) after 0..n-1 steps. Frame j shows every path
    up to step ``frame_indices(...)[j]`` (paths that stopped early stay at their last point).
    """
    n_max = max((len(p) for p in paths.values()), default=1)
    idx = frame_indices(n_max, max_frames)
    fig = go.Figure()
    # The function is drawn as a background image of filled contour bands, not a Contour trace:
    # inside Streamlit a Contour/Heatmap trace vanishes as soon as a frame animates, an image stays.
    zmin, zmax = float(np.nanmin(z)), float(np.nanmax(z))
    fig.add_layout_image(source=contour_image(z), xref="x", yref="y", x=float(xs[0]), y=float(ys[-1]),
                         sizex=float(xs[-1] - xs[0]), sizey=float(ys[-1] - ys[0]), sizing="stretch",
                         layer="below", opacity=1.0)
    fig.add_trace(go.Scatter(                           # carries the colour bar for the image
        x=[None], y=[None], mode="markers", showlegend=False, hoverinfo="skip",
        marker=dict(color=[zmin, zmax], cmin=zmin, cmax=zmax, colorscale=_BAND_SCALE, showscale=True,
                    colorbar=dict(title=dict(text=z_title, side="right")))))
    fig.add_trace(go.Scatter(x=[minimum[0]], y=[minimum[1]], mode="markers", name="minimum",
                             marker=dict(symbol="star", size=14, color="gold", line=dict(color="black", width=1))))
    keys = list(paths)
    for key in keys:
        p = paths[key]
        fig.add_trace(go.Scatter(x=p[:, 0], y=p[:, 1], mode="lines+markers", name=labels.get(key, key),
                                 line=dict(color=_colour(key), width=2, dash=_DASHES.get(key, "solid")),
                                 marker=dict(size=3), hovertemplate="x %{x:.4f}<br>y %{y:.4f}<extra>"
                                 + labels.get(key, key) + "</extra>"))
    first_path_trace = 2                                # after the colour-bar carrier and the star
    frames = []
    for j, i in enumerate(idx):
        data = [go.Scatter(x=paths[k][: min(i, len(paths[k]) - 1) + 1, 0].tolist(),
                           y=paths[k][: min(i, len(paths[k]) - 1) + 1, 1].tolist()) for k in keys]
        frames.append(go.Frame(data=data, traces=list(range(first_path_trace, first_path_trace + len(keys))),
                               name=str(i)))
    fig.frames = frames
    play = dict(label="▶ play", method="animate",
                args=[None, dict(frame=dict(duration=80, redraw=True), transition=dict(duration=0),
                                 fromcurrent=True, mode="immediate")])
    pause = dict(label="❚❚ pause", method="animate",
                 args=[[None], dict(frame=dict(duration=0, redraw=False), mode="immediate")])
    fig.update_layout(
        title=dict(text=title, y=0.98, yanchor="top"), height=560, margin=dict(l=60, r=20, t=100, b=90),
        xaxis=dict(title="x (dimensionless)", range=[float(xs[0]), float(xs[-1])], showgrid=False, zeroline=False),
        yaxis=dict(title="y (dimensionless)", range=[float(ys[0]), float(ys[-1])], showgrid=False, zeroline=False),
        legend=dict(orientation="h", y=1.01, yanchor="bottom", x=0),
        updatemenus=[dict(type="buttons", buttons=[play, pause], direction="left", x=0.0, y=-0.12,
                          xanchor="left", yanchor="top", showactive=False)],
        sliders=[dict(active=len(idx) - 1, x=0.18, len=0.82, y=-0.08, yanchor="top",
                      currentvalue=dict(prefix="step ", xanchor="right"),
                      steps=[dict(label=str(i), method="animate",
                                  args=[[str(i)], dict(mode="immediate", frame=dict(duration=0, redraw=True))])
                             for i in idx])])
    return fig


def loss_figure(losses: Mapping[str, np.ndarray], labels: Mapping[str, str], *, log_y: bool = True,
                y_title: str = "f(x, y) (dimensionless)") -> go.Figure:
    """Loss against step for each optimiser (losses[key][k] after k steps)."""
    fig = go.Figure()
    for key, y in losses.items():
        fig.add_trace(go.Scatter(x=np.arange(len(y)), y=y, mode="lines", name=labels.get(key, key),
                                 line=dict(color=_colour(key), dash=_DASHES.get(key, "solid"))))
    fig.update_layout(height=340, margin=dict(l=60, r=20, t=30, b=50), legend=dict(orientation="h", y=-0.25),
                      xaxis_title="step (count)", yaxis_title=y_title)
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def effective_lr_figure(effective: Mapping[str, np.ndarray], labels: Mapping[str, str], *,
                        coordinate: int = 0, name: str = "x") -> go.Figure:
    """lr / denominator for one coordinate against step (effective[key] is (steps, 2))."""
    fig = go.Figure()
    for key, e in effective.items():
        if len(e) == 0:
            continue
        fig.add_trace(go.Scatter(x=np.arange(1, len(e) + 1), y=e[:, coordinate], mode="lines",
                                 name=labels.get(key, key),
                                 line=dict(color=_colour(key), dash=_DASHES.get(key, "solid"))))
    fig.update_layout(height=340, margin=dict(l=60, r=20, t=30, b=50), legend=dict(orientation="h", y=-0.25),
                      xaxis_title="step (count)",
                      yaxis_title=f"lr / denominator on {name} (dimensionless)")
    fig.update_yaxes(type="log")
    return fig


def decimate(t: np.ndarray, y: np.ndarray, max_points: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    """At most ~max_points points that keep the envelope: each bucket's min and max, in time order."""
    n = len(y)
    if n <= max_points:
        return t, y
    buckets = np.array_split(np.arange(n), max_points // 2)
    keep: list[int] = []
    for b in buckets:
        lo, hi = b[np.argmin(y[b])], b[np.argmax(y[b])]
        keep.extend(sorted({int(lo), int(hi)}))
    keep_arr = np.asarray(keep)
    return t[keep_arr], y[keep_arr]


def counterexample_figure(xs: Mapping[str, np.ndarray], labels: Mapping[str, str],
                          max_points: int = 4000) -> go.Figure:
    """x_t against t for the online counterexample, with the optimum x = -1 marked."""
    fig = go.Figure()
    for key, x in xs.items():
        t, y = decimate(np.arange(1, len(x) + 1), np.asarray(x), max_points)
        fig.add_trace(go.Scattergl(x=t, y=y, mode="lines", name=labels.get(key, key),
                                   line=dict(color=_colour(key), width=1.5, dash=_DASHES.get(key, "solid"))))
    fig.add_hline(y=-1, line=dict(color="goldenrod", width=2, dash="dash"), layer="below",
                  annotation_text="optimum x = -1", annotation_position="top right")
    fig.update_layout(height=380, margin=dict(l=60, r=20, t=30, b=50), legend=dict(orientation="h", y=-0.22),
                      xaxis_title="t (step count)", yaxis_title="x_t (dimensionless)",
                      yaxis=dict(range=[-1.1, 1.1]))
    return fig


def regret_figure(avg_regret: Mapping[str, np.ndarray], labels: Mapping[str, str],
                  max_points: int = 4000, skip: int = 101) -> go.Figure:
    """Average regret R_t / t against t (it goes to 0 only for a method that converges). The y range
    leaves out the first ``skip`` steps, where R_t / t starts at 1010 and would flatten the rest."""
    fig = go.Figure()
    tails = [np.asarray(r)[skip:] for r in avg_regret.values() if len(r) > skip]
    if tails:
        lo, hi = min(float(t.min()) for t in tails), max(float(t.max()) for t in tails)
        pad = 0.05 * max(hi - lo, 1e-9)
        fig.update_yaxes(range=[min(lo, 0.0) - pad, hi + pad])
    for key, r in avg_regret.items():
        t, y = decimate(np.arange(1, len(r) + 1), np.asarray(r), max_points)
        fig.add_trace(go.Scattergl(x=t, y=y, mode="lines", name=labels.get(key, key),
                                   line=dict(color=_colour(key), width=1.5, dash=_DASHES.get(key, "solid"))))
    n = max((len(r) for r in avg_regret.values()), default=1)
    fig.update_layout(height=340, margin=dict(l=60, r=20, t=30, b=50), legend=dict(orientation="h", y=-0.25),
                      xaxis_title="t (step count)", yaxis_title="average regret R_t / t (dimensionless)")
    fig.update_xaxes(type="log", range=[np.log10(min(skip, n)), np.log10(max(n, 2))])
    return fig

