"""lab.view.topology: the Topology page's editor state, add-a-device checks, route ends, upload and
comparison sentence, exercised with plain dicts in place of the session."""

import pytest

from lab.scenario.catalogue import LINK_CATALOGUE, preset
from lab.scenario.document import Scenario
from lab.view.topology_tables import apply_edit, tables_equal, to_tables
from lab.view import topology as T


def quote(s):
    return f"<{s}>"


def test_fresh_editor_holds_the_topologys_tables_and_a_new_version():
    cxl = preset("cxl")
    ed = T.fresh_editor(cxl, 4)
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
    ed = T.after_edit(ok, 2)
    assert ed["version"] == 3 and ed["error"] is None and ed["produced"] == ok.topology
    assert ed["flash"] == "Edit applied: every page now uses this topology."
    assert ed["produced"].links[0].bandwidth == 10e9
    l2.loc[0, "bandwidth_GBps"] = -1.0
    bad = apply_edit(cxl, (d, l, s), (d, l2, s))
    ed = T.after_edit(bad, 2)
    assert "flash" not in ed and ed["produced"] == cxl
    assert ed["error"][0] == "links" and "must be positive" in ed["error"][1]
    assert tables_equal(ed["links"], l2)
    ed = T.editor_after(ok, 7, "hello")
    assert ed["version"] == 8 and ed["flash"] == "hello"


def test_edited_and_any_edited_read_the_editors_widget_state():
    assert not T.edited(None) and not T.edited({})
    assert not T.edited({"edited_rows": {}, "added_rows": [], "deleted_rows": []})
    assert T.edited({"edited_rows": {0: {"name": "x"}}, "added_rows": [], "deleted_rows": []})
    assert T.edited({"deleted_rows": [1]})
    assert not T.any_edited({"topo_dev_3": {"edited_rows": {}}}, 3)
    assert T.any_edited({"topo_link_3": {"added_rows": [{}]}}, 3)
    assert not T.any_edited({"topo_link_2": {"added_rows": [{}]}}, 3)  # another version's editor


def test_editor_columns_labels_units_and_choices():
    dev = T.editor_columns("devices")
    assert dev["name"] == ("text", {"label": "name", "required": True})
    assert dev["type"][0] == "select" and "gpu" in dev["type"][1]["options"]
    assert dev["memory_GB"] == ("number", {"label": "memory (GB)", "format": "%.3g"})
    assert dev["matmul_TFLOPs"][1]["label"] == "matmul (TFLOP/s)" and dev["matmul_TFLOPs"][1]["format"] == "%.4g"
    assert T.editor_columns("switches") == {"name": ("text", {"label": "switch"})}
    links = T.editor_columns("links")
    assert links["bandwidth_GBps"] == ("number", {"label": "bandwidth (GB/s each way)", "format": "%.4g"})
    assert links["latency_us"][1]["label"] == "latency (µs)" and "cxl" in links["kind"][1]["options"]


def test_refusal_goes_above_its_own_table():
    assert T.refusal(None, "devices", quote) is None
    err = ("links", "links row 1: bad")
    assert T.refusal(err, "devices", quote) is None
    assert T.refusal(err, "links", quote) == ("This edit is not applied, so every page keeps the last valid "
                                              "topology. <links row 1: bad>. Fix the cell, or discard the edit.")
    assert T.refusal((None, "whole"), "devices", quote).endswith("<whole>. Fix the cell, or discard the edit.")


def test_add_refusal_and_added_messages():
    taken = ["host", "gpu", "cxl-switch"]
    assert T.add_refusal("", taken, False, quote) == "Give the new device a name."
    assert T.add_refusal("gpu", taken, False, quote) == (
        "Nothing was added: a device or switch named “<gpu>” already exists, and every device and switch "
        "needs its own name. “<gpu1>” is free.")
    assert T.add_refusal("npu", taken, True, quote) == (
        "Nothing was added: the tables hold an edit that is not applied; fix or discard it first.")
    assert T.add_refusal("npu", taken, False, quote) is None
    assert T.added("npu", quote) == "Added “<npu>”: every page now uses this topology."


