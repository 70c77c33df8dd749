"""The Home and Topology pages under streamlit's AppTest (a real script run, no browser): the Topology page rendered
whole from its model, and what lives in Streamlit: its buttons, the uploader, the popover's callbacks, the session
across pages, and a scenario from a link. What the sections hold and what each change does to the editor is tested
on the page model (tests/view/test_view_topology.py)."""

import json
import re

from lab.scenario.catalogue import LINK_CATALOGUE, PRESET_LABELS, preset
from lab.scenario.document import Scenario
from lab.view.state import VIEW
from tests.conftest import app_test, assert_no_exception

PAGE = "pages/topology.py"


def shown(text: str) -> str:
    """What a person reads: the page escapes user text inside markdown."""
    return re.sub(r"\\(.)", r"\1", text)


def test_home_lists_every_page(spawns):
    at = app_test()
    assert_no_exception(at)
    text = " ".join(m.value for m in at.markdown)
    assert "Heterogeneous" in at.title[0].value
    assert "measured" in text and "modelled" in text


def test_the_page_draws_its_controls_from_the_table_and_its_model_whole(spawns):
    at = app_test(PAGE)
    assert_no_exception(at)
    assert at.title[0].value == "Topology"
    assert at.session_state["scenario"].topology.name == "cxl"
    assert [s.value for s in at.subheader] == [
        "Devices, switches and links", "Routes and transfer times",
        "The CXL claim: does direct device-to-device access remove the host hop?"]
    md = " ".join(m.value for m in at.markdown)
    assert "Route **" in md and "seed" not in md.lower()
    # the CXL design's claim on the user's own cluster: two PCIe hops through the host against two
    # CXL hops through the switch, 10 MB by default
    cxl_bw, cxl_lat, _ = LINK_CATALOGUE["cxl"]
    pcie_bw, pcie_lat, _ = LINK_CATALOGUE["pcie"]
    ratio = (2 * pcie_lat + 10e6 / pcie_bw) / (2 * cxl_lat + 10e6 / cxl_bw)
    assert f"take {ratio:.2f}× as long with PCIe through the host as on this cluster" in md
    assert len(at.get("plotly_chart")) == 3 and sum("modelled" in c.value for c in at.caption) == 3
    assert at.selectbox(key="topo_preset").options == list(PRESET_LABELS.values())
    assert at.selectbox(key="topo_cmp").options[0] == "the same cluster with PCIe through the host"
    assert at.select_slider(key="topo_size").value == 10.0 and "10" in at.select_slider(key="topo_size").options
    assert at.selectbox(key="topo_from").value == "host" and at.selectbox(key="topo_to").value == "gpu"
    assert at.selectbox(key="topo_new_type").label == VIEW["topo_new_type"].setting.label


def test_loading_a_preset_changes_the_scenario_for_every_page(spawns):
    at = app_test(PAGE)
    at.selectbox(key="topo_to").set_value("dpu").run()
    at.selectbox(key="topo_preset").set_value("edge").run()
    at.button(key="topo_load_preset").click().run()
    assert not at.exception
    sc = at.session_state["scenario"]
    assert sc.topology.name == "edge" and len(sc.topology.devices) == 8
    assert at.selectbox(key="topo_from").value == "edge0" and at.selectbox(key="topo_to").value == "edge1"
    assert any("dpu" in i.value and "no longer a device" in i.value for i in at.info)  # the route's end, told
    at.switch_page("pages/home.py").run()
    assert at.session_state["scenario"].topology.name == "edge"
    assert any("edge" in m.value for m in at.markdown)


def test_invalid_scenario_in_link_falls_back_with_a_message(spawns):
    from streamlit.testing.v1 import AppTest

    from tests.conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["s"] = "garbage!!"
    at.run()
    assert not at.exception
    assert any("could not be read" in w.value for w in at.warning)
    assert at.session_state["scenario"].topology.name == "cxl"


