"""Training: real multi-process runs of the current scenario, watched live from the run store."""

import streamlit as st

import ui
from lab.view import training as view

sc = ui.scenario_sidebar()
desk = view.TrainingDesk(*ui.job_manager())  # the manager shared with the Jobs page; this session's owner id
owner = desk.owner
runs_store = view.run_store()
st.title("Training")
st.markdown(view.INTRO.format(measured=ui.badge("measured"), emulated=ui.badge("emulated")))

# ---------------------------------------------------------------- settings -> scenario
# Every widget is a field of the Scenario's tables, laid out by the page model; lesson mode hides the advanced.
settings = ui.settings_form(sc.training, view.TRAINING_FORM)
boxes = view.device_boxes(sc, settings)
devices = [ui.control(col, key, **box) for col, (key, box) in zip(st.columns(len(boxes)), boxes)] if boxes else None
compression = ui.settings_form(sc.training.compression, view.COMPRESSION_FORM)
with ui.guarded("the training settings"):
    if (new := view.edited(sc, settings, devices, compression)) is not sc:
        sc = new
        ui.set_scenario(sc)

st.markdown(f":material/compress: **Compression:** "
            f"{ui.plain(view.compression_summary(sc.training.compression.to_dict()))}")
if conflict := view.compression_conflict(sc.training):
    st.warning(conflict, icon=":material/warning:")
st.caption(view.IMPLEMENTATIONS)

b1, b2, b3 = st.columns([1, 3, 2], vertical_alignment="bottom")
if b1.button("Run", type="primary", key="train_run", icon=":material/play_arrow:"):
    with ui.guarded("starting the run"):
        if jobs := ui.submit_once(owner, sc, "run", runs_store,
                                  lambda: desk.submit(sc, view.name_of(sc))):
            st.session_state["train_watch"] = jobs[0].run_id
            st.rerun()
repeats = ui.control(b3, "tr_repeats")
if b2.button("Compare optimisers × compression", key="train_compare", icon=":material/compare_arrows:",
             help=view.COMPARE_HELP):
    with ui.guarded("queueing the comparison"):
        items = view.comparison(sc, repeats, owner)
        if jobs := ui.submit_once(owner, sc, f"compare x{repeats}", runs_store,
                                  lambda: desk.submit_many(items)):
            st.session_state["train_watch"] = jobs[0].run_id
            ui.set_view("cmp_runs", [j.run_id for j in jobs])
            st.switch_page("pages/compare.py")


# ---------------------------------------------------------------- live view
# Poll the store every second while a job is queued or running; a full rerun when they all end
# turns the polling off again. A submit still under way (a double click) polls too, so its run shows.
polling = view.polling(runs_store, owner, ui.submit_book().pending(owner))


@ui.live("training", 1.0, polling)
def live() -> None:
    with ui.guarded("the live view"):  # inside: the fragment also reruns on its own
        live_view()


def live_view() -> None:
    w = desk.watch(runs_store, st.session_state.get("train_watch"), polling,
                   ui.submit_book().pending(owner))
    if w.rerun:
        st.rerun()
    if w.run_id is None:
        st.info(view.NO_RUNS)
        return
    ui.show_all(w.head)
    # From the stored run's own settings: the controls above may have changed since it was queued.
    st.markdown(":material/function: **Optimiser in this run:** " + ui.plain(view.optimiser_summary(w.training)))
    st.markdown(":material/compress: **Compression in this run:** "
                + ui.plain(view.compression_summary(w.training.get("compression", {}))))
    st.progress(w.progress, text=w.progress_text)
    if w.can_stop and st.button("Stop", key=f"train_stop_{w.run_id}", icon=":material/stop:"):
        with ui.guarded("stopping the run"):
            desk.stop(w.run_id)
            st.rerun()
    ui.show_all(w.body)
    if w.predict:
        with ui.guarded("the prediction"):
            ui.prediction_beside_measured(runs_store, w.run_id, key="train_pred")


live()
