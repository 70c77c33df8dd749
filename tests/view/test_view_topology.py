"""lab.view.topology: the Topology page's model: the editor's state and what changes it (a preset, an upload, an
edit, an added device), the add-a-device checks, the route and its ends, the figures and the comparison, exercised
with plain dicts in place of the session."""

import json

import pytest

from lab.scenario.catalogue import LINK_CATALOGUE, preset
from lab.scenario.document import Scenario
from lab.view.topology_tables import apply_edit, tables_equal, to_tables
from lab.view import topology as topology_view
from tests.view.sections import figure_json


def test_fresh_editor_holds_the_topologys_tables_and_a_new_version():
    cxl = preset("cxl")
    ed = topology_view.fresh_editor(cxl, 4)
    assert ed["version"] == 5 and ed["produced"] == cxl and ed["error"] is None
    assert list(ed["devices"]["name"]) == ["host", "gpu", "fpga", "asic", "dpu"]
    assert list(ed["switches"]["name"]) == ["cxl-switch"] and len(ed["links"]) == 5
    assert "flash" not in ed


def test_editor_after_an_applied_and_a_refused_edit():
    cxl = preset("cxl")
    d, l, s = to_tables(cxl)
    l2 = l.copy()
    l2.loc[0, "bandwidth_GBps"] = 10.0
    ok = apply_edit(cxl, (d, l, s), (d, l2, s))
    ed = topology_view.after_edit(ok, 2)
    assert ed["version"] == 3 and ed["error"] is None and ed["produced"] == ok.topology
    assert ed["flash"] == "Edit applied: every page now uses this topology."
    assert ed["produced"].links[0].bandwidth == 10e9
    l2.loc[0, "bandwidth_GBps"] = -1.0
    bad = apply_edit(cxl, (d, l, s), (d, l2, s))
    ed = topology_view.after_edit(bad, 2)
    assert "flash" not in ed and ed["produced"] == cxl
    assert ed["error"][0] == "links" and "must be positive" in ed["error"][1]
    assert tables_equal(ed["links"], l2)
    ed = topology_view.editor_after(ok, 7, "hello")
    assert ed["version"] == 8 and ed["flash"] == "hello"


def test_edited_and_any_edited_read_the_editors_widget_state():
    assert not topology_view.edited(None) and not topology_view.edited({})
    assert not topology_view.edited({"edited_rows": {}, "added_rows": [], "deleted_rows": []})
    assert topology_view.edited({"edited_rows": {0: {"name": "x"}}, "added_rows": [], "deleted_rows": []})
    assert topology_view.edited({"deleted_rows": [1]})
    assert not topology_view.any_edited({"topo_dev_3": {"edited_rows": {}}}, 3)
    assert topology_view.any_edited({"topo_link_3": {"added_rows": [{}]}}, 3)
    assert not topology_view.any_edited({"topo_link_2": {"added_rows": [{}]}}, 3)  # another version's editor


def test_editor_columns_labels_units_and_choices():
    dev = topology_view.editor_columns("devices")
    assert dev["name"] == {"kind": "text", "label": "name", "required": True}
    assert dev["type"]["kind"] == "select" and "gpu" in dev["type"]["options"]
    assert dev["memory_GB"] == {"kind": "number", "label": "memory (GB)", "format": "%.3g"}
    assert dev["matmul_TFLOPs"]["label"] == "matmul (TFLOP/s)" and dev["matmul_TFLOPs"]["format"] == "%.4g"
    assert topology_view.editor_columns("switches") == {"name": {"kind": "text", "label": "switch"}}
    links = topology_view.editor_columns("links")
    assert links["bandwidth_GBps"] == {"kind": "number", "label": "bandwidth (GB/s each way)", "format": "%.4g"}
    assert links["latency_us"]["label"] == "latency (µs)" and "cxl" in links["kind"]["options"]


def notice_of(sections):
    """The one notice of a list of sections (or of one section), as (level, text)."""
    sections = [sections] if not isinstance(sections, list) else sections
    (n,) = [n for s in sections for n in s.notices]
    return n.level, n.text


