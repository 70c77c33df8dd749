"""The Placement page under streamlit's AppTest."""

from conftest import app_test, assert_no_exception

from lab.catalogue import preset
from lab.scenario import Scenario
from lab.topology import Device, Link, Switch, Topology


def _md(at) -> str:
    return " ".join(m.value for m in at.markdown)


def _captions(at) -> str:
    return " ".join(c.value for c in at.caption)


def _with_topology(at, topo):
    at.session_state["scenario"] = Scenario(name="t", topology=topo)
    at.run()
    return at


def test_default_page_shows_schedule_comparison_and_balancing():
    at = app_test("pages/placement.py")
    assert_no_exception(at)
    assert at.title[0].value == "Placement"
    table = at.dataframe[0].value  # the assignment table
    assert list(table["operator"]) == ["net_0", "net_1", "net_2", "net_3", "net_4"]
    assert {"class", "FLOPs", "device"} <= set(table.columns)
    assert any(c.startswith("start (") for c in table.columns) and any(c.startswith("on fpga (") for c in table.columns)
    assert table["FLOPs"].iloc[0] == 2 * 32 * 64 * 128
    compare = at.dataframe[1].value
    assert len(compare) == 8
    opt = compare[compare.strategy == "optimal"].iloc[0]
    assert opt["above optimum (%)"] == 0
    assert (compare["above optimum (%)"].dropna() >= -1e-9).all()
    assert compare[compare.strategy == "type_rule"]["above optimum (%)"].iloc[0] > 100
    md = _md(at)
    assert "**wait**" in md and "**throughput**" in md and "stopped after" in md
    assert "modelled" in _captions(at)
    labels = [m.label for m in at.metric]
    assert any(label.startswith("Makespan (") for label in labels)


def test_type_rule_on_the_cnn_uses_fpga_and_asic():
    at = app_test("pages/placement.py")
    at.selectbox(key="pl_model").set_value("cnn").run()
    at.selectbox(key="pl_strategy").set_value("type_rule").run()
    assert_no_exception(at)
    table = at.dataframe[0].value
    by_class = dict(zip(table["class"], table["device"]))
    assert by_class["conv"] == "fpga" and by_class["elementwise"] == "asic" and by_class["matmul"] == "gpu"


def test_optimal_on_a_big_model_runs_on_a_coarsened_graph():
    at = app_test("pages/placement.py")
    at.selectbox(key="pl_model").set_value("resnet").run()
    at.selectbox(key="pl_strategy").set_value("optimal").run()
    assert_no_exception(at)
    assert any("coarsened graph" in i.value for i in at.info)
    compare = at.dataframe[1].value
    graphs = set(compare["graph"])
    assert any(g.startswith("full graph (26") for g in graphs) and any(g.startswith("coarsened") for g in graphs)
    full = compare[compare.graph.str.startswith("full")]
    assert "optimal" not in set(full.strategy)
    assert "coarsened graph" in _md(at)


def test_data_parallel_balancing_and_slowdowns():
    at = app_test("pages/placement.py")
    at.radio(key="pl_bal_mode").set_value("data").run()
    assert_no_exception(at)
    assert "split made with the true speeds" in _md(at)
    assert any("Data-parallel nodes" in c for c in [c.value for c in at.caption])
    rounds = at.dataframe[2].value
    assert {"w host", "w gpu"} == {c for c in rounds.columns if c.startswith("w ")}
    assert rounds["samples moved"].iloc[1] > 0  # the 20x slower GPU loses samples after round 1
    at.number_input(key="pl_slow_gpu").set_value(1.0).run()
    at.number_input(key="pl_noise").set_value(0.0).run()
    assert_no_exception(at)
    rounds = at.dataframe[2].value
    assert rounds["w gpu"].iloc[-1] > rounds["w host"].iloc[-1]  # at catalogue speed the GPU is the faster node


def test_model_without_a_kernel_anywhere_is_a_clear_message():
    only_conv = Topology("convs", (Device("f0", "fpga", throughput={"conv": 1e12}),
                                   Device("f1", "fpga", throughput={"conv": 1e12})),
                         (Link("f0", "f1", "pcie", 32e9),))
    at = _with_topology(app_test("pages/placement.py"), only_conv)
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert "'matmul' kernel" in errors


def test_over_full_device_is_flagged():
    devs = (Device("tiny", "gpu", memory=1000.0, throughput={"matmul": 1e12, "elementwise": 1e11}),)
    at = _with_topology(app_test("pages/placement.py"), Topology("tiny", devs, ()))
    assert_no_exception(at)
    assert any("Over-full: tiny" in w.value for w in at.warning)


def test_data_mode_without_a_whole_model_device_is_a_clear_message():
    sw = Switch("s")
    devs = (Device("g", "gpu", throughput={"matmul": 1e13}), Device("a", "asic", throughput={"elementwise": 1e12}))
    topo = Topology("split", devs, (Link("g", "s", "cxl", 64e9), Link("a", "s", "cxl", 64e9)), (sw,))
    at = _with_topology(app_test("pages/placement.py"), topo)
    assert_no_exception(at)  # model-parallel placement works: each op has some device
    at.radio(key="pl_bal_mode").set_value("data").run()
    assert not at.exception
    assert any("can run the whole model" in e.value for e in at.error)


def test_every_preset_renders():
    at = app_test("pages/placement.py")
    for name in ("pcie", "two-pools", "gpu-npu", "edge"):
        _with_topology(at, preset(name))
        assert_no_exception(at)
        assert len(at.dataframe[1].value) == 8
