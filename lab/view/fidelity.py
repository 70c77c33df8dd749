"""The Fidelity page's model: this machine's profile and its calibration, every stored run's predicted step time
beside its measured one (the model's error, the measurement's own spread, the best any model could do), the
placement runs' prediction and replay, and one step of a run exported as a trace."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from lab.machine import calibrate as cal
from lab.machine import fidelity
from lab.machine import plans
from lab.machine import trace_export
from lab.machine.profile import load_profile
from lab.store.runs import default_db_path, run_store
from lab.view.desk import Desk
from lab.view.jobs import run_picker
from lab.view.section import Notice, Section

TITLE = "Fidelity: prediction beside measurement"
INTRO = ("The lab does not only predict: it runs the same scenario on this machine and shows how far the prediction "
         "was off. The cost model is **calibrated** here (its numbers fitted to timings of this machine: calibration "
         "networks that are not the presets, the optimiser and compressor costs, short jobs with 2 to 4 processes at "
         "once, each pinned to a core as the job manager pins a job's ranks), then it predicts each run's step time "
         "and its parts; the run store holds what the workers measured.")
BAND = fidelity.TARGET_ERROR
SIMULATORS = (
    "For scale, published claims of the simulators this lab stands beside (their numbers, on dedicated GPU "
    "clusters, not re-measured here): **SimAI** (NSDI '25) reports an average of 98.1 % alignment with real "
    "training runs, i.e. about 2 % error; **ASTRA-sim 2.0** (ISPASS '23) reports validating its models against real "
    "systems; **Calculon** (SC '23) is an analytical model for co-design studies. Errors of a few percent up to about "
    "20 % are the usual range such papers report. This lab runs on a shared CPU, where other processes change the "
    "machine's speed from minute to minute, so it publishes its own error, on its own runs.")
BATCH_HELP = "13 short real runs queued one after another: 1-4 workers, MLP and CNN, dense and Group-TopK, emulation " \
             "off and on"
TRACE = ("Export a run's step per worker (compute, compression, communication, idle; one track per worker) as Chrome / "
         "Perfetto trace-event JSON, measured and, with a profile, predicted. Open it at "
         "[ui.perfetto.dev](https://ui.perfetto.dev) or chrome://tracing.")
TRACE_STATUSES = ("done", "stopped", "failed", "diverged", "interrupted")

Predict = Callable[[str, str, Any, tuple], tuple]  # (db, profile's created, profile, run ids) -> (rows, skipped)


def evaluate(db: str, created: str, profile: Any, ids: tuple) -> tuple:
    """The machine model's predictions of the runs ``ids`` of the store at ``db``: (rows, skipped) (a page passes
    the same, cached per profile, whose ``created`` names it)."""
    return fidelity.evaluate_runs(run_store(db), profile, list(ids))


def profile():
    """This machine's profile (None before its first calibration)."""
    return load_profile()


# ----- the machine profile and its calibration -----------------------------------------------------------------------
@dataclass(frozen=True)
class Machine:
    """This machine's profile as sections, and the calibration's buttons: the first one's label, and whether to
    offer to wait for a quiet machine (jobs run) with its help."""

    sections: list[Section]
    label: str
    wait: bool
    wait_help: str


