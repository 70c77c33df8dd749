"""One stored training run as the Training page shows it (its workers, totals, progress line, which run it
follows), and the stored runs a picker offers on the Training, Compare, Fidelity and Placement pages."""
from __future__ import annotations

from typing import Iterable

from lab.scenario.names import OPTIMIZER_LABELS, OPTIMIZER_SHORT
from lab.store.runs import RunStore
from lab.view.jobs.progress import start_phase


def worker_labels(info: dict, workers: Iterable[int]) -> dict[int, str]:
    """worker -> "worker 1 (gpu)" from a run's info (the devices its workers stood for), and the
    parameter server's rank named as such."""
    devs = info.get("devices") or []
    labels = {int(w): f"worker {int(w)}" + (f" ({devs[int(w)]})" if int(w) < len(devs) else "") for w in workers}
    if info.get("server_rank") is not None:
        labels[info["server_rank"]] = "parameter server"
    return labels


def run_totals(job, per_worker) -> dict:
    """A run's wall time so far (s), its throughput over its last 20 measured steps (samples/s, None
    before any) and the megabytes all workers sent, from the run store's job and worker metrics."""
    thr = job.samples_per_s.dropna()
    return {"wall_s": float(job.wall.max()), "samples_per_s": float(thr.tail(20).mean()) if len(thr) else None,
            "sent_mb": float(per_worker.bytes_sent.sum() / 1e6)}


def run_to_watch(runs, wanted: str | None) -> str:
    """The run the Training page follows: the one asked for while it is in ``runs`` (this session's,
    newest first), else the newest running one, else the newest."""
    if wanted in set(runs.id):
        return wanted
    running = runs[runs.status == "running"]
    return (running if len(running) else runs).id.iloc[0]


def progress_line(store: RunStore, run: dict, queue_position: int | None = None) -> str:
    """The Training page's progress line for a stored run: its status and where it is (queued behind
    N, starting workers, step k of N), its optimiser, workers and sync mode, and whether it emulates."""
    tr = run["scenario"]["training"]
    return (f"{run['status']}: {start_phase(store, run['id'], queue_position)} · "
            f"{OPTIMIZER_LABELS.get(tr['optimizer'])}, {tr['workers']} worker{'' if tr['workers'] == 1 else 's'}, "
            f"{tr['sync']}"
            + (" · emulated devices and links" if tr["emulate"] else " · plain local processes"))


def default_device(names: list[str], chosen: list[str], i: int) -> int:
    """Which of the topology's ``names`` worker ``i`` stands for by default: the one chosen before
    while the topology still has it, else a GPU, else the first device (an index into ``names``)."""
    if i < len(chosen) and chosen[i] in names:
        return names.index(chosen[i])
    return names.index("gpu") if "gpu" in names else 0


def compression_conflict(training) -> str:
    """Why the training settings cannot compress ("" when they can): compression needs the
    gradient all-reduce sync mode."""
    if training.compression.kind != "none" and training.sync != "allreduce":
        return ("Compression works with the sync mode gradient all-reduce only: set Compressor to none or "
                "Sync mode to gradient all-reduce.")
    return ""


def bytes_note(info: dict) -> str:
    """Where a run's byte counts come from, for the caption under its time split."""
    kind = info.get("bytes_kind", "measured")
    how = ("counted by the lab ring / parameter server" if info.get("bytes_kind") == "measured"
           else "what a ring all-reduce sends; gloo does not count")
    return f"Bytes are {kind} ({how})."


def run_label(r, owner: str | None = None) -> str:
    """How a picker names a stored run: its name, its optimiser where the name does not say it, its id, and whose
    it is when it is not ``owner``'s. Not its status: Streamlit keeps a select box's choice as its label, so a label
    that changed while the run went from queued to done would drop the choice (and a link taken meanwhile would
    carry the old label); the page beside the picker says the status."""
    named = OPTIMIZER_SHORT.get(r.optimizer, "?") in str(r.name)  # names from a comparison say it
    opt = "" if named else f" · {OPTIMIZER_LABELS.get(r.optimizer, r.optimizer)}"
    whose = "" if owner is None or r.owner == owner else (
        " · command line" if r.owner is None else " · another session's (read-only)")
    return f"{r.name}{opt} · {r.id}{whose}"


def run_picker(store: RunStore, owner: str | None, everyone: bool = False, keep: Iterable[str] = (),
               statuses: Iterable[str] | None = None):
    """The stored runs a picker offers (newest first) and their labels: ``owner``'s own, the whole
    class's with ``everyone`` (to read), and the runs in ``keep`` whoever's they are (a link names
    them, so the view it reproduces stays whole)."""
    runs = store.list_runs(statuses=statuses)
    keep = set(keep)
    if owner is not None and not everyone:
        runs = runs[(runs.owner == owner) | runs.id.isin(keep)]
    return runs, {r.id: run_label(r, owner) for r in runs.itertuples()}


#: Which code a run executes: the Training page says it, so a wall-time comparison compares what it names.
IMPLEMENTATIONS = ("Which code runs: the optimisers are the lab's own Adam, AdaBelief and Max-AdaBelief, each one "
                   "multi-tensor update over all parameters (`torch._foreach_*` operations, as torch's foreach Adam), "
                   "checked step by step against `torch.optim.Adam` and adabelief-pytorch. With *Fused optimiser* on, the "
                   "same maths is one pass over each parameter, compiled by `torch.compile` at the first step (as "
                   "torch's fused Adam is one hand-written pass), within float32 rounding of the multi-tensor "
                   "results (tested), not bit for bit. Group-TopK, top-k, random-k and FP16 are the lab's own "
                   "compressors, their payloads sent by the lab's ring or all-gather; PowerSGD and the FP16 and BF16 "
                   "all-reduces are the arithmetic of torch's DDP hooks (`powerSGD_hook`, `fp16_compress_hook`, "
                   "`bf16_compress_hook`) on the lab's ring, checked against DDP with those hooks. The "
                   "`bench_optim` row of docs/measurements.md gives the optimisers' time per step beside torch's Adam in its three forms.")

__all__ = ["IMPLEMENTATIONS", "bytes_note", "compression_conflict", "default_device", "progress_line", "run_label",
           "run_picker", "run_to_watch", "run_totals", "worker_labels"]
