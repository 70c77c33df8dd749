"""The All-reduce page under AppTest, rendered whole: its controls from the view table, its model's sections drawn
with their badges, a refusal shown as a message, the step player (a fragment and session state) and the
measurement's button (real processes). What the sections hold is tested on the page model
(tests/view/test_view_allreduce.py)."""

from __future__ import annotations

import pytest

from lab.modelled import collectives
from lab.scenario.catalogue import preset
from lab.scenario.units import fmt_rate, fmt_seconds
from lab.view.state import VIEW
from tests.conftest import app_test, assert_no_exception

PAGE = "pages/allreduce.py"


def frame(at, column: str):
    """The first dataframe on the page that has ``column``."""
    for df in at.dataframe:
        if column in df.value.columns:
            return df.value
    raise AssertionError(f"no table with column {column!r}: {[list(d.value.columns) for d in at.dataframe]}")


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def captions(at) -> str:
    return " ".join(c.value for c in at.caption).replace("\\", "")  # user names are escaped as text


def test_the_page_draws_its_controls_from_the_table_and_its_model_whole(spawns):
    at = app_test(PAGE)
    assert_no_exception(at)
    assert [s.value for s in at.subheader] == [
        "Step by step", "How long on this cluster", "Synchronous or asynchronous trigger",
        "Measured on this machine"]
    topo = preset("cxl")
    est = collectives.schedule_time(collectives.build_schedule("ring", collectives.default_participants(topo), 4 << 20), topo)
    assert metric(at, "Modelled time") == fmt_seconds(est.seconds)
    assert metric(at, "busbw") == fmt_rate(est.busbw)
    text = " ".join(m.value for m in at.markdown)
    assert "Slowest link" in text and "\\mathrm{busbw}" in text  # the formula, as Markdown's LaTeX
    assert "modelled" in captions(at) and "gpu → fpga → asic → dpu → gpu" in text.replace("\\", "")
    assert len(frame(at, "slowest link")) == 4 and len(frame(at, "sent (B)")) == 4
    assert len(frame(at, "sync: idle (ms)")) == 4 and len(at.get("plotly_chart")) == 5
    assert at.radio(key="ar_source").options == ["of the scenario's topology", "N identical devices"]
    assert at.radio(key="ar_order").options == ["as listed", "the lab's: widest slowest hop"]
    assert at.selectbox(key="ar_top").options[0] == "64 KiB"
    assert at.number_input(key="ar_iters").label == VIEW["ar_iters"].setting.label

    at.slider(key="ar_step").set_value(1).run()
    assert_no_exception(at)
    assert list(frame(at, "content sent")["from"]) == ["gpu", "fpga", "asic", "dpu"]
    at.radio(key="ar_source").set_value("identical").run()
    at.slider(key="ar_n").set_value(7).run()
    assert_no_exception(at)
    assert len(frame(at, "sent (B)")) == 7
    at.radio(key="ar_source").set_value("topology").run()
    at.multiselect(key="ar_devices").set_value(["gpu"]).run()
    assert not at.exception
    assert any("at least two devices" in e.value for e in at.error)  # a message, not a traceback


@pytest.mark.timeout(180)
def test_measure_button_runs_real_processes(spawns):
    at = app_test(PAGE, timeout=150)
    at.selectbox(key="ar_procs").set_value(2)
    at.selectbox(key="ar_top").set_value(64 << 10)
    at.number_input(key="ar_iters").set_value(1)
    at.button(key="ar_measure").click().run()
    assert not at.exception and not at.error
    table = frame(at, "measured time (µs)")
    assert list(table["size (B)"]) == [4096, 4096, 16384, 16384, 65536, 65536]
    assert (table["measured time (µs)"] > 0).all()
    assert "measured" in captions(at) and "geometric-mean error" in captions(at)
    fits = (" ".join(m.value for m in at.markdown) + " ".join(w.value for w in at.warning)).replace("\\", "")
    assert "geometric-mean error" in fits or "no α-β model is shown" in fits  # each fit, as numbers or a notice
    assert all("load" in r for r in at.session_state["ar_rows"])


def test_play_pressed_at_the_last_step_plays_again_from_the_first(spawns):
    at = app_test(PAGE)
    last = at.slider(key="ar_step").max
    at.slider(key="ar_step").set_value(last).run()
    at.toggle(key="ar_play").set_value(True).run()  # a full run with the fragment inline: no switch to reset
    assert_no_exception(at)
    assert at.slider(key="ar_step").value in (0, 1) and at.toggle(key="ar_play").value is True


def test_next_and_previous_move_the_one_step_control_and_stop_at_the_ends(spawns):
    at = app_test(PAGE)
    step = lambda: at.slider(key="ar_step").value  # noqa: E731
    assert step() == 0 and at.button(key="ar_prev").disabled and not at.button(key="ar_next").disabled
    at.button(key="ar_next").click().run()
    assert_no_exception(at)
    assert step() == 1 and not at.button(key="ar_prev").disabled
    assert at.session_state["_view_values"]["ar_step"] == 1  # the link carries the step the button moved to
    assert list(frame(at, "content sent")["from"]) == ["gpu", "fpga", "asic", "dpu"]  # the figure's step follows
    at.button(key="ar_prev").click().run()
    assert_no_exception(at)
    assert step() == 0 and at.button(key="ar_prev").disabled
    last = at.slider(key="ar_step").max
    at.slider(key="ar_step").set_value(last).run()
    assert at.button(key="ar_next").disabled and not at.button(key="ar_prev").disabled
    at.button(key="ar_prev").click().run()
    assert step() == last - 1 and not at.button(key="ar_next").disabled
