"""The Home and Topology pages under streamlit's AppTest (a real script run, no browser)."""

import json
import re

import pytest

from lab.scenario.catalogue import LINK_CATALOGUE, preset
from lab.scenario.document import Scenario
from tests.conftest import app_test, assert_no_exception


def shown(text: str) -> str:
    """What a person reads: the page escapes user text inside markdown."""
    return re.sub(r"\\(.)", r"\1", text)


def test_home_lists_every_page(spawns):
    at = app_test()
    assert_no_exception(at)
    text = " ".join(m.value for m in at.markdown)
    assert "Heterogeneous" in at.title[0].value
    assert "measured" in text and "modelled" in text


def test_topology_page_renders_default_scenario(spawns):
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


def test_loading_a_preset_changes_the_scenario_for_every_page(spawns):
    at = app_test("pages/topology.py")
    at.selectbox(key="topo_preset").set_value("edge").run()
    at.button(key="topo_load_preset").click().run()
    assert_no_exception(at)
    sc = at.session_state["scenario"]
    assert sc.topology.name == "edge" and len(sc.topology.devices) == 8
    at.switch_page("pages/home.py").run()
    assert at.session_state["scenario"].topology.name == "edge"
    assert any("edge" in m.value for m in at.markdown)


def test_route_picker_reports_bottleneck(spawns):
    at = app_test("pages/topology.py")
    at.selectbox(key="topo_preset").set_value("pcie").run()
    at.button(key="topo_load_preset").click().run()
    at.selectbox(key="topo_from").set_value("gpu").run()
    at.selectbox(key="topo_to").set_value("fpga").run()
    md = " ".join(m.value for m in at.markdown)
    assert "gpu → host → fpga" in md
    assert "2 hop(s)" in md


def test_adding_a_device_from_the_catalogue(spawns):
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


def test_invalid_upload_shows_error_and_keeps_topology(spawns):
    at = app_test("pages/topology.py")
    before = at.session_state["scenario"]
    bad = preset("cxl").to_dict()
    bad["links"][0]["bandwidth"] = -1
    at.file_uploader(key="topo_upload").set_value(("bad.json", json.dumps(bad).encode(), "application/json")).run()
    assert not at.exception
    errs = [shown(e.value) for e in at.error]
    assert errs and "bad.json was not loaded" in errs[0] and "must be positive" in errs[0]
    assert at.session_state["scenario"] == before


def test_malformed_upload_is_refused(spawns):
    at = app_test("pages/topology.py")
    at.file_uploader(key="topo_upload").set_value(("x.json", b"{not json", "application/json")).run()
    assert not at.exception
    assert any("not valid JSON" in e.value for e in at.error)


def test_valid_upload_replaces_the_scenario(spawns):
    at = app_test("pages/topology.py")
    sc = Scenario("uploaded", preset("gpu-npu"))
    at.file_uploader(key="topo_upload").set_value(("s.json", sc.to_json().encode(), "application/json")).run()
    assert_no_exception(at)
    assert at.session_state["scenario"] == sc


# ---- the editor, the popover, the route and the comparison ----------------------------------------

def load(at, name):
    at.selectbox(key="topo_preset").set_value(name).run()
    at.button(key="topo_load_preset").click().run()
    return at


def test_the_popover_proposes_a_free_name_for_the_chosen_type(spawns):
    at = app_test("pages/topology.py")
    at.selectbox(key="topo_new_type").set_value("fpga").run()
    assert at.text_input(key="topo_new_name").value == "fpga1"  # fpga is taken in the CXL preset
    at.selectbox(key="topo_new_type").set_value("npu").run()
    assert at.text_input(key="topo_new_name").value == "npu"


def test_a_taken_name_is_refused_before_anything_is_added(spawns):
    at = app_test("pages/topology.py")
    before = at.session_state["scenario"].topology
    at.selectbox(key="topo_new_type").set_value("fpga").run()
    at.text_input(key="topo_new_name").set_value("fpga").run()
    at.button(key="topo_add_device").click().run()
    assert not at.exception
    errs = [shown(e.value) for e in at.error]
    assert errs and "Nothing was added" in errs[0] and "“fpga” already exists" in errs[0] and "fpga1" in errs[0]
    assert at.session_state["scenario"].topology == before
    assert list(at.session_state["topo_editor"]["devices"]["name"]) == before.device_names  # no broken row
    at.button(key="topo_add_device").click().run()  # the name is still the taken one: still refused
    assert at.session_state["scenario"].topology == before


def test_adding_a_device_updates_the_sidebar_and_proposes_the_next_name(spawns):
    at = app_test("pages/topology.py")
    at.selectbox(key="topo_new_type").set_value("fpga").run()
    at.button(key="topo_add_device").click().run()
    assert_no_exception(at)
    topo = at.session_state["scenario"].topology
    assert topo.device_names[-1] == "fpga1" and topo.device("fpga1").type == "fpga"
    assert any("(6 devices)" in m.value for m in at.sidebar.markdown)
    assert at.text_input(key="topo_new_name").value == "fpga2"
    assert any("Added" in s.value for s in at.success)
    at.switch_page("pages/home.py").run()
    at.switch_page("pages/topology.py").run()
    assert_no_exception(at)
    assert not at.success  # nothing is announced on arrival
    assert at.session_state["scenario"].topology == topo


