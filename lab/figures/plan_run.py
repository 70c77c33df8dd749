"""Plotly builders for a placement run: what ran on each device (measured) beside what the model predicted
(modelled) and the replay, the strategies ranked by model and measurement, and the balancing loop's rounds as
they ran. Plain data in, go.Figure out; times in the unit :func:`lab.figures.style.time_unit` picks."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lab.figures.placement import TRANSFER_COLOUR, device_colours
from lab.figures.style import esc, fmt_bytes, time_unit
from lab.modelled.placement.pipeline import bubble_share, is_transfer, lanes as lanes_of
from lab.scenario.units import error_pct

# ----- a placement run: what ran on each device (measured) beside what the model predicted (modelled) -------
#
# Rows come in one format, measured or modelled (seconds from the step's start):
#   compute:  device, piece, micro, kind ("forward" | "backward" | "backward_input" | "backward_weight" | "loss" |
#             "optimizer" | "emulated"), op, start, end
#   transfer: kind ("activation" | "gradient"), src, dst, device (= dst), piece, from_piece, micro, bytes, start, end

#: Compute kinds: (legend name, colour, hatch). An emulated wait is the time an operator waits on a device the
#: topology says is slower; only measured runs have it, drawn light and hatched.
RUN_KINDS = {"forward": ("forward", "#4c78a8", ""), "backward": ("backward", "#f58518", ""),
             "backward_input": ("backward: input's gradient", "#f58518", ""),
             "backward_weight": ("backward: weights' gradient", "#e45756", ""),
             "loss": ("loss", "#54a24b", ""), "optimizer": ("optimizer step", "#b279a2", ""),
             "emulated": ("emulated wait (slower device)", "#c9ced6", "/")}
#: Transfer kinds: (legend name, colour).
TRANSFER_KINDS = {"activation": ("activation sent", TRANSFER_COLOUR), "gradient": ("gradient sent", "#8250df")}
_OTHER_KIND = "#9e9e9e"
#: A run's bars are many and close together: only those under this share of the time axis (about 2 px on a
#: projector) get a diamond.
RUN_MIN_VISIBLE = 0.002


def _note(fig: go.Figure, text: str, xref: str = "paper", yref: str = "paper", x: float = 0.5,
          y: float = 0.5) -> None:
    fig.add_annotation(text=text, showarrow=False, x=x, y=y, xref=xref, yref=yref, font=dict(size=15, color="#57606a"))


def run_gantt_figure(measured: Sequence[Mapping[str, Any]], modelled: Sequence[Mapping[str, Any]] | None,
                     devices: Sequence[str], *, measured_badge: str = "measured", title: str = "",
                     replayed: Sequence[Mapping[str, Any]] | None = None) -> go.Figure:
    """One step of a placement run: a lane per device, a bar per operator row from its start to its end
    coloured by kind (forward, backward, loss, optimizer; emulated waits light and hatched), and each
    transfer as a thin line from (sent, its source's lane) to (arrived, its destination's lane).
    What was measured (subplot titled ``measured_badge``, e.g. "measured, with emulated waits") is on
    top, what the model predicts ("modelled") below it on the same time axis, and with ``replayed`` the
    recorded step replayed through the model with its own task times; without modelled rows only the
    measured panel. One trace per kind per panel (and per transfer kind), whatever the
    number of rows; bars too short to see at this scale also get a small diamond with the same hover."""
    panels = [(measured_badge, list(measured))]
    if modelled:
        panels.append(("modelled", list(modelled)))
    if replayed:
        panels.append(("replayed: measured task times, no gaps", list(replayed)))
    every = [r for _, rows in panels for r in rows]
    if not every:
        fig = go.Figure()
        _note(fig, f"Nothing to draw yet: no {esc(measured_badge)} rows"
              + ("" if modelled is None else " and no modelled rows") + ". Run the plan to see its step.")
        fig.update_layout(title=esc(title) or "A step of the placement run", height=300,
                          xaxis=dict(visible=False), yaxis=dict(visible=False), margin=dict(l=10, r=10, t=50, b=10))
        return fig

    span = max([r["end"] for r in every] + [0.0])
    scale, unit = time_unit(span)
    tiny = RUN_MIN_VISIBLE * span
    lanes_raw = lanes_of(devices, *(rows for _, rows in panels))
    lanes = [esc(d) for d in lanes_raw]

    def dur(r: Mapping[str, Any]) -> str:
        a, b = r["start"] * scale, r["end"] * scale
        return f"{a:.4g}–{b:.4g} {unit} ({(r['end'] - r['start']) * scale:.4g} {unit})"

    subtitles = []
    for badge, rows in panels:
        comp = [r for r in rows if not is_transfer(r)]
        if comp:
            first, last = min(r["start"] for r in comp), max(r["end"] for r in comp)
            bubble = bubble_share(comp, lanes_raw)
            subtitles.append(f"{esc(badge)}: {(last - first) * scale:.3g} {unit} from the first start to the last end"
                             + (f", bubble {bubble:.0%} of device time" if math.isfinite(bubble) else ""))
        else:
            subtitles.append(f"{esc(badge)}: no rows")
    n = len(panels)
    per_panel = 60 + (40 if len(lanes) <= 4 else 24 if len(lanes) <= 8 else 20) * len(lanes)  # 8 lanes: 768 px
    gap, top, bottom = 70, 80, 110  # px: between the panels (room for the lower one's title), above, below
    height = top + bottom + n * per_panel + (n - 1) * gap
    plot_h = height - top - bottom
    fig = make_subplots(rows=n, cols=1, shared_xaxes=True, vertical_spacing=gap / plot_h if n > 1 else 0.0,
                        subplot_titles=subtitles)
    shown: set[str] = set()
    for p, (badge, rows) in enumerate(panels, start=1):
        comp = [r for r in rows if not is_transfer(r)]
        if not rows:
            _note(fig, f"no {esc(badge)} rows", xref=f"x{p if p > 1 else ''} domain",
                  yref=f"y{p if p > 1 else ''} domain")
        by_kind: dict[str, list] = {}
        for r in comp:
            by_kind.setdefault(str(r.get("kind")), []).append(r)
        order = [k for k in RUN_KINDS if k in by_kind] + [k for k in by_kind if k not in RUN_KINDS]
        for kind in order:
            rs = by_kind[kind]
            name, colour, hatch = RUN_KINDS.get(kind, (esc(kind), _OTHER_KIND, ""))
            ys = [esc(r["device"]) for r in rs]
            hovers = [f"<b>{name if r.get('op') is None else esc(r['op'])}</b> · {name}<br>"
                      f"{esc(r['device'])} · micro-batch {r.get('micro')} · piece {r.get('piece')}<br>"
                      f"{dur(r)}<br><i>{esc(badge)}</i>" for r in rs]
            fig.add_trace(go.Bar(
                y=ys, x=[(r["end"] - r["start"]) * scale for r in rs], base=[r["start"] * scale for r in rs],
                orientation="h", name=name, legendgroup=esc(kind), showlegend=kind not in shown,
                marker=dict(color=colour, line=dict(color="white", width=0.5), pattern=dict(shape=hatch)),
                hovertext=hovers, hoverinfo="text"), p, 1)
            small = [k for k, r in enumerate(rs) if r["end"] - r["start"] < tiny]
            if small:
                fig.add_trace(go.Scatter(
                    y=[ys[k] for k in small], x=[(rs[k]["start"] + rs[k]["end"]) / 2 * scale for k in small],
                    mode="markers", name=f"{name} (short)", legendgroup=esc(kind), showlegend=False,
                    marker=dict(symbol="diamond", size=6, color=colour, line=dict(color="white", width=0.5)),
                    hovertext=[hovers[k] for k in small], hoverinfo="text"), p, 1)
            shown.add(kind)
        for kind, (name, colour) in TRANSFER_KINDS.items():
            ts = [r for r in rows if r.get("kind") == kind]
            if not ts:
                continue
            xs: list = []
            ys2: list = []
            hv: list = []
            for t in ts:
                h = (f"<b>{name}</b> · micro-batch {t.get('micro')}<br>piece {t.get('from_piece')} on {esc(t['src'])}"
                     f" → piece {t.get('piece')} on {esc(t['dst'])}<br>sent {t['start'] * scale:.4g} {unit}, arrived "
                     f"{t['end'] * scale:.4g} {unit} ({(t['end'] - t['start']) * scale:.4g} {unit})"
                     + (f"<br>{fmt_bytes(t['bytes'])}" if t.get("bytes") is not None else "")
                     + f"<br><i>{esc(badge)}</i>")
                xs += [t["start"] * scale, t["end"] * scale, None]
                ys2 += [esc(t["src"]), esc(t["dst"]), None]
                hv += [h, h, None]
            fig.add_trace(go.Scatter(
                x=xs, y=ys2, mode="lines+markers", name=name, legendgroup=kind, showlegend=kind not in shown,
                line=dict(color=colour, width=1.2), opacity=0.75,
                marker=dict(size=5, color=colour, symbol=["circle", "triangle-right", "circle"] * len(ts)),
                hovertext=hv, hoverinfo="text"), p, 1)
            shown.add(kind)
    fig.update_layout(
        title=esc(title) or ("A step of the placement run: " + " above, ".join(esc(b) for b, _ in panels)
                             + (" below" if n > 1 else "")),
        barmode="overlay", height=height, font=dict(size=14), hoverlabel=dict(font_size=14),
        margin=dict(l=10, r=10, t=top, b=bottom), legend_title="",
        legend=dict(orientation="h", yanchor="top", y=-55 / max(plot_h, 1), x=0.0))
    fig.update_yaxes(categoryorder="array", categoryarray=lanes[::-1], title_text="device", automargin=True)
    fig.update_xaxes(title_text=f"time from the step's start ({unit})", row=n, col=1)
    return fig


def strategy_ranking_figure(rows: Sequence[Mapping[str, Any]], *, title: str = "") -> go.Figure:
    """Time per step per strategy: the modelled bar beside the measured one, the measured interval
    (``low``–``high``) as its whiskers, fastest measured on top; each hover says the error
    (measured / modelled − 1). ``rows``: strategy, modelled, measured (s), low, high (s or None)."""
    fig = go.Figure()
    default = "Time per step by strategy: modelled vs measured (whiskers: the measured interval)"
    if not rows:
        _note(fig, "No strategies compared yet: run them to rank them.")
        fig.update_layout(title=esc(title) or default, height=300, xaxis=dict(visible=False),
                          yaxis=dict(visible=False), margin=dict(l=10, r=10, t=50, b=10))
        return fig
    rs = sorted(rows, key=lambda r: (r.get("measured") is None, r.get("measured") or 0.0))
    peak = max([v for r in rs for v in (r.get("modelled"), r.get("measured"), r.get("high")) if v is not None] + [0.0])
    scale, unit = time_unit(peak)
    ys = [esc(r["strategy"]) for r in rs]

    def t(x: float | None) -> str:
        return "—" if x is None else f"{x * scale:.4g} {unit}"

    hovers = []
    for r in rs:
        e = error_pct(r.get("measured"), r.get("modelled"))
        interval = (f" (interval {t(r.get('low'))}–{t(r.get('high'))})"
                    if r.get("low") is not None or r.get("high") is not None else "")
        hovers.append(f"<b>{esc(r['strategy'])}</b><br>modelled: {t(r.get('modelled'))}<br>measured: "
                      f"{t(r.get('measured'))}{interval}<br>error (measured / modelled − 1): "
                      + ("—" if e is None else f"{e:+.1f} %"))

    def val(x: float | None) -> float | None:
        return None if x is None else x * scale

    fig.add_trace(go.Bar(y=ys, x=[val(r.get("modelled")) for r in rs], orientation="h", name="modelled",
                         marker=dict(color="#9ecae1", pattern=dict(shape="x")), hovertext=hovers, hoverinfo="text"))
    plus = [None if r.get("high") is None or r.get("measured") is None else (r["high"] - r["measured"]) * scale
            for r in rs]
    minus = [None if r.get("low") is None or r.get("measured") is None else (r["measured"] - r["low"]) * scale
             for r in rs]
    errs = [error_pct(r.get("measured"), r.get("modelled")) for r in rs]
    fig.add_trace(go.Bar(
        y=ys, x=[val(r.get("measured")) for r in rs], orientation="h", name="measured", marker_color="#08519c",
        error_x=dict(type="data", symmetric=False, array=[p or 0.0 for p in plus],
                     arrayminus=[m or 0.0 for m in minus], color="#24292f", thickness=1.5, width=6),
        text=["" if e is None else f"{e:+.0f} %" for e in errs], textposition="inside", insidetextanchor="start",
        textfont=dict(color="white"), hovertext=hovers, hoverinfo="text"))
    fig.update_layout(barmode="group", title=esc(title) or default, height=170 + 60 * len(rs), font=dict(size=14),
                      xaxis_title=f"time per step ({unit})", yaxis_title="strategy", legend_title="time per step",
                      margin=dict(l=10, r=10, t=60, b=40), hoverlabel=dict(font_size=14),
                      legend=dict(traceorder="reversed"))  # as the bars stack: measured above modelled
    fig.update_yaxes(categoryorder="array", categoryarray=ys[::-1], automargin=True)
    return fig


def balance_rounds_figure(measured: Sequence[Mapping[str, Any]],
                          modelled: Sequence[Mapping[str, Any]] | None) -> go.Figure:
    """Round by round of balancing: each device's weight (top), its waiting as a share of the round's step time
    (middle) and the step time relative to the first round's (bottom); measured solid, modelled dashed. Shares
    and ratios, so a loop simulated by a cost model in its own seconds reads beside a measured one; the seconds
    are in the hover. ``rows``: round, device, weight, wait (s), step (s; the round's step time)."""
    sets = [("measured", list(measured), "solid")]
    if modelled:
        sets.append(("modelled", list(modelled), "dash"))
    every = [r for _, rs, _ in sets for r in rs]
    title = "Balancing round by round: measured (solid)" + (" and modelled (dashed)" if len(sets) > 1 else "")
    if not every:
        fig = go.Figure()
        _note(fig, "No balancing rounds yet: run the balancing loop to see weights, waits and step times.")
        fig.update_layout(title=title, height=300, xaxis=dict(visible=False), yaxis=dict(visible=False),
                          margin=dict(l=10, r=10, t=50, b=10))
        return fig
    devices = lanes_of([], every)
    colours = device_colours(devices)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=(
        "Weight per device (relative to the round's mean)", "Waiting per device (share of the step time)",
        "Step time (relative to round 1)"))
    for label, rows, dash in sets:
        step: dict[Any, float] = {}
        for r in rows:
            step[r["round"]] = max(step.get(r["round"], 0.0), r["step"])
        scale, unit = time_unit(max(step.values(), default=0.0))
        for d in devices:
            mine = sorted((r for r in rows if r["device"] == d), key=lambda r: r["round"])
            if not mine:
                continue
            x = [r["round"] for r in mine]
            common = dict(mode="lines+markers", legendgroup=f"{label}:{esc(d)}", line=dict(color=colours[d], dash=dash),
                          hoverinfo="text", name=f"{esc(d)}, {label}")
            fig.add_trace(go.Scatter(x=x, y=[r["weight"] for r in mine], **common, hovertext=[
                f"{esc(d)}, {label}<br>round {r['round']}: weight {r['weight']:.3g}" for r in mine]), 1, 1)
            fig.add_trace(go.Scatter(x=x, y=[r["wait"] / step[r["round"]] if step[r["round"]] > 0 else 0.0
                                             for r in mine], **common, showlegend=False,
                                     hovertext=[f"{esc(d)}, {label}<br>round {r['round']}: waited "
                                                f"{r['wait'] * scale:.4g} {unit} of {step[r['round']] * scale:.4g} "
                                                f"{unit}" for r in mine]), 2, 1)
        xs = sorted(step)
        first = step[xs[0]] if xs and step[xs[0]] > 0 else 1.0
        fig.add_trace(go.Scatter(x=xs, y=[step[k] / first for k in xs], mode="lines+markers",
                                 name=f"step time, {label}",
                                 line=dict(color="#24292f", dash=dash, width=2.5), hoverinfo="text",
                                 hovertext=[f"step time, {label}<br>round {k}: {step[k] * scale:.4g} {unit} "
                                            f"({step[k] / first:.2f} of round {xs[0]})" for k in xs]), 3, 1)
    rounds = {r["round"] for r in every}
    fig.update_yaxes(title_text="weight / mean", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="wait / step", row=2, col=1, range=[0, 1.05])
    fig.update_yaxes(title_text="step / round 1", row=3, col=1, rangemode="tozero")
    fig.update_xaxes(title_text="round", row=3, col=1)
    if len(rounds) <= 20:
        fig.update_xaxes(dtick=1)
    fig.update_layout(title=title, height=700, font=dict(size=14), hoverlabel=dict(font_size=14),
                      margin=dict(l=10, r=10, t=60, b=40), legend_title="device, source")
    return fig