def machine(prof: Any, jobs_running: int) -> Machine:
    """The profile (or how to get one) and the calibration's buttons beside ``jobs_running`` jobs."""
    if prof is not None:
        sections = [Section("fid_profile", intro="**Profile:** {profile}", values={"profile": prof.describe()},
                            kind="measured", caption=(
                                f"calibration took {prof.settings.get('seconds', math.nan):.0f} s; compute fit error "
                                f"{prof.compute.fit_error * 100:.1f} % of CPU time over {prof.compute.samples} "
                                "calibration cases (networks and batch sizes the presets do not use)"))]
        if words := fidelity.profile_load_words(prof):
            sections.append(Section("fid_profile_load", notices=(Notice(words, "warning", ":material/speed:"),)))
    else:
        sections = [Section("fid_no_profile", notices=(Notice(
            "This machine has no profile yet: calibrate it (about six minutes on an idle 2-core machine, placement "
            "plans drawn at random included, a quick one half that; several times longer while jobs run; other pages stay usable)."),))]
    sections.append(Section("fid_quiet", caption="Calibrate while no training runs: other work on the cores during the "
                                                 "minutes of measuring skews the profile, and every prediction made "
                                                 "from it."))
    loaded = fidelity.calibrate_now_words(jobs_running)
    if loaded:
        sections.append(Section("fid_busy", notices=(Notice(loaded, "warning", ":material/speed:"),)))
    return Machine(sections, "Calibrate now" if loaded else "Calibrate this machine", bool(loaded),
                   f"checks every {cal.QUIET_WINDOW_S:g} s; after {cal.PAGE_WAIT_S / 60:.0f} minutes it calibrates "
                   "anyway and marks the profile if other work was still running")


def calibrating() -> bool:
    """A calibration runs in the background now."""
    return cal.calibration_running()


def calibrate(quick: bool, wait: bool) -> None:
    """Start a calibration in the background; with ``wait``, once the machine is quiet (at most a quarter hour)."""
    cal.start_background(quick=quick, wait_quiet_s=cal.PAGE_WAIT_S if wait else 0.0)


@dataclass(frozen=True)
class Progress:
    """A background task's progress: a bar (its fraction done and line) while it runs, and what it said."""

    bar: tuple[float, str] | None = None
    sections: tuple[Section, ...] = ()
    ended: bool = False  # it has ended since it last ran


def calibration_progress() -> Progress:
    """The background calibration's progress (an empty one when none ever ran)."""
    p = cal.read_progress()
    if not p:
        return Progress()
    if p.get("error"):
        return Progress(sections=(Section("fid_cal_failed", notices=(
            Notice(f"The last calibration failed: {p['error']}", "error"),)),))
    if cal.calibration_running():
        return Progress(bar=(float(p.get("fraction", 0.0)), cal.progress_line(p)))
    return Progress(ended=True)


def calibration_measured(prof: Any, lesson: bool) -> list[Section]:
    """What the calibration measured: throughput per operator class, the collectives' fits, a step's terms (none in
    lesson mode, or without a profile)."""
    if prof is None or lesson:
        return []
    t = fidelity.profile_tables(prof)
    return [
        Section("fid_classes", chart="fidelity.class_throughput", chart_input=dict(rows=t["classes"]),
                kind="measured", caption="per operator class, fitted to the calibration networks' CPU time per step "
                                         "(forward + backward); with N processes: the slow-down factor plus the fixed "
                                         "extra per step of the table below"),
        Section("fid_comm", table=t["comm"]),
        Section("fid_step_terms", table=t["step_terms"], kind="measured",
                caption="the all-reduce measurement command starts every call after a barrier, with every process "
                        "awake; inside training the early workers sleep in the receive and must be woken, which on a "
                        "busy shared CPU costs more, so the prediction uses the cycles"),
    ]


# ----- the preset batch ----------------------------------------------------------------------------------------------
def db() -> str:
    """The run store's path: the server's one preset batch is kept per store."""
    return str(default_db_path())


def start_batch(manager: Any, prof: Any, steps: int, owner: str) -> Any:
    """Queue the preset batch of short real runs, ``owner``'s."""
    return fidelity.FidelityBatch(manager, prof, steps=int(steps), owner=owner).start()


