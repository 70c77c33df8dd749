"""Compression: Group-TopK and its sparse ring, byte-true accounting, and the Cholesky claim tested."""

import streamlit as st

import ui
from lab.view import compression as view

sc = ui.scenario_sidebar()
comp = sc.training.compression
st.title("Compression")
st.markdown(view.INTRO)

# ---------------------------------------------------------------- compressors on one gradient
st.header("Compressors on one gradient")
values = ui.form("cp", view.COMPRESSORS_FORM, "Compute")
with ui.guarded("the compressor comparison"), st.spinner("Computing the gradient and compressing it…"):
    ui.show_all(view.compressors(values))

# ---------------------------------------------------------------- the ring and its fill-in
st.header("Sharing across workers: the edge-compression design's sparse ring and its fill-in")
st.markdown(view.RING_INTRO)
values |= ui.form("ring", view.RING_FORM, "Simulate")
with ui.guarded("the ring simulation"):
    with st.spinner("Simulating the ring…"):
        ui.show_all(view.ring(values))
    if st.button("Use this compressor, ratio and group size in the scenario", key="ring_apply"):
        new, said = view.apply_ring(sc, values)
        ui.set_scenario(new)
        st.success(said)

# ---------------------------------------------------------------- the Cholesky claim
st.header("The Cholesky claim (the CXL design)")
st.markdown(view.CHOLESKY_INTRO)
values |= ui.form("ch", view.CHOLESKY_FORM, "Test the claim")
with ui.guarded("the Cholesky section"), st.spinner("Factorising and timing…"):
    ui.show_all(view.cholesky(values))

# ---------------------------------------------------------------- training runs: the preset grid
st.header("Training with compression")
st.markdown(view.grid_intro(comp))
variants = ui.control(st, "cp_grid_variants", format_func=lambda v: view.variant_label(v, rank=comp.rank))
c2, c3 = st.columns([1, 3], vertical_alignment="bottom")
if c2.button(view.queue_label(variants), type="primary", key="cp_grid_run", icon=":material/grid_view:",
             disabled=not variants):
    with ui.guarded("queueing the grid"):
        desk = view.Desk(*ui.job_manager())  # the Training page's manager and fair queue
        items = view.grid_runs(sc, variants)
        if jobs := ui.submit_once(desk.owner, items[0][0], "grid", view.run_store(), lambda: desk.submit_many(items)):
            st.session_state["cp_grid_runs"] = st.session_state["cmp_runs"] = [j.run_id for j in jobs]
c3.page_link("pages/compare.py", label="Compare them: loss, accuracy, bytes, time", icon=":material/compare_arrows:")
grid_ids = st.session_state.get("cp_grid_runs", [])
polling = view.grid_active(grid_ids)


@ui.live("compression_grid", 2.0, polling)
def grid_view() -> None:
    with ui.guarded("the grid's results"):
        sections, active = view.grid(grid_ids, sc.training.emulate)
        if polling and not active:
            st.rerun()
        ui.show_all(sections)


grid_view()
