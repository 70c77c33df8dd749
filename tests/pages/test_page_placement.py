"""The Placement page under streamlit's AppTest: drawn whole, and what lives in Streamlit (the pin and baseline
buttons' callbacks, values kept across pages, a choice that stays when it cannot be used). What it shows is tested
fast on its model (tests/view/test_view_placement*.py)."""

from lab.machine.calibrate import synthetic_profile
from lab.scenario.names import STRATEGY_NAMES
from lab.view.state import encode
from tests.conftest import app_test, assert_no_exception


def _md(at) -> str:
    """Every markdown on the page, with the escapes of user text (ui.plain) taken out."""
    return " ".join(m.value for m in at.markdown).replace("\\", "")


def _captions(at) -> str:
    return " ".join(c.value for c in at.caption).replace("\\", "")


def _table(at, column: str):
    """The first dataframe on the page with ``column``."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def _whole(at) -> None:
    """Every part of the page is drawn: the plan, the strategy table, the run buttons and the balancing loop."""
    assert list(_table(at, "operator")["operator"])  # the assignment
    assert len(_table(at, "above optimum (%)")) == len(STRATEGY_NAMES)  # every strategy
    assert {"pl_run", "pl_run_all", "pl_bal_run"} <= {b.key for b in at.button}
    md = _md(at)
    assert "**wait**" in md and "**throughput**" in md and "stopped after" in md  # the balancing loop's results
    assert [t.label for t in at.tabs] == ["rounds: wait", "rounds: throughput"]


def test_the_default_page_is_drawn_whole(spawns):
    at = app_test("pages/placement.py")
    assert_no_exception(at)
    assert at.title[0].value == "Placement"
    _whole(at)
    assert "modelled" in _captions(at) and "Topology **cxl**" in _captions(at)
    assert any(m.label.replace("\\", "").startswith("Makespan (") for m in at.metric)
    assert [h.value for h in at.subheader] == [
        "Why is an operator where it is?", "Against a baseline", "Assignment", "All strategies on this scenario",
        "Run the plan: measured beside modelled", "Dynamic load balancing: weights from each node's waiting time",
        "The balancing loop, run: measured beside modelled"]
    assert "Run this plan (or every strategy) to see it measured here beside the model." in _captions(at)
    assert at.radio(key="pl_bal_mode").options == ["operators across devices (model parallel)",
                                                   "batch shares (data parallel)"]


def _pin(at, op, dev):
    at.selectbox(key="pl_pin_op").set_value(op).run()
    at.selectbox(key="pl_pin_dev").set_value(dev).run()
    at.button(key="pl_pin").click().run()
    return at


def test_the_pin_and_baseline_buttons_change_the_scenario_and_the_link(spawns):
    at = app_test("pages/placement.py")
    at.selectbox(key="pl_model").set_value("cnn").run()
    at.button(key="pl_keep").click().run()
    assert "same settings: makespan +0.0 %" in _md(at)
    _pin(at, "conv1", "host")
    assert_no_exception(at)
    assert at.session_state["scenario"].training.pins == (("conv1", "host"),)
    assert "conv1 → host" in _md(at) and "conv1 pinned to host: makespan +" in _md(at)
    table = _table(at, "operator")
    assert table[table.operator == "conv1"].iloc[0]["device"] == "host"
    at.button(key="pl_unpin").click().run()
    assert at.session_state["scenario"].training.pins == ()
    at.button(key="pl_base_clear").click().run()
    assert "makespan +" not in _md(at)
    _pin(at, "conv1", "asic")  # no conv kernel there: a notice, and the page stays whole
    assert not at.exception and not at.error
    assert any("'conv1' cannot be pinned to 'asic'" in w.value.replace("\\", "") for w in at.warning)
    _whole(at)
    at.button(key="pl_pins_clear").click().run()
    assert_no_exception(at)
    assert at.session_state["scenario"].training.pins == () and not at.warning


def test_a_pin_on_another_models_operator_leaves_the_page_whole(spawns):
    """The walk's defect: the model back at the MLP with a pin on the CNN's conv2 showed only the pin's error."""
    at = app_test("pages/placement.py")
    at.selectbox(key="pl_model").set_value("cnn").run()
    _pin(at, "conv2", "gpu")
    at.selectbox(key="pl_model").set_value("mlp").run()
    assert not at.exception and not at.error
    assert any("no operator 'conv2'" in w.value.replace("\\", "") for w in at.warning)
    _whole(at)


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


