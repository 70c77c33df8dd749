"""The Topology page's library: tables in display units and their messages, free names, the link-kind
rule, one edit of the editor, and the same cluster with PCIe through the host."""

import math

import pytest

from lab.errors import LabError
from lab.scenario.catalogue import (
    LINK_CATALOGUE,
    PRESETS,
    as_pcie,
    catalogue_device,
    catalogue_link,
    has_cxl,
    host_of,
    preset,
)
from lab.view.topology_tables import (
    AS_PCIE,
    TableError,
    add_catalogue_device,
    apply_edit,
    compare_designs,
    comparison_option_label,
    comparison_target,
    default_attach,
    fill_link_kinds,
    free_name,
    from_tables,
    kind_change,
    names_in,
    tables_equal,
    to_tables,
    with_device,
)
from lab.scenario.topology import Switch, Topology

PCIE_BW, PCIE_LAT, _ = LINK_CATALOGUE["pcie"]
CXL_BW, CXL_LAT, _ = LINK_CATALOGUE["cxl"]


# ---- free names -------------------------------------------------------------------------------

def test_free_name_is_the_type_when_no_one_uses_it():
    assert free_name("npu", ["host", "gpu", "fpga"]) == "npu"


def test_free_name_counts_past_the_taken_ones():
    assert free_name("fpga", ["fpga", "fpga1", "gpu"]) == "fpga2"
    assert free_name("fpga", ["fpga"]) == "fpga1"
    assert free_name("fpga", ["fpga", "fpga2"]) == "fpga1"  # the first free, not the next after the largest


def test_free_name_ignores_blank_cells_and_counts_switches():
    d, _, s = to_tables(preset("cxl"))
    d.loc[len(d)] = [None] * len(d.columns)
    taken = names_in(d, s)
    assert "cxl-switch" in taken and len(taken) == 6
    assert free_name("cxl-switch", taken) == "cxl-switch1"


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_proposed_name_always_adds_cleanly(name):
    topo = preset(name)
    tables = to_tables(topo)
    for kind in ("fpga", "gpu", "cpu"):
        new = free_name(kind, names_in(tables[0], tables[2]))
        assert new not in topo.device_names
        out = apply_edit(topo, tables, with_device(tables, catalogue_device(new, kind),
                                                   catalogue_link(new, topo.device_names[0], "pcie")))
        assert out.error is None and out.applied
        assert out.topology.device(new).type == kind
        topo, tables = out.topology, out.tables


# ---- messages in display units ------------------------------------------------------------------

def refused(devices, links, switches) -> TableError:
    with pytest.raises(TableError) as exc:
        from_tables("x", devices, links, switches)
    return exc.value


def test_a_negative_bandwidth_is_named_by_row_and_column_in_gb_per_s():
    d, l, s = to_tables(preset("cxl"))
    l.loc[1, "bandwidth_GBps"] = -5
    err = refused(d, l, s)
    assert err.table == "links"
    assert "links row 2 (gpu–cxl-switch)" in str(err)
    assert "'bandwidth (GB/s each way)' must be positive (got -5 GB/s)" in str(err)
    assert "e+09" not in str(err) and "bytes" not in str(err)


@pytest.mark.parametrize("value, words", [(-1.5, "must not be negative (got -1.5 µs)"),
                                          (math.inf, "must be a finite number")])
def test_latency_problems_in_microseconds(value, words):
    d, l, s = to_tables(preset("cxl"))
    l.loc[3, "latency_us"] = value
    err = refused(d, l, s)
    assert err.table == "links" and "links row 4 (asic–cxl-switch)" in str(err) and words in str(err)
    assert "'latency (µs)'" in str(err)


def test_memory_and_throughput_problems_in_gb_and_tflops():
    d, l, s = to_tables(preset("cxl"))
    d.loc[1, "memory_GB"] = 0
    err = refused(d, l, s)
    assert err.table == "devices" and "device 'gpu' (devices row 2)" in str(err)
    assert "'memory (GB)' must be positive (got 0 GB)" in str(err)
    d, l, s = to_tables(preset("cxl"))
    d.loc[2, "conv_TFLOPs"] = -2
    err = refused(d, l, s)
    assert "device 'fpga' (devices row 3)" in str(err) and "'conv (TFLOP/s)' must be positive" in str(err)
    assert "got -2 TFLOP/s" in str(err)


