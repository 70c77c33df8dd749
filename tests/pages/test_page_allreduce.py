"""The All-reduce page under AppTest: step-through, modelled times, trigger, measurement."""

from __future__ import annotations

import pytest

from lab.figures.style import fmt_rate, fmt_seconds
from lab.modelled import collectives as C
from lab.scenario.catalogue import preset
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


def test_default_page_shows_the_cxl_ring_with_modelled_numbers(spawns):
    at = app_test(PAGE)
    assert_no_exception(at)
    assert [s.value for s in at.subheader] == [
        "Step by step", "How long on this cluster", "Synchronous or asynchronous trigger",
        "Measured on this machine"]
    topo = preset("cxl")
    names = C.default_participants(topo)
    assert names == ["gpu", "fpga", "asic", "dpu"]
    est = C.schedule_time(C.build_schedule("ring", names, 4 << 20), topo)
    assert metric(at, "Modelled time") == fmt_seconds(est.seconds)
    assert metric(at, "busbw") == fmt_rate(est.busbw)
    assert any("Slowest link" in m.value for m in at.markdown)
    assert "modelled" in captions(at)
    bytes_table = frame(at, "sent (B)")
    assert list(bytes_table["sent / S"]) == pytest.approx([1.5] * 4)  # 2(N-1)/N of the buffer
    algs = frame(at, "slowest link")
    assert len(algs) == 4
    assert algs["time (µs)"].iloc[0] == pytest.approx(est.seconds * 1e6)
    assert len(at.latex) == 1 and "busbw" in at.latex[0].value


def test_stepping_shows_the_transfers_of_that_step(spawns):
    at = app_test(PAGE)
    at.slider(key="ar_step").set_value(1).run()
    assert_no_exception(at)
    tr = frame(at, "content sent")
    assert list(tr["from"]) == ["gpu", "fpga", "asic", "dpu"]
    assert list(tr["to"]) == ["fpga", "asic", "dpu", "gpu"]
    assert list(tr["content sent"]) == ["a0", "b1", "c2", "d3"]
    assert set(tr["operation"]) == {"add"}


@pytest.mark.parametrize("algorithm", ["host", "tree", "hierarchical"])
def test_every_algorithm_and_the_lab_ring_order(algorithm, spawns):
    at = app_test(PAGE)
    at.selectbox(key="ar_alg").set_value(algorithm).run()
    at.radio(key="ar_order").set_value("lab").run()
    at.slider(key="ar_step").set_value(1).run()
    assert_no_exception(at)
    tr = frame(at, "content sent")
    if algorithm == "host":
        assert set(tr["to"]) == {"host"} and len(tr) == 4
    assert len(frame(at, "its narrowest hop")) >= 2


def test_identical_devices(spawns):
    at = app_test(PAGE)
    at.radio(key="ar_source").set_value("identical").run()
    at.slider(key="ar_n").set_value(7).run()
    assert_no_exception(at)
    star = C.uniform_star(7, 25e9, 1e-6)
    est = C.schedule_time(C.build_schedule("ring", C.default_names(7), 4 << 20), star)
    assert metric(at, "Modelled time") == fmt_seconds(est.seconds)
    assert len(frame(at, "sent (B)")) == 7
    idle = frame(at, "sync: idle (ms)")
    assert len(idle) == 7


def test_too_few_devices_is_a_clear_message(spawns):
    at = app_test(PAGE)
    at.multiselect(key="ar_devices").set_value(["gpu"]).run()
    assert not at.exception
    assert any("at least two devices" in e.value for e in at.error)


@pytest.mark.timeout(180)
def test_measure_button_runs_real_processes(spawns):
    at = app_test(PAGE, timeout=150)
    at.selectbox(key="ar_procs").set_value(2)
    at.selectbox(key="ar_top").set_value(64 << 10)
    at.number_input(key="ar_iters").set_value(1)
    at.button(key="ar_measure").click().run()
    assert_no_exception(at)
    table = frame(at, "measured time (µs)")
    assert list(table["size (B)"]) == [4096, 4096, 16384, 16384, 65536, 65536]
    assert (table["measured time (µs)"] > 0).all()
    assert "measured" in captions(at) and "geometric-mean error" in captions(at)
    assert any("geometric-mean error" in m.value for m in at.markdown)


def test_two_pools_scenario_names_the_fabric_and_the_groups(spawns):
    from lab.scenario.document import Scenario

    at = app_test(PAGE)
    at.session_state["scenario"] = Scenario(name="two", topology=preset("two-pools"))
    at.run()
    at.selectbox(key="ar_alg").set_value("hierarchical").run()
    assert_no_exception(at)
    text = " ".join(m.value for m in at.markdown).replace("\\", "")  # user names are escaped as text
    assert "brute force over all 5040 rings" in text
    assert "p0-cxl→fabric" in text or "p1-cxl→fabric" in text  # the slowest link is the fabric port
    assert "p0-gpu, p0-fpga, p0-asic, p0-dpu; p1-gpu" in captions(at)
    hops = frame(at, "its narrowest hop")
    assert [p for p in hops["phase"]][:2] == ["reduce inside groups"] * 2


def test_play_pressed_at_the_last_step_plays_again_from_the_first(spawns):
    at = app_test(PAGE)
    last = at.slider(key="ar_step").max
    at.slider(key="ar_step").set_value(last).run()
    at.toggle(key="ar_play").set_value(True).run()  # a full run with the fragment inline: no switch to reset
    assert_no_exception(at)
    assert at.slider(key="ar_step").value in (0, 1) and at.toggle(key="ar_play").value is True