def test_refusal_goes_above_its_own_table():
    assert topology_view.refusal({"error": None}, "devices") is None
    ed = {"error": ("links", "links row 1: bad")}
    assert topology_view.refusal(ed, "devices") is None
    assert notice_of(topology_view.refusal(ed, "links")) == ("error", "This edit is not applied, so every page keeps the last "
                                                          "valid topology. links row 1: bad. Fix the cell, or discard "
                                                          "the edit.")
    assert notice_of(topology_view.refusal({"error": (None, "whole")}, "devices"))[1].endswith(
        "whole. Fix the cell, or discard the edit.")


def test_add_refusal_and_added_messages():
    taken = ["host", "gpu", "cxl-switch"]
    assert topology_view.add_refusal("", taken, False) == "Give the new device a name."
    assert topology_view.add_refusal("gpu", taken, False) == (
        "Nothing was added: a device or switch named “gpu” already exists, and every device and switch "
        "needs its own name. “gpu1” is free.")
    assert topology_view.add_refusal("npu", taken, True) == (
        "Nothing was added: the tables hold an edit that is not applied; fix or discard it first.")
    assert topology_view.add_refusal("npu", taken, False) is None
    assert topology_view.added("npu") == "Added “npu”: every page now uses this topology."


def test_needs_new_name():
    assert topology_view.needs_new_name(None, None, ["gpu"])
    assert topology_view.needs_new_name(" gpu ", ["host"], ["host", "gpu"])  # the topology now uses it
    assert not topology_view.needs_new_name("gpu", ["host", "gpu"], ["host", "gpu"])  # typed by the person: kept
    assert not topology_view.needs_new_name("npu", ["host"], ["host", "gpu"])


def session_for(topo):
    return {topology_view.EDITOR: topology_view.fresh_editor(topo, 0)}


def test_prepare_new_device_sets_the_popovers_first_choices():
    ss = session_for(preset("cxl"))
    taken = topology_view.prepare_new_device(ss)
    assert taken == ["host", "gpu", "fpga", "asic", "dpu", "cxl-switch"]
    assert ss["topo_new_type"] == "gpu" and ss["topo_new_name"] == "gpu1"
    assert ss["topo_new_attach"] == "cxl-switch" and ss["topo_new_kind"] == "cxl"
    assert ss["topo_new_bw"] == LINK_CATALOGUE["cxl"][0] / 1e9
    assert ss["topo_new_lat"] == pytest.approx(LINK_CATALOGUE["cxl"][1] / 1e-6)
    ss["topo_new_name"] = "gpu"  # typed by the person: stays, to be refused
    topology_view.prepare_new_device(ss)
    assert ss["topo_new_name"] == "gpu"
    ss[topology_view.EDITOR] = topology_view.fresh_editor(preset("pcie"), 1)  # no switch, and the names are the same minus it
    ss["topo_new_name"] = "npu"
    topology_view.prepare_new_device(ss)
    assert ss["topo_new_attach"] == "host" and ss["topo_new_name"] == "npu"


def test_propose_name_and_follow_kind():
    ss = session_for(preset("cxl"))
    topology_view.prepare_new_device(ss)
    ss["topo_new_type"] = "npu"
    topology_view.propose_name(ss)
    assert ss["topo_new_name"] == "npu"
    ss["topo_new_kind"] = "pcie"
    topology_view.follow_kind(ss)
    assert ss["topo_new_bw"] == LINK_CATALOGUE["pcie"][0] / 1e9 and ss["_topo_new_kind_was"] == "pcie"
    ss["topo_new_bw"] = 5.0  # the person's own number stays
    ss["topo_new_kind"] = "ethernet"
    topology_view.follow_kind(ss)
    assert ss["topo_new_bw"] == 5.0
    assert ss["topo_new_lat"] == pytest.approx(LINK_CATALOGUE["ethernet"][1] / 1e-6)


