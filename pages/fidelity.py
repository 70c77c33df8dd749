"""Fidelity: the cost model's prediction beside the measurement, for every stored run."""

import math

import pandas as pd
import streamlit as st

import ui
from lab.machine import calibrate as cal
from lab.machine.profile import load_profile
from lab.machine import fidelity as P
from lab.machine import plans
from lab.machine import trace_export as T
from lab.figures import fidelity as figs
from lab.view import jobs as job_views
from lab.store.runs import default_db_path, store as run_store
from lab.view.state import VIEW

ui.scenario_sidebar()
lesson = ui.lesson_mode()
st.title("Fidelity: prediction beside measurement")
st.markdown(
    "The lab does not only predict: it runs the same scenario on this machine and shows how far the prediction "
    "was off. The cost model is **calibrated** here (calibration networks that are not the presets, the optimiser "
    "and compressor costs, short jobs with 2 to 4 processes at once, each pinned to a core as the job manager "
    "pins a job's ranks), then it "
    "predicts each run's step time and its parts; the run store holds what the workers measured.")

BAND = P.TARGET_ERROR
SIMULATORS = (
    "For scale, published claims of the simulators this lab stands beside (their numbers, on dedicated GPU "
    "clusters, not re-measured here): **SimAI** (NSDI '25) reports an average of 98.1 % alignment with real "
    "training runs, i.e. about 2 % error; **ASTRA-sim 2.0** (ISPASS '23) reports validating its models against real "
    "systems; **Calculon** (SC '23) is an analytical model for co-design studies. Errors of a few percent up to about "
    "20 % are the usual range such papers report. This lab runs on a shared CPU, where other processes change the "
    "machine's speed from minute to minute, so it publishes its own error, on its own runs.")

# ----- the machine profile -------------------------------------------------------------------------
st.subheader("This machine")
prof = None
with ui.guarded("the machine profile"):
    prof = load_profile()
busy = cal.calibration_running()
if prof is not None:
    st.markdown(f"**Profile:** {ui.plain(prof.describe())}")
    ui.caption("measured", f"calibration took {prof.settings.get('seconds', math.nan):.0f} s; compute fit error "
                           f"{prof.compute.fit_error * 100:.1f} % of CPU time over {prof.compute.samples} calibration "
                           "cases (networks and batch sizes the presets do not use)")
    if words := P.profile_load_words(prof):
        st.warning(words, icon=":material/speed:")
else:
    st.info("This machine has no profile yet: calibrate it (about two minutes on an idle 2-core machine, a quick one "
            "half that; several times longer while jobs run; other pages stay usable).")
st.caption("Calibrate while no training runs: other work on the cores during the minute of measuring skews the "
           "profile, and every prediction made from it.")
jm, owner = ui.job_manager()
loaded = P.calibrate_now_words(len(jm.running()))
if loaded:
    st.warning(loaded, icon=":material/speed:")
c1, c2 = st.columns([1, 2])
quick = False if lesson else ui.control(c2, "fid_quick")
now = c1.button("Calibrate now" if loaded else "Calibrate this machine", key="fid_calibrate", icon=":material/speed:",
                disabled=busy)
wait = 0.0
if loaded and st.button("Wait for a quiet machine, then calibrate", key="fid_calibrate_wait",
                        icon=":material/hourglass_top:", disabled=busy,
                        help=f"checks every {cal.QUIET_WINDOW_S:g} s; after {cal.PAGE_WAIT_S / 60:.0f} minutes it "
                             "calibrates anyway and marks the profile if other work was still running"):
    wait = cal.PAGE_WAIT_S
if (now or wait) and not busy:
    with ui.guarded("starting the calibration"):
        cal.start_background(quick=quick, wait_quiet_s=wait)
        busy = True


@st.fragment(run_every=2.0 if busy else None)
def calibration_progress() -> None:
    p = cal.read_progress()
    if not p:
        return
    if p.get("error"):
        st.error("The last calibration failed: " + ui.plain(p["error"]))
    elif cal.calibration_running():
        st.progress(float(p.get("fraction", 0.0)), cal.progress_line(p))
    elif busy:  # it just finished (or its process is gone): show the new profile
        st.rerun()


