"""Topology: build the cluster, see what its links can carry."""

import streamlit as st

import ui
from lab.view import topology as view

sc = ui.scenario_sidebar()
ss = st.session_state
st.title("Topology")
st.markdown(view.INTRO)

# The editor's tables live in the session, not in the data editors' widget state (which Streamlit drops once
# another page is shown); every change gets a new version, so the editors start afresh (lab.view.topology.editor).
ed = view.editor_for(ss, sc.topology)
v = ed["version"]

# ---- load -----------------------------------------------------------------------------------------
c1, c2 = st.columns([1, 1])
with c1:
    choice = ui.control(st, "topo_preset")
    if st.button("Load preset", key="topo_load_preset", type="primary"):
        ui.set_scenario(view.load_preset(ss, sc, choice))
        st.rerun()
with c2:
    loaded = view.take_upload(ss, ui.control(st, "topo_upload", type=["json"]))
    if loaded is not None:
        ui.set_scenario(loaded)
        st.rerun()
    ui.show_all(view.upload_refusal(ss))

with st.expander(f"About “{ui.plain(sc.topology.name)}”", expanded=False):
    st.text(sc.topology.description or "(no description)")

# ---- edit -----------------------------------------------------------------------------------------
ui.show(view.EDIT)
ui.show_all(view.flash(ed))


def table_editor(table: str):
    """The data editor of ``table``, under the message of a refused edit about it, with a way back."""
    refused = view.refusal(ed, table)
    if refused is not None:
        ui.show(refused)
        if st.button("Discard this edit", key=f"topo_discard_{v}", icon=":material/undo:"):
            view.discard(ss, sc.topology)
            st.rerun()
    return ui.control(st, view.editor_key(table, v), data=ed[table], num_rows="dynamic", width="stretch",
                      column_config=ui.column_config(view.editor_columns(table)), hide_index=True)


devices = table_editor("devices")
cs, cl = st.columns([1, 3])
with cs:
    switches = table_editor("switches")
with cl:
    links = table_editor("links")

if view.any_edited(ss, v):
    ui.set_scenario(view.take_edit(ss, sc, (devices, links, switches)))
    st.rerun()  # the editors start from the new tables, and the sidebar counts the devices again

# ---- add a device ---------------------------------------------------------------------------------
taken = view.prepare_new_device(ss)

with st.popover("Add a device from the catalogue", icon=":material/add:"):
    # Two fields a row, so the popover and its Add button fit a 1024x768 projector.
    t1, t2 = st.columns(2)
    new_type = ui.control(t1, "topo_new_type", on_change=view.propose_name, args=(ss,))
    ui.control(t2, "topo_new_name")
    ui.show(view.device_source(new_type))
    a1, a2 = st.columns(2)
    ui.control(a1, "topo_new_attach", options=taken)
    kind = ui.control(a2, "topo_new_kind", on_change=view.follow_kind, args=(ss,))
    n1, n2 = st.columns(2)
    ui.control(n1, "topo_new_bw")
    ui.control(n2, "topo_new_lat")
    ui.show(view.link_source(kind))
    if st.button("Add", key="topo_add_device", type="primary"):
        new, refused = view.add_device(ss, sc)
        ui.show_all(refused)
        if new is not None:
            ui.set_scenario(new)
            st.rerun()

topo = sc.topology
ui.show(view.network(topo))
d1, d2 = st.columns(2)
d1.download_button("Download topology JSON", topo.to_json(), file_name="topology.json",
                   mime="application/json", key="topo_dl_topo")
d2.download_button("Download whole scenario JSON", sc.to_json(), file_name="scenario.json",
                   mime="application/json", key="topo_dl_scn")

# ---- paths ----------------------------------------------------------------------------------------
ui.show(view.ROUTES)
size_mb = ui.control(st, "topo_size")
with ui.guarded("the path matrix"):
    ui.show(view.heatmap(topo, size_mb))
    for key, now, notice in view.route_ends(topo.device_names, ui.view_value):
        ui.set_view(key, now, notice=notice)  # set_view shows the notice as text
    r1, r2 = st.columns(2)
    a = ui.control(r1, "topo_from", options=topo.device_names)
    b = ui.control(r2, "topo_to", options=topo.device_names)
    ui.show(view.route(topo, a, b, size_mb, ui.badge("modelled")))

# ---- the CXL design's claim ---------------------------------------------------------------------
ui.show(view.CLAIM)
other = ui.control(st, "topo_cmp")
with ui.guarded("the CXL/PCIe comparison"):
    ui.show_all(view.comparison(topo, other, size_mb, ui.badge("modelled")))
