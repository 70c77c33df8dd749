"""Plotly builders for the Placement page: plain data in, go.Figure out. Times arrive in seconds
and are shown in the unit :func:`time_unit` picks (s, ms, µs or ns), named on every axis."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from lab.figures.style import bytes_unit, esc, fmt_bytes, time_unit
from lab.scenario.units import MIN_VISIBLE

CLASS_COLOURS = {"matmul": "#2e7d32", "conv": "#1565c0", "elementwise": "#8e24aa", "norm": "#ef6c00",
                 "pool": "#00838f", "other": "#6e7781", None: "#9e9e9e"}
_PALETTE = qualitative.Plotly + qualitative.D3


def device_colours(devices: Sequence[str]) -> dict[str, str]:
    return {d: _PALETTE[i % len(_PALETTE)] for i, d in enumerate(devices)}


TRANSFER_COLOUR = "#cf222e"


def receive_lane(device: str) -> str:
    """The Gantt lane of the transfers arriving at ``device``, as its tick label shows it (escaped)."""
    return f"{esc(device)} ← in"


def gantt_figure(rows: Sequence[Mapping[str, Any]], devices: Sequence[str], title: str = "",
                 transfers: Sequence[Mapping[str, Any]] = (), reasons: Mapping[Any, str] | None = None) -> go.Figure:
    """One lane per device; a bar per task from start to finish, coloured by operator class, its
    hover saying the class and why it is there (``reasons``). Under each device that receives data,
    a lane of its incoming transfers (``transfers``: producer, consumer, src, dst, start, finish, s).
    Bars too short to see at this scale carry a diamond marker with the same hover.
    ``rows``: dicts with task, device, start, finish (s) and class."""
    span = max([r["finish"] for r in rows] + [t["finish"] for t in transfers] + [0.0])
    scale, unit = time_unit(span)
    fig = go.Figure()
    tiny = MIN_VISIBLE * span

    def add(lanes, starts, ends, colour, name, texts, hovers, group, opacity=1.0):
        fig.add_trace(go.Bar(
            y=lanes, x=[(b - a) * scale for a, b in zip(starts, ends)], base=[a * scale for a in starts],
            orientation="h", name=name, legendgroup=group, opacity=opacity, text=texts, textposition="inside",
            insidetextanchor="middle", marker=dict(color=colour, line=dict(color="white", width=1)),
            hovertext=hovers, hoverinfo="text"))
        small = [k for k, (a, b) in enumerate(zip(starts, ends)) if b - a < tiny]
        if small:
            fig.add_trace(go.Scatter(
                y=[lanes[k] for k in small], x=[(starts[k] + ends[k]) / 2 * scale for k in small], mode="markers",
                marker=dict(symbol="diamond", size=9, color=colour, line=dict(color="white", width=1)),
                hovertext=[hovers[k] for k in small], hoverinfo="text", legendgroup=group, showlegend=False))

    by_class: dict[Any, list] = {}
    for r in rows:
        by_class.setdefault(r.get("class"), []).append(r)
    for cls, rs in by_class.items():
        add([esc(r["device"]) for r in rs], [r["start"] for r in rs], [r["finish"] for r in rs],
            CLASS_COLOURS.get(cls, "#9e9e9e"), esc(cls or "task"), [esc(r["task"]) for r in rs],
            [f"<b>{esc(r['task'])}</b> ({esc(cls)})<br>{esc(r['device'])}: {r['start'] * scale:.4g}–"
             f"{r['finish'] * scale:.4g} {unit}" + (f"<br>{esc((reasons or {}).get(r['task'], ''))}"
                                                    if reasons else "") for r in rs], str(cls))
    if transfers:
        add([receive_lane(t["dst"]) for t in transfers], [t["start"] for t in transfers],
            [t["finish"] for t in transfers], TRANSFER_COLOUR, "transfer (arriving)", [""] * len(transfers),
            [f"transfer {esc(t['producer'])} → {esc(t['consumer'])}<br>{esc(t['src'])} → {esc(t['dst'])}: "
             f"{t['start'] * scale:.4g}–{t['finish'] * scale:.4g} {unit}"
             + (f"<br>{fmt_bytes(t['bytes'])}" if t.get("bytes") is not None else "") for t in transfers],
            "transfer", opacity=0.55)
    receiving = {t["dst"] for t in transfers}
    # The lanes are the y axis's categories, so its tick labels: device names escaped like every bar's y.
    lanes = [x for d in devices for x in ([esc(d), receive_lane(d)] if d in receiving else [esc(d)])]
    fig.update_layout(title=esc(title), barmode="overlay", height=140 + 34 * len(lanes), uniformtext=dict(minsize=8,
                      mode="hide"), xaxis_title=f"time ({unit})", yaxis_title="device (and its arriving transfers)",
                      legend_title="operator class", margin=dict(l=10, r=10, t=50, b=40))
    fig.update_yaxes(categoryorder="array", categoryarray=lanes[::-1])
    return fig


WHY_PARTS = (("inputs_at", "until its inputs exist", "#d0d7de"), ("transfer", "input transfer", TRANSFER_COLOUR),
             ("wait", "waiting for the device", "#d29922"), ("compute", "compute", "#2e7d32"))



def why_figure(rows: Sequence[Mapping[str, Any]], task: Any) -> go.Figure:
    """One stacked bar per candidate device of ``task``: when its inputs exist, then transfer, wait
    and compute up to its finish there (``rows`` from :func:`lab.modelled.placement.why`, seconds). The
    plan's device is marked; devices without a kernel or excluded by a pin say so."""
    ok = [r for r in rows if r["kernel"]]
    scale, unit = time_unit(max((r["finish"] for r in ok), default=0.0))

    def label(r: Mapping[str, Any]) -> str:
        tag = " ★ chosen" if r["chosen"] else ("" if r["allowed"] else " (pin excludes)")
        return esc(r["device"]) + tag

    fig = go.Figure()
    for key, name, colour in WHY_PARTS:
        fig.add_trace(go.Bar(y=[label(r) for r in ok], x=[r[key] * scale for r in ok], name=name, orientation="h",
                             marker_color=colour, hovertemplate=f"{name}: %{{x:.4g}} {unit}<extra>%{{y}}</extra>"))
    for r in rows:
        if not r["kernel"]:
            fig.add_trace(go.Bar(y=[esc(r["device"]) + " (no kernel)"], x=[0], showlegend=False, hoverinfo="skip"))
    # Drawn in a narrow column: the title in two lines, the legend under the bars.
    fig.update_layout(barmode="stack", title=f"Why {esc(task)} is where it is:<br>finish on each device",
                      xaxis_title=f"time ({unit})", yaxis_title="candidate device", legend_title="part of the finish",
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.25, yanchor="top"),
                      height=260 + 36 * len(rows), margin=dict(l=10, r=10, t=70, b=40))
    fig.update_yaxes(autorange="reversed")
    return fig