def test_a_taken_name_names_both_rows():
    d, l, s = to_tables(preset("cxl"))
    d.loc[len(d)] = d.loc[2]  # a second "fpga"
    err = refused(d, l, s)
    assert err.table == "devices" and "devices row 6" in str(err) and "already used by devices row 3" in str(err)
    _, l, s = to_tables(preset("cxl"))
    s.loc[0, "name"] = "gpu"
    err = refused(to_tables(preset("cxl"))[0], l, s)
    assert err.table == "switches" and "already used by devices row 2" in str(err)


def test_a_link_to_nowhere_and_a_disconnected_graph_are_about_the_links():
    d, l, s = to_tables(preset("cxl"))
    l.loc[0, "b"] = "cxl-swich"
    err = refused(d, l, s)
    assert err.table == "links" and "links row 1 (host–cxl-swich)" in str(err) and "not a device or switch" in str(err)
    d, l, s = to_tables(preset("cxl"))
    err = refused(d, l.drop(index=4), s)
    assert err.table == "links" and "disconnected" in str(err) and "dpu" in str(err)


def test_a_table_error_is_a_lab_error():
    assert issubclass(TableError, LabError)


# ---- the link-kind rule --------------------------------------------------------------------------

def test_kind_change_follows_catalogue_numbers_and_keeps_typed_ones():
    pcie = (PCIE_BW / 1e9, PCIE_LAT / 1e-6)
    cxl = (CXL_BW / 1e9, CXL_LAT / 1e-6)
    assert kind_change("cxl", "pcie", *cxl) == pytest.approx(pcie)
    assert kind_change("cxl", "pcie", 10.0, cxl[1]) == pytest.approx((10.0, pcie[1]))  # own bandwidth stays
    assert kind_change(None, "pcie", None, None) == pytest.approx(pcie)  # empty numbers are filled
    assert kind_change("cxl", "cxl", 3.0, 1.0) == (3.0, 1.0)


def test_fill_link_kinds_in_the_table():
    before = to_tables(preset("cxl"))[1]
    after = before.copy()
    after.loc[1, "kind"] = "pcie"  # catalogue numbers: both follow
    after.loc[2, "kind"] = "ethernet"
    after.loc[2, "bandwidth_GBps"] = 7.0  # typed in this same edit: stays
    after.loc[3, "bandwidth_GBps"] = 9.0  # no kind change: untouched
    after.loc[5] = ["gpu", "fpga", "nvlink", None, None]  # a new row: filled
    out = fill_link_kinds(before, after)
    eth_bw, eth_lat, _ = LINK_CATALOGUE["ethernet"]
    nv_bw, nv_lat, _ = LINK_CATALOGUE["nvlink"]
    assert out.loc[1, "bandwidth_GBps"] == pytest.approx(PCIE_BW / 1e9)
    assert out.loc[1, "latency_us"] == pytest.approx(PCIE_LAT / 1e-6)
    assert out.loc[2, "bandwidth_GBps"] == 7.0 and out.loc[2, "latency_us"] == pytest.approx(eth_lat / 1e-6)
    assert out.loc[3, "bandwidth_GBps"] == 9.0 and out.loc[3, "kind"] == "cxl"
    assert out.loc[5, "bandwidth_GBps"] == pytest.approx(nv_bw / 1e9)
    assert out.loc[5, "latency_us"] == pytest.approx(nv_lat / 1e-6)


def test_a_user_number_survives_a_kind_change():
    before = to_tables(preset("cxl"))[1]
    before.loc[1, "bandwidth_GBps"] = 50.0  # typed earlier
    after = before.copy()
    after.loc[1, "kind"] = "pcie"
    out = fill_link_kinds(before, after)
    assert out.loc[1, "bandwidth_GBps"] == 50.0
    assert out.loc[1, "latency_us"] == pytest.approx(PCIE_LAT / 1e-6)


