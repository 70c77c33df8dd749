"""Topology: build the cluster, see what its links can carry."""

import streamlit as st

import ui
from lab.scenario.catalogue import (DEVICE_CATALOGUE, LINK_CATALOGUE, PRESET_LABELS, PRESETS, as_pcie, catalogue_device,
                           has_cxl, preset)
from lab.errors import LabError
from lab.figures.topology import comparison_figure, fmt_rate, fmt_seconds, network_figure, path_heatmap
from lab.scenario.document import Scenario
from lab.scenario.topology import DEVICE_TYPES, LINK_KINDS, OP_CLASS_LABELS, OP_CLASSES, Link
from lab.scenario.tables import (COLUMN_LABELS, apply_edit, compare_designs, free_name,
                                 kind_change, names_in, to_tables, with_device)
from lab.view.state import TRANSFER_SIZES_MB, fit_choice

sc = ui.scenario_sidebar()
ss = st.session_state
st.title("Topology")
st.markdown("Build a heterogeneous cluster: devices (what each can compute, how fast) and the links between "
            "them. Routes take the widest path; moving *n* bytes costs **latency + n / bottleneck bandwidth** "
            "(the slowest hop bounds the path). Device and link numbers are illustrative assumptions from "
            "public datasheets; edit them.")

# The editor's tables live here, not in the data editors' widget state (which Streamlit drops once
# another page is shown): "devices", "links", "switches" are what the editors start from; "produced"
# is the topology those tables were last applied as; "error" (table, message) is a refused edit,
# whose typed tables are kept; every change gets a new "version", so the editors start afresh.
ED = "topo_editor"
UPLOAD_ERROR = "topo_upload_error"


def fresh_editor(topo, version: int) -> dict:
    d, l, s = to_tables(topo)
    return {"devices": d, "links": l, "switches": s, "version": version + 1, "produced": topo, "error": None}


ed = ss.get(ED)
if ed is None or ed["produced"] != sc.topology:  # first visit, or a preset, upload, link or lesson changed it
    ed = ss[ED] = fresh_editor(sc.topology, ed["version"] if ed else 0)
flash = ed.pop("flash", None)
v = ed["version"]

# ---- load -----------------------------------------------------------------------------------------
c1, c2 = st.columns([1, 1])
with c1:
    choice = st.selectbox("Preset", list(PRESET_LABELS), format_func=PRESET_LABELS.get, key="topo_preset")
    if st.button("Load preset", key="topo_load_preset", type="primary"):
        topo = preset(choice)
        ui.set_scenario(sc.replace(name=f"{topo.name}-scenario", topology=topo))
        ss[ED] = fresh_editor(topo, v)
        ss.pop(UPLOAD_ERROR, None)
        st.rerun()
with c2:
    up = st.file_uploader("…or upload a scenario or topology JSON (max 5 MB)", type=["json"], key="topo_upload")
    if up is None:
        # The file was removed, or the page was left (the uploader forgets its file then): its error goes too.
        ss.pop(UPLOAD_ERROR, None)
    elif ss.get("topo_upload_seen") != up.file_id:
        ss["topo_upload_seen"] = up.file_id
        try:
            loaded = Scenario.from_json(up.getvalue())
        except LabError as exc:
            ss[UPLOAD_ERROR] = f"{up.name} was not loaded: {exc}"
        else:
            ss.pop(UPLOAD_ERROR, None)
            ui.set_scenario(loaded)
            ss[ED] = fresh_editor(loaded.topology, v)
            st.rerun()
    if ss.get(UPLOAD_ERROR):
        st.error(ui.plain(ss[UPLOAD_ERROR]) + " The current topology is unchanged.", icon=":material/error:")

with st.expander(f"About “{ui.plain(sc.topology.name)}”", expanded=False):
    st.text(sc.topology.description or "(no description)")

