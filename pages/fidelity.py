"""Fidelity: the cost model's prediction beside the measurement, for every stored run."""

import streamlit as st

import ui
from lab.view import fidelity as view

ui.scenario_sidebar()
lesson = ui.lesson_mode()
st.title(view.TITLE)
st.markdown(view.INTRO)


def draw(progress) -> None:
    """A background task's progress bar and what it said."""
    if progress.bar:
        st.progress(progress.bar[0], ui.plain(progress.bar[1]))
    ui.show_all(progress.sections)


# ----- the machine profile -------------------------------------------------------------------------
st.subheader("This machine")
prof = None
with ui.guarded("the machine profile"):
    prof = view.profile()
busy = view.calibrating()
desk = view.FidelityDesk(*ui.job_manager())
here = view.machine(prof, desk.running())
ui.show_all(here.sections)
c1, c2 = st.columns([1, 2])
quick = ui.control(c2, "fid_quick")
now = c1.button(here.label, key="fid_calibrate", icon=":material/speed:", disabled=busy)
wait = here.wait and st.button("Wait for a quiet machine, then calibrate", key="fid_calibrate_wait",
                               icon=":material/hourglass_top:", disabled=busy, help=here.wait_help)
if (now or wait) and not busy:
    with ui.guarded("starting the calibration"):
        view.calibrate(quick, wait)
        busy = True


@ui.live("calibration", 2.0, busy)
def calibration_progress() -> None:
    p = view.calibration_progress()
    draw(p)
    if p.ended and busy:  # it just finished (or its process is gone): show the new profile
        st.rerun()


calibration_progress()

if measured := view.calibration_measured(prof, lesson):
    with st.expander("What the calibration measured"):
        ui.show_all(measured)

# ----- stored runs ---------------------------------------------------------------------------------
st.subheader("Stored runs: predicted against measured")
everyone = ui.control(st, "fid_class")


@st.cache_resource
def batch_holder(db: str) -> dict:
    return {"batch": None}


holder = batch_holder(view.db())
batch = holder["batch"]
b1, b2 = st.columns([1, 2])
steps = ui.control(b2, "fid_steps")
if b1.button("Run the preset batch", key="fid_batch", icon=":material/play_arrow:", help=view.BATCH_HELP,
             disabled=prof is None or (batch is not None and batch.running())):
    with ui.guarded("starting the preset batch"):
        holder["batch"] = batch = desk.start_batch(prof, steps)


@ui.live("fidelity_batch", 3.0, batch is not None and batch.running())
def batch_progress() -> None:
    draw(view.batch_progress(holder["batch"]))


batch_progress()

with ui.guarded("the comparison"):
    runs, aside = view.stored_runs(prof, desk.owner, everyone, lesson, ui.predicted_runs)
    ui.show_all(runs)
    if aside:
        with st.expander(aside[0]):
            ui.show_all(aside[1])

# ----- placement runs ------------------------------------------------------------------------------
st.subheader("Placement runs: prediction, replay and measurement")
with ui.guarded("the placement runs"):
    ui.show_all(view.placement_runs(prof, desk.owner, everyone, ui.placement_rows))

# ----- trace export --------------------------------------------------------------------------------
st.subheader("One step as a trace")
st.markdown(view.TRACE)
with ui.guarded("the trace export"):
    labels = view.trace_runs(desk.owner, everyone, ui.view_value("fid_trace_run"))
    if not labels:
        st.caption("No stored runs of yours yet (the switch above adds the whole class's).")
    else:
        rid = ui.control(st, "fid_trace_run", options=list(labels), format_func=labels.get)
        download, caption = view.trace(rid, prof)
        st.download_button(**download)
        ui.show_all(caption)
