"""Topology: build the cluster, see what its links can carry."""

import pandas as pd
import streamlit as st

import ui
from lab.catalogue import DEVICE_CATALOGUE, LINK_CATALOGUE, PRESET_LABELS, catalogue_device, preset
from lab.errors import LabError
from lab.figures.topology import comparison_figure, fmt_bytes_per_s, fmt_seconds, network_figure, path_heatmap
from lab.scenario import Scenario
from lab.topology import DEVICE_TYPES, LINK_KINDS, OP_CLASS_LABELS, OP_CLASSES
from lab.topology_tables import from_tables, to_tables, transfer_comparison

sc = ui.scenario_sidebar()
st.title("Topology")
st.markdown("Build a heterogeneous cluster: devices (what each can compute, how fast) and the links between "
            "them. Routes take the widest path; moving *n* bytes costs **latency + n / bottleneck bandwidth** "
            "(the slowest hop bounds the path). Device and link numbers are illustrative assumptions from "
            "public datasheets; edit them.")

ED = "topo_editor"


def new_editor(topo, version: int) -> dict:
    d, l, s = to_tables(topo)
    return {"devices": d, "links": l, "switches": s, "version": version + 1, "produced": topo,
            "name": topo.name, "description": topo.description}


ed = st.session_state.get(ED)
if ed is None or ed["produced"] != sc.topology:
    ed = st.session_state[ED] = new_editor(sc.topology, ed["version"] if ed else 0)

# ---- load -----------------------------------------------------------------------------------------
c1, c2 = st.columns([1, 1])
with c1:
    choice = st.selectbox("Preset", list(PRESET_LABELS), format_func=PRESET_LABELS.get, key="topo_preset")
    if st.button("Load preset", key="topo_load_preset", type="primary"):
        topo = preset(choice)
        ui.set_scenario(sc.replace(name=f"{topo.name}-scenario", topology=topo))
        st.session_state[ED] = new_editor(topo, ed["version"])
        st.rerun()
with c2:
    up = st.file_uploader("…or upload a scenario or topology JSON (max 5 MB)", type=["json"], key="topo_upload")
    if up is not None and st.session_state.get("topo_upload_seen") != up.file_id:
        st.session_state["topo_upload_seen"] = up.file_id
        try:
            loaded = Scenario.from_json(up.getvalue())
        except LabError as exc:
            st.session_state["topo_upload_error"] = f"{up.name} was not loaded: {exc}"
        else:
            st.session_state.pop("topo_upload_error", None)
            ui.set_scenario(loaded)
            st.session_state[ED] = new_editor(loaded.topology, ed["version"])
            st.rerun()
    if st.session_state.get("topo_upload_error"):
        st.error(st.session_state["topo_upload_error"] + " The current topology is unchanged.",
                 icon=":material/error:")

with st.expander(f"About “{ui.plain(sc.topology.name)}”", expanded=False):
    st.text(sc.topology.description or "(no description)")

# ---- edit -----------------------------------------------------------------------------------------
st.subheader("Devices, switches and links")
st.caption("Edit cells, add rows at the bottom, delete rows with the row selector. Throughput in TFLOP/s per "
           "operator class: an empty cell means the device has no kernel for that class and cannot run it.")
v = ed["version"]
dev_cfg = {"name": st.column_config.TextColumn("name", required=True),
           "type": st.column_config.SelectboxColumn("type", options=list(DEVICE_TYPES), required=True),
           "pool": st.column_config.TextColumn("pool"),
           "memory_GB": st.column_config.NumberColumn("memory (GB)", format="%.3g")}
dev_cfg |= {f"{op}_TFLOPs": st.column_config.NumberColumn(f"{op} (TFLOP/s)", help=OP_CLASS_LABELS[op],
                                                          format="%.4g") for op in OP_CLASSES}
devices = st.data_editor(ed["devices"], num_rows="dynamic", column_config=dev_cfg, key=f"topo_dev_{v}",
                         width="stretch", hide_index=True)
cs, cl = st.columns([1, 3])
with cs:
    switches = st.data_editor(ed["switches"], num_rows="dynamic", key=f"topo_sw_{v}", width="stretch",
                              hide_index=True, column_config={"name": st.column_config.TextColumn("switch")})
