"""The Training page's model: the run's settings as forms of the Scenario's field tables, the Scenario they make,
what Run and the one-click comparison queue, and the live view of this session's run (its sections, read from the
run store)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from lab.jobs.variants import comparison_compressions, comparison_scenarios, run_name, settings_of, student_seed
from lab.scenario.document import COMPRESSION_FIELDS, TRAINING_FIELDS, Scenario
from lab.scenario.names import PAYLOAD_COMPRESSORS, SHARING_SHORT, SPARSIFIERS, is_uploaded_model
from lab.store.runs import ACTIVE, JOB_WORKER, run_store
from lab.view.desk import Desk
from lab.view.fields import Field, Row, SettingsForm
from lab.view.jobs import (IMPLEMENTATIONS, bytes_note, compression_conflict, default_device, progress_line, queue_line,
                           run_to_watch, run_totals, worker_labels)
from lab.view.section import Notice, Section
from lab.scenario.summaries import COMPRESSOR_NAMES, compression_summary, optimiser_summary

INTRO = ("Each run is a real job: N worker processes on this machine train the model over torch.distributed (gloo, "
         "PyTorch's library of collectives for CPUs), and every number below is {measured} from them. With emulation "
         "on, a worker standing for a slower device of the topology waits in proportion to its measured compute, and "
         "the lab's ring waits the modelled transfer time on each link: those waits are {emulated} and shown apart.")
COMPARE_HELP = ("Queues Adam, AdaBelief and Max-AdaBelief (the two Adam variants of the Optimisers page), each without "
                "compression and with the compression above (when none is chosen, Group-TopK 1 %, the largest 1 % of "
                "every group of the gradient, with error feedback, which adds what was not sent to the next "
                "gradient), each with several seeds; then opens the Compare page on exactly those runs")
NO_RUNS = "No runs yet: press **Run**."



def _powersgd(v) -> bool:  # torch's hook takes a rank and a warm-up where the lab's compressors take a ratio
    return v["kind"] == "powersgd"


def _own_sending(v) -> bool:  # torch's hooks send by their own all-reduces: no sharing method, no error feedback
    return v["kind"] in PAYLOAD_COMPRESSORS and v["kind"] != "none"


# Two select boxes a row: their choices are long, and a 1024-pixel projector must show them whole.
TRAINING_FORM = SettingsForm(TRAINING_FIELDS, (
    Row((Field("optimizer", "tr_optimizer"), Field("model", "tr_model"))),
    Row((Field("model_width", "tr_model_width", disabled=lambda v: is_uploaded_model(v["model"])),), widths=(1, 2)),
    Row((Field("sync", "tr_sync"), Field("allreduce_impl", "tr_impl"))),
    Row((Field("workers", "tr_workers"), Field("steps", "tr_steps"), Field("batch_size", "tr_batch"),
         Field("lr", "tr_lr"), Field("seed", "tr_seed"))),
    Row((Field("split", "tr_split"),
         Field("dirichlet_alpha", "tr_alpha", disabled=lambda v: v["split"] != "dirichlet"),
         Field("exchange_share", "tr_exchange"), Field("lr_scaling", "tr_lr_scaling"))),
    Row((Field("emulate", "tr_emulate"), Field("fused", "tr_fused"))),
))
# The same compression settings the Compression page edits (the Scenario's training.compression).
COMPRESSION_FORM = SettingsForm(COMPRESSION_FIELDS, (
    Row((Field("kind", "tr_cmp_kind", names=COMPRESSOR_NAMES),
         Field("rank", "tr_cmp_rank", when=_powersgd), Field("warmup", "tr_cmp_warmup", when=_powersgd),
         Field("ratio", "tr_cmp_ratio", when=lambda v: not _powersgd(v),
               disabled=lambda v: v["kind"] not in SPARSIFIERS),
         Field("group_size", "tr_cmp_group", when=lambda v: not _powersgd(v),
               disabled=lambda v: v["kind"] != "group_topk")), widths=(1, 1, 1)),
    Row((Field("sharing", "tr_cmp_sharing", names=SHARING_SHORT, disabled=lambda v: not _own_sending(v)),
         Field("error_feedback", "tr_cmp_ef", disabled=lambda v: not _own_sending(v))), widths=(2, 1),
        align="bottom"),
))


def device_boxes(sc: Scenario, settings: Mapping[str, Any]) -> list[tuple[str, dict]]:
    """The boxes that pick the device each worker (and a parameter server) stands for, as (key, ``ui.control``
    arguments); none unless the form emulates the topology or splits the data by compute share."""
    if not (settings["emulate"] or settings["split"] == "weighted"):
        return []
    names, chosen = list(sc.topology.device_names), list(sc.training.worker_devices)
    n = settings["workers"] + (1 if settings["sync"] == "param_server" else 0)
    return [(f"tr_dev_{i}", {"options": names, "value": names[default_device(names, chosen, i)],
                             "label": f"Worker {i} device" if i < settings["workers"] else "Server device"})
            for i in range(n)]


def edited(sc: Scenario, settings: Mapping[str, Any], devices: Sequence[str] | None,
           compression: Mapping[str, Any]) -> Scenario:
    """The Scenario with the forms' values: the training fields, the worker devices (None: as they are) and the
    compression, checked against the field tables; ``sc`` itself when nothing changed."""
    tr = sc.training
    new = tr.replace(**settings, worker_devices=tr.worker_devices if devices is None else tuple(devices),
                     compression={**tr.compression.to_dict(), **compression})
    return sc if new == tr else sc.replace(training=new)


def name_of(sc: Scenario) -> str:
    """The name Run gives the run: what it is."""
    return run_name(settings_of(sc.to_dict()))


def comparison(sc: Scenario, repeats: int, owner: str) -> list[tuple[Scenario, str]]:
    """The runs the one-click comparison queues: the compared optimisers × no compression and the scenario's (or
    Group-TopK with error feedback), ``repeats`` seeds each from this student's first seed."""
    return comparison_scenarios(sc, comparison_compressions(sc.training.compression), int(repeats),
                                first_seed=student_seed(sc.training.seed, owner))