def test_route_ends_fall_back_with_a_notice():
    names = ["edge0", "edge1", "edge2"]
    view = {"topo_from": "edge2", "topo_to": "dpu"}
    assert topology_view.route_ends(names, view.get) == [
        ("topo_to", "edge1", "“dpu” is no longer a device, so the route ends at “edge1”.")]
    assert topology_view.route_ends(names, {}.get) == [("topo_from", "edge0", None), ("topo_to", "edge1", None)]
    assert topology_view.route_ends(["solo"], {"topo_from": "x"}.get) == [
        ("topo_from", "solo", "“x” is no longer a device, so the route starts at “solo”."),
        ("topo_to", "solo", None)]
    pcie = preset("pcie").device_names  # the same device names as the CXL preset's: the choice stays
    assert topology_view.route_ends(pcie, {"topo_from": "host", "topo_to": "dpu"}.get) == []
    edge = preset("edge").device_names  # gone: back to the first and second device, with a notice
    (_, (key, now, notice)) = topology_view.route_ends(edge, {"topo_from": "host", "topo_to": "dpu"}.get)
    assert (key, now) == ("topo_to", "edge1") and "dpu" in notice and "no longer a device" in notice


def test_read_upload():
    sc = Scenario("up", preset("gpu-npu"))
    assert topology_view.read_upload("s.json", sc.to_json().encode()) == (sc, None)
    loaded, err = topology_view.read_upload("x.json", b"{not json")
    assert loaded is None and err.startswith("x.json was not loaded: not valid JSON")


def test_comparison_text_ratio_and_verdict():
    text = topology_view.comparison_text((1.5, 1.502), 10.0, "PCIe through the host", "B")
    assert text == ("In this model, device-to-device transfers of 10 MB take 1.50× as long with PCIe through the "
                    "host as on this cluster: this cluster is faster for every pair. The gap comes from the link "
                    "numbers in the tables, not from a measurement B.")
    assert "take 0.50× to 0.90× as long with preset (1) as on this cluster: this cluster is slower for every " \
        "pair." in topology_view.comparison_text((0.5, 0.9), 10.0, "preset (1)", "B")
    assert "0.1 MB take 0.80× to 1.20× as long with x as on this cluster: neither is faster for every pair." \
        in topology_view.comparison_text((0.8, 1.2), 0.1, "x", "B")



# ---- what changes the editor: a preset, an upload, an edit, an added device -------------------------------------

class Upload:
    """What the page's uploader gives: a file's id, name and bytes."""

    def __init__(self, name: str, data: bytes, file_id: str = "f1"):
        self.name, self.file_id, self._data = name, file_id, data

    def getvalue(self) -> bytes:
        return self._data


def test_the_editor_is_kept_while_its_tables_produced_the_topology_and_its_message_shows_once():
    cxl, ss = preset("cxl"), {}
    ed = topology_view.editor_for(ss, cxl)
    assert ed["version"] == 1 and topology_view.editor_for(ss, cxl) is ed
    assert topology_view.editor_for(ss, preset("pcie"))["version"] == 2  # a preset, link or lesson changed it
    ss[topology_view.EDITOR]["flash"] = "done"
    assert notice_of(topology_view.flash(ss[topology_view.EDITOR])) == ("success", "done") and topology_view.flash(ss[topology_view.EDITOR]) == []


def test_loading_a_preset_starts_the_editor_over():
    sc, ss = Scenario("s", preset("cxl")), {}
    topology_view.editor_for(ss, sc.topology)
    topology_view.prepare_new_device(ss)
    ss[topology_view.UPLOAD_ERROR] = "bad.json was not loaded"
    new = topology_view.load_preset(ss, sc, "edge")
    assert new.topology.name == "edge" and len(new.topology.devices) == 8 and new.name == "edge-scenario"
    assert ss[topology_view.EDITOR]["produced"] == new.topology and ss[topology_view.EDITOR]["version"] == 2
    assert topology_view.UPLOAD_ERROR not in ss and "topo_new_name" not in ss and topology_view.upload_refusal(ss) == []


