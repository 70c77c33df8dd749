"""Plotly builders for the Topology page: plain data in, go.Figure out."""

from __future__ import annotations

import functools
import math

import networkx as nx
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lab.figures.style import esc, fmt_rate, fmt_seconds
from lab.scenario.topology import DEVICE_TYPE_LABELS, LINK_KIND_LABELS, Topology
from lab.scenario.units import counted

TYPE_COLOURS = {"cpu": "#4c566a", "gpu": "#2e7d32", "fpga": "#1565c0", "asic": "#8e24aa",
                "dpu": "#ef6c00", "npu": "#c62828", "tpu": "#00838f", "switch": "#9e9e9e"}
KIND_COLOURS = {"cxl": "#1f6feb", "pcie": "#d29922", "upi": "#8250df", "nvlink": "#2da44e",
                "switch": "#6e7781", "ethernet": "#cf222e"}


#: Above this many nodes the drawing is laid out by a force-directed layout of fixed iterations:
#: Kamada–Kawai's optimisation takes seconds at a few dozen nodes and half a minute at the size caps.
KAMADA_KAWAI_MAX = 40
#: Up to this many devices the heatmap's hover is a sentence per cell; above, the cell's numbers.
HOVER_TEXT_MAX = 48


def layout_positions(topo: Topology, seed: int = 7) -> dict[str, tuple[float, float]]:
    g = topo.graph
    return dict(_positions(tuple(g.nodes), tuple(g.edges), seed))


@functools.lru_cache(maxsize=32)  # one layout per graph in this process: every view of it draws the same
def _positions(nodes: tuple[str, ...], edges: tuple[tuple[str, str], ...], seed: int) -> dict[str, tuple[float, float]]:
    g = nx.Graph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    if len(g) <= 2:
        return {n: (float(i), 0.0) for i, n in enumerate(g.nodes)}
    pos = nx.kamada_kawai_layout(g) if len(g) <= KAMADA_KAWAI_MAX else nx.spring_layout(g, seed=seed, iterations=50)
    return {n: (float(x), float(y)) for n, (x, y) in pos.items()}


def network_figure(topo: Topology) -> go.Figure:
    """The cluster drawn as a graph: nodes coloured by device type, links by kind (hover: numbers)."""
    pos = layout_positions(topo)
    fig = go.Figure()
    shown_kinds: set[str] = set()
    mid_x, mid_y, mid_text = [], [], []
    for link in topo.links:
        (x0, y0), (x1, y1) = pos[link.a], pos[link.b]
        width = 1.5 + 4.0 * min(1.0, math.log10(max(link.bandwidth, 1e6) / 1e6) / 5.5)
        fig.add_trace(go.Scatter(
            x=[x0, x1], y=[y0, y1], mode="lines", line=dict(color=KIND_COLOURS[link.kind], width=width),
            name=LINK_KIND_LABELS[link.kind], legendgroup="link-" + link.kind,
            showlegend=link.kind not in shown_kinds, hoverinfo="skip"))
        shown_kinds.add(link.kind)
        mid_x.append((x0 + x1) / 2)
        mid_y.append((y0 + y1) / 2)
        mid_text.append(f"{esc(link.a)} ↔ {esc(link.b)}<br>{LINK_KIND_LABELS[link.kind]}<br>"
                        f"{fmt_rate(link.bandwidth)} per direction<br>latency {fmt_seconds(link.latency)}")
    fig.add_trace(go.Scatter(x=mid_x, y=mid_y, mode="markers", marker=dict(size=9, opacity=0.0),
                             hovertext=mid_text, hoverinfo="text", showlegend=False, name="links"))
    groups: dict[str, list] = {}
    for d in topo.devices:
        groups.setdefault(d.type, []).append(
            (d.name, f"<b>{esc(d.name)}</b> ({DEVICE_TYPE_LABELS[d.type]}, pool {esc(d.pool)})<br>"
                     f"memory {d.memory / 1e9:.3g} GB<br>kernels: {', '.join(sorted(d.kernels))}"))
    for s in topo.switches:
        groups.setdefault("switch", []).append((s.name, f"<b>{esc(s.name)}</b> (switch)"))
    for t, items in groups.items():
        fig.add_trace(go.Scatter(
            x=[pos[n][0] for n, _ in items], y=[pos[n][1] for n, _ in items], mode="markers+text",
            marker=dict(size=26 if t != "switch" else 18, color=TYPE_COLOURS.get(t, "#333"),
                        symbol="square" if t == "switch" else "circle", line=dict(color="white", width=2)),
            text=[esc(n) for n, _ in items], textposition="bottom center", hovertext=[h for _, h in items],
            hoverinfo="text", name=DEVICE_TYPE_LABELS.get(t, t), legendgroup="type-" + t))
    fig.update_layout(
        title=f"Topology “{esc(topo.name)}”: {counted(len(topo.devices), 'device')}, "
              f"{counted(len(topo.switches), 'switch', 'switches')}, {counted(len(topo.links), 'link')} "
              "(hover a link's middle for its numbers)",
        xaxis=dict(visible=False), yaxis=dict(visible=False, scaleanchor="x"), height=460,
        margin=dict(l=10, r=10, t=50, b=10), legend=dict(orientation="v"), plot_bgcolor="white")
    return fig


