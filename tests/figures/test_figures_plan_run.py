"""lab.figures.plan_run for a placement run: the measured-over-modelled Gantt of one step (bars where the
rows say, one trace per kind, transfers as lines between lanes), the busy / emulated / idle time per device,
the strategies ranked modelled against measured, and the balancing rounds; hostile names shown as text;
empty inputs a figure with a note."""

from __future__ import annotations

import math

import pytest

from lab.figures import plan_run as figs
from lab.figures.style import esc
from lab.view.placement import tables

IMG = "<img src=x onerror=alert(1)>"
MD = "[a](http://x)"
DEVS = ["gpu0", IMG]


def compute(device, kind, start, end, op="matmul", micro=0, piece=0):
    return {"device": device, "piece": piece, "micro": micro, "kind": kind, "op": op, "start": start, "end": end}


def transfer(kind, src, dst, start, end, micro=0, piece=1, from_piece=0, nbytes=4096):
    return {"kind": kind, "src": src, "dst": dst, "device": dst, "piece": piece, "from_piece": from_piece,
            "micro": micro, "bytes": nbytes, "start": start, "end": end, "op": None}


#: One step, seconds: two micro-batches forward on gpu0 then IMG, the loss, backward back, an optimizer step.
MEASURED = [
    compute("gpu0", "forward", 0.000, 0.004, op=MD, micro=0),
    compute("gpu0", "emulated", 0.004, 0.006, op=MD, micro=0),
    compute("gpu0", "forward", 0.006, 0.010, op=MD, micro=1),
    transfer("activation", "gpu0", IMG, 0.006, 0.007, micro=0),
    transfer("activation", "gpu0", IMG, 0.010, 0.011, micro=1),
    compute(IMG, "forward", 0.007, 0.012, op="relu", micro=0, piece=1),
    compute(IMG, "loss", 0.012, 0.013, op="ce", micro=0, piece=1),
    compute(IMG, "backward", 0.013, 0.020, op="relu", micro=0, piece=1),
    transfer("gradient", IMG, "gpu0", 0.020, 0.022, micro=0, piece=0, from_piece=1),
    compute("gpu0", "backward", 0.022, 0.030, op=MD, micro=0),
    compute("gpu0", "optimizer", 0.030, 0.032, op=None),
]
MODELLED = [dict(r, start=r["start"] * 0.5, end=r["end"] * 0.5) for r in MEASURED if r["kind"] != "emulated"]


def panel(fig, p):
    """The traces of subplot ``p`` (1 = top)."""
    axis = "x" if p == 1 else f"x{p}"
    return [t for t in fig.data if (t.xaxis or "x") == axis]


def bars(traces, kind):
    return [t for t in traces if t.type == "bar" and t.legendgroup == kind]


# ----- run_gantt_figure -----------------------------------------------------------------------------------

def test_gantt_bars_sit_where_the_rows_say_in_ms_one_trace_per_kind_per_panel():
    fig = figs.run_gantt_figure(MEASURED, MODELLED, DEVS, measured_badge="measured, with emulated waits")
    for p, rows in ((1, MEASURED), (2, MODELLED)):
        traces = panel(fig, p)
        for kind in ("forward", "backward", "loss", "optimizer", "emulated"):
            mine = [r for r in rows if r["kind"] == kind]
            found = bars(traces, kind)
            assert len(found) == (1 if mine else 0), (p, kind)
            if mine:
                bar = found[0]
                assert bar.orientation == "h"
                assert list(bar.base) == pytest.approx([r["start"] * 1e3 for r in mine])
                assert list(bar.x) == pytest.approx([(r["end"] - r["start"]) * 1e3 for r in mine])
                assert list(bar.y) == [esc(r["device"]) for r in mine]
    assert not bars(panel(fig, 2), "emulated")  # the model has no emulated waits
    assert fig.layout.xaxis2.title.text == "time from the step's start (ms)"
    assert fig.layout.xaxis2.matches == "x" or fig.layout.xaxis.matches == "x2"  # one time axis for both
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("measured, with emulated waits: 32 ms") and titles[1].startswith("modelled: 16 ms")
    assert "measured, with emulated waits above, modelled below" in fig.layout.title.text