def polling(runs_store, owner: str, pending: bool) -> bool:
    """Whether the live view polls: a submit of this session still under way, or one of its jobs queued or
    running."""
    return pending or bool(len(runs_store.list_runs(statuses=ACTIVE, owner=owner)))


@dataclass(frozen=True)
class Watch:
    """The live view of this session's run: ``rerun`` when polling should stop (a full rerun turns it off);
    ``run_id`` None before any run. ``head`` goes above the run's settings lines and progress bar, ``body`` below
    them; ``training`` is the stored run's own settings (the form may have changed since it was queued)."""

    rerun: bool = False
    run_id: str | None = None
    head: tuple[Section, ...] = ()
    training: Mapping[str, Any] | None = None
    progress: float = 0.0
    progress_text: str = ""
    can_stop: bool = False
    body: tuple[Section, ...] = ()
    predict: bool = False


def watch(runs_store, jm, owner: str, wanted: str | None, polled: bool, pending: bool) -> Watch:
    """The live view of this session's runs (the class's are on the Jobs page): the run ``wanted`` while it is
    this session's, else the newest running one, else the newest."""
    jm.sweep()  # a run whose launcher died without a word becomes interrupted
    runs = runs_store.list_runs(owner=owner)
    if runs.empty:
        return Watch(rerun=polled and not pending)
    active = runs[runs.status.isin(ACTIVE)]
    if polled and not len(active) and not pending:
        return Watch(rerun=True)
    head = []
    if len(active):
        head.append(Section("train_active", caption=(
            f"Active jobs: {', '.join(f'{r.id} ({r.status})' for r in active.itertuples())}. At most "
            f"{jm.capacity} run(s) at a time; the others wait in a queue that takes every session in turn.")))
    rid = run_to_watch(runs, wanted)
    run = runs_store.get_run(rid)
    tr = run["scenario"]["training"]
    queue = jm.queue_info(rid) if run["status"] == "queued" else None
    if queue is not None:
        whose = "Your job" if run["info"].get("owner") == owner else "This job (another session's)"
        head.append(Section("train_queue", notices=(
            Notice(f"{whose}: {queue_line(runs_store, queue)}", "info", ":material/hourglass_top:"),)))
    head.append(Section("train_run", header=f"Run {rid}", level="subheader"))
    place = queue["position"] if queue else None
    body = []
    if run["status"] in ("failed", "diverged", "interrupted") and run["error"]:
        body.append(Section("train_error", notices=(
            Notice(f"This run {run['status']}: {run['error'].splitlines()[0]}", "error", ":material/error:"),)))
    elif run["status"] == "stopped":
        body.append(Section("train_stopped", notices=(Notice(run["error"] or "stopped", "warning"),)))
    m = runs_store.metrics(rid)
    body += measured(m, run) if len(m) else [Section("train_wait", caption="Waiting for the first measurements…")]
    return Watch(run_id=rid, head=tuple(head), training=tr, progress=min(1.0, runs_store.progress(rid) / tr["steps"]),
                 progress_text=progress_line(runs_store, run, place), can_stop=run["status"] in ("queued", "running"),
                 body=tuple(body), predict=run["status"] == "done" and len(m) > 0)


