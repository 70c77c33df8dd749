"""Compare: stored runs side by side (loss and accuracy against step or wall time, a summary table),
download them as CSV, delete them."""

import streamlit as st

import ui
from lab.figures import compare as cfigs
from lab.figures import fidelity as fid
from lab.jobs import comparison
from lab.machine import fidelity as P
from lab.machine.profile import load_profile
from lab.view import jobs as job_views
from lab.store.runs import ACTIVE, FINISHED, safe_filename, store

ui.scenario_sidebar()
st.title("Compare runs")
st.markdown(f"Your stored runs of the Training page (the switch adds the whole class's and the command line's). All numbers are "
            f"{ui.badge('measured')} on this machine; runs with emulation on also contain {ui.badge('emulated')} "
            "waits (see the time columns).")

runs_store = store()
jm, owner = ui.job_manager()
everyone = ui.control(st, "cmp_class")
before = list(ui.view_value("cmp_runs") or [])
runs, labels = job_views.run_picker(runs_store, owner, everyone, keep=before)
if runs.empty:
    st.info("No stored runs of yours yet: start one on the Training page (the switch above adds the whole class's).")
    st.stop()
kept = [r for r in before if r in labels] or list(runs[runs.status.isin(FINISHED) & (runs.owner == owner)].id[:6])
if kept != before:  # runs deleted elsewhere, or none chosen yet: the newest finished ones
    ui.set_view("cmp_runs", kept)
chosen = ui.control(st, "cmp_runs", options=list(labels), format_func=labels.get)



def pool() -> None:
    """Button callback (before the Runs box is drawn again): the class's runs of the chosen variants."""
    ui.set_view("cmp_runs", comparison.pooled_runs(runs_store, st.session_state.get("cmp_runs") or []))


st.button("Pool the class's runs of these variants", key="cmp_pool", icon=":material/groups:", on_click=pool,
          disabled=not chosen, help="Adds every finished run of the class with the same settings (any seed) as the "
                                    "chosen ones: thirty students' repeats make a band that three cannot")
x = ui.control(st, "cmp_x", format_func={"step": "step (count)", "wall": "wall time (s)"}.get)
if not chosen:
    st.info("Pick one or more runs.")
    st.stop()

target = ui.control(st, "cmp_target")

active = int(runs.set_index("id").status.reindex(chosen).isin(ACTIVE).sum())