def path_heatmap(matrix: dict, nbytes: float) -> go.Figure:
    """Modelled transfer time between every pair of devices for ``nbytes``."""
    names = matrix["names"]
    t = matrix["time"]
    z = [[v * 1e6 for v in row] for row in t]
    labels = [esc(n) for n in names]
    if len(names) > HOVER_TEXT_MAX:
        # Each cell's numbers, formatted by the browser: a sentence per cell would be megabytes
        # sent again on every rerun at the size caps.
        data = np.stack([np.array(matrix[k], dtype=float) for k in ("bottleneck", "latency", "hops")], axis=-1)
        np.fill_diagonal(data[:, :, 0], np.nan)  # a device to itself has no bottleneck
        z = np.array(t) * 1e6
        cell = dict(customdata=data, hovertemplate="%{y} → %{x}<br>time %{z:.3g} µs<br>bottleneck "
                                                   "%{customdata[0]:.3s}B/s<br>latency %{customdata[1]:.3s}s<br>"
                                                   "hops %{customdata[2]}<extra></extra>")
    else:
        cell = dict(hoverinfo="text", hovertext=[
            [f"{esc(a)} → {esc(b)}<br>time {fmt_seconds(t[i][j])}<br>bottleneck "
             f"{fmt_rate(matrix['bottleneck'][i][j]) if i != j else '—'}<br>"
             f"latency {fmt_seconds(matrix['latency'][i][j])}<br>hops {matrix['hops'][i][j]}"
             for j, b in enumerate(names)] for i, a in enumerate(names)])
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, colorscale="Blues", colorbar=dict(title="µs"), **cell))
    fig.update_layout(title=f"Modelled time to move {nbytes / 1e6:.3g} MB from row to column (µs)",
                      xaxis_title="to device", yaxis_title="from device", height=420,
                      yaxis=dict(autorange="reversed"), margin=dict(l=10, r=10, t=50, b=10))
    return fig


def comparison_figure(df: pd.DataFrame, nbytes: float) -> go.Figure:
    """Grouped bars: the same device-to-device transfer on several topologies (modelled)."""
    fig = go.Figure()
    for label, part in df.groupby("topology", sort=False):
        fig.add_trace(go.Bar(
            x=[esc(p) for p in part["pair"]], y=part["time_s"] * 1e6, name=esc(str(label)),
            hovertext=[f"route {esc(r)}<br>{h} hops, bottleneck {fmt_rate(b)}"
                       for r, h, b in zip(part["route"], part["hops"], part["bottleneck_Bps"])],
            hoverinfo="text+y"))
    fig.update_layout(barmode="group", title=f"Modelled time to move {nbytes / 1e6:.3g} MB device to device",
                      yaxis_title="time (µs)", xaxis_title="device pair", height=400,
                      margin=dict(l=10, r=10, t=50, b=10))
    return fig
