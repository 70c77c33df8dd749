"""Topology: build the cluster, see what its links can carry."""

import streamlit as st

import ui
from lab.figures import topology as figures
from lab.view import topology_tables as tables
from lab.scenario.catalogue import (
    DEVICE_CATALOGUE,
    LINK_CATALOGUE,
    PRESET_LABELS,
    preset,
)
from lab.view import topology as view

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
ED = view.EDITOR
UPLOAD_ERROR = "topo_upload_error"

ed = ss.get(ED)
if ed is None or ed["produced"] != sc.topology:  # first visit, or a preset, upload, link or lesson changed it
    ed = ss[ED] = view.fresh_editor(sc.topology, ed["version"] if ed else 0)
flash = ed.pop("flash", None)
v = ed["version"]

# ---- load -----------------------------------------------------------------------------------------
c1, c2 = st.columns([1, 1])
with c1:
    choice = ui.control(st, "topo_preset", format_func=PRESET_LABELS.get)
    if st.button("Load preset", key="topo_load_preset", type="primary"):
        topo = preset(choice)
        ui.set_scenario(sc.replace(name=f"{topo.name}-scenario", topology=topo))
        ss[ED] = view.fresh_editor(topo, v)
        ss.pop(UPLOAD_ERROR, None)
        view.forget_new_device(ss)
        st.rerun()
with c2:
    up = ui.control(st, "topo_upload", type=["json"])
    if up is None:
        # The file was removed, or the page was left (the uploader forgets its file then): its error goes too.
        ss.pop(UPLOAD_ERROR, None)
    elif ss.get("topo_upload_seen") != up.file_id:
        ss["topo_upload_seen"] = up.file_id
        loaded, ss[UPLOAD_ERROR] = view.read_upload(up.name, up.getvalue())
        if loaded is not None:
            ss.pop(UPLOAD_ERROR, None)
            ui.set_scenario(loaded)
            ss[ED] = view.fresh_editor(loaded.topology, v)
            view.forget_new_device(ss)
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
    message = view.refusal(ed.get("error"), table, ui.plain)
    if message is None:
        return
    st.error(message, icon=":material/error:")
    if st.button("Discard this edit", key=f"topo_discard_{v}", icon=":material/undo:"):
        ss[ED] = view.fresh_editor(sc.topology, v)
        st.rerun()


COLUMN_KINDS = {"text": st.column_config.TextColumn, "select": st.column_config.SelectboxColumn,
                "number": st.column_config.NumberColumn}


def table_editor(table: str):
    """The data editor of ``table``, under the message of a refused edit about it."""
    refused_here(table)
    config = {col: COLUMN_KINDS[kind](**kw) for col, (kind, kw) in view.editor_columns(table).items()}
    return ui.control(st, view.editor_key(table, v), data=ed[table], num_rows="dynamic",
                      column_config=config, width="stretch", hide_index=True)


devices = table_editor("devices")
cs, cl = st.columns([1, 3])
with cs:
    switches = table_editor("switches")
with cl:
    links = table_editor("links")

if view.any_edited(ss, v):
    out = tables.apply_edit(sc.topology, (ed["devices"], ed["links"], ed["switches"]), (devices, links, switches))
    ss[ED] = view.after_edit(out, v)
    if out.applied:
        ui.set_scenario(sc.replace(topology=out.topology))
    st.rerun()  # the editors start from the new tables, and the sidebar counts the devices again

# ---- add a device ---------------------------------------------------------------------------------
taken = view.prepare_new_device(ss)

