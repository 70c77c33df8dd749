"""Every figure builder shows user text as text: device, run, job, topology and operator names that
hold HTML reach plotly escaped, in every place plotly reads HTML (text, hover text and templates,
legend names, titles, annotations, and the tick labels a categorical axis takes from the data)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from lab.figures import allreduce as far
from lab.figures import compare as fcmp
from lab.figures import fidelity as ffid
from lab.figures import jobs as fjobs
from lab.figures import placement as fpl
from lab.figures import plan_run as fpr
from lab.figures import topology as ftopo
from lab.figures import training as ftr
from lab.figures.style import esc
from lab.modelled import collectives
from lab.view import topology_tables as tables
from lab.scenario.catalogue import preset
from lab.scenario.topology import Topology

# Loopback but not the app: a live link or image in a figure would point there.
ANCHOR = '<a href="http://127.0.0.2:9/d">x</a>'
IMG = "<img src=http://127.0.0.2:9/c.png>"
BOLD = "<b>gpu</b> & co"
HOSTILE = (ANCHOR, IMG, BOLD)
LIVE = re.compile(r"<\s*(a|img)\b", re.IGNORECASE)


def strings(obj):
    """Every string in a figure's JSON (data, layout, frames), however deeply nested."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from strings(v)
    elif isinstance(obj, np.ndarray):
        yield from strings(obj.tolist())


def assert_shown_as_text(fig: go.Figure, *names: str) -> None:
    """No string of ``fig`` holds a live link or image, and each of ``names`` is there, escaped."""
    texts = list(strings(fig.to_dict()))
    live = [s for s in texts if LIVE.search(s)]
    assert not live, live
    for name in names:
        assert any(esc(name) in s for s in texts), (name, texts[:40])


def hostile_topology() -> Topology:
    d = preset("cxl").to_dict()
    rename = {"gpu": ANCHOR, "fpga": IMG, "asic": BOLD}
    for dev in d["devices"]:
        dev["name"] = rename.get(dev["name"], dev["name"])
        dev["pool"] = IMG
    for link in d["links"]:
        link["a"], link["b"] = rename.get(link["a"], link["a"]), rename.get(link["b"], link["b"])
    d["name"] = ANCHOR
    return Topology.from_dict(d)


def test_esc_escapes_what_plotly_reads_as_html_and_nothing_else():
    assert esc(ANCHOR) == '&lt;a href="http://127.0.0.2:9/d"&gt;x&lt;/a&gt;'
    assert esc(BOLD) == "&lt;b&gt;gpu&lt;/b&gt; &amp; co"
    assert esc("gpu0 (A100)") == "gpu0 (A100)"


def test_topology_graph_heatmap_and_comparison():
    topo = hostile_topology()
    assert set(HOSTILE) <= set(topo.device_names)
    assert_shown_as_text(ftopo.network_figure(topo), *HOSTILE)
    heat = ftopo.path_heatmap(topo.path_matrix(1e6), 1e6)
    assert_shown_as_text(heat, *HOSTILE)
    assert esc(ANCHOR) in list(heat.data[0].y)  # the categorical axis: its tick labels
    df, _ = tables.compare_designs(topo, tables.as_pcie(topo), 1e6, ("this cluster", ANCHOR))
    assert_shown_as_text(ftopo.comparison_figure(df, 1e6), ANCHOR, IMG)


def test_allreduce_step_through_curves_and_trigger_timeline():
    topo = hostile_topology()
    names = [ANCHOR, IMG, BOLD]
    setup = collectives.Setup(tuple(names))
    for alg in ("ring", "host", "tree"):
        s = setup.schedule(alg, 4096, with_state=True)
        fig = far.step_figure(s, 1, ANCHOR)
        assert_shown_as_text(fig, *names)
        grid = fig.data[3]
        assert esc(IMG) in list(grid.y)  # the heatmap's rows: device names are its tick labels
    curves = {ANCHOR: ("ring", setup)}
    assert_shown_as_text(far.time_vs_size_figure(collectives.sweep_sizes(topo, curves, [4096, 65536]), IMG), ANCHOR, IMG)
    plain = setup.schedule("ring", 4096)
    comp = collectives.compute_times(topo, names, 1e9)
    tls = {m: collectives.trigger_timeline(plain, topo, comp, m) for m in ("sync", "async")}
    trig = far.trigger_figure(tls)
    assert_shown_as_text(trig, *names)
    assert all(not LIVE.search(y) for tr in trig.data for y in tr.y)