def test_gantt_draws_the_replay_as_a_third_panel_on_the_same_axis():
    replayed = [dict(r, start=r["start"] / 2, end=r["end"] / 2) for r in MEASURED]
    fig = figs.run_gantt_figure(MEASURED, MODELLED, DEVS, replayed=replayed)
    found = bars(panel(fig, 3), "forward")
    mine = [r for r in replayed if r["kind"] == "forward"]
    assert list(found[0].base) == pytest.approx([r["start"] * 1e3 for r in mine])
    titles = [a.text for a in fig.layout.annotations]
    assert titles[2].startswith("replayed: measured task times, no gaps: 16 ms")
    assert fig.layout.xaxis3.matches in ("x", "x2", "x3") or fig.layout.xaxis.matches == "x3"


def test_gantt_kinds_are_coloured_emulated_hatched_and_each_named_once_in_the_legend():
    fig = figs.run_gantt_figure(MEASURED, MODELLED, DEVS)
    emulated = bars(fig.data, "emulated")[0]
    assert emulated.marker.pattern.shape == "/" and emulated.name == "emulated wait (slower device)"
    assert emulated.marker.color == figs.RUN_KINDS["emulated"][1]
    forward = bars(fig.data, "forward")
    assert [b.marker.pattern.shape for b in forward] == ["", ""]
    assert {b.marker.color for b in forward} == {figs.RUN_KINDS["forward"][1]}
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert sorted(legend) == sorted(["forward", "emulated wait (slower device)", "loss", "backward", "optimizer step",
                                     "activation sent", "gradient sent"])


def test_gantt_transfers_are_lines_from_the_senders_lane_at_sent_to_the_receivers_lane_at_arrived():
    fig = figs.run_gantt_figure(MEASURED, None, DEVS)
    act = [t for t in fig.data if t.name == "activation sent"]
    grad = [t for t in fig.data if t.name == "gradient sent"]
    assert len(act) == len(grad) == 1 and act[0].type == "scatter" and "lines" in act[0].mode
    assert list(act[0].x) == pytest.approx([6.0, 7.0, None, 10.0, 11.0, None])  # None: lift the pen
    assert list(act[0].y) == ["gpu0", esc(IMG), None, "gpu0", esc(IMG), None]
    assert list(grad[0].x)[:2] == pytest.approx([20.0, 22.0]) and list(grad[0].y)[:2] == [esc(IMG), "gpu0"]
    hover = act[0].hovertext[0]
    assert "micro-batch 0" in hover and "sent 6 ms, arrived 7 ms (1 ms)" in hover and "4.1 kB" in hover


def test_gantt_without_modelled_rows_draws_only_the_measured_panel():
    for modelled in (None, []):
        fig = figs.run_gantt_figure(MEASURED, modelled, DEVS)
        assert {t.xaxis or "x" for t in fig.data} == {"x"}
        assert len(fig.layout.annotations) == 1 and fig.layout.annotations[0].text.startswith("measured: 32 ms")
        assert fig.layout.xaxis.title.text == "time from the step's start (ms)"


def test_gantt_lanes_follow_devices_top_down_and_keep_a_device_the_list_lacks():
    fig = figs.run_gantt_figure(MEASURED + [compute("cpu9", "forward", 0.0, 0.001)], MODELLED, DEVS + ["idle dev"])
    lanes = ["gpu0", esc(IMG), "idle dev", "cpu9"]
    assert list(fig.layout.yaxis.categoryarray) == lanes[::-1] == list(fig.layout.yaxis2.categoryarray)
    assert {y for t in fig.data for y in t.y if y is not None} <= set(lanes)


def test_gantt_hover_says_op_micro_batch_piece_and_times_all_escaped():
    fig = figs.run_gantt_figure(MEASURED, MODELLED, DEVS)
    relu = bars(panel(fig, 1), "forward")[0].hovertext[2]
    assert relu == (f"<b>relu</b> · forward<br>{esc(IMG)} · micro-batch 0 · piece 1<br>7–12 ms (5 ms)<br>"
                    "<i>measured</i>")
    first = bars(panel(fig, 1), "forward")[0].hovertext[0]
    assert first.startswith(f"<b>{MD}</b> · forward<br>gpu0") and "0–4 ms (4 ms)" in first
    opt = bars(fig.data, "optimizer")[0].hovertext[0]
    assert opt.startswith("<b>optimizer step</b>")  # an op of None: the kind stands in
    odd = figs.run_gantt_figure([compute("gpu0", "a&b", 0.0, 1.0, op=None)], None, DEVS)
    assert odd.data[0].name == "a&amp;b" and odd.data[0].hovertext[0].startswith("<b>a&amp;b</b> · a&amp;b<br>")
    assert "<i>modelled</i>" in bars(panel(fig, 2), "loss")[0].hovertext[0]
    texts = [h for t in fig.data for h in (t.hovertext or ()) if h] + [a.text for a in fig.layout.annotations]
    assert any(esc(IMG) in h for h in texts) and not any(IMG in h for h in texts)
    assert "<a" not in fig.to_json()
    badged = figs.run_gantt_figure(MEASURED, None, DEVS, measured_badge=IMG, title=MD + IMG)
    assert badged.layout.annotations[0].text.startswith(esc(IMG)) and badged.layout.title.text == MD + esc(IMG)