def batch_progress(batch: Any) -> Progress:
    """How far the preset batch is."""
    if batch is None:
        return Progress()
    s = batch.status()
    out = []
    if not s["running"] and s["finished"]:
        out.append(Section("fid_batch_done", caption=f"The preset batch finished ({len(s['run_ids'])} runs)."))
    if s["error"]:
        out.append(Section("fid_batch_error", notices=(Notice(s["error"], "warning"),)))
    bar = (s["done"] / s["total"], f"{s['done']} of {s['total']} runs done; running: {s['current'] or '-'}")
    return Progress(bar=bar if s["running"] else None, sections=tuple(out), ended=not s["running"])


# ----- stored runs: predicted against measured -----------------------------------------------------------------------
def _done(owner: str, everyone: bool) -> tuple:
    return tuple(run_picker(run_store(), owner, everyone, statuses=("done",))[0].id)


def _metrics(summary: dict, quiet: Sequence[dict]) -> Section:
    """The model's error over the runs measured on a quiet machine (a run measured under load says as much about
    the other work: kept apart), beside the target, the measurement's own spread and the best any model does."""
    g = summary["quiet"]
    spread, pairs = fidelity.reproducibility(quiet[::-1])  # oldest first
    floor, n_floor = fidelity.oracle_error(quiet)
    return Section("fid_metrics", metrics=(
        ("Model error, step time", f"{g * 100:.1f} %" if summary["n_quiet"] else "–",
         fidelity.GEOMEAN_ERROR_HELP + "; over the runs measured on a quiet machine"),
        ("Target on this machine", f"≤ {BAND * 100:.0f} %"),
        ("Runs compared", str(summary["n_quiet"]), "runs measured on a quiet machine; "
         f"{summary['n_loaded']} more measured under load are kept apart (below)"),
        ("Re-measured spread", f"{spread * 100:.1f} %" if pairs else "–",
         "The measurement's own spread: runs of the same scenario (the preset batch run twice, say) differ by this "
         f"geometric mean of |ln(m_b / m_a)|; no model can be expected to predict closer. {pairs} pair(s) of runs."),
        ("Best possible here", f"{floor * 100:.1f} %" if n_floor else "–",
         "An oracle that knows each scenario's own measurements and predicts the best single step time for it (the "
         "median): the least error any model of one number per scenario reaches on these runs. "
         f"{n_floor} run(s) of scenarios measured more than once.")))


def stored_runs(prof: Any, owner: str, everyone: bool, lesson: bool, predict: Predict = evaluate
                ) -> tuple[list[Section], tuple[str, list[Section]] | None]:
    """Every finished run's predicted step time beside its measured one, and (an expander's label and sections)
    the runs that could not be compared; nothing without a profile."""
    if prof is None:
        return [], None
    rows, skipped = predict(str(run_store().path), prof.created, prof, _done(owner, everyone))
    aside = (f"{len(skipped)} run(s) not compared", [Section("fid_skipped", table=list(skipped))]) \
        if skipped and not lesson else None
    if not rows:
        return [Section("fid_no_runs", notices=(Notice(
            "No finished runs to compare yet: run the preset batch, or runs on the Training page."),))], aside
    summary = fidelity.load_summary(rows)
    quiet = [r for r in rows if not r["under_load"]]
    out = [_metrics(summary, quiet)]
    if summary["n_quiet"]:
        out.append(Section("fid_verdict", text=f"**{'Within' if summary['quiet'] <= BAND else 'Outside'} the "
                                               "target.** " + SIMULATORS))
    if summary["n_loaded"]:
        out.append(Section("fid_loaded", notices=(Notice(fidelity.load_line(summary), "warning", ":material/speed:"),)))
    if quiet:  # the charts show the runs measured on a quiet machine; the table lists every run
        out += [
            Section("fid_scatter", chart="fidelity.step_scatter", chart_input=dict(rows=quiet, band=BAND),
                    kind="measured", caption="x: measured mean step time (wall clock between the ends of consecutive "
                                             "steps, after the warm-up: the first steps, which pay one-off "
                                             "costs); y: modelled, from the profile; dashed: y = x; "
                                             f"band: ±{BAND * 100:.0f} %"),
            Section("fid_errors", chart="fidelity.error_bars", chart_input=dict(rows=quiet, band=BAND),
                    kind="modelled", caption="error = predicted / measured − 1 of the step time, per run")]
        if not lesson:
            out.append(Section("fid_parts", chart="fidelity.parts_scatter", chart_input=dict(rows=quiet, band=BAND),
                               kind="measured", caption="each part: mean over workers of each worker's mean (measured) "
                                                        "against the model's per-worker mean (modelled); emulated "
                                                        "waits are inside compute and communication"))
    out.append(Section("fid_table", table=fidelity.fidelity_table(rows), kind="measured", caption=(
        "ms per step (measured: means after the warm-up; predicted: modelled); error = predicted / measured − 1, in "
        "percent; other work: the share of the machine's CPU time other processes took while the run ran (more than "
        f"{fidelity.LOADED_SHARE * 100:.0f} %: under load, and not in the charts or the error above)")))
    return out, aside