@st.fragment(run_every=3.0 if active else None)
def comparison_view() -> None:
    """The comparison; while chosen runs are queued or running it refreshes itself every 3 s."""
    if active:
        live = int(runs_store.list_runs(statuses=ACTIVE).id.isin(chosen).sum())
        st.info(f"{live} of {len(chosen)} chosen runs are still queued or running; the curves and the summary "
                "fill in as they finish.", icon=":material/hourglass_top:")
        if live != active:  # a run ended: the whole page again, so the Runs box's chips say so too
            st.rerun()
    with ui.guarded("the comparison"):
        cmp = comparison.compare_runs(runs_store, chosen, target / 100, x)
        st.plotly_chart(cfigs.band_figure(cmp.loss, x, "training loss (nats)", "Training loss"), key="cmp_loss")
        st.plotly_chart(cfigs.band_figure(cmp.accuracy, x, "test accuracy (%)", "Test accuracy", y_scale=100),
                        key="cmp_acc")
        ui.caption("measured", "colour = optimiser, line style = compression; a line is the mean over a variant's "
                   "repeats (runs that differ only in their seed), the shaded band their min–max. Loss over each run's "
                   "combined batch; accuracy on the held-out set. Hover a line for its full settings." + cmp.drawn_note)
        opts = {c.optimizer for c in cmp.accuracy}
        if {"adabelief", "maxadabelief"} <= opts:
            st.caption("AdaBelief and Max-AdaBelief lie on top of each other while the raw belief s is still growing "
                       "from zero (roughly the first 1/(1 - beta2) steps, 1,000 for beta2 = 0.999): the running max of a "
                       "growing value is the value itself. They part only when s first falls.")

        if cmp.loaded_words:  # it names runs: user text
            st.warning(ui.plain(cmp.loaded_words), icon=":material/speed:")
        st.subheader("Summary by variant")
        prof = load_profile()
        predicted = {r["id"]: r["predicted"] for r in ui.predicted_runs(
            str(runs_store.path), prof.created, prof, tuple(chosen))[0]} if prof is not None else None
        table = cmp.table(predicted)
        st.dataframe(table, hide_index=True, key="cmp_summary")
        ui.caption("measured", "mean ± the half-width of its 95 % interval (Student's t over the repeats), and the range. "
                   "Step time: mean wall time per step after the first 10 % of the steps. Sent: bytes per worker and "
                   "step (counted by the lab's ring and the sparse transports; gloo's own all-reduce counts none). "
                   "Bytes vs dense: against the mean of the dense variants here."
                   + (" Predicted: the calibrated machine model's step time (modelled), where a profile exists."
                      if predicted else ""))
        for label, dropped in (cmp.same_seed or {}).items():
            st.caption(ui.plain(f"{label}: {len(dropped)} run(s) with the same settings and seed as another counted "
                                "once (the same seed computes the same numbers: they are not repeats)."))
        if cmp.verdicts:
            st.markdown("**Can the variants be told apart?** Each against the one with the best mean final accuracy "
                        f"({ui.plain(cmp.verdicts[0]['against'])}):")
            st.markdown("\n".join(f"- **{ui.plain(v['variant'])}** ({v['accuracy difference (points)']} points): "
                                   f"{ui.plain(v['verdict'])}." for v in cmp.verdicts))
            ui.caption("measured", "two variants are told apart only when their 95 % intervals do not overlap; "
                                   "with few repeats the intervals are wide, which is honest, not a flaw.")
        d1, d2 = st.columns(2)
        d1.download_button("Download the summary (CSV)", cmp.summary_frame().to_csv(index=False), mime="text/csv",
                           file_name=safe_filename(comparison.export_filename(cmp.runs, "summary"), ".csv"),
                           key="cmp_download_summary", icon=":material/download:")
        d2.download_button("Download every step with its settings (CSV)",
                           lambda: comparison.export_frame(cmp.runs, runs_store.metrics(chosen)).to_csv(index=False),
                           file_name=safe_filename(comparison.export_filename(cmp.runs), ".csv"), mime="text/csv",
                           key="cmp_download", icon=":material/download:")

        with st.expander("Every run: settings, time split, bytes"):
            s = runs_store.summary(chosen)
            per_run = s.assign(**{
                "final test accuracy (%)": s.final_test_acc * 100, "best test accuracy (%)": s.best_test_acc * 100,
                "final loss (nats)": s.final_loss, "wall time (s)": s.wall_s, "sent (MB)": s.bytes_sent / 1e6,
                "compute (s/worker)": s.t_compute, "comm (s/worker)": s.t_comm, "compression (s/worker)": s.t_compress,
                "idle (s/worker)": s.t_idle, "emulated device wait (s/worker)": s.t_emul_compute,
                "emulated link wait (s/worker)": s.t_emul_comm,
            })[["id", "name", "status", "optimizer", "sync", "workers", "emulate", "steps", "final test accuracy (%)",
                "best test accuracy (%)", "final loss (nats)", "wall time (s)", "sent (MB)", "compute (s/worker)",
                "comm (s/worker)", "compression (s/worker)", "idle (s/worker)", "emulated device wait (s/worker)",
                "emulated link wait (s/worker)"]]
            st.dataframe(per_run, hide_index=True, key="cmp_table",
                         column_config={c: st.column_config.NumberColumn(format="%.3f") for c in per_run.columns[8:]})
            ui.caption("measured", "Time columns: seconds per worker summed over the run (mean over workers); compute "
                       "and comm include the emulated waits shown in the last two columns (0 without emulation).")


comparison_view()

st.subheader("Predicted beside measured")
with ui.guarded("the prediction"):
    prof = load_profile()
    if prof is None:
        st.info("No machine profile yet: calibrate this machine on the Fidelity page to see the cost model's "
                "prediction beside these runs.")
    else:
        rows, skipped = ui.predicted_runs(str(runs_store.path), prof.created, prof, tuple(chosen))
        if rows:
            st.plotly_chart(fid.step_scatter(rows, P.TARGET_ERROR, "Step time of the chosen runs"), key="cmp_pred")
            st.dataframe(P.fidelity_table(rows), hide_index=True, key="cmp_pred_table")
            ui.caption("modelled", f"Predicted from this machine's profile ({prof.created[:10]}) against the measured "
                       f"mean step (ms) after the warm-up; dashed y = x, band ±{P.TARGET_ERROR * 100:.0f} %; "
                       "error = predicted / measured − 1.")
        for s in skipped:
            st.caption(ui.plain(f"Run {s['id']} not predicted: {s['why']}"))

with st.expander("Delete runs"):
    st.markdown("Deletes the chosen runs, their measurements and their checkpoints: only your own (another "
                "session's run refuses the whole deletion).")
    sure = ui.control(st, "cmp_confirm", label=f"Yes, delete {len(chosen)} run(s)")
    if st.button("Delete the chosen runs", key="cmp_delete", disabled=not sure, icon=":material/delete:"):
        with ui.guarded("deleting runs"):
            jm.delete(chosen, owner)
            st.session_state.pop("cmp_runs", None)
            st.rerun()