def test_an_upload_is_read_once_and_a_refused_one_keeps_the_topology_with_its_message():
    ss = {}
    topology_view.editor_for(ss, preset("cxl"))
    bad = preset("cxl").to_dict()
    bad["links"][0]["bandwidth"] = -1
    assert topology_view.take_upload(ss, Upload("bad.json", json.dumps(bad).encode())) is None
    level, text = notice_of(topology_view.upload_refusal(ss))
    assert level == "error" and text.startswith("bad.json was not loaded") and "must be positive" in text
    assert text.endswith(" The current topology is unchanged.")
    assert topology_view.take_upload(ss, Upload("x.json", b"{not json", "f2")) is None
    assert "not valid JSON" in notice_of(topology_view.upload_refusal(ss))[1]
    assert topology_view.take_upload(ss, None) is None and topology_view.upload_refusal(ss) == []  # the file removed, or the page left
    sc = Scenario("uploaded", preset("gpu-npu"))
    assert topology_view.take_upload(ss, Upload("s.json", sc.to_json().encode(), "f3")) == sc
    assert ss[topology_view.EDITOR]["produced"] == sc.topology
    assert topology_view.take_upload(ss, Upload("s.json", sc.to_json().encode(), "f3")) is None  # the same file: read once


def test_an_edit_of_the_tables_is_applied_or_kept_with_its_message():
    sc, ss = Scenario("s", preset("cxl")), {}
    ed = topology_view.editor_for(ss, sc.topology)
    d, l, s = ed["devices"], ed["links"].copy(), ed["switches"]
    l.loc[0, "bandwidth_GBps"] = 10.0
    new = topology_view.take_edit(ss, sc, (d, l, s))
    assert new.topology.links[0].bandwidth == 10e9 and ss[topology_view.EDITOR]["produced"] == new.topology
    assert notice_of(topology_view.flash(ss[topology_view.EDITOR]))[1] == "Edit applied: every page now uses this topology."
    l.loc[0, "bandwidth_GBps"] = -1.0
    assert topology_view.take_edit(ss, new, (ss[topology_view.EDITOR]["devices"], l, s)) == new
    assert "must be positive" in notice_of(topology_view.refusal(ss[topology_view.EDITOR], "links"))[1]
    topology_view.discard(ss, new.topology)
    assert ss[topology_view.EDITOR]["error"] is None and tables_equal(ss[topology_view.EDITOR]["links"], to_tables(new.topology)[1])


def test_adding_a_device_from_the_catalogue_and_a_taken_name_refused():
    sc, ss = Scenario("s", preset("cxl")), {}
    topology_view.editor_for(ss, sc.topology)
    topology_view.prepare_new_device(ss)
    ss["topo_new_type"] = "fpga"
    topology_view.propose_name(ss)
    assert ss["topo_new_name"] == "fpga1"  # fpga is taken in the CXL preset
    ss["topo_new_name"] = "fpga"
    new, refused = topology_view.add_device(ss, sc)
    level, text = notice_of(refused)
    assert new is None and level == "error" and "Nothing was added" in text and "“fpga” already exists" in text
    assert "fpga1" in text and list(ss[topology_view.EDITOR]["devices"]["name"]) == sc.topology.device_names  # no broken row
    ss["topo_new_name"] = "fpga1"
    new, refused = topology_view.add_device(ss, sc)
    assert refused == [] and new.topology.device_names[-1] == "fpga1" and new.topology.device("fpga1").type == "fpga"
    assert new.topology.path("fpga1", "gpu").hops == 2  # through the CXL switch
    assert notice_of(topology_view.flash(ss[topology_view.EDITOR]))[1] == "Added “fpga1”: every page now uses this topology."
    topology_view.editor_for(ss, new.topology)
    topology_view.prepare_new_device(ss)
    assert ss["topo_new_name"] == "fpga2"  # the next free name


def test_a_new_device_on_a_link_of_its_own_numbers():
    sc, ss = Scenario("s", preset("cxl")), {}
    topology_view.editor_for(ss, sc.topology)
    topology_view.prepare_new_device(ss)
    ss["topo_new_kind"] = "ethernet"
    topology_view.follow_kind(ss)
    ss["topo_new_bw"], ss["topo_new_attach"] = 5.0, "host"
    new, _ = topology_view.add_device(ss, sc)
    link = new.topology.links[-1]
    assert (link.kind, link.bandwidth, link.b) == ("ethernet", 5e9, "host")
    assert link.latency == pytest.approx(LINK_CATALOGUE["ethernet"][1])


# ---- the figures, the route and the comparison ------------------------------------------------------------------

