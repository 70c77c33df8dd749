"""The Home and Topology pages under streamlit's AppTest (a real script run, no browser)."""

import json
import re

from conftest import app_test, assert_no_exception

from lab.catalogue import LINK_CATALOGUE, preset
from lab.scenario import Scenario


def shown(text: str) -> str:
    """What a person reads: the page escapes user text inside markdown."""
    return re.sub(r"\\(.)", r"\1", text)


def test_home_lists_every_page():
    at = app_test()
    assert_no_exception(at)
    text = " ".join(m.value for m in at.markdown)
    assert "Heterogeneous" in at.title[0].value
    assert "measured" in text and "modelled" in text


def test_topology_page_renders_default_scenario():
    at = app_test("pages/topology.py")
    assert_no_exception(at)
    assert at.title[0].value == "Topology"
    sc = at.session_state["scenario"]
    assert sc.topology.name == "cxl"
    md = " ".join(m.value for m in at.markdown)
    assert "Route **" in md
    # the CXL design's claim on the user's own cluster: two PCIe hops through the host against two
    # CXL hops through the switch, 10 MB by default
    cxl_bw, cxl_lat, _ = LINK_CATALOGUE["cxl"]
    pcie_bw, pcie_lat, _ = LINK_CATALOGUE["pcie"]
    ratio = (2 * pcie_lat + 10e6 / pcie_bw) / (2 * cxl_lat + 10e6 / cxl_bw)
    assert f"take {ratio:.2f}× as long with PCIe through the host as on this cluster" in md
    assert "seed" not in md.lower()


def test_loading_a_preset_changes_the_scenario_for_every_page():
    at = app_test("pages/topology.py")
    at.selectbox(key="topo_preset").set_value("edge").run()
    at.button(key="topo_load_preset").click().run()
    assert_no_exception(at)
    sc = at.session_state["scenario"]
    assert sc.topology.name == "edge" and len(sc.topology.devices) == 8
    at.switch_page("pages/home.py").run()
    assert at.session_state["scenario"].topology.name == "edge"
    assert any("edge" in m.value for m in at.markdown)


def test_route_picker_reports_bottleneck():
    at = app_test("pages/topology.py")
    at.selectbox(key="topo_preset").set_value("pcie").run()
    at.button(key="topo_load_preset").click().run()
    at.selectbox(key="topo_from").set_value("gpu").run()
    at.selectbox(key="topo_to").set_value("fpga").run()
    md = " ".join(m.value for m in at.markdown)
    assert "gpu → host → fpga" in md
    assert "2 hop(s)" in md


def test_adding_a_device_from_the_catalogue():
    at = app_test("pages/topology.py")
    at.selectbox(key="topo_new_type").set_value("npu").run()
    at.text_input(key="topo_new_name").set_value("npu9").run()
    at.selectbox(key="topo_new_attach").set_value("cxl-switch").run()
    at.selectbox(key="topo_new_kind").set_value("cxl").run()
    at.button(key="topo_add_device").click().run()
    assert_no_exception(at)
    topo = at.session_state["scenario"].topology
    assert "npu9" in topo.device_names
    assert topo.path("npu9", "gpu").hops == 2


def test_invalid_scenario_in_link_falls_back_with_a_message():
    from streamlit.testing.v1 import AppTest
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["s"] = "garbage!!"
    at.run()
    assert not at.exception
    assert any("could not be read" in w.value for w in at.warning)
    assert at.session_state["scenario"].topology.name == "cxl"


def test_valid_scenario_in_link_is_loaded():
    from streamlit.testing.v1 import AppTest
    from conftest import ROOT

    sc = Scenario("from-link", preset("two-pools"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params["s"] = sc.to_url_param()
    at.run()
    assert_no_exception(at)
    assert at.session_state["scenario"] == sc
    assert json.loads(sc.to_json())["topology"]["name"] == "two-pools"


def test_invalid_upload_shows_error_and_keeps_topology():
    at = app_test("pages/topology.py")
    before = at.session_state["scenario"]
    bad = preset("cxl").to_dict()
    bad["links"][0]["bandwidth"] = -1
    at.file_uploader(key="topo_upload").set_value(("bad.json", json.dumps(bad).encode(), "application/json")).run()
    assert not at.exception
    errs = [shown(e.value) for e in at.error]
    assert errs and "bad.json was not loaded" in errs[0] and "must be positive" in errs[0]
    assert at.session_state["scenario"] == before


def test_malformed_upload_is_refused():
    at = app_test("pages/topology.py")
    at.file_uploader(key="topo_upload").set_value(("x.json", b"{not json", "application/json")).run()
    assert not at.exception
    assert any("not valid JSON" in e.value for e in at.error)


def test_valid_upload_replaces_the_scenario():
    at = app_test("pages/topology.py")
    sc = Scenario("uploaded", preset("gpu-npu"))
    at.file_uploader(key="topo_upload").set_value(("s.json", sc.to_json().encode(), "application/json")).run()
    assert_no_exception(at)
    assert at.session_state["scenario"] == sc
