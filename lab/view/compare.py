"""The Compare page's model: stored runs grouped into variants (loss and accuracy bands, a summary over repeats with
noise verdicts, every run's numbers), their downloads, and the machine model's prediction beside them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from lab.jobs import comparison
from lab.machine import fidelity
from lab.machine.profile import load_profile
from lab.store.runs import ACTIVE, FINISHED, safe_filename, run_store
from lab.view.desk import Desk
from lab.view.fidelity import Predict, evaluate
from lab.view.jobs import run_picker
from lab.view.section import Notice, Section

INTRO = ("Your stored runs of the Training page (the switch adds the whole class's and the command line's). All "
         "numbers are {measured} on this machine; runs with emulation on also contain {emulated} waits (see the time "
         "columns).")
NO_RUNS = "No stored runs of yours yet: start one on the Training page (the switch above adds the whole class's)."
PICK = "Pick one or more runs."
POOL_HELP = ("Adds every finished run of the class with the same settings (any seed) as the chosen ones: thirty "
             "students' repeats make a band that three cannot")
DELETE = ("Deletes the chosen runs, their measurements and their checkpoints: only your own (another session's run "
          "refuses the whole deletion).")
CURVES = ("colour = optimiser, line style = compression; a line is the mean over a variant's repeats (runs that differ "
          "only in their seed), the shaded band their min–max. Loss over each run's combined batch; accuracy on the "
          "held-out set (samples never trained on). Hover a line for its full settings.")
BELIEF = ("AdaBelief and Max-AdaBelief lie on top of each other while the raw belief s is still growing from zero "
          "(roughly the first 1/(1 - beta2) steps, 1,000 for beta2 = 0.999): the running max of a growing value is the "
          "value itself. They part only when s first falls.")
SUMMARY = ("mean ± the half-width of its 95 % interval (Student's t over the repeats), and the range. Reached: how "
           "many of the repeats reached the target; the steps and seconds to it are over those. Step time: mean wall "
           "time per step after the first 10 % of the steps. Sent: bytes per worker and step (counted by the lab's "
           "ring and the sparse transports; gloo's own all-reduce, PyTorch's for CPUs, counts none). Bytes vs dense: "
           "against the mean of the dense variants here.")
PREDICTED = (" Predicted: the calibrated machine model's step time (modelled: the cost model with its numbers fitted "
             "to timings of this machine), where a profile exists.")
TOLD_APART = ("two variants are told apart only when their 95 % intervals do not overlap; with few repeats the "
              "intervals are wide, which is honest, not a flaw.")
PER_RUN = ("Time columns: seconds per worker summed over the run (mean over workers); compute and comm include the "
           "emulated waits shown in the last two columns (0 without emulation).")
PER_RUN_COLUMNS = {  # the per-run table's column -> the store summary's column and its scale
    "final test accuracy (%)": ("final_test_acc", 100), "best test accuracy (%)": ("best_test_acc", 100),
    "final loss (nats)": ("final_loss", 1), "wall time (s)": ("wall_s", 1), "sent (MB)": ("bytes_sent", 1e-6),
    "compute (s/worker)": ("t_compute", 1), "comm (s/worker)": ("t_comm", 1),
    "compression (s/worker)": ("t_compress", 1),
    "idle (s/worker)": ("t_idle", 1), "emulated device wait (s/worker)": ("t_emul_compute", 1),
    "emulated link wait (s/worker)": ("t_emul_comm", 1)}
SETTINGS = ("id", "name", "status", "optimizer", "sync", "workers", "emulate", "steps")



@dataclass(frozen=True)
class Picker:
    """The runs the Runs box offers (id -> label, newest first) and the ones it keeps chosen."""

    labels: dict
    kept: list


def picker(owner: str, everyone: bool, before: Sequence[str]) -> Picker:
    """The Runs box's runs: ``owner``'s own (the class's with ``everyone``) and the chosen ones ``before``; of those
    the ones still stored, or with none, the owner's six newest finished runs."""
    runs, labels = run_picker(run_store(), owner, everyone, keep=before)
    kept = [r for r in before if r in labels] or list(runs[runs.status.isin(FINISHED) & (runs.owner == owner)].id[:6])
    return Picker(labels, kept)


def pooled(chosen: Sequence[str]) -> list[str]:
    """The chosen runs and the class's finished runs of their variants (any seed)."""
    return comparison.pooled_runs(run_store(), list(chosen))


def waiting(chosen: Sequence[str]) -> tuple[int, list[Section]]:
    """How many chosen runs are queued or running, and a notice that says so (none when none is)."""
    live = int(run_store().list_runs(statuses=ACTIVE).id.isin(list(chosen)).sum())
    if not live:
        return 0, []
    return live, [Section("cmp_waiting", notices=(Notice(
        f"{live} of {len(chosen)} chosen runs are still queued or running; the curves and the summary fill in as they "
        "finish.", "info", ":material/hourglass_top:"),))]


@dataclass(frozen=True)
class Model:
    """The comparison: its sections, its two downloads (``st.download_button``'s arguments) and, in an expander,
    every run's numbers."""

    sections: list[Section]
    downloads: list[dict]
    per_run: list[Section]


def _predicted(chosen: Sequence[str], predict: Predict) -> tuple[Any, list, list]:
    prof = load_profile()
    if prof is None:
        return None, [], []
    rows, skipped = predict(str(run_store().path), prof.created, prof, tuple(chosen))
    return prof, rows, skipped


def comparison_model(chosen: Sequence[str], target: float, x: str, predict: Predict = evaluate) -> Model:
    """The chosen runs compared against ``x`` ("step" or "wall"), with the time to a test accuracy of ``target``
    percent."""
    runs_store = run_store()
    cmp = comparison.compare_runs(runs_store, list(chosen), target / 100, x)
    sections = [
        Section("cmp_loss", chart="compare.band_figure",
                chart_input=dict(curves=cmp.loss, x=x, y_title="training loss (nats)", title="Training loss")),
        Section("cmp_acc", chart="compare.band_figure", kind="measured", caption=CURVES + cmp.drawn_note,
                chart_input=dict(curves=cmp.accuracy, x=x, y_title="test accuracy (%)", title="Test accuracy",
                                 y_scale=100)),
    ]
    if {"adabelief", "maxadabelief"} <= {c.optimizer for c in cmp.accuracy}:
        sections.append(Section("cmp_belief", caption=BELIEF))
    if cmp.loaded_words:  # it names runs: user text
        sections.append(Section("cmp_loaded", notices=(Notice(cmp.loaded_words, "warning", ":material/speed:"),)))
    prof, rows, _ = _predicted(chosen, predict)
    predicted = {r["id"]: r["predicted"] for r in rows} if prof is not None else None
    sections.append(Section("cmp_summary", header="Summary by variant", level="subheader",
                            table=cmp.table(predicted).to_dict("records"), kind="measured",
                            caption=SUMMARY + (PREDICTED if predicted else "")))
    sections += [Section(f"cmp_same_seed_{i}", values={"variant": label}, caption=(
        f"{{variant}}: {len(dropped)} run(s) with the same settings and seed as another counted once (the same seed "
        "computes the same numbers: they are not repeats)."))
        for i, (label, dropped) in enumerate((cmp.same_seed or {}).items())]
    if cmp.verdicts:
        said = {f"v{i}": v["variant"] for i, v in enumerate(cmp.verdicts)} | {
            f"w{i}": v["verdict"] for i, v in enumerate(cmp.verdicts)}
        sections += [
            Section("cmp_verdicts", values={"against": cmp.verdicts[0]["against"]},
                    intro="**Can the variants be told apart?** Each against the one with the best mean final "
                          "accuracy ({against}):"),
            Section("cmp_verdict_list", values=said, kind="measured", caption=TOLD_APART, intro="\n".join(
                f"- **{{v{i}}}** ({v['accuracy difference (points)']} points): {{w{i}}}."
                for i, v in enumerate(cmp.verdicts))),
        ]
    downloads = [
        dict(label="Download the summary (CSV)", data=cmp.summary_frame().to_csv(index=False), mime="text/csv",
             file_name=safe_filename(comparison.export_filename(cmp.runs, "summary"), ".csv"),
             key="cmp_download_summary", icon=":material/download:"),
        dict(label="Download every step with its settings (CSV)",
             data=lambda: comparison.export_frame(cmp.runs, runs_store.metrics(list(chosen))).to_csv(index=False),
             file_name=safe_filename(comparison.export_filename(cmp.runs), ".csv"), mime="text/csv",
             key="cmp_download", icon=":material/download:"),
    ]
    return Model(sections, downloads, per_run(chosen))


def per_run(chosen: Sequence[str]) -> list[Section]:
    """Every chosen run's settings, accuracy, time split and bytes."""
    s = run_store().summary(list(chosen))
    table = [{**{k: getattr(r, k) for k in SETTINGS},
              **{col: getattr(r, name) * scale for col, (name, scale) in PER_RUN_COLUMNS.items()}}
             for r in s.itertuples()]
    return [Section("cmp_table", table=table, kind="measured", caption=PER_RUN,
                    columns={c: {"kind": "number", "format": "%.3f"} for c in PER_RUN_COLUMNS})]


def prediction(chosen: Sequence[str], predict: Predict = evaluate) -> list[Section]:
    """The machine model's step time of the chosen runs beside the measured one (how to get one without a profile)."""
    prof, rows, skipped = _predicted(chosen, predict)
    if prof is None:
        return [Section("cmp_no_profile", notices=(Notice(
            "No machine profile yet: calibrate this machine on the Fidelity page to see the cost model's prediction "
            "beside these runs."),))]
    out = []
    if rows:
        out.append(Section(
            "cmp_pred", chart="fidelity.step_scatter", table=fidelity.fidelity_table(rows), kind="modelled",
            chart_input=dict(rows=rows, band=fidelity.TARGET_ERROR, title="Step time of the chosen runs"),
            caption=f"Predicted from this machine's profile ({prof.created[:10]}) against the measured mean step (ms) "
                    "after the warm-up (the first steps, which pay one-off costs); dashed y = x, "
                    f"band ±{fidelity.TARGET_ERROR * 100:.0f} %; error = predicted / measured − 1."))
    out += [Section(f"cmp_unpredicted_{i}", values={"id": s["id"], "why": s["why"]},
                    caption="Run {id} not predicted: {why}") for i, s in enumerate(skipped)]
    return out


__all__ = ["Desk", "INTRO", "NO_RUNS", "PICK", "POOL_HELP", "DELETE", "Picker", "Model", "picker", "pooled", "waiting",
           "comparison_model", "per_run", "prediction"]