calibration_progress()

if prof is not None and not lesson:
    with st.expander("What the calibration measured"):
        t = P.profile_tables(prof)
        st.plotly_chart(figs.class_throughput(t["classes"]), key="fid_classes")
        ui.caption("measured", "per operator class, fitted to the calibration networks' CPU time per step "
                               "(forward + backward); with N processes: the slow-down factor plus the fixed extra per step of the "
                               "table below")
        st.dataframe(pd.DataFrame(t["comm"]), hide_index=True, key="fid_comm")
        st.dataframe(pd.DataFrame(t["step_terms"]), hide_index=True, key="fid_step_terms")
        ui.caption("measured", "the all-reduce measurement command starts every call after a barrier, with every "
                               "process awake; inside training the early workers sleep in the receive and must be "
                               "woken, which on a busy shared CPU costs more, so the prediction uses the cycles")

# ----- stored runs ---------------------------------------------------------------------------------
st.subheader("Stored runs: predicted against measured")
store = run_store()
everyone = ui.control(st, "fid_class")


@st.cache_resource
def batch_holder(db: str) -> dict:
    return {"batch": None}


holder = batch_holder(str(default_db_path()))
batch = holder["batch"]
b1, b2 = st.columns([1, 2])
steps = VIEW["fid_steps"].spec.default if lesson else ui.control(b2, "fid_steps")
if b1.button("Run the preset batch", key="fid_batch", icon=":material/play_arrow:",
             disabled=prof is None or (batch is not None and batch.running()),
             help="13 short real runs queued one after another: 1-4 workers, MLP and CNN, dense and Group-TopK, "
                  "emulation off and on"):
    with ui.guarded("starting the preset batch"):
        holder["batch"] = batch = P.FidelityBatch(jm, prof, steps=int(steps), owner=owner).start()


@st.fragment(run_every=3.0 if batch is not None and batch.running() else None)
def batch_progress() -> None:
    b = holder["batch"]
    if b is None:
        return
    s = b.status()
    if s["running"]:
        st.progress(s["done"] / s["total"], f"{s['done']} of {s['total']} runs done; running: {s['current'] or '-'}")
    elif s["finished"]:
        st.caption(f"The preset batch finished ({len(s['run_ids'])} runs).")
    if s["error"]:
        st.warning(ui.plain(s["error"]))


batch_progress()