#: The narrowest the operator graph is drawn: a window 1024 pixels wide, with the sidebar open, leaves the page's
#: main column about 680 pixels (a classroom projector). A wider window only spreads the columns further apart.
DAG_WIDTH_PX = 640
DAG_FONT_PX = 12
#: A generous average width of one character of the labels' sans-serif font (underscores and digits are narrower).
DAG_CHAR_PX = 0.62 * DAG_FONT_PX
DAG_LABEL_CHARS = 14  # longer names are cut to their end (…0_conv1); the hover gives the whole name
DAG_ROW_PX = 46  # one row of operators: a marker and its label above it
DAG_MARKER_PX = 16
DAG_MARGIN = dict(l=10, r=10, b=20)
_BAND_GAP = 0.5  # rows between two bands of layers, where the edges that wrap run
_LABEL_ROWS = 0.75  # above the first row: room for its labels


def short_label(name: Any, chars: int = DAG_LABEL_CHARS) -> str:
    """``name`` as text of at most ``chars`` characters: its end, after an ellipsis, when it is longer (a traced
    operator's name ends with what tells it from its neighbours: blocks_2_conv1, layer_0_mlp_3), from the start
    of a word of it where one starts in the end's first half."""
    text = str(name)
    if len(text) <= chars:
        return text
    tail = text[-(chars - 1):]
    whole = text[-chars] in "_."  # the end starts with a word already
    cut = -1 if whole else min((k for k in (tail.find("_"), tail.find(".")) if k >= 0), default=-1)
    # from a word's start (…attention, not …elf_attention) unless that leaves too little to recognise it by
    return "…" + (tail[cut + 1:] if 0 <= cut < len(tail) // 2 else tail)


def dag_layout(tasks: Sequence[Any], edges: Sequence[tuple[Any, Any]], width_px: float = DAG_WIDTH_PX) -> dict[str, Any]:
    """Where :func:`dag_figure` draws each operator: in layers by depth (one column per layer, an operator one
    column right of its latest input), read left to right and wrapped into bands like lines of text, so that a
    column is wide enough for the longest label at ``width_px``. Returns ``pos`` (task -> (column, row); rows count
    down from 0), ``band`` (task -> band), ``columns`` per band, ``rows`` (the last row), ``gaps`` (the row under
    each band, where wrapping edges run) and ``label`` (task -> the text drawn, not escaped)."""
    preds: dict[Any, list] = {t: [] for t in tasks}
    for u, v in edges:
        preds[v].append(u)
    depth: dict[Any, int] = {}
    for t in tasks:
        depth[t] = 1 + max((depth[p] for p in preds[t]), default=-1)
    label = {t: short_label(t) for t in tasks}
    layers = 1 + max(depth.values(), default=0)
    slot = max(DAG_MARKER_PX, DAG_CHAR_PX * max((len(x) for x in label.values()), default=1)) + 14
    plot_w = width_px - DAG_MARGIN["l"] - DAG_MARGIN["r"]
    # a tenth of a column more on the right: the edges that skip a band run down there
    columns = max(1, min(layers, int(plot_w / slot - 0.1)))
    in_layer: dict[int, list] = {}
    for t in tasks:
        in_layer.setdefault(depth[t], []).append(t)
    pos, band, gaps, top = {}, {}, [], 0.0
    for b in range(-(-layers // columns)):
        ks = range(b * columns, min(layers, (b + 1) * columns))
        tall = max(len(in_layer.get(k, ())) for k in ks)
        for k in ks:
            here = in_layer.get(k, [])
            for i, t in enumerate(here):  # a layer's operators centred on the band, so a chain runs straight
                pos[t] = (k - b * columns, top + (tall - len(here)) / 2 + i)
                band[t] = b
        gaps.append(top + tall - 1 + 0.5)
        top += tall + _BAND_GAP
    return {"pos": pos, "band": band, "columns": columns, "rows": top - _BAND_GAP - 1, "gaps": gaps, "label": label}


def _edge_path(u: Any, v: Any, lay: Mapping[str, Any]) -> tuple[list, list]:
    """The points of edge u -> v: straight to the next column; under the band when it skips columns (a residual
    connection), so it does not run through the operators between; through the gap under its band when it wraps."""
    (xu, yu), (xv, yv) = lay["pos"][u], lay["pos"][v]
    bu, bv = lay["band"][u], lay["band"][v]
    if bu != bv:
        below, above = lay["gaps"][bu], lay["gaps"][bv - 1]
        edge = lay["columns"] - 0.45  # a band or more skipped: down the right-hand side, past the bands between
        xs, ys = ([xu, xu + 0.3, xv - 0.3, xv], [yu, below, above, yv]) if bv == bu + 1 else (
            [xu, xu + 0.3, edge, edge, xv - 0.3, xv], [yu, below, below, above, above, yv])
    elif xv - xu > 1:
        low = max(yu, yv) + 0.35
        xs, ys = [xu, xu + 0.4, xv - 0.4, xv], [yu, low, low, yv]
    else:
        xs, ys = [xu, xv], [yu, yv]
    return xs + [None], [-y if y is not None else None for y in ys + [None]]


def dag_figure(tasks: Sequence[Any], edges: Sequence[tuple[Any, Any]], device_of: Mapping[Any, str],
               devices: Sequence[str], labels: Mapping[Any, str] | None = None, title: str = "",
               width_px: float = DAG_WIDTH_PX) -> go.Figure:
    """The operator DAG in layers by depth (:func:`dag_layout`: left to right, wrapped into bands), nodes coloured
    by device; transfers between two devices drawn as red dashed edges. Labels are names cut to
    :data:`DAG_LABEL_CHARS` characters and never overlap at ``width_px`` or wider; the hover gives the whole name,
    its device and ``labels`` (its class and cost). ``tasks`` in topological order. The height grows with the
    bands."""
    lay = dag_layout(tasks, edges, width_px)
    colours = device_colours(devices)
    fig = go.Figure()
    for cross, style in ((False, dict(color="#b0b0b0", width=1.5)), (True, dict(color="#cf222e", width=2, dash="dash"))):
        xs, ys = [], []
        for u, v in edges:
            if (device_of[u] != device_of[v]) == cross:
                ex, ey = _edge_path(u, v, lay)
                xs += ex
                ys += ey
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=style, hoverinfo="skip",
                                 name="transfer between devices" if cross else "same device"))
    for d in devices:
        ts = [t for t in tasks if device_of[t] == d]
        if not ts:
            continue
        fig.add_trace(go.Scatter(
            x=[lay["pos"][t][0] for t in ts], y=[-lay["pos"][t][1] for t in ts], mode="markers+text", name=esc(d),
            marker=dict(size=DAG_MARKER_PX, color=colours[d], line=dict(color="white", width=1.5)),
            text=[esc(lay["label"][t]) for t in ts], textposition="top center", textfont=dict(size=DAG_FONT_PX),
            cliponaxis=False,
            hovertext=[f"<b>{esc(t)}</b> on {esc(d)}<br>{esc((labels or {}).get(t, ''))}" for t in ts],
            hoverinfo="text"))
    # The legend and the title above the plot, so the columns have the whole width; its lines as it wraps.
    names = ["same device", "transfer between devices", *devices]
    legend_lines = math.ceil(sum(40 + DAG_CHAR_PX * len(str(n)) for n in names) / (width_px - 20))
    top = 40 + 24 * legend_lines
    span = lay["rows"] + _LABEL_ROWS + 0.5
    fig.update_layout(title=dict(text=esc(title), y=1, yanchor="top", yref="container", pad=dict(t=10)),
                      height=round(top + DAG_MARGIN["b"] + DAG_ROW_PX * span), plot_bgcolor="white",
                      xaxis=dict(visible=False, range=[-0.5, lay["columns"] - 0.4], fixedrange=True),
                      yaxis=dict(visible=False, range=[-(lay["rows"] + 0.5), _LABEL_ROWS], fixedrange=True),
                      legend=dict(title="device", orientation="h", x=0, xanchor="left", y=1, yanchor="bottom"),
                      margin=dict(DAG_MARGIN, t=top))
    return fig


def usage_figure(rows: Sequence[Mapping[str, Any]], makespan: float) -> go.Figure:
    """Busy and idle time per device within the makespan (stacked bars)."""
    scale, unit = time_unit(makespan)
    devs = [esc(r["device"]) for r in rows]
    fig = go.Figure([go.Bar(x=devs, y=[r["busy"] * scale for r in rows], name="busy", marker_color="#2e7d32"),
                     go.Bar(x=devs, y=[r["idle"] * scale for r in rows], name="idle", marker_color="#d0d7de")])
    fig.update_layout(barmode="stack", title="Busy and idle time per device", xaxis_title="device",
                      yaxis_title=f"time ({unit})", height=340, margin=dict(l=10, r=10, t=50, b=40))
    return fig


def memory_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Memory used per device (parameters + output activations of its operators) beside its
    capacity, on a log axis; over-full devices in red."""
    devs = [esc(r["device"]) for r in rows]
    used = [max(r["memory"], 1.0) for r in rows]
    fig = go.Figure(go.Bar(
        x=devs, y=used, name="used", marker_color=["#cf222e" if r["over"] else "#1565c0" for r in rows],
        text=[fmt_bytes(r["memory"]) for r in rows], textposition="outside",
        hovertext=[f"{esc(r['device'])}: {fmt_bytes(r['memory'])} of {fmt_bytes(r['capacity'])}"
                   + (" (OVER-FULL)" if r["over"] else "") for r in rows], hoverinfo="text"))
    fig.add_trace(go.Scatter(x=devs, y=[r["capacity"] for r in rows], mode="markers", name="capacity",
                             marker=dict(symbol="line-ew-open", size=28, color="#cf222e", line=dict(width=3)),
                             hovertext=[f"{esc(r['device'])}: capacity {fmt_bytes(r['capacity'])}" for r in rows],
                             hoverinfo="text"))
    fig.update_layout(title="Memory per device", xaxis_title="device",
                      yaxis_title="memory (bytes, log scale)", yaxis_type="log", height=340,
                      margin=dict(l=10, r=10, t=50, b=40))
    return fig


def comparison_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Makespan per strategy, one bar group per graph (``rows``: graph, strategy, makespan in s or
    None); the optimum as a marker line per graph when present."""
    ok = [r for r in rows if r.get("makespan") is not None]
    scale, unit = time_unit(max((r["makespan"] for r in ok), default=0.0))
    fig = go.Figure()
    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    for gname in graphs:
        rs = [r for r in ok if r["graph"] == gname]
        fig.add_trace(go.Bar(y=[esc(r.get("label", r["strategy"])) for r in rs], x=[r["makespan"] * scale for r in rs],
                             name=esc(gname),
                             orientation="h", text=[f"{r['makespan'] * scale:.3g}" for r in rs],
                             textposition="outside",
                             hovertext=[f"{esc(r.get('label', r['strategy']))} on {esc(gname)}: "
                                        f"{r['makespan'] * scale:.4g} {unit}"
                                        + (f"<br>{100 * r['gap']:.1f}% above the optimum" if r.get("gap") is not None
                                           else "") for r in rs], hoverinfo="text"))
    fig.update_layout(barmode="group", title="Makespan of one forward pass per strategy (shorter is better)",
                      xaxis_title=f"makespan ({unit}, log scale)", xaxis_type="log", yaxis_title="strategy",
                      height=200 + 34 * len({r['strategy'] for r in rows}) * max(1, len(graphs)),
                      margin=dict(l=10, r=10, t=50, b=40), legend_title="graph")
    fig.update_yaxes(autorange="reversed")
    return fig


def balance_figure(series: Mapping[str, Mapping[str, Any]], nodes: Sequence[str],
                   reference_time: float | None = None) -> go.Figure:
    """Round by round, per rule: round time, max and mean wait (top) and every node's weight (bottom).

    ``series[rule]`` holds lists ``round``, ``round_time``, ``max_wait``, ``mean_wait`` (s) and
    ``weights`` (one tuple per round)."""
    peak = max([max(s["round_time"]) for s in series.values() if s["round_time"]] + [reference_time or 0.0])
    scale, unit = time_unit(peak)
    rules = list(series)
    dashes = ["solid", "dash", "dot", "dashdot"]
    key = ", ".join(f"{dashes[k % 4]}: {esc(r)}" for k, r in enumerate(rules))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=(f"Round time and waiting time ({key})", f"Weight per node ({key})"))
    colours = device_colours(nodes)
    traces, rows = [], []  # added at once: plotly checks the figure's whole data again on every add_trace
    for k, (rule, s) in enumerate(series.items()):
        dash = dashes[k % len(dashes)]
        traces += [go.Scatter(x=s["round"], y=[x * scale for x in s["round_time"]], mode="lines+markers",
                              name=f"{esc(rule)}: round time", line=dict(color="#24292f", dash=dash)),
                   go.Scatter(x=s["round"], y=[x * scale for x in s["max_wait"]], mode="lines",
                              name=f"{esc(rule)}: max wait", line=dict(color="#cf222e", dash=dash)),
                   go.Scatter(x=s["round"], y=[x * scale for x in s["mean_wait"]], mode="lines",
                              name=f"{esc(rule)}: mean wait", line=dict(color="#d29922", dash=dash))]
        rows += [1, 1, 1]
        for j, node in enumerate(nodes):
            traces.append(go.Scatter(x=s["round"], y=[w[j] for w in s["weights"]], mode="lines+markers",
                                     name=esc(node), line=dict(color=colours[node], dash=dash),
                                     legendgroup=esc(node), showlegend=k == 0,
                                     hovertemplate=f"{esc(rule)}, {esc(node)}: %{{y:.3g}}<extra></extra>"))
            rows.append(2)
    fig.add_traces(traces, rows=rows, cols=[1] * len(rows))
    if reference_time is not None:
        fig.add_hline(y=reference_time * scale, line=dict(color="#2da44e", dash="dot"), row=1, col=1,
                      annotation_text="plan made with the true speeds")
    fig.update_yaxes(title_text=f"time ({unit})", row=1, col=1)
    fig.update_yaxes(title_text="weight (dimensionless)", row=2, col=1)
    fig.update_xaxes(title_text="round", row=2, col=1)
    fig.update_layout(height=620, margin=dict(l=10, r=10, t=50, b=40))
    return fig


__all__ = ["time_unit", "bytes_unit", "device_colours", "gantt_figure", "why_figure", "receive_lane", "dag_figure",
           "dag_layout", "short_label", "DAG_WIDTH_PX", "DAG_CHAR_PX", "DAG_FONT_PX", "DAG_MARKER_PX", "usage_figure", "memory_figure", "comparison_figure", "balance_figure", "CLASS_COLOURS",
           "MIN_VISIBLE"]
