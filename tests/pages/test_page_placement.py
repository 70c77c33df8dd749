"""The Placement page under streamlit's AppTest."""

from lab.machine.calibrate import synthetic_profile
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario
from lab.scenario.names import STRATEGY_LABELS
from lab.scenario.topology import Device, Link, Switch, Topology
from tests.conftest import app_test, assert_no_exception


def _md(at) -> str:
    """Every markdown on the page, with the escapes of user text (ui.plain) taken out."""
    return " ".join(m.value for m in at.markdown).replace("\\", "")


def _captions(at) -> str:
    return " ".join(c.value for c in at.caption)


def _table(at, column: str):
    """The first dataframe on the page with ``column``."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def _with_topology(at, topo):
    at.session_state["scenario"] = Scenario(name="t", topology=topo)
    at.run()
    return at


def test_default_page_shows_schedule_comparison_and_balancing(spawns):
    at = app_test("pages/placement.py")
    assert_no_exception(at)
    assert at.title[0].value == "Placement"
    table = _table(at, "operator")  # the assignment table
    assert list(table["operator"]) == ["net_0", "net_1", "net_2", "net_3", "net_4"]
    assert {"class", "FLOPs", "device"} <= set(table.columns)
    assert any(c.startswith("start (") for c in table.columns) and any(c.startswith("on fpga (") for c in table.columns)
    assert table["FLOPs"].iloc[0] == 2 * 32 * 64 * 128
    compare = _table(at, "above optimum (%)")
    assert len(compare) == 8
    opt = compare[compare.strategy == STRATEGY_LABELS["optimal"]].iloc[0]  # named as the Strategy menu names it
    assert opt["above optimum (%)"] == 0
    assert (compare["above optimum (%)"].dropna() >= -1e-9).all()
    assert compare[compare.strategy == STRATEGY_LABELS["type_rule"]]["above optimum (%)"].iloc[0] > 100
    md = _md(at)
    assert "**wait**" in md and "**throughput**" in md and "stopped after" in md
    assert "modelled" in _captions(at)
    labels = [m.label for m in at.metric]
    assert any(label.startswith("Makespan (") for label in labels)


def test_type_rule_on_the_cnn_uses_fpga_and_asic(spawns):
    at = app_test("pages/placement.py")
    at.selectbox(key="pl_model").set_value("cnn").run()
    at.selectbox(key="pl_strategy").set_value("type_rule").run()
    assert_no_exception(at)
    table = _table(at, "operator")
    by_class = dict(zip(table["class"], table["device"]))
    assert by_class["conv"] == "fpga" and by_class["elementwise"] == "asic" and by_class["matmul"] == "gpu"


def test_optimal_on_a_big_model_runs_on_a_coarsened_graph(spawns):
    at = app_test("pages/placement.py")
    at.selectbox(key="pl_model").set_value("resnet").run()
    at.selectbox(key="pl_strategy").set_value("optimal").run()
    assert_no_exception(at)
    assert any("coarsened graph" in i.value for i in at.info)
    compare = _table(at, "above optimum (%)")
    graphs = set(compare["graph"])
    assert any(g.startswith("full graph (26") for g in graphs) and any(g.startswith("coarsened") for g in graphs)
    full = compare[compare.graph.str.startswith("full")]
    assert "optimal" not in set(full.strategy)
    assert "coarsened graph" in _md(at)


def test_data_parallel_balancing_and_slowdowns(spawns):
    at = app_test("pages/placement.py")
    at.radio(key="pl_bal_mode").set_value("data").run()
    assert_no_exception(at)
    assert "split made with the true speeds" in _md(at)
    assert any("Data-parallel nodes" in c for c in [c.value for c in at.caption])
    rounds = _table(at, "round")
    assert {"w host", "w gpu"} == {c for c in rounds.columns if c.startswith("w ")}
    assert rounds["samples moved"].iloc[1] > 0  # the 20x slower GPU loses samples after round 1
    at.number_input(key="pl_slow_gpu").set_value(1.0).run()
    at.number_input(key="pl_noise").set_value(0.0).run()
    assert_no_exception(at)
    rounds = _table(at, "round")
    assert rounds["w gpu"].iloc[-1] > rounds["w host"].iloc[-1]  # at catalogue speed the GPU is the faster node


def test_model_without_a_kernel_anywhere_is_a_clear_message(spawns):
    only_conv = Topology("convs", (Device("f0", "fpga", throughput={"conv": 1e12}),
                                   Device("f1", "fpga", throughput={"conv": 1e12})),
                         (Link("f0", "f1", "pcie", 32e9),))
    at = _with_topology(app_test("pages/placement.py"), only_conv)
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert "'matmul' kernel" in errors


def test_over_full_device_is_flagged(spawns):
    devs = (Device("tiny", "gpu", memory=1000.0, throughput={"matmul": 1e12, "elementwise": 1e11}),)
    at = _with_topology(app_test("pages/placement.py"), Topology("tiny", devs, ()))
    assert_no_exception(at)
    assert any("Over-full: tiny" in w.value for w in at.warning)


def test_data_mode_without_a_whole_model_device_is_a_clear_message(spawns):
    sw = Switch("s")
    devs = (Device("g", "gpu", throughput={"matmul": 1e13}), Device("a", "asic", throughput={"elementwise": 1e12}))
    topo = Topology("split", devs, (Link("g", "s", "cxl", 64e9), Link("a", "s", "cxl", 64e9)), (sw,))
    at = _with_topology(app_test("pages/placement.py"), topo)
    assert_no_exception(at)  # model-parallel placement works: each op has some device
    at.radio(key="pl_bal_mode").set_value("data").run()
    assert not at.exception
    assert any("can run the whole model" in e.value for e in at.error)


def test_every_preset_renders(spawns):
    at = app_test("pages/placement.py")
    for name in ("pcie", "two-pools", "gpu-npu", "edge"):
        _with_topology(at, preset(name))
        assert_no_exception(at)
        assert len(_table(at, "above optimum (%)")) == 8


def _pin(at, op, dev):
    at.selectbox(key="pl_pin_op").set_value(op).run()
    at.selectbox(key="pl_pin_dev").set_value(dev).run()
    at.button(key="pl_pin").click().run()
    return at


def test_pinning_an_operator_moves_it_and_travels_in_the_scenario(spawns):
    at = app_test("pages/placement.py")
    at.selectbox(key="pl_model").set_value("cnn").run()
    before = dict(zip(_table(at, "operator")["operator"], _table(at, "operator")["device"]))
    assert before["conv1"] != "host"
    _pin(at, "conv1", "host")
    assert_no_exception(at)
    table = _table(at, "operator")
    row = table[table.operator == "conv1"].iloc[0]
    assert row["device"] == "host" and row["why here"].startswith("pinned")
    assert at.session_state["scenario"].training.pins == (("conv1", "host"),)
    assert "conv1 → host" in _md(at)
    at.button(key="pl_unpin").click().run()
    assert at.session_state["scenario"].training.pins == ()
    table = _table(at, "operator")
    assert table[table.operator == "conv1"].iloc[0]["device"] == before["conv1"]


def test_baseline_summary_shows_what_a_pin_costs(spawns):
    at = app_test("pages/placement.py")
    at.selectbox(key="pl_model").set_value("cnn").run()
    at.button(key="pl_keep").click().run()
    assert "same settings: makespan +0.0 %" in _md(at)
    _pin(at, "conv1", "host")
    assert_no_exception(at)
    md = _md(at)
    assert "conv1 pinned to host: makespan +" in md and " %" in md
    base = _table(at, "change (%)")
    span = base[base.device == "makespan"].iloc[0]
    assert span["change (%)"] > 0
    pct = float(md.split("conv1 pinned to host: makespan ")[1].split(" %")[0])
    assert abs(pct - span["change (%)"]) < 0.051  # the summary and the table agree
    at.button(key="pl_base_clear").click().run()
    assert "makespan +" not in _md(at)


def test_impossible_pin_is_a_clear_message_and_clear_pins_recovers(spawns):
    at = app_test("pages/placement.py")
    at.selectbox(key="pl_model").set_value("cnn").run()
    _pin(at, "conv1", "asic")
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert "'conv1' cannot be pinned to 'asic'" in errors and "'conv'" in errors
    at.button(key="pl_pins_clear").click().run()
    assert_no_exception(at)


def test_why_table_explains_the_chosen_device(spawns):
    at = app_test("pages/placement.py")
    at.selectbox(key="pl_model").set_value("cnn").run()
    at.selectbox(key="pl_why").set_value("fc1").run()
    assert_no_exception(at)
    why = _table(at, "plan's choice")
    chosen = why[why["plan's choice"]]
    assert len(chosen) == 1
    finish = [c for c in why.columns if c.startswith("finish (")][0]
    assert chosen.iloc[0][finish] == why[finish].min()  # greedy earliest finish picks the earliest finish
    parts = [c for c in why.columns
             if c.split(" (")[0] in ("inputs exist at", "transfer", "wait for device", "compute")]
    ok = why.dropna(subset=[finish])
    assert ((ok[parts].sum(axis=1) - ok[finish]).abs() <= 1e-9 * ok[finish].abs().max()).all()
    assert "earliest finish of" in _md(at)


def test_controls_keep_their_values_across_pages_and_the_fastest_device_starts_slow(spawns):
    at = app_test("pages/placement.py")
    assert at.number_input(key="pl_slow_gpu").value == 20.0 and at.number_input(key="pl_slow_host").value == 1.0
    at.selectbox(key="pl_model").set_value("transformer").run()
    at.selectbox(key="pl_strategy").set_value("heft").run()
    at.number_input(key="pl_slow_gpu").set_value(3.0).run()
    at.switch_page("pages/topology.py").run()
    at.switch_page("pages/placement.py").run()
    assert_no_exception(at)
    assert at.selectbox(key="pl_model").value == "transformer" and at.selectbox(key="pl_strategy").value == "heft"
    assert at.number_input(key="pl_slow_gpu").value == 3.0


def test_the_cost_model_is_chosen_and_named(tmp_path, monkeypatch, spawns):
    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    at = app_test("pages/placement.py")
    assert "Cost model: FLOPs / the device's catalogue throughput" in _captions(at)
    datasheet = _table(at, "operator")
    at.radio(key="pl_cost").set_value("calibrated").run()
    assert not at.exception  # no profile yet: a message that says how to get one
    assert any("calibrate the machine on the Fidelity page" in e.value for e in at.error)
    assert at.radio(key="pl_cost").value == "calibrated"  # the choice stays
    synthetic_profile().save()
    at.run()
    assert_no_exception(at)
    assert "this machine's calibrated forward + backward cost" in _captions(at)
    assert "one forward + backward" in str(next(c for c in at.get("plotly_chart")).proto.spec)
    calibrated = _table(at, "operator")
    start = next(c for c in datasheet.columns if c.startswith("finish ("))
    assert list(calibrated["operator"]) == list(datasheet["operator"])
    assert not calibrated.equals(datasheet) and start in datasheet.columns