# ----- placement runs ------------------------------------------------------------------------------------------------
def placement_runs(prof: Any, owner: str, everyone: bool, rows: Callable = None) -> list[Section]:
    """The newest finished placement runs: measured, modelled and the replay of one recorded step. ``rows`` is
    :func:`lab.machine.plans.placement_rows`'s (db, profile's created, profile, ids) form (a page caches it)."""
    done = _done(owner, everyone)
    if rows is None:
        prow = plans.placement_rows(run_store(), prof, list(done))
    else:
        prow = rows(str(run_store().path), prof.created if prof else "", prof, done)
    if not prow:
        return [Section("fid_no_plans", caption="No finished placement runs yet (the Placement page runs plans).")]
    return [Section("fid_plan_table", table=prow, kind="measured", caption=(
        "the newest finished placement runs. Modelled: each process's own tasks in the executor's order on this "
        "machine's cores, from the calibrated costs. Replay: the run's own recorded step (the one nearest its median) "
        "through the same model with its measured task times, each process on a core of its own: near that step's "
        "own length the schedule explains it, far below it the time went between the tasks. "
        + plans.prediction_caveat(prof, 4) + "."))]


# ----- one step as a trace -------------------------------------------------------------------------------------------
def trace_runs(owner: str, everyone: bool, keep: str | None) -> dict:
    """The runs a trace can be taken of (id -> label, newest first): ``owner``'s (the class's with ``everyone``) and
    the one in ``keep``."""
    return run_picker(run_store(), owner, everyone, keep=[keep], statuses=TRACE_STATUSES)[1]


def trace(run_id: str, prof: Any) -> tuple[dict, list[Section]]:
    """A run's step closest to its median as trace-event JSON: ``st.download_button``'s arguments, and its caption."""
    doc = trace_export.store_trace(run_store(), run_id, profile=prof)
    download = dict(label="Download the trace (JSON)", data=trace_export.to_json(doc), file_name=f"{run_id}-step.trace.json",
                    mime="application/json", key="fid_trace_download", icon=":material/download:")
    return download, [Section("fid_trace", kind="measured", caption=(
        f"step {doc['otherData']['steps'][0]} (closest to the median step time); {len(doc['traceEvents'])} events; "
        "timestamps in µs"))]



class FidelityDesk(Desk):
    """The Fidelity page's calls: how busy the server is, and this session's preset batch."""

    def start_batch(self, prof: Any, steps: int) -> Any:
        return start_batch(self.jm, prof, steps, self.owner)


__all__ = ["FidelityDesk", "TITLE", "INTRO", "SIMULATORS", "BATCH_HELP", "TRACE", "Machine", "Progress", "evaluate", "profile",
           "machine", "calibrating", "calibrate", "calibration_progress", "calibration_measured", "db", "start_batch",
           "batch_progress", "stored_runs", "placement_runs", "trace_runs", "trace"]