def test_gantt_picks_the_unit_and_marks_bars_too_short_to_see():
    # under 0.2 % of the 900 µs axis (1.8 µs) a bar is about 2 px wide on a projector: it gets a diamond
    rows = [compute("gpu0", "forward", 0.0, 1e-6), compute("gpu0", "forward", 1e-6, 900e-6),
            compute(IMG, "backward", 0.0, 2e-6)]
    fig = figs.run_gantt_figure(rows, None, DEVS)
    bar = bars(fig.data, "forward")[0]
    assert list(bar.base) == pytest.approx([0.0, 1.0]) and list(bar.x) == pytest.approx([1.0, 899.0])
    assert fig.layout.xaxis.title.text == "time from the step's start (µs)"
    marks = [t for t in fig.data if t.type == "scatter" and t.legendgroup == "forward"]
    assert len(marks) == 1 and list(marks[0].x) == pytest.approx([0.5]) and marks[0].showlegend is False
    assert marks[0].hovertext[0] == bar.hovertext[0]
    assert not [t for t in fig.data if t.type == "scatter" and t.legendgroup == "backward"]


def test_gantt_of_two_thousand_rows_stays_a_handful_of_traces():
    # Few traces is what keeps it quick; how quick is load's to say (a busy suite took 3.04 s), not a test's.
    devs = [f"dev{i}" for i in range(8)]
    rows = [compute(devs[k % 8], ("forward", "backward", "emulated", "loss", "optimizer")[k % 5],
                    k * 1e-4, k * 1e-4 + 9e-5, op=f"op{k}", micro=k % 16, piece=k % 8) for k in range(1800)]
    rows += [transfer(("activation", "gradient")[k % 2], devs[k % 8], devs[(k + 1) % 8], k * 1e-4, k * 1e-4 + 5e-5,
                      micro=k % 16) for k in range(200)]
    fig = figs.run_gantt_figure(rows, rows, devs)
    assert len(fig.data) <= 2 * (2 * len(figs.RUN_KINDS) + len(figs.TRANSFER_KINDS))
    assert sum(len(t.x) for t in fig.data if t.type == "bar") == 2 * 1800
    assert sum(len(t.x) for t in fig.data if t.name in ("activation sent", "gradient sent")) == 2 * 3 * 200
    assert fig.layout.height <= 768 and fig.layout.font.size >= 14  # two panels of 8 lanes on a projector


def test_gantt_with_nothing_to_draw_says_so():
    fig = figs.run_gantt_figure([], None, DEVS)
    assert len(fig.data) == 0 and "Nothing to draw yet: no measured rows" in fig.layout.annotations[0].text
    fig = figs.run_gantt_figure([], [], DEVS, measured_badge=IMG)
    assert esc(IMG) in fig.layout.annotations[0].text and "no modelled rows" in fig.layout.annotations[0].text
    only_model = figs.run_gantt_figure([], MODELLED, DEVS)
    notes = [a.text for a in only_model.layout.annotations]
    assert "measured: no rows" in notes and "no measured rows" in notes
    assert {t.xaxis for t in only_model.data} == {"x2"}


# ----- device_time_table ------------------------------------------------------------------------------------

def test_device_time_by_hand():
    rows = [compute("a", "forward", 1.0, 3.0), compute("a", "emulated", 3.0, 4.0), compute("a", "optimizer", 6.0, 7.0),
            compute("b", "backward", 2.0, 5.0), transfer("activation", "a", "b", 3.0, 3.5),
            compute("z", "loss", 1.5, 2.0)]
    tab = tables.device_time_table(rows, ["a", "b", "c"])
    # span = 7 - 1 = 6 s; a: busy 2 + 1 = 3, emulated 1, idle 2; b: busy 3, idle 3; c: nothing, all idle;
    # z is not in the list but its time is shown.
    assert [r["device"] for r in tab] == ["a", "b", "c", "z"]
    expect = {"a": (3.0, 1.0, 2.0, 100 * 2 / 6), "b": (3.0, 0.0, 3.0, 50.0), "c": (0.0, 0.0, 6.0, 100.0),
              "z": (0.5, 0.0, 5.5, 100 * 5.5 / 6)}
    for r in tab:
        assert (r["busy (s)"], r["emulated wait (s)"], r["idle (s)"], r["idle share (%)"]) == pytest.approx(
            expect[r["device"]])
    assert set(tab[0]) == {"device", "busy (s)", "emulated wait (s)", "idle (s)", "idle share (%)"}