def test_valid_scenario_in_link_is_loaded(spawns):
    from streamlit.testing.v1 import AppTest

    from tests.conftest import ROOT

    sc = Scenario("from-link", preset("two-pools"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["s"] = sc.to_url_param()
    at.run()
    assert_no_exception(at)
    assert at.session_state["scenario"] == sc
    assert json.loads(sc.to_json())["topology"]["name"] == "two-pools"


def test_an_upload_refused_keeps_the_topology_and_its_message_goes_with_the_file(spawns):
    bad = preset("cxl").to_dict()
    bad["links"][0]["bandwidth"] = -1
    at = app_test(PAGE)
    before = at.session_state["scenario"]
    at.file_uploader(key="topo_upload").set_value(("bad.json", json.dumps(bad).encode(), "application/json")).run()
    assert not at.exception
    errs = [shown(e.value) for e in at.error]
    assert errs and "bad.json was not loaded" in errs[0] and "must be positive" in errs[0]
    assert at.session_state["scenario"] == before
    at.selectbox(key="topo_preset").set_value("pcie").run()
    at.button(key="topo_load_preset").click().run()
    assert not at.error and at.session_state["scenario"].topology.name == "pcie"

    at = app_test(PAGE)
    at.file_uploader(key="topo_upload").set_value(("x.json", b"{not json", "application/json")).run()
    assert any("not valid JSON" in e.value for e in at.error)
    at.switch_page("pages/home.py").run()
    at.switch_page(PAGE).run()
    assert not at.error  # the uploader forgot its file when the page was left, and its message went too


def test_an_upload_replaces_the_scenario_and_its_names_reach_the_page_as_text(spawns):
    import ui

    topo = preset("pcie")
    odd = "*gpu*_[x](y)<i>"
    devices = tuple(type(d)(odd if d.name == "gpu" else d.name, d.type, d.pool, d.memory, dict(d.throughput))
                    for d in topo.devices)
    links = tuple(type(l)(l.a, odd if l.b == "gpu" else l.b, l.kind, l.bandwidth, l.latency) for l in topo.links)
    sc = Scenario("odd", topo.replace(devices=devices, links=links, name="<b>odd</b>"))
    at = app_test(PAGE)
    at.file_uploader(key="topo_upload").set_value(("odd.json", sc.to_json().encode(), "application/json")).run()
    assert_no_exception(at)
    assert at.session_state["scenario"] == sc
    route = [m.value for m in at.markdown if m.value.startswith("Route")][0]
    assert ui.plain(odd) in route and odd not in route
    assert shown(route).startswith(f"Route **host → {odd}**")


def test_the_popover_proposes_a_name_and_follows_the_link_kind(spawns):
    at = app_test(PAGE)
    at.selectbox(key="topo_new_type").set_value("fpga").run()
    assert at.text_input(key="topo_new_name").value == "fpga1"  # fpga is taken in the CXL preset
    at.selectbox(key="topo_new_type").set_value("npu").run()
    assert at.text_input(key="topo_new_name").value == "npu"
    assert at.number_input(key="topo_new_bw").value == LINK_CATALOGUE["cxl"][0] / 1e9
    at.selectbox(key="topo_new_kind").set_value("pcie").run()
    assert at.number_input(key="topo_new_bw").value == LINK_CATALOGUE["pcie"][0] / 1e9
    at.number_input(key="topo_new_bw").set_value(5.0).run()  # the person's own number
    at.selectbox(key="topo_new_kind").set_value("ethernet").run()
    assert at.number_input(key="topo_new_bw").value == 5.0
    at.selectbox(key="topo_new_attach").set_value("host").run()
    at.button(key="topo_add_device").click().run()
    assert_no_exception(at)
    link = at.session_state["scenario"].topology.links[-1]
    assert (link.kind, link.bandwidth, link.a, link.b) == ("ethernet", 5e9, "npu", "host")


def test_adding_a_device_updates_the_sidebar_and_a_taken_name_is_refused(spawns):
    at = app_test(PAGE)
    at.selectbox(key="topo_new_type").set_value("fpga").run()
    at.button(key="topo_add_device").click().run()
    assert_no_exception(at)
    topo = at.session_state["scenario"].topology
    assert topo.device_names[-1] == "fpga1" and topo.device("fpga1").type == "fpga"
    assert any("(6 devices)" in m.value for m in at.sidebar.markdown)
    assert at.text_input(key="topo_new_name").value == "fpga2"
    assert any("Added" in s.value for s in at.success)
    at.text_input(key="topo_new_name").set_value("fpga").run()
    at.button(key="topo_add_device").click().run()
    assert not at.exception
    errs = [shown(e.value) for e in at.error]
    assert errs and "Nothing was added" in errs[0] and "“fpga” already exists" in errs[0]
    assert at.session_state["scenario"].topology == topo
    at.switch_page("pages/home.py").run()
    at.switch_page(PAGE).run()
    assert_no_exception(at)
    assert not at.success  # nothing is announced on arrival
    assert at.session_state["scenario"].topology == topo