def test_needs_new_name():
    assert T.needs_new_name(None, None, ["gpu"])
    assert T.needs_new_name(" gpu ", ["host"], ["host", "gpu"])  # the topology now uses it
    assert not T.needs_new_name("gpu", ["host", "gpu"], ["host", "gpu"])  # typed by the person: kept
    assert not T.needs_new_name("npu", ["host"], ["host", "gpu"])


def session_for(topo):
    return {T.EDITOR: T.fresh_editor(topo, 0)}


def test_prepare_new_device_sets_the_popovers_first_choices():
    ss = session_for(preset("cxl"))
    taken = T.prepare_new_device(ss)
    assert taken == ["host", "gpu", "fpga", "asic", "dpu", "cxl-switch"]
    assert ss["topo_new_type"] == "gpu" and ss["topo_new_name"] == "gpu1"
    assert ss["topo_new_attach"] == "cxl-switch" and ss["topo_new_kind"] == "cxl"
    assert ss["topo_new_bw"] == LINK_CATALOGUE["cxl"][0] / 1e9
    assert ss["topo_new_lat"] == pytest.approx(LINK_CATALOGUE["cxl"][1] / 1e-6)
    ss["topo_new_name"] = "gpu"  # typed by the person: stays, to be refused
    T.prepare_new_device(ss)
    assert ss["topo_new_name"] == "gpu"
    ss[T.EDITOR] = T.fresh_editor(preset("pcie"), 1)  # no switch, and the names are the same minus it
    ss["topo_new_name"] = "npu"
    T.prepare_new_device(ss)
    assert ss["topo_new_attach"] == "host" and ss["topo_new_name"] == "npu"


def test_propose_name_and_follow_kind():
    ss = session_for(preset("cxl"))
    T.prepare_new_device(ss)
    ss["topo_new_type"] = "npu"
    T.propose_name(ss)
    assert ss["topo_new_name"] == "npu"
    ss["topo_new_kind"] = "pcie"
    T.follow_kind(ss)
    assert ss["topo_new_bw"] == LINK_CATALOGUE["pcie"][0] / 1e9 and ss["_topo_new_kind_was"] == "pcie"
    ss["topo_new_bw"] = 5.0  # the person's own number stays
    ss["topo_new_kind"] = "ethernet"
    T.follow_kind(ss)
    assert ss["topo_new_bw"] == 5.0
    assert ss["topo_new_lat"] == pytest.approx(LINK_CATALOGUE["ethernet"][1] / 1e-6)


def test_route_ends_fall_back_with_a_notice():
    names = ["edge0", "edge1", "edge2"]
    view = {"topo_from": "edge2", "topo_to": "dpu"}
    assert T.route_ends(names, view.get, quote) == [
        ("topo_to", "edge1", "“<dpu>” is no longer a device, so the route ends at “<edge1>”.")]
    assert T.route_ends(names, {}.get, quote) == [("topo_from", "edge0", None), ("topo_to", "edge1", None)]
    assert T.route_ends(["solo"], {"topo_from": "x"}.get, quote) == [
        ("topo_from", "solo", "“<x>” is no longer a device, so the route starts at “<solo>”."),
        ("topo_to", "solo", None)]


def test_read_upload():
    sc = Scenario("up", preset("gpu-npu"))
    assert T.read_upload("s.json", sc.to_json().encode()) == (sc, None)
    loaded, err = T.read_upload("x.json", b"{not json")
    assert loaded is None and err.startswith("x.json was not loaded: not valid JSON")


def test_comparison_text_ratio_and_verdict():
    text = T.comparison_text((1.5, 1.502), 10.0, "PCIe through the host", "B")
    assert text == ("In this model, device-to-device transfers of 10 MB take 1.50× as long with PCIe through the "
                    "host as on this cluster: this cluster is faster for every pair. The gap comes from the link "
                    "numbers in the tables, not from a measurement B.")
    assert "take 0.50× to 0.90× as long with preset (1) as on this cluster: this cluster is slower for every " \
        "pair." in T.comparison_text((0.5, 0.9), 10.0, "preset (1)", "B")
    assert "0.1 MB take 0.80× to 1.20× as long with x as on this cluster: neither is faster for every pair." \
        in T.comparison_text((0.8, 1.2), 0.1, "x", "B")