# ---- one edit -------------------------------------------------------------------------------------

def test_an_applied_edit_makes_the_new_topology_the_tables():
    topo = preset("cxl")
    before = to_tables(topo)
    after = tuple(t.copy() for t in before)
    after[1].loc[1, "bandwidth_GBps"] = 8.0
    out = apply_edit(topo, before, after)
    assert out.applied and out.error is None
    assert out.topology.path("gpu", "host").bottleneck == 8e9
    assert all(tables_equal(a, b) for a, b in zip(out.tables, to_tables(out.topology)))


def test_a_refused_edit_keeps_what_was_typed_and_the_topology():
    topo = preset("cxl")
    before = to_tables(topo)
    after = tuple(t.copy() for t in before)
    after[1].loc[1, "bandwidth_GBps"] = -5.0
    out = apply_edit(topo, before, after)
    assert not out.applied and out.topology is topo
    assert out.error.table == "links" and "got -5 GB/s" in str(out.error)
    assert out.tables[1].loc[1, "bandwidth_GBps"] == -5.0


def test_a_blank_new_row_stays_to_be_filled():
    topo = preset("cxl")
    before = to_tables(topo)
    devices = before[0].copy()
    devices.loc[len(devices)] = [None] * len(devices.columns)
    out = apply_edit(topo, before, (devices, before[1], before[2]))
    assert not out.applied and out.error is None and len(out.tables[0]) == 6


def test_a_deleted_row_is_gone_for_good():
    topo = preset("pcie")
    before = to_tables(topo)
    devices = before[0].drop(index=4)
    links = before[1].drop(index=3)  # host–dpu
    out = apply_edit(topo, before, (devices, links, before[2]))
    assert out.applied and "dpu" not in out.topology.device_names
    assert list(out.tables[0]["name"]) == ["host", "gpu", "fpga", "asic"]


# ---- the same cluster with PCIe through the host -------------------------------------------------

def test_as_pcie_routes_cxl_devices_through_the_host():
    cxl = preset("cxl")
    before = cxl.path("gpu", "fpga")
    assert "host" not in before.nodes and {l.kind for l in before.links} == {"cxl"}
    pcie = as_pcie(cxl)
    after = pcie.path("gpu", "fpga")
    assert after.nodes == ("gpu", "host", "fpga")
    assert after.bottleneck == PCIE_BW and after.latency == pytest.approx(2 * PCIE_LAT)
    assert not has_cxl(pcie) and not pcie.switches  # the CXL switch served only CXL links
    assert pcie.device_names == cxl.device_names
    for a, b in [("gpu", "asic"), ("dpu", "fpga")]:
        assert pcie.path(a, b).time(1e6) > cxl.path(a, b).time(1e6)


def test_as_pcie_uses_each_pools_own_host_and_keeps_the_rest():
    two = preset("two-pools")
    pcie = as_pcie(two)
    assert pcie.path("p1-gpu", "p1-fpga").nodes == ("p1-gpu", "p1-host", "p1-fpga")
    assert pcie.path("p0-asic", "p0-dpu").nodes == ("p0-asic", "p0-host", "p0-dpu")
    cross = pcie.path("p0-gpu", "p1-gpu")
    assert cross.nodes[1] == "p0-host" and cross.nodes[-2] == "p1-host"
    upi = [l for l in two.links if l.kind == "upi"]
    assert upi and all(l in pcie.links for l in upi)  # non-CXL links stay
    assert {l.kind for l in pcie.links} <= {"pcie", "upi", "switch"}