def balance_outcome_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """A balancing session's plans (:func:`lab.view.placement.balance_outcome`): each one's measured step time as
    a bar, labelled with its change against the even layer split; a plan still running has no bar yet."""
    done = [r for r in rows if isinstance(r["step"], (int, float)) and math.isfinite(r["step"])]
    scale, unit = time_unit(max((r["step"] for r in done), default=0.0))
    names = [f"{esc(r['plan'])} ({r['status']})" for r in rows]
    steps = [r["step"] * scale if r in done else None for r in rows]
    text = [("" if r not in done else f"{r['step'] * scale:.3g} {unit}"
             + ("" if not math.isfinite(r["vs_split"]) else f" ({r['vs_split']:+.0%} vs the even split)"))
            for r in rows]
    fig = go.Figure(go.Bar(y=names, x=steps, orientation="h", text=text, textposition="auto",
                           marker_color=["#2da44e" if r["key"] in ("wait", "throughput") else "#8c959f" for r in rows],
                           hoverinfo="text", hovertext=[n + ("<br>" + t if t else "") for n, t in zip(names, text)]))
    fig.update_layout(title="Measured step time of each plan on the same emulated cluster", height=120 + 45 * len(rows),
                      margin=dict(l=10, r=10, t=50, b=40), xaxis_title=f"step time ({unit})",
                      yaxis=dict(autorange="reversed", automargin=True), font=dict(size=14))
    return fig


__all__ = ["balance_outcome_figure", "RUN_KINDS", "TRANSFER_KINDS", "run_gantt_figure", "strategy_ranking_figure",
            "balance_rounds_figure"]