def measured(m, run: dict) -> list[Section]:
    """A run's figures from its metrics ``m`` so far: loss and accuracy, and where each worker's time went with
    the run's totals."""
    rid, tr, info = run["id"], run["scenario"]["training"], run["info"]
    job, per = m[m.worker == JOB_WORKER], m[m.worker != JOB_WORKER]
    out = [Section("train_loss", side="left", chart="training.loss_figure", chart_input={"runs": {rid: job}}),
           Section("train_acc", side="right", chart="training.accuracy_figure", chart_input={"runs": {rid: job}}),
           Section("train_curves", kind="measured", caption=(
               "Loss of each step over the combined batch of all workers; test accuracy on the held-out set (samples "
               "never trained on) every "
               f"{tr['eval_every']} steps."))]
    if len(per):
        tot = run_totals(job, per)
        out.append(Section(
            "train_split", chart="training.time_split_figure",
            chart_input={"per_worker": per, "worker_labels": worker_labels(info, per.worker.unique())},
            kind="emulated" if tr["emulate"] else "measured",
            caption="Seconds per worker so far. Idle: how much earlier this worker was ready to communicate than the "
                    "slowest one. Hatched: emulated waits (device slower than this machine; modelled link times). "
                    + bytes_note(info),
            metrics=(("Wall time (s)", f"{tot['wall_s']:.2f}"),
                     ("Throughput (samples/s)",
                      "–" if tot["samples_per_s"] is None else f"{tot['samples_per_s']:,.0f}"),
                     (f"Sent by all workers (MB, {info.get('bytes_kind', 'measured')})", f"{tot['sent_mb']:.2f}"))))
    return out



class TrainingDesk(Desk):
    """The Training page's calls: queue a run or a comparison, stop a run, watch this session's runs."""

    def watch(self, runs_store, wanted: str | None, polled: bool, pending: bool) -> Watch:
        return watch(runs_store, self.jm, self.owner, wanted, polled, pending)


__all__ = ["TrainingDesk", "INTRO", "COMPARE_HELP", "NO_RUNS", "COMPRESSOR_NAMES", "compression_summary", "optimiser_summary", "TRAINING_FORM", "COMPRESSION_FORM",
           "IMPLEMENTATIONS", "compression_conflict", "device_boxes", "edited", "name_of", "comparison", "polling",
           "run_store", "Watch", "watch", "measured"]