with st.popover("Add a device from the catalogue", icon=":material/add:"):
    # Two fields a row, so the popover and its Add button fit a 1024x768 projector.
    t1, t2 = st.columns(2)
    new_type = ui.control(t1, "topo_new_type", on_change=view.propose_name, args=(ss,))
    ui.control(t2, "topo_new_name")
    st.caption(DEVICE_CATALOGUE[new_type].source)
    a1, a2 = st.columns(2)
    attach = ui.control(a1, "topo_new_attach", options=taken)
    kind = ui.control(a2, "topo_new_kind", on_change=view.follow_kind, args=(ss,))
    n1, n2 = st.columns(2)
    ui.control(n1, "topo_new_bw")
    ui.control(n2, "topo_new_lat")
    st.caption(ui.plain(LINK_CATALOGUE[kind][2]))
    if st.button("Add", key="topo_add_device", type="primary"):
        name = ss["topo_new_name"].strip()
        problem = view.add_refusal(name, taken, bool(ed.get("error")), ui.plain)
        if problem is None:
            out = tables.add_catalogue_device(sc.topology, (ed["devices"], ed["links"], ed["switches"]), name,
                                              new_type, attach, kind, ss["topo_new_bw"], ss["topo_new_lat"])
            problem = "Nothing was added: " + ui.plain(str(out.error)) + "." if out.error else None
        if problem is not None:
            st.error(problem, icon=":material/error:")
        else:
            ss[ED] = view.editor_after(out, v, view.added(name, ui.plain))
            ui.set_scenario(sc.replace(topology=out.topology))
            st.rerun()

topo = sc.topology
st.plotly_chart(figures.network_figure(topo), key="topo_net")
ui.caption("modelled", "the cluster as the lab models it; numbers are the table's assumptions.")

d1, d2 = st.columns(2)
d1.download_button("Download topology JSON", topo.to_json(), file_name="topology.json",
                   mime="application/json", key="topo_dl_topo")
d2.download_button("Download whole scenario JSON", sc.to_json(), file_name="scenario.json",
                   mime="application/json", key="topo_dl_scn")

# ---- paths ----------------------------------------------------------------------------------------
st.subheader("Routes and transfer times")
size_mb = ui.control(st, "topo_size", format_func=lambda x: f"{x:g}")
nbytes = size_mb * 1e6
with ui.guarded("the path matrix"):
    st.plotly_chart(figures.path_heatmap(topo.path_matrix(nbytes), nbytes), key="topo_heat")
    ui.caption("modelled", "latency + bytes / bottleneck bandwidth along the widest route.")
    names = topo.device_names
    for key, now, notice in view.route_ends(names, ui.view_value, str):  # set_view shows it as text
        ui.set_view(key, now, notice=notice)
    r1, r2 = st.columns(2)
    a = ui.control(r1, "topo_from", options=names)
    b = ui.control(r2, "topo_to", options=names)
    st.markdown(figures.route_summary(topo.path(a, b), size_mb, ui.plain, ui.badge("modelled")))

# ---- the CXL design's claim ---------------------------------------------------------------------
st.subheader("The CXL claim: does direct device-to-device access remove the host hop?")
st.markdown("The CXL design's claim: with CXL a device reads another device's memory directly, without a copy "
            "through the host. Compare your cluster with the same cluster wired with PCIe through the host (every "
            "device that hung off a CXL switch gets a PCIe link to its pool's host CPU, with the catalogue's PCIe "
            "numbers), or with a preset. These are the model's numbers from the tables above: modelled, not "
            "measured on CXL hardware.")
other_name = ui.control(st, "topo_cmp", format_func=tables.comparison_option_label)
with ui.guarded("the CXL/PCIe comparison"):
    target = tables.comparison_target(topo, other_name)
    if target is None:
        st.info(f"“{ui.plain(topo.name)}” has no CXL link, so there is nothing to replace with PCIe: its transfers "
                "already take the routes shown above. Choose a preset to compare with instead.",
                icon=":material/info:")
    else:
        other, other_label = target
        df, span = tables.compare_designs(topo, other, nbytes, ("this cluster", other_label))
        if span is None:
            st.info("This cluster and the chosen preset have fewer than two device names in common, so there is no "
                    "device-to-device transfer to compare.", icon=":material/info:")
        else:
            st.plotly_chart(figures.comparison_figure(df, nbytes), key="topo_cmp_fig")
            ui.caption("modelled", "routes, hop counts and bottlenecks on hover; host CPUs left out "
                                   "(the claim is about device-to-device transfers).")
            st.markdown(view.comparison_text(span, size_mb, other_label, ui.badge("modelled"), df.attrs["pairs"]))
