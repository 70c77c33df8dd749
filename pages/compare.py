"""Compare: stored runs side by side (loss and accuracy against step or wall time, a summary table),
download them as CSV, delete them."""

import streamlit as st

import ui
from lab.view import compare as view

ui.scenario_sidebar()
st.title("Compare runs")
st.markdown(view.INTRO.format(measured=ui.badge("measured"), emulated=ui.badge("emulated")))

desk = view.Desk(*ui.job_manager())
owner = desk.owner
everyone = ui.control(st, "cmp_class")
before = list(ui.view_value("cmp_runs") or [])
pick = view.picker(owner, everyone, before)
if not pick.labels:
    st.info(view.NO_RUNS)
    st.stop()
if pick.kept != before:  # runs deleted elsewhere, or none chosen yet: the newest finished ones
    ui.set_view("cmp_runs", pick.kept)
chosen = ui.control(st, "cmp_runs", options=list(pick.labels), format_func=pick.labels.get)


def pool() -> None:
    """Button callback (before the Runs box is drawn again): the class's runs of the chosen variants."""
    ui.set_view("cmp_runs", view.pooled(st.session_state.get("cmp_runs") or []))


st.button("Pool the class's runs of these variants", key="cmp_pool", icon=":material/groups:", on_click=pool,
          disabled=not chosen, help=view.POOL_HELP)
x = ui.control(st, "cmp_x")
if not chosen:
    st.info(view.PICK)
    st.stop()

target = ui.control(st, "cmp_target")
active, _ = view.waiting(chosen)


@ui.live("compare", 3.0, active)
def comparison_view() -> None:
    """The comparison; while chosen runs are queued or running it refreshes itself (every 3 s, longer when slow)."""
    if active:
        live, notice = view.waiting(chosen)
        ui.show_all(notice)
        if live != active:  # a run ended: the whole page again, so the Runs box's chips say so too
            st.rerun()
    with ui.guarded("the comparison"):
        model = view.comparison_model(chosen, target, x, ui.predicted_runs)
        ui.show_all(model.sections)
        for place, download in zip(st.columns(2), model.downloads):
            place.download_button(**download)
        with st.expander("Every run: settings, time split, bytes"):
            ui.show_all(model.per_run)


comparison_view()

st.subheader("Predicted beside measured")
with ui.guarded("the prediction"):
    ui.show_all(view.prediction(chosen, ui.predicted_runs))

with st.expander("Delete runs"):
    st.markdown(view.DELETE)
    sure = ui.control(st, "cmp_confirm", label=f"Yes, delete {len(chosen)} run(s)")
    if st.button("Delete the chosen runs", key="cmp_delete", disabled=not sure, icon=":material/delete:"):
        with ui.guarded("deleting runs"):
            desk.delete(chosen)
            st.session_state.pop("cmp_runs", None)
            st.rerun()