# ---- edit -----------------------------------------------------------------------------------------
st.subheader("Devices, switches and links")
st.caption("Edit cells, add rows at the bottom, delete rows with the row selector. Throughput in TFLOP/s per "
           "operator class: an empty cell means the device has no kernel for that class and cannot run it. "
           "Choosing a link's kind fills in that kind's catalogue bandwidth and latency unless you typed your own.")
if flash:
    st.success(flash, icon=":material/check:")


def refused_here(table: str | None) -> None:
    """A refused edit's message, right above the table it is about, with a way back."""
    err = ed.get("error")
    if not err or (err[0] or "devices") != table:
        return
    st.error("This edit is not applied, so every page keeps the last valid topology. " + ui.plain(err[1])
             + ". Fix the cell, or discard the edit.", icon=":material/error:")
    if st.button("Discard this edit", key=f"topo_discard_{v}", icon=":material/undo:"):
        ss[ED] = fresh_editor(sc.topology, v)
        st.rerun()


dev_cfg = {"name": st.column_config.TextColumn("name", required=True),
           "type": st.column_config.SelectboxColumn("type", options=list(DEVICE_TYPES), required=True),
           "pool": st.column_config.TextColumn("pool"),
           "memory_GB": st.column_config.NumberColumn(COLUMN_LABELS["memory_GB"], format="%.3g")}
dev_cfg |= {f"{op}_TFLOPs": st.column_config.NumberColumn(COLUMN_LABELS[f"{op}_TFLOPs"], help=OP_CLASS_LABELS[op],
                                                          format="%.4g") for op in OP_CLASSES}
refused_here("devices")
devices = st.data_editor(ed["devices"], num_rows="dynamic", column_config=dev_cfg, key=f"topo_dev_{v}",
                         width="stretch", hide_index=True)
cs, cl = st.columns([1, 3])
with cs:
    refused_here("switches")
    switches = st.data_editor(ed["switches"], num_rows="dynamic", key=f"topo_sw_{v}", width="stretch",
                              hide_index=True, column_config={"name": st.column_config.TextColumn("switch")})
with cl:
    refused_here("links")
    links = st.data_editor(ed["links"], num_rows="dynamic", key=f"topo_link_{v}", width="stretch",
                           hide_index=True, column_config={
                               "kind": st.column_config.SelectboxColumn("kind", options=list(LINK_KINDS)),
                               "bandwidth_GBps": st.column_config.NumberColumn(COLUMN_LABELS["bandwidth_GBps"],
                                                                               format="%.4g"),
                               "latency_us": st.column_config.NumberColumn(COLUMN_LABELS["latency_us"],
                                                                           format="%.4g")})


def edited(state) -> bool:
    return bool(state) and any(state.get(k) for k in ("edited_rows", "added_rows", "deleted_rows"))


if any(edited(ss.get(f"topo_{t}_{v}")) for t in ("dev", "sw", "link")):
    out = apply_edit(sc.topology, (ed["devices"], ed["links"], ed["switches"]), (devices, links, switches))
    d, l, s = out.tables
    ss[ED] = {"devices": d, "links": l, "switches": s, "version": v + 1, "produced": out.topology,
              "error": (out.error.table, str(out.error)) if out.error else None}
    if out.applied:
        ui.set_scenario(sc.replace(topology=out.topology))
        ss[ED]["flash"] = "Edit applied: every page now uses this topology."
    st.rerun()  # the editors start from the new tables, and the sidebar counts the devices again

# ---- add a device ---------------------------------------------------------------------------------
taken = names_in(ed["devices"], ed["switches"])


def propose_name() -> None:
    ss["topo_new_name"] = free_name(ss["topo_new_type"], names_in(ss[ED]["devices"], ss[ED]["switches"]))


def follow_kind() -> None:
    bw, lat = kind_change(ss.get("_topo_new_kind_was"), ss["topo_new_kind"], ss.get("topo_new_bw"),
                          ss.get("topo_new_lat"))
    ss["topo_new_bw"], ss["topo_new_lat"] = float(bw), float(lat)
    ss["_topo_new_kind_was"] = ss["topo_new_kind"]