def test_placement_gantt_why_graph_usage_memory_comparison_and_balance():
    devs = [ANCHOR, IMG, "cpu0"]
    rows = [{"task": BOLD, "device": ANCHOR, "start": 0.0, "finish": 1e-3, "class": "matmul"},
            {"task": "relu", "device": IMG, "start": 1.2e-3, "finish": 1.21e-3, "class": "elementwise"}]
    transfers = [{"producer": BOLD, "consumer": "relu", "src": ANCHOR, "dst": IMG, "start": 1e-3,
                  "finish": 1.2e-3, "bytes": 4096}]
    gantt = fpl.gantt_figure(rows, devs, IMG, transfers, {BOLD: f"fastest on {ANCHOR}", "relu": "pinned"})
    assert_shown_as_text(gantt, ANCHOR, IMG, BOLD)
    lanes = list(gantt.layout.yaxis.categoryarray)
    assert esc(ANCHOR) in lanes and fpl.receive_lane(IMG) in lanes and fpl.receive_lane(IMG).startswith(esc(IMG))
    assert {y for tr in gantt.data for y in tr.y} <= set(lanes)  # every bar sits on a lane of the axis

    why = [{"device": d, "type": "gpu", "kernel": k, "chosen": d == ANCHOR, "allowed": True, "inputs_at": 0.0,
            "transfer": 1e-4, "wait": 0.0, "compute": 1e-3, "finish": 1.1e-3} for d, k in zip(devs, (True, True, False))]
    assert_shown_as_text(fpl.why_figure(why, BOLD), ANCHOR, IMG, BOLD)
    dag = fpl.dag_figure([BOLD, "relu"], [(BOLD, "relu")], {BOLD: ANCHOR, "relu": IMG}, devs,
                         {BOLD: f"matmul on {IMG}"}, ANCHOR)
    assert_shown_as_text(dag, ANCHOR, IMG, BOLD)
    usage = [{"device": d, "busy": 1e-3, "idle": 1e-4, "memory": 1e6, "capacity": 2e6, "over": d == IMG}
             for d in devs]
    assert_shown_as_text(fpl.usage_figure(usage, 1.1e-3), ANCHOR, IMG)
    assert_shown_as_text(fpl.memory_figure(usage), ANCHOR, IMG)
    strategies = [{"graph": ANCHOR, "strategy": IMG, "makespan": 1e-3, "gap": 0.1},
                  {"graph": ANCHOR, "strategy": "optimal", "makespan": 9e-4, "gap": 0.0}]
    assert_shown_as_text(fpl.comparison_figure(strategies), ANCHOR, IMG)
    series = {BOLD: {"round": [0, 1], "round_time": [1e-3, 9e-4], "max_wait": [1e-4, 0.0],
                     "mean_wait": [5e-5, 0.0], "weights": [(0.5, 0.5), (0.6, 0.4)]}}
    assert_shown_as_text(fpl.balance_figure(series, [ANCHOR, IMG], 8e-4), ANCHOR, IMG, BOLD)


def test_training_curves_and_time_split():
    per = pd.DataFrame({"step": [1, 1], "worker": [0, 1], "t_compute": [1.0, 2.0], "t_emul_compute": [0.0, 0.5],
                        "t_comm": [0.5, 0.5], "t_emul_comm": [0.0, 0.1], "t_compress": [0.1, 0.1],
                        "t_idle": [0.2, 0.0]})
    split = ftr.time_split_figure(per, {0: f"worker 0 ({ANCHOR})", 1: f"worker 1 ({IMG})"}, title=BOLD)
    assert_shown_as_text(split, ANCHOR, IMG, BOLD)
    job = pd.DataFrame({"step": [1, 2], "loss": [2.0, 1.5], "test_acc": [0.1, 0.2]})
    assert_shown_as_text(ftr.loss_figure({ANCHOR: job}, title=IMG), ANCHOR, IMG)


def test_compare_bands_name_hover_and_panels():
    band = pd.DataFrame({"step": [1, 2], "mean": [1.0, 0.5], "min": [0.9, 0.4], "max": [1.1, 0.6]})
    curves = [SimpleNamespace(label=f"{ANCHOR} {i}", hover=IMG, optimizer="adam", compression=f"{BOLD} {i}",
                              band=band, repeats=2) for i in range(7)]  # more than 6: one panel per compression
    fig = fcmp.band_figure(curves, "step", "loss", ANCHOR)
    assert_shown_as_text(fig, ANCHOR, IMG, BOLD)
    assert any(esc(BOLD) in a.text for a in fig.layout.annotations)  # the panels' titles