rows = []
if prof is not None:
    with ui.guarded("the comparison"):
        done = tuple(job_views.run_picker(store, owner, everyone, statuses=("done",))[0].id)
        rows, skipped = ui.predicted_runs(str(store.path), prof.created, prof, done)
        if not rows:
            st.info("No finished runs to compare yet: run the preset batch, or runs on the Training page.")
        else:
            summary = P.load_summary(rows)
            g = summary["quiet"]  # a run measured under load says as much about the other work: kept apart
            quiet = [r for r in rows if not r["under_load"]]
            spread, pairs = P.reproducibility(quiet[::-1])  # oldest first
            floor, n_floor = P.oracle_error(quiet)
            m1, m2, m3, m4, m5 = st.columns(5)
            m1.metric("Model error, step time", f"{g * 100:.1f} %" if summary["n_quiet"] else "–",
                      help=P.GEOMEAN_ERROR_HELP + "; over the runs measured on a quiet machine")
            m2.metric("Target on this machine", f"≤ {BAND * 100:.0f} %")
            m3.metric("Runs compared", summary["n_quiet"], help="runs measured on a quiet machine; "
                      f"{summary['n_loaded']} more measured under load are kept apart (below)")
            m4.metric("Re-measured spread", f"{spread * 100:.1f} %" if pairs else "–",
                      help="The measurement's own spread: runs of the same scenario (the preset batch run twice, "
                           "say) differ by this geometric mean of |ln(m_b / m_a)|; no model can be expected to "
                           f"predict closer. {pairs} pair(s) of runs.")
            m5.metric("Best possible here", f"{floor * 100:.1f} %" if n_floor else "–",
                      help="An oracle that knows each scenario's own measurements and predicts the best single step "
                           "time for it (the median): the least error any model of one number per scenario reaches "
                           f"on these runs. {n_floor} run(s) of scenarios measured more than once.")
            if summary["n_quiet"]:
                st.markdown(f"**{'Within' if g <= BAND else 'Outside'} the target.** " + SIMULATORS)
            if summary["n_loaded"]:
                st.warning(P.load_line(summary), icon=":material/speed:")
            if quiet:  # the charts show the runs measured on a quiet machine; the table lists every run
                st.plotly_chart(figs.step_scatter(quiet, BAND), key="fid_scatter")
                ui.caption("measured", "x: measured mean step time (wall clock between the ends of consecutive steps, "
                                       f"after the warm-up); y: modelled, from the profile; dashed: y = x; band: ±{BAND * 100:.0f} %")
                st.plotly_chart(figs.error_bars(quiet, BAND), key="fid_errors")
                ui.caption("modelled", "error = predicted / measured − 1 of the step time, per run")
                if not lesson:
                    st.plotly_chart(figs.parts_scatter(quiet, band=BAND), key="fid_parts")
                    ui.caption("measured", "each part: mean over workers of each worker's mean (measured) against the "
                                           "model's per-worker mean (modelled); emulated waits are inside compute and "
                                           "communication")
            st.dataframe(pd.DataFrame(P.fidelity_table(rows)), hide_index=True, key="fid_table")
            ui.caption("measured", "ms per step (measured: means after the warm-up; predicted: modelled); "
                                   "error = predicted / measured − 1, in percent; other work: the share of the "
                                   "machine's CPU time other processes took while the run ran (more than "
                                   f"{P.LOADED_SHARE * 100:.0f} %: under "
                                   "load, and not in the charts or the error above)")
        if skipped and not lesson:
            with st.expander(f"{len(skipped)} run(s) not compared"):
                st.dataframe(pd.DataFrame(skipped), hide_index=True, key="fid_skipped")

# ----- placement runs ------------------------------------------------------------------------------
st.subheader("Placement runs: prediction, replay and measurement")
with ui.guarded("the placement runs"):
    done = tuple(job_views.run_picker(store, owner, everyone, statuses=("done",))[0].id)
    prow = ui.placement_rows(str(store.path), prof.created if prof else "", prof, done)
    if not prow:
        st.caption("No finished placement runs yet (the Placement page runs plans).")
    else:
        st.dataframe(pd.DataFrame(prow), hide_index=True, key="fid_plan_table")
        ui.caption("measured", "the newest finished placement runs. Modelled: each process's own tasks in the "
                               "executor's order on this machine's cores, from the calibrated costs. Replay: the "
                               "run's own recorded step (the one nearest its median) through the same model with its "
                               "measured task times, each process on a core of its own: near that step's own length "
                               "the schedule explains it, far below it the time went between the tasks. "
                               + plans.prediction_caveat(prof, 4) + ".")

# ----- trace export --------------------------------------------------------------------------------
st.subheader("One step as a trace")
st.markdown("Export a run's step per worker (compute, compression, communication, idle; one track per worker) "
            "as Chrome / Perfetto trace-event JSON, measured and, with a profile, predicted. Open it at "
            "[ui.perfetto.dev](https://ui.perfetto.dev) or chrome://tracing.")
with ui.guarded("the trace export"):
    runs, labels = job_views.run_picker(store, owner, everyone, keep=[ui.view_value("fid_trace_run")],
                                        statuses=("done", "stopped", "failed", "diverged", "interrupted"))
    if runs.empty:
        st.caption("No stored runs of yours yet (the switch above adds the whole class's).")
    else:
        rid = ui.control(st, "fid_trace_run", options=list(runs.id), format_func=labels.get)
        doc = T.store_trace(store, rid, profile=prof)
        st.download_button("Download the trace (JSON)", T.to_json(doc), file_name=f"{rid}-step.trace.json",
                           mime="application/json", key="fid_trace_download", icon=":material/download:")
        ui.caption("measured", f"step {doc['otherData']['steps'][0]} (closest to the median step time); "
                               f"{len(doc['traceEvents'])} events; timestamps in µs")