def test_a_device_only_reachable_by_cxl_is_reachable_via_its_host_afterwards():
    devs = (catalogue_device("h0", "cpu", "a"), catalogue_device("g0", "gpu", "a"),
            catalogue_device("h1", "cpu", "b"), catalogue_device("f1", "fpga", "b"))
    links = (catalogue_link("g0", "f1", "cxl"), catalogue_link("h0", "g0", "ethernet"),
             catalogue_link("h0", "h1", "upi"))
    topo = Topology("direct", devs, links, ()).validate()
    assert topo.path("h1", "f1").nodes == ("h1", "h0", "g0", "f1")  # f1 hangs off g0's CXL link only
    pcie = as_pcie(topo)
    assert pcie.path("h1", "f1").nodes == ("h1", "f1")
    assert pcie.path("h1", "f1").bottleneck == PCIE_BW
    assert host_of(topo, "f1") == "h1" and host_of(topo, "g0") == "h0"
    assert [l for l in pcie.links if {l.a, l.b} == {"g0", "h0"}][0].kind == "ethernet"  # already linked: kept


def test_as_pcie_leaves_a_topology_without_cxl_alone_and_needs_a_host():
    for name in ("pcie", "gpu-npu", "edge"):
        t = preset(name)
        assert not has_cxl(t) and as_pcie(t).links == t.links
    devs = (catalogue_device("g", "gpu"), catalogue_device("f", "fpga"))
    no_host = Topology("nohost", devs, (catalogue_link("g", "sw", "cxl"), catalogue_link("f", "sw", "cxl")),
                       (Switch("sw"),)).validate()
    with pytest.raises(LabError, match="no host CPU"):
        as_pcie(no_host)


def test_compare_designs_on_the_users_cluster():
    cxl = preset("cxl")
    nbytes = 10e6
    df, span = compare_designs(cxl, as_pcie(cxl), nbytes, ("mine", "pcie"))
    assert not df.pair.str.contains("host").any()  # host CPUs are left out: the claim is device to device
    assert df.pair.nunique() == 6  # 4 devices
    ratio = (2 * PCIE_LAT + nbytes / PCIE_BW) / (2 * CXL_LAT + nbytes / CXL_BW)
    assert span == pytest.approx((ratio, ratio))
    df, span = compare_designs(cxl, preset("edge"), nbytes, ("mine", "edge"))
    assert df.empty and span is None


# ---- the page's add-a-device and comparison helpers --------------------------------------------

def test_default_attach_is_the_first_switch_else_the_first_device():
    d, _, s = to_tables(preset("cxl"))
    assert default_attach(d, s) == "cxl-switch"
    d, _, s = to_tables(preset("pcie"))  # no switch
    assert default_attach(d, s) == "host"
    assert default_attach(d.iloc[:0], s.iloc[:0]) is None


def test_add_catalogue_device_links_it_in_display_units():
    cxl = preset("cxl")
    out = add_catalogue_device(cxl, to_tables(cxl), "npu9", "npu", "cxl-switch", "pcie", 5.0, 2.0)
    assert out.applied and out.error is None
    assert out.topology.device("npu9").type == "npu"
    link = out.topology.links[-1]
    assert (link.a, link.b, link.kind) == ("npu9", "cxl-switch", "pcie")
    assert link.bandwidth == pytest.approx(5e9) and link.latency == pytest.approx(2e-6)
    assert list(out.tables[0]["name"])[-1] == "npu9"
    bad = add_catalogue_device(cxl, to_tables(cxl), "npu9", "npu", "cxl-switch", "pcie", 0.0, 2.0)
    assert not bad.applied and bad.topology == cxl and "must be positive" in str(bad.error)


def test_comparison_target_and_labels():
    assert comparison_option_label(AS_PCIE) == "the same cluster with PCIe through the host"
    assert comparison_option_label("edge") == "(5) edge cluster: 8 weak devices on 100 Mbit/s"
    cxl = preset("cxl")
    other, label = comparison_target(cxl, AS_PCIE)
    assert label == "PCIe through the host" and other == as_pcie(cxl) and not has_cxl(other)
    assert comparison_target(preset("edge"), AS_PCIE) is None  # no CXL link: nothing to replace
    other, label = comparison_target(cxl, "pcie")
    assert label == "preset (2)" and other == preset("pcie")