def test_fidelity_scatter_errors_parts_and_calibration():
    rows = [{"name": n, "predicted": 0.011, "measured": 0.010, "model": "mlp", "workers": 2, "compressed": False,
             "emulated": False, "parts_predicted": {"compute": 0.005}, "parts_measured": {"compute": 0.006}}
            for n in HOSTILE]
    assert_shown_as_text(ffid.step_scatter(rows, 0.15, ANCHOR), *HOSTILE)
    errors = ffid.error_bars(rows)
    assert_shown_as_text(errors, *HOSTILE)
    assert esc(ANCHOR) in list(errors.data[0].y)
    assert_shown_as_text(ffid.parts_scatter(rows), *HOSTILE)
    assert_shown_as_text(ffid.calibration_fit([{"name": IMG, "batch": 8, "measured": 0.01, "fitted": 0.011}]), IMG)


def test_jobs_timeline_and_stages():
    rows = [{"job": "r1", "label": ANCHOR, "resource": IMG, "start": 0.0, "end": 1.0}]
    assert_shown_as_text(fjobs.timeline_figure(rows, title=BOLD, resources=[IMG, "cpu1"]), ANCHOR, IMG, BOLD)
    events = [{"run_id": "r1", "t": 10.0, "event": "submitted", "attempt": 0, "step": None}]
    assert_shown_as_text(fjobs.events_figure(events, {"r1": ANCHOR}), ANCHOR)


@pytest.mark.parametrize("module", [far, fcmp, ffid, fjobs, fpl, ftopo, ftr])
def test_every_figure_module_escapes_with_the_one_function(module):
    assert module.esc is esc


def test_placement_run_gantt_ranking_and_balance_rounds():
    devs = [ANCHOR, IMG]
    rows = [{"device": ANCHOR, "piece": 0, "micro": 0, "kind": "forward", "op": BOLD, "start": 0.0, "end": 1e-3},
            {"device": ANCHOR, "piece": 0, "micro": 0, "kind": "emulated", "op": BOLD, "start": 1e-3, "end": 2e-3},
            {"kind": "activation", "src": ANCHOR, "dst": IMG, "device": IMG, "piece": 1, "from_piece": 0, "micro": 0,
             "bytes": 4096, "start": 2e-3, "end": 3e-3, "op": None},
            {"device": IMG, "piece": 1, "micro": 0, "kind": "backward", "op": IMG, "start": 3e-3, "end": 4e-3}]
    gantt = fpr.run_gantt_figure(rows, rows, devs, measured_badge=BOLD, title=ANCHOR)
    assert_shown_as_text(gantt, ANCHOR, IMG, BOLD)
    lanes = list(gantt.layout.yaxis.categoryarray)
    assert lanes == [esc(IMG), esc(ANCHOR)] and {y for tr in gantt.data for y in tr.y if y is not None} <= set(lanes)
    assert_shown_as_text(fpr.run_gantt_figure([], None, devs, measured_badge=IMG), IMG)
    strategies = [{"strategy": ANCHOR, "modelled": 1e-3, "measured": 1.1e-3, "low": 1e-3, "high": 1.2e-3},
                  {"strategy": IMG, "modelled": 2e-3, "measured": 1.9e-3, "low": None, "high": None}]
    ranking = fpr.strategy_ranking_figure(strategies, title=BOLD)
    assert_shown_as_text(ranking, ANCHOR, IMG, BOLD)
    assert esc(ANCHOR) in list(ranking.data[0].y)
    rounds = [{"round": k, "device": d, "weight": 0.5, "wait": 1e-4, "step": 1e-3} for k in range(2) for d in devs]
    assert_shown_as_text(fpr.balance_rounds_figure(rounds, rounds), ANCHOR, IMG)
    outcome = [{"plan": ANCHOR, "key": "even_split", "status": "done", "step": 2e-3, "vs_split": 0.0},
               {"plan": IMG, "key": "wait", "status": "running", "step": float("nan"), "vs_split": float("nan")}]
    assert_shown_as_text(fpr.balance_outcome_figure(outcome), ANCHOR, IMG)