def test_the_route_names_its_nodes_its_bottleneck_and_time():
    r = topology_view.route(preset("cxl"), "host", "gpu", 10.0, "BADGE")  # two CXL hops through the switch: 0.25 µs, 64 GB/s
    # 10 MB: 0.5 µs + 10e6 B / 64e9 B/s = 156.75 µs
    assert r.text.format(**r.values) == ("Route **host → cxl-switch → gpu**: 2 hop(s), summed latency 500 ns, "
                                         "bottleneck 64 GB/s on link host–cxl-switch (cxl); 10 MB take 157 µs BADGE.")
    r = topology_view.route(preset("pcie"), "gpu", "fpga", 1.0, "B")
    assert r.text.startswith("Route **{route}**: 2 hop(s)") and r.values["route"] == "gpu → host → fpga"
    assert "on link {a}–{b} (pcie); 1 MB take" in r.text and {r.values["a"], r.values["b"]} <= {"gpu", "host", "fpga"}
    same = topology_view.route(preset("cxl"), "gpu", "gpu", 10.0, "B")
    assert same.text.format(**same.values) == "Route **gpu**: 0 hop(s), summed latency 0 s, same device: no transfer."


def test_the_drawing_and_the_heatmap_are_modelled_and_user_names_reach_them_as_text():
    topo = preset("pcie")
    odd = "*gpu*_[x](y)<i>"
    devices = tuple(type(d)(odd if d.name == "gpu" else d.name, d.type, d.pool, d.memory, dict(d.throughput))
                    for d in topo.devices)
    links = tuple(type(l)(l.a, odd if l.b == "gpu" else l.b, l.kind, l.bandwidth, l.latency) for l in topo.links)
    topo = topo.replace(devices=devices, links=links, name="<b>odd</b>")
    net = topology_view.network(topo)
    assert net.kind == "modelled" and "the table's assumptions" in net.caption
    drawn = figure_json(net)
    labels = [t for trace in drawn["data"] for t in (trace.get("text") or [])]
    assert "*gpu*_[x](y)&lt;i&gt;" in labels and odd not in labels  # plotly reads tags: escaped
    assert "&lt;b&gt;odd&lt;/b&gt;" in drawn["layout"]["title"]["text"]
    heat = topology_view.heatmap(topo, 10.0)
    assert heat.kind == "modelled" and figure_json(heat)["layout"]["title"]["text"].startswith("Modelled time to move 10 MB")
    route = topology_view.route(topo, "host", odd, 10.0, "B")
    assert odd not in route.text and route.values["route"] == f"host → {odd}"  # ui.show fills it in as text


def test_the_cxl_claim_is_checked_on_the_users_cluster():
    from lab.scenario.catalogue import catalogue_device
    from lab.scenario.topology import Link

    cxl = preset("cxl")
    (s,) = topology_view.comparison(cxl, "as_pcie", 10.0, "B")
    cxl_bw, cxl_lat, _ = LINK_CATALOGUE["cxl"]
    pcie_bw, pcie_lat, _ = LINK_CATALOGUE["pcie"]
    ratio = (2 * pcie_lat + 10e6 / pcie_bw) / (2 * cxl_lat + 10e6 / cxl_bw)
    assert f"take {ratio:.2f}× as long with PCIe through the host as on this cluster" in s.text
    assert s.kind == "modelled" and "host CPUs left out" in s.caption
    npu = cxl.replace(devices=cxl.devices + (catalogue_device("npu", "npu"),),
                      links=cxl.links + (Link("npu", "cxl-switch", "cxl", cxl_bw, cxl_lat),))
    bars = figure_json(topology_view.comparison(npu, "as_pcie", 10.0, "B")[0])["data"]
    pairs = {x for trace in bars for x in trace["x"]}
    assert {"gpu→npu", "dpu→npu"} <= pairs and not any("host" in p for p in pairs)
    assert any("gpu → host → npu" in h for trace in bars for h in trace["hovertext"])
    edge = preset("edge")
    assert "has no CXL link" in notice_of(topology_view.comparison(edge, "as_pcie", 10.0, "B"))[1]
    assert "fewer than two device names in common" in notice_of(topology_view.comparison(edge, "pcie", 10.0, "B"))[1]
    (s,) = topology_view.comparison(preset("pcie"), "cxl", 10.0, "B")
    assert "with preset (1) as on this cluster: this cluster is slower for every pair" in s.text