with cl:
    links = st.data_editor(ed["links"], num_rows="dynamic", key=f"topo_link_{v}", width="stretch",
                           hide_index=True, column_config={
                               "kind": st.column_config.SelectboxColumn("kind", options=list(LINK_KINDS)),
                               "bandwidth_GBps": st.column_config.NumberColumn("bandwidth (GB/s each way)",
                                                                               format="%.4g"),
                               "latency_us": st.column_config.NumberColumn("latency (µs)", format="%.4g")})

with st.popover("Add a device from the catalogue", icon=":material/add:"):
    new_type = st.selectbox("type", list(DEVICE_CATALOGUE), key="topo_new_type")
    st.caption(DEVICE_CATALOGUE[new_type].source)
    new_name = st.text_input("name", value=f"{new_type}{len(devices)}", key="topo_new_name")
    attach = st.selectbox("link it to", [n for n in list(devices["name"]) + list(switches["name"])
                                          if isinstance(n, str)], key="topo_new_attach")
    kind = st.selectbox("link kind", list(LINK_KINDS), key="topo_new_kind")
    if st.button("Add", key="topo_add_device"):
        dev_row, _, _ = to_tables(sc.topology.replace(devices=(catalogue_device(new_name, new_type),)))
        bw, lat, _ = LINK_CATALOGUE[kind]
        link_row = pd.DataFrame([{"a": new_name, "b": attach, "kind": kind, "bandwidth_GBps": bw / 1e9,
                                  "latency_us": lat / 1e-6}])
        st.session_state[ED] = ed | {"devices": pd.concat([devices, dev_row], ignore_index=True),
                                     "links": pd.concat([links, link_row], ignore_index=True),
                                     "switches": switches, "version": v + 1}
        st.rerun()

try:
    topo = from_tables(ed["name"], devices, links, switches, ed["description"])
except LabError as exc:
    st.error(f"This edit is not valid, so the last valid topology stays in use. {exc}", icon=":material/error:")
else:
    if topo != sc.topology:
        ed["produced"] = topo
        sc = sc.replace(topology=topo)
        ui.set_scenario(sc)
        st.success("Edit applied: every page now uses this topology.", icon=":material/check:")
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
size_mb = st.select_slider("Transfer size (MB)", options=[0.001, 0.01, 0.1, 1, 10, 100, 1000], value=10,
                           key="topo_size")
nbytes = size_mb * 1e6
with ui.guarded("the path matrix"):
    st.plotly_chart(path_heatmap(topo.path_matrix(nbytes), nbytes), key="topo_heat")
    ui.caption("modelled", "latency + bytes / bottleneck bandwidth along the widest route.")
    names = topo.device_names
    r1, r2 = st.columns(2)
    a = r1.selectbox("from", names, key="topo_from")
    b = r2.selectbox("to", names, index=min(1, len(names) - 1), key="topo_to")
    p = topo.path(a, b)
    slow = p.slowest_link
    st.markdown(f"Route **{' → '.join(p.nodes)}**: {p.hops} hop(s), summed latency {fmt_seconds(p.latency)}, "
                + (f"bottleneck {fmt_bytes_per_s(p.bottleneck)} on link {slow.a}–{slow.b} ({slow.kind}); "
                   f"{size_mb:g} MB take {fmt_seconds(p.time(nbytes))} {ui.badge('modelled')}." if slow else
                   "same device: no transfer."))

st.subheader("The CXL claim: does direct device-to-device access remove the host hop?")
st.markdown("Seed A claims that with CXL a device reads another device's memory without a copy through the host. "
            "Here are the model's numbers for the same transfers on preset (1), CXL, and preset (2), PCIe. "
            "This is what the *model* says given the datasheet numbers; it is not a measurement of CXL hardware.")
with ui.guarded("the CXL/PCIe comparison"):
    df = transfer_comparison({"CXL (1)": preset("cxl"), "PCIe (2)": preset("pcie")}, nbytes)
    df = df[~df["pair"].str.startswith("host")]
    st.plotly_chart(comparison_figure(df, nbytes), key="topo_cmp")
    ui.caption("modelled", "routes, hop counts and bottlenecks on hover.")
    ratio = (df[df.topology == "PCIe (2)"]["time_s"].values / df[df.topology == "CXL (1)"]["time_s"].values)
    span = f"{ratio.min():.2f}×" if ratio.max() - ratio.min() < 0.005 else f"{ratio.min():.2f}× to {ratio.max():.2f}×"
    st.markdown(f"In this model, device-to-device transfers of {size_mb:g} MB take {span} as long on PCIe "
                "(through the host) as on CXL (through one CXL switch). "
                "The gap comes from the assumed link numbers, not from a measurement.")