def test_device_time_of_an_empty_step():
    assert tables.device_time_table([], ["a"]) == [
        {"device": "a", "busy (s)": 0, "emulated wait (s)": 0, "idle (s)": 0.0, "idle share (%)": None}]
    only_transfers = tables.device_time_table([transfer("gradient", "a", "b", 0.0, 1.0)], ["a"])
    assert only_transfers[0]["idle share (%)"] is None


# ----- strategy_ranking_figure and ranking_table ---------------------------------------------------------------

STRATS = [{"strategy": "pipeline " + IMG, "modelled": 0.050, "measured": 0.060, "low": 0.055, "high": 0.070},
          {"strategy": "data parallel", "modelled": 0.040, "measured": 0.035, "low": 0.030, "high": 0.040},
          {"strategy": MD, "modelled": 0.100, "measured": 0.120, "low": None, "high": None}]


def test_ranking_figure_modelled_beside_measured_with_the_interval_fastest_on_top():
    fig = figs.strategy_ranking_figure(STRATS)
    mod, mea = fig.data
    assert (mod.name, mea.name) == ("modelled", "measured") and fig.layout.barmode == "group"
    order = ["data parallel", "pipeline " + esc(IMG), MD]
    assert list(mod.y) == list(mea.y) == order and list(fig.layout.yaxis.categoryarray) == order[::-1]
    assert list(mod.x) == pytest.approx([40.0, 50.0, 100.0]) and list(mea.x) == pytest.approx([35.0, 60.0, 120.0])
    assert list(mea.error_x.array) == pytest.approx([5.0, 10.0, 0.0])
    assert list(mea.error_x.arrayminus) == pytest.approx([5.0, 5.0, 0.0])
    assert list(mea.text) == ["-12 %", "+20 %", "+20 %"]
    assert mod.hovertext[1] == (f"<b>pipeline {esc(IMG)}</b><br>modelled: 50 ms<br>"
                                "measured: 60 ms (interval 55 ms–70 ms)"
                                "<br>error (measured / modelled − 1): +20.0 %")
    assert list(mea.hovertext) == list(mod.hovertext)
    assert "interval" not in mod.hovertext[2] and "+20.0 %" in mod.hovertext[2]
    assert fig.layout.xaxis.title.text == "time per step (ms)"
    assert "modelled vs measured" in fig.layout.title.text and "measured interval" in fig.layout.title.text
    assert figs.strategy_ranking_figure(STRATS, title=IMG).layout.title.text == esc(IMG)
    assert "<img" not in fig.to_json()


def test_ranking_figure_with_no_strategies_says_so():
    fig = figs.strategy_ranking_figure([])
    assert len(fig.data) == 0 and "No strategies compared yet" in fig.layout.annotations[0].text


def test_ranking_table_by_hand():
    tab = tables.ranking_table(STRATS + [{"strategy": "tied", "modelled": 0.040, "measured": None, "low": None,
                                        "high": None}])
    assert [r["strategy"] for r in tab] == ["data parallel", "pipeline " + IMG, MD, "tied"]
    assert [(r["modelled rank"], r["measured rank"]) for r in tab] == [(1, 1), (3, 2), (4, 3), (1, None)]
    assert [r["modelled (ms)"] for r in tab] == pytest.approx([40.0, 50.0, 100.0, 40.0])
    assert [r["measured (ms)"] for r in tab[:3]] == pytest.approx([35.0, 60.0, 120.0])
    assert tab[3]["measured (ms)"] is None
    assert [r["error (%)"] for r in tab[:3]] == pytest.approx([-12.5, 20.0, 20.0]) and tab[3]["error (%)"] is None
    assert set(tab[0]) == {"strategy", "modelled rank", "measured rank", "modelled (ms)", "measured (ms)", "error (%)"}
    assert tables.ranking_table([]) == []


