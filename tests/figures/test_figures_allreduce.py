"""lab.figures.allreduce: the step-through of a schedule, modelled time curves, trigger timelines and
measured-against-fitted times, built from the lab's own schedules, sweeps and fits."""

import pytest

from lab.figures.allreduce import (ALGO_COLOURS, KIND_COLOURS, measured_vs_model_figure, step_figure,
                                   time_vs_n_figure, time_vs_size_figure, trigger_figure)
from lab.modelled import collectives

NAMES = collectives.default_names(4)
TOPO = collectives.uniform_star(4, 10e9, 1e-6)
SETUP = collectives.Setup(tuple(NAMES))


def test_step_figure_draws_the_chosen_step_and_has_no_control_of_its_own():
    s = collectives.build_schedule("ring", 4, 4096)
    fig = step_figure(s, 2, "Ring")
    assert not fig.frames and not fig.layout.sliders and not fig.layout.updatemenus  # the page's slider is the one
    assert f"step 2 of {len(s.steps)}" in fig.layout.title.text
    grid = fig.data[3]
    assert list(grid.x) == [f"chunk {c}" for c in range(4)] and list(grid.y) == NAMES
    assert all(v == 0.25 for row in step_figure(s, 0).data[3].z for v in row)  # only its own contribution
    assert all(v == 1.0 for row in step_figure(s, len(s.steps)).data[3].z for v in row)  # everything, everywhere
    pairs = {(t.src, t.dst) for t in s.steps[1].transfers}
    assert len(fig.data[2].text) == len(pairs)
    assert all(h.endswith(f"{s.steps[1].transfers[0].nbytes:,} B") for h in fig.data[2].hovertext)
    assert f"step {len(s.steps)} of {len(s.steps)}" in step_figure(s, 99).layout.title.text  # clamped


def test_step_figure_places_an_outside_host_in_the_middle_and_needs_states():
    s = collectives.build_schedule("host", 3, 12)
    nodes = step_figure(s).data[0]
    assert nodes.text[-1] == "host" and (nodes.x[-1], nodes.y[-1]) == (0.0, 0.0)
    assert nodes.text[0] == "A<br>(a)" and nodes.marker.color[0] != nodes.marker.color[-1]
    tree = step_figure(collectives.build_schedule("tree", 5, 20)).data[0]
    assert tree.y[0] == 1.0 and min(tree.y) == -1.0  # root on top, deepest level at the bottom
    with pytest.raises(ValueError, match="with_state"):
        step_figure(collectives.build_schedule("ring", 3, 12, with_state=False))


def test_time_curves_one_line_per_algorithm_in_its_colour_with_units():
    curves = {a: (a, SETUP) for a in collectives.ALGORITHMS} | {"ring (lab order)": ("ring", SETUP)}
    series = collectives.sweep_sizes(TOPO, curves, [1024, 65536, 1 << 20])
    fig = time_vs_size_figure(series, "t(S)")
    assert [t.name for t in fig.data] == list(series)
    for t in fig.data:
        assert list(t.x) == series[t.name][0] and list(t.y) == series[t.name][1]
        assert t.line.color == ALGO_COLOURS[t.name]
    assert fig.data[-1].line.dash == "dot" and fig.data[0].line.dash is None
    assert "(bytes)" in fig.layout.xaxis.title.text and fig.layout.yaxis.title.text == "modelled time (s)"
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"
    uniform = collectives.sweep_uniform([2, 4, 8], 1 << 20, 1e-6, 1e-10)
    assert time_vs_n_figure(uniform, "t(N)").layout.xaxis.type == "linear"
    logn = time_vs_n_figure(uniform, "t(N)", log_x=True)
    assert logn.layout.xaxis.type == "log" and logn.layout.xaxis.title.text == "devices N"
    assert len(logn.data) == len(collectives.ALGORITHMS)


@pytest.mark.parametrize("scale, unit", [(1e3, "ms"), (1e6, "µs")])
def test_trigger_bars_are_durations_in_the_stated_unit(scale, unit):
    compute = {"A": 1e-3, "B": 2e-3, "C": 1e-3, "D": 3e-3}
    tls = {m: collectives.trigger_timeline(SETUP.schedule("ring", 1 << 20), TOPO, compute, m) for m in ("sync", "async")}
    fig = trigger_figure(tls, scale, unit)
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [f"{m}: iteration ends at {tls[m].makespan * scale:.3g} {unit}" for m in tls]
    sync_compute = next(t for t in fig.data if t.name == "compute" and t.xaxis == "x")
    for node, x, base in zip(sync_compute.y, sync_compute.x, sync_compute.base):
        assert x == pytest.approx(compute[node] * scale) and base == 0
    assert [t.name for t in fig.data if t.showlegend is not False] == ["compute", "communicate", "idle"]
    assert all(t.marker.color == KIND_COLOURS[t.name] and unit in t.hovertemplate for t in fig.data)
    assert fig.layout.xaxis2.title.text == f"time since the iteration started ({unit})"


def test_measured_markers_and_fitted_lines_share_a_colour_per_implementation():
    sizes = [4096, 65536, 1 << 20]
    rows = [{"impl": impl, "size": s, "time": t, "time_min": 0.9 * t, "time_max": 1.2 * t}
            for impl, k in (("ring", 1.0), ("gloo", 2.0)) for s in sizes for t in [k * (6e-5 + 1.5e-9 * s)]]
    fits = {impl: collectives.fit_alpha_beta(4, sizes, [r["time"] for r in rows if r["impl"] == impl])
            for impl in ("ring", "gloo")}
    fig = measured_vs_model_figure(rows, fits, "4 processes")
    assert len(fig.data) == 2 * len(fits)
    ring_meas, ring_model, gloo_meas, _ = fig.data
    assert ring_meas.name == "ring: measured" and list(ring_meas.x) == sizes
    assert list(ring_meas.error_y.array) == pytest.approx([0.2 * r["time"] for r in rows[:3]])
    assert f"α={fits['ring'].alpha * 1e6:.3g} µs" in ring_model.name and "ns/B" in ring_model.name
    assert ring_meas.marker.color == ring_model.line.color != gloo_meas.marker.color
    assert fig.layout.yaxis.title.text == "time (s)" and "(bytes)" in fig.layout.xaxis.title.text


def test_trigger_hover_gives_start_end_and_length():
    compute = {"A": 1e-3, "B": 2e-3, "C": 1e-3, "D": 3e-3}
    tls = {"sync": collectives.trigger_timeline(SETUP.schedule("ring", 1 << 20), TOPO, compute, "sync")}
    fig = trigger_figure(tls, 1e3, "ms")
    for t in fig.data:
        for base, length, end in zip(t.base, t.x, t.customdata):
            assert end == pytest.approx(base + length)
        assert "from %{base" in t.hovertemplate and "to %{customdata" in t.hovertemplate