def test_placement_follows_a_model_chosen_on_training_and_keeps_its_own_choice_otherwise(spawns):
    at = app_test("pages/placement.py")
    assert at.selectbox(key="pl_model").value == "mlp"
    at.selectbox(key="pl_model").set_value("transformer").run()  # Placement's own choice
    at.switch_page("pages/topology.py").run()
    at.switch_page("pages/placement.py").run()
    assert at.selectbox(key="pl_model").value == "transformer"  # kept while the scenario's model is unchanged
    at.switch_page("pages/training.py").run()
    at.selectbox(key="tr_model").set_value("resnet").run()
    at.switch_page("pages/placement.py").run()
    assert_no_exception(at)
    assert at.selectbox(key="pl_model").value == "resnet"  # the model chosen on Training


def test_the_calibrated_cost_model_is_offered_once_the_machine_is_calibrated_and_the_page_stays_whole(
        tmp_path, monkeypatch, spawns):
    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    at = app_test("pages/placement.py", query={"v": encode({"pl_cost": "calibrated"})})
    assert_no_exception(at)  # a link's calibrated model without a profile: the datasheet one, and why
    assert len(at.radio(key="pl_cost").options) == 1 and at.radio(key="pl_cost").value == "datasheet"
    assert "Cost model: FLOPs / the device's catalogue throughput" in _captions(at)
    assert "The calibrated cost model is offered once this machine is calibrated" in _captions(at)
    assert at.button(key="pl_run").proto.label == "Run this plan"  # the plan and its Run are drawn
    synthetic_profile().save()
    at.run()
    assert len(at.radio(key="pl_cost").options) == 2
    at.radio(key="pl_cost").set_value("calibrated").run()
    assert_no_exception(at)
    assert "this machine's calibrated forward + backward cost" in _captions(at)
    assert "The calibrated cost model is offered once" not in _captions(at)


def test_a_cluster_past_a_dozen_devices_sets_one_picked_devices_slowdown_and_lists_the_slowed_ones(spawns):
    """A box per device of the size caps' 256 devices was a page of boxes: one picked device's box, and a table
    of the devices not at 1×, whose values stay in force when another device is picked."""
    from lab.scenario.document import default_scenario
    from lab.testing.caps import cap_topology
    from lab.view.placement.balance import default_slowdowns

    topo = cap_topology("star")
    at = app_test("pages/placement.py", timeout=240,
                  query={"s": default_scenario().replace(topology=topo).to_url_param()})
    assert_no_exception(at)
    _whole(at)
    fastest = default_slowdowns(topo)[0]
    pick = at.selectbox(key="pl_pick_slow")
    assert pick.value == fastest and pick.options == list(topo.device_names)
    assert [n.key for n in at.number_input if n.key.startswith("pl_slow_")] == [f"pl_slow_{fastest}"]

    def slowed() -> dict:
        t = _table(at, "slowdown (×)")
        return dict(zip(t.device, t["slowdown (×)"]))

    assert slowed() == {fastest: 20.0}
    other = next(n for n in topo.device_names if n != fastest)
    pick.set_value(other).run()
    at.number_input(key=f"pl_slow_{other}").set_value(3.0).run()
    assert_no_exception(at)
    assert [n.key for n in at.number_input if n.key.startswith("pl_slow_")] == [f"pl_slow_{other}"]
    assert slowed() == {fastest: 20.0, other: 3.0}
    assert "the other 254 run at 1×" in _captions(at)
    _whole(at)