# ----- balance_rounds_figure ----------------------------------------------------------------------------------

def rounds(scale=1.0):
    return [{"round": k, "device": d, "weight": w, "wait": wait * scale, "step": step * scale}
            for k, per in enumerate([[("gpu0", 0.5, 0.000, 0.030), (IMG, 0.5, 0.010, 0.031)],
                                     [("gpu0", 0.4, 0.002, 0.024), (IMG, 0.6, 0.000, 0.025)]])
            for d, w, wait, step in per]


def test_balance_rounds_three_panels_measured_solid_modelled_dashed():
    fig = figs.balance_rounds_figure(rounds(), rounds(0.5))
    by_axis = {a: [t for t in fig.data if t.yaxis == a] for a in ("y", "y2", "y3")}
    weights = {t.name: t for t in by_axis["y"]}
    assert set(weights) == {"gpu0, measured", f"{esc(IMG)}, measured", "gpu0, modelled", f"{esc(IMG)}, modelled"}
    assert list(weights["gpu0, measured"].y) == pytest.approx([0.5, 0.4])
    assert list(weights["gpu0, measured"].x) == [0, 1]
    assert weights["gpu0, measured"].line.dash == "solid" and weights["gpu0, modelled"].line.dash == "dash"
    assert weights["gpu0, measured"].line.color == weights["gpu0, modelled"].line.color
    waits = {t.name: t for t in by_axis["y2"]}  # a share of the round's step time (the longest any device reports)
    assert list(waits[f"{esc(IMG)}, measured"].y) == pytest.approx([10 / 31, 0.0])
    assert list(waits[f"{esc(IMG)}, modelled"].y) == pytest.approx([10 / 31, 0.0])  # the same shares at half the time
    steps = {t.name: t for t in by_axis["y3"]}
    assert set(steps) == {"step time, measured", "step time, modelled"}
    assert list(steps["step time, measured"].y) == pytest.approx([1.0, 25 / 31])  # relative to the first round
    assert list(steps["step time, modelled"].y) == pytest.approx([1.0, 25 / 31])
    assert steps["step time, modelled"].line.dash == "dash"
    assert [a.text for a in fig.layout.annotations] == ["Weight per device (relative to the round's mean)",
                                                        "Waiting per device (share of the step time)",
                                                        "Step time (relative to round 1)"]
    assert fig.layout.title.text == "Balancing round by round: measured (solid) and modelled (dashed)"
    assert fig.layout.xaxis3.title.text == "round"
    assert waits[f"{esc(IMG)}, measured"].hovertext[0] == f"{esc(IMG)}, measured<br>round 0: waited 10 ms of 31 ms"
    assert steps["step time, modelled"].hovertext[1] == "step time, modelled<br>round 1: 12.5 ms (0.81 of round 0)"
    assert "<img" not in fig.to_json()


def test_balance_rounds_without_a_model_and_with_nothing():
    fig = figs.balance_rounds_figure(rounds(), None)
    assert all("measured" in t.name and t.line.dash == "solid" for t in fig.data)
    assert fig.layout.title.text == "Balancing round by round: measured (solid)"
    empty = figs.balance_rounds_figure([], [])
    assert len(empty.data) == 0 and "No balancing rounds yet" in empty.layout.annotations[0].text


def test_balance_outcome_bars_each_plan_against_the_even_split_and_leaves_a_running_one_empty():
    rows = [{"plan": "balancing loop (wait), last round", "key": "wait", "status": "done", "step": 0.0509,
             "vs_split": 0.0509 / 0.0806 - 1},
            {"plan": "even contiguous layer split", "key": "even_split", "status": "done", "step": 0.0806,
             "vs_split": 0.0},
            {"plan": "rule by device type", "key": "type_rule", "status": "running", "step": math.nan,
             "vs_split": math.nan}]
    fig = figs.balance_outcome_figure(rows)
    bar = fig.data[0]
    assert list(bar.y) == ["balancing loop (wait), last round (done)", "even contiguous layer split (done)",
                           "rule by device type (running)"]
    assert list(bar.x[:2]) == pytest.approx([50.9, 80.6]) and bar.x[2] is None
    assert list(bar.text) == ["50.9 ms (-37% vs the even split)", "80.6 ms (+0% vs the even split)", ""]
    assert bar.marker.color[0] != bar.marker.color[1]  # a loop stands out from the fixed plans
    assert fig.layout.xaxis.title.text == "step time (ms)"