def test_the_link_kind_fills_its_catalogue_numbers_in_the_popover(spawns):
    at = app_test("pages/topology.py")
    assert at.number_input(key="topo_new_bw").value == LINK_CATALOGUE["cxl"][0] / 1e9
    at.selectbox(key="topo_new_kind").set_value("pcie").run()
    assert at.number_input(key="topo_new_bw").value == LINK_CATALOGUE["pcie"][0] / 1e9
    assert at.number_input(key="topo_new_lat").value == pytest.approx(LINK_CATALOGUE["pcie"][1] / 1e-6)
    at.number_input(key="topo_new_bw").set_value(5.0).run()  # the person's own number
    at.selectbox(key="topo_new_kind").set_value("ethernet").run()
    assert at.number_input(key="topo_new_bw").value == 5.0
    assert at.number_input(key="topo_new_lat").value == pytest.approx(LINK_CATALOGUE["ethernet"][1] / 1e-6)
    at.selectbox(key="topo_new_attach").set_value("host").run()
    at.button(key="topo_add_device").click().run()
    assert_no_exception(at)
    link = at.session_state["scenario"].topology.links[-1]
    assert (link.kind, link.bandwidth) == ("ethernet", 5e9) and link.b == "host"


def test_an_upload_error_goes_on_a_preset_load_and_when_the_page_is_left(spawns):
    bad = preset("cxl").to_dict()
    bad["links"][0]["bandwidth"] = -1
    at = app_test("pages/topology.py")
    at.file_uploader(key="topo_upload").set_value(("bad.json", json.dumps(bad).encode(), "application/json")).run()
    assert at.error
    load(at, "pcie")
    assert not at.error and at.session_state["scenario"].topology.name == "pcie"

    at = app_test("pages/topology.py")
    at.file_uploader(key="topo_upload").set_value(("bad.json", json.dumps(bad).encode(), "application/json")).run()
    assert at.error
    at.switch_page("pages/home.py").run()
    at.switch_page("pages/topology.py").run()
    assert not at.error


def test_route_ends_follow_the_device_list(spawns):
    at = app_test("pages/topology.py")
    assert at.selectbox(key="topo_from").value == "host" and at.selectbox(key="topo_to").value == "gpu"
    at.selectbox(key="topo_to").set_value("dpu").run()
    load(at, "pcie")  # the same device names: the choice stays
    assert at.selectbox(key="topo_to").value == "dpu"
    load(at, "edge")  # gone: back to the first and second device, with a notice
    assert_no_exception(at)
    assert at.selectbox(key="topo_from").value == "edge0" and at.selectbox(key="topo_to").value == "edge1"
    assert any("dpu" in i.value and "no longer a device" in i.value for i in at.info)


def figure(at, key: str) -> dict:
    """The plotly figure the page drew under ``key``, as its JSON."""
    return json.loads(next(e.proto.spec for e in at.get("plotly_chart") if e.proto.id.endswith(key)))


def test_user_text_reaches_the_page_as_text(spawns):
    import ui

    topo = preset("pcie")
    odd = "*gpu*_[x](y)<i>"
    devices = tuple(type(d)(odd if d.name == "gpu" else d.name, d.type, d.pool, d.memory, dict(d.throughput))
                    for d in topo.devices)
    links = tuple(type(l)(l.a, odd if l.b == "gpu" else l.b, l.kind, l.bandwidth, l.latency) for l in topo.links)
    sc = Scenario("odd", topo.replace(devices=devices, links=links, name="<b>odd</b>"))
    at = app_test("pages/topology.py")
    at.file_uploader(key="topo_upload").set_value(("odd.json", sc.to_json().encode(), "application/json")).run()
    assert_no_exception(at)
    route = [m.value for m in at.markdown if m.value.startswith("Route")][0]
    assert ui.plain(odd) in route and odd not in route
    assert shown(route).startswith(f"Route **host → {odd}**")
    net = figure(at, "topo_net")
    labels = [t for trace in net["data"] for t in (trace.get("text") or [])]
    assert "*gpu*_[x](y)&lt;i&gt;" in labels and odd not in labels  # plotly reads tags: escaped
    assert "&lt;b&gt;odd&lt;/b&gt;" in net["layout"]["title"]["text"]


def test_the_cxl_claim_is_checked_on_the_users_cluster(spawns):
    at = app_test("pages/topology.py")
    at.selectbox(key="topo_new_type").set_value("npu").run()
    at.button(key="topo_add_device").click().run()  # an NPU on the CXL switch joins the comparison
    md = " ".join(m.value for m in at.markdown)
    assert "The CXL design's claim" in md and "modelled, not measured" in md
    pairs = {x for trace in figure(at, "topo_cmp_fig")["data"] for x in trace["x"]}
    assert {"gpu→npu", "dpu→npu"} <= pairs and not any("host" in p for p in pairs)
    assert any("gpu → host → npu" in h for trace in figure(at, "topo_cmp_fig")["data"] for h in trace["hovertext"])
    load(at, "edge")
    assert any("has no CXL link" in i.value for i in at.info)
    at.selectbox(key="topo_cmp").set_value("pcie").run()
    assert any("fewer than two device names in common" in i.value for i in at.info)
    load(at, "pcie")
    at.selectbox(key="topo_cmp").set_value("cxl").run()
    md = " ".join(m.value for m in at.markdown)
    assert "with preset (1) as on this cluster: this cluster is slower for every pair" in md