ss.setdefault("topo_new_type", "gpu")
if "topo_new_name" not in ss or (ss.get("_topo_new_taken") != taken and ss["topo_new_name"].strip() in taken):
    propose_name()  # a name the topology now uses is replaced; one the person types stays, to be refused
ss["_topo_new_taken"] = taken
if ss.get("topo_new_attach") not in taken:  # first visit, or that node is gone: the first switch, else device
    switch_names = names_in(ed["devices"].iloc[:0], ed["switches"])
    ss["topo_new_attach"] = (switch_names or taken or [None])[0]
if "topo_new_kind" not in ss:
    ss["topo_new_kind"] = LINK_KINDS[0]
    ss["_topo_new_kind_was"] = None
    follow_kind()

with st.popover("Add a device from the catalogue", icon=":material/add:"):
    new_type = st.selectbox("type", list(DEVICE_CATALOGUE), key="topo_new_type", on_change=propose_name)
    st.caption(DEVICE_CATALOGUE[new_type].source)
    st.text_input("name", key="topo_new_name", help="A free name is proposed; every device and switch needs its own")
    attach = st.selectbox("link it to", taken, key="topo_new_attach")
    kind = st.selectbox("link kind", list(LINK_KINDS), key="topo_new_kind", on_change=follow_kind,
                        help="Fills in the kind's catalogue bandwidth and latency unless you typed your own")
    n1, n2 = st.columns(2)
    n1.number_input("bandwidth (GB/s each way)", min_value=0.0, format="%.4g", key="topo_new_bw")
    n2.number_input("latency (µs)", min_value=0.0, format="%.4g", key="topo_new_lat")
    st.caption(ui.plain(LINK_CATALOGUE[kind][2]))
    if st.button("Add", key="topo_add_device", type="primary"):
        name = ss["topo_new_name"].strip()
        if not name:
            st.error("Give the new device a name.", icon=":material/error:")
        elif name in taken:
            st.error(f"Nothing was added: a device or switch named “{ui.plain(name)}” already exists, and every "
                     f"device and switch needs its own name. “{ui.plain(free_name(name, taken))}” is free.",
                     icon=":material/error:")
        elif ed.get("error"):
            st.error("Nothing was added: the tables hold an edit that is not applied; fix or discard it first.",
                     icon=":material/error:")
        else:
            bw, lat = ss["topo_new_bw"], ss["topo_new_lat"]
            tables = with_device((ed["devices"], ed["links"], ed["switches"]), catalogue_device(name, new_type),
                                 Link(name, attach, kind, bw * 1e9, lat * 1e-6))
            out = apply_edit(sc.topology, (ed["devices"], ed["links"], ed["switches"]), tables)
            if out.error:
                st.error("Nothing was added: " + ui.plain(str(out.error)) + ".", icon=":material/error:")
            else:
                d, l, s = out.tables
                ss[ED] = {"devices": d, "links": l, "switches": s, "version": v + 1, "produced": out.topology,
                          "error": None, "flash": f"Added “{ui.plain(name)}”: every page now uses this topology."}
                ui.set_scenario(sc.replace(topology=out.topology))
                st.rerun()

topo = sc.topology
st.plotly_chart(network_figure(topo), key="topo_net")
ui.caption("modelled", "the cluster as the lab models it; numbers are the table's assumptions.")

d1, d2 = st.columns(2)
d1.download_button("Download topology JSON", topo.to_json(), file_name="topology.json",
                   mime="application/json", key="topo_dl_topo")
d2.download_button("Download whole scenario JSON", sc.to_json(), file_name="scenario.json",
                   mime="application/json", key="topo_dl_scn")

# ---- paths ----------------------------------------------------------------------------------------
st.subheader("Routes and transfer times")
size_mb = st.select_slider("Transfer size (MB)", options=list(TRANSFER_SIZES_MB), format_func=lambda x: f"{x:g}",
                           key="topo_size")
nbytes = size_mb * 1e6
with ui.guarded("the path matrix"):
    st.plotly_chart(path_heatmap(topo.path_matrix(nbytes), nbytes), key="topo_heat")
    ui.caption("modelled", "latency + bytes / bottleneck bandwidth along the widest route.")
    names = topo.device_names
    for key, fallback, what in (("topo_from", names[0], "starts"), ("topo_to", names[min(1, len(names) - 1)], "ends")):
        was = ui.view_value(key)
        now, changed = fit_choice(was, names, fallback)
        if changed:
            ui.set_view(key, now, notice=f"“{ui.plain(was)}” is no longer a device, so the route {what} at "
                                         f"“{ui.plain(now)}”." if was else None)
    r1, r2 = st.columns(2)
    a = r1.selectbox("from", names, key="topo_from")
    b = r2.selectbox("to", names, key="topo_to")
    p = topo.path(a, b)
    slow = p.slowest_link
    st.markdown(f"Route **{' → '.join(ui.plain(n) for n in p.nodes)}**: {p.hops} hop(s), summed latency "
                f"{fmt_seconds(p.latency)}, "
                + (f"bottleneck {fmt_rate(p.bottleneck)} on link {ui.plain(slow.a)}–{ui.plain(slow.b)} "
                   f"({slow.kind}); {size_mb:g} MB take {fmt_seconds(p.time(nbytes))} {ui.badge('modelled')}."
                   if slow else "same device: no transfer."))

# ---- the CXL design's claim ---------------------------------------------------------------------
st.subheader("The CXL claim: does direct device-to-device access remove the host hop?")
st.markdown("The CXL design's claim: with CXL a device reads another device's memory directly, without a copy "
            "through the host. Compare your cluster with the same cluster wired with PCIe through the host (every "
            "device that hung off a CXL switch gets a PCIe link to its pool's host CPU, with the catalogue's PCIe "
            "numbers), or with a preset. These are the model's numbers from the tables above: modelled, not "
            "measured on CXL hardware.")
AS_PCIE = "as_pcie"
other_name = st.selectbox("Compare this cluster with", [AS_PCIE, *PRESETS], key="topo_cmp",
                          format_func=lambda k: "the same cluster with PCIe through the host" if k == AS_PCIE
                          else PRESET_LABELS[k])
with ui.guarded("the CXL/PCIe comparison"):
    other = None
    if other_name == AS_PCIE and not has_cxl(topo):
        st.info(f"“{ui.plain(topo.name)}” has no CXL link, so there is nothing to replace with PCIe: its transfers "
                "already take the routes shown above. Choose a preset to compare with instead.",
                icon=":material/info:")
    elif other_name == AS_PCIE:
        other, other_label = as_pcie(topo), "PCIe through the host"
    else:
        other, other_label = preset(other_name), f"preset {PRESET_LABELS[other_name].split(' ')[0]}"
    if other is not None:
        df, span = compare_designs(topo, other, nbytes, ("this cluster", other_label))
        if span is None:
            st.info("This cluster and the chosen preset have fewer than two device names in common, so there is no "
                    "device-to-device transfer to compare.", icon=":material/info:")
        else:
            st.plotly_chart(comparison_figure(df, nbytes), key="topo_cmp_fig")
            ui.caption("modelled", "routes, hop counts and bottlenecks on hover; host CPUs left out "
                                   "(the claim is about device-to-device transfers).")
            lo, hi = span
            times = f"{lo:.2f}×" if hi - lo < 0.005 else f"{lo:.2f}× to {hi:.2f}×"
            verdict = ("this cluster is faster for every pair" if lo > 1.0005 else
                       "this cluster is slower for every pair" if hi < 0.9995 else
                       "neither is faster for every pair")
            st.markdown(f"In this model, device-to-device transfers of {size_mb:g} MB take {times} as long with "
                        f"{other_label} as on this cluster: {verdict}. The gap comes from the link numbers in "
                        f"the tables, not from a measurement {ui.badge('modelled')}.")
