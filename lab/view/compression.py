"""The Compression page's model: the compressors on one real gradient, the sparse ring's fill-in across workers,
the Cholesky claim tested, and the preset grid of training runs with compression, read from the run store."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

from lab.compression import cholesky as chol
from lab.compression.study import evaluate, generated_gradients, real_gradients
from lab.jobs.grid import grid_results, grid_scenarios, grid_table, variant_label, where_each_wins
from lab.scenario.document import Compression, Scenario
from lab.scenario.names import COMPRESSOR_LABELS, SHARING_LABELS, Sharing
from lab.store.runs import ACTIVE, run_store
from lab.view.desk import Desk
from lab.view.section import Notice, Section
from lab.view.sharing import sharing_report
from lab.scenario.units import fmt_seconds

INTRO = (
    "The edge-compression design's **Group-TopK** keeps, in every group of *group size* consecutive gradient entries, "
    "the *ratio × group size* entries of largest magnitude, and shares the sparse result round a ring. Here it stands "
    "beside global Top-K (the k largest of the whole gradient), Random-K and FP16 on a real gradient, with every byte "
    "counted from the payload as it is really serialised (fp32 value + uint16 in-group offset: 6 B per kept entry for "
    "Group-TopK, 8 B with int32 indices for the others, plus a 24 B header). Error feedback, which adds what was not "
    "sent to the next gradient, is part of `lab.compression.compressors` and of the training job.")
COMPRESSORS_FORM = (("cp_source", "cp_model"), ("cp_n", "cp_batch"), ("cp_group", "cp_seed", "cp_ratios"))
RING_INTRO = (
    "Each worker cuts its sparse gradient into N blocks. In the reduce-scatter (hops a1 … a(N−1)) a block travels "
    "round the ring and every worker adds its own entries to it; the sum of sparse vectors has the union of their "
    "supports, so the block **fills in** as it goes. In the all-gather (b1 …) the finished blocks go round unchanged. "
    "The alternative the published compression systems use is to all-gather every worker's payload as it is and let "
    "each worker add them up.")
RING_FORM = (("ring_workers", ("ring_kind", 2), "ring_ratio"),)  # the compressor's name is long
CHOLESKY_INTRO = (
    "The CXL design proposes sending the factor L of a result matrix D = L Lᵀ instead of D, \"halving\" the traffic. "
    "L exists only for a symmetric positive-definite D, and it has n(n+1)/2 entries: exactly the lower triangle of a "
    "symmetric D, which can be sent with no factorisation at all.")
CHOLESKY_FORM = (("ch_matrix", "ch_by_class"), ("ch_damping", "ch_workers", "ch_batch"))
GRID_OPTIMIZERS = 3  # the CXL design's three optimisers, each run with every variant


def compressor_table(rows) -> list[dict]:
    """The compressors on one gradient (lab.compression.study.evaluate rows), units in the column names."""
    return [{"compressor": r["label"], "ratio": r["ratio"], "kept (entries)": r["kept"],
             "density (%)": 100 * r["density"], "relative error (%)": 100 * r["rel_error"], "bytes (B)": r["bytes"],
             "wire format": r["wire_format"], "time": fmt_seconds(r["t_compress"])} for r in rows]


def cholesky_applicability_table(a: Mapping) -> list[dict]:
    """Whether the Cholesky factor exists for worker 0's matrix: one row of its properties."""
    return [{"shape": "×".join(map(str, a["shape"])), "square": a["square"], "asymmetry ||D−Dᵀ||/||D||": a["asymmetry"],
             "symmetric": a["symmetric"], "smallest eigenvalue (matrix units)": a["min_eigenvalue"],
             "positive-definite": a["positive_definite"]}]


def cholesky_table(methods) -> list[dict]:
    """What each way of sending the matrix sends, and costs (lab.compression.cholesky.study's methods)."""
    return [{"sent": r["method"], "values (count)": r["values"], "bytes (B)": r["bytes"], "pack": fmt_seconds(r["t_pack"]),
             "unpack": fmt_seconds(r["t_unpack"]), "relative error": r["rel_error"]} for r in methods]


# Kept per input, so a rerun neither computes nor measures again (a study's times are measured once).
@lru_cache(maxsize=8)
def _gradients(source: str, model: str, n: int, workers: int, batch: int, seed: int) -> tuple:
    gs = real_gradients(model, workers, batch, seed) if source == "real" else generated_gradients(n, workers, seed)
    return tuple(gs)


def gradients(v: Mapping[str, Any], workers: int = 1) -> tuple:
    """The gradients the forms' values ``v`` ask for, one per worker."""
    return _gradients(v["cp_source"], v["cp_model"], int(v["cp_n"]), int(workers), int(v["cp_batch"]),
                      int(v["cp_seed"]))


@lru_cache(maxsize=8)
def _evaluate(source: str, model: str, n: int, batch: int, seed: int, group_size: int, ratios: tuple) -> list[dict]:
    return evaluate(_gradients(source, model, n, 1, batch, seed)[0], ratios=ratios, group_size=group_size, seed=seed)


@lru_cache(maxsize=8)
def _ring(source: str, model: str, n: int, workers: int, batch: int, seed: int, kind: str, ratio: float,
          group_size: int):
    return sharing_report(list(_gradients(source, model, n, workers, batch, seed)), kind, ratio, group_size, seed)


@lru_cache(maxsize=8)
def _cholesky(seed: int, batch: int, damping: float, workers: int, by_class: bool, name: str) -> dict:
    return chol.study(chol.example_matrices(seed, batch, damping, workers, by_class)[name])


def compressors(v: Mapping[str, Any]) -> list[Section]:
    """The compressors on one gradient for the form's values ``v``: error, time and bytes, and their table."""
    grad = gradients(v)[0]
    group, ratios = int(v["cp_group"]), tuple(sorted(v["cp_ratios"]))
    rows = _evaluate(v["cp_source"], v["cp_model"], int(v["cp_n"]), int(v["cp_batch"]), int(v["cp_seed"]), group,
                     ratios)
    skipped = sorted(set(ratios) - {r["ratio"] for r in rows if r["compressor"] == "group_topk"})
    return [
        Section("cp_gradient",
                intro=f"Gradient: **{grad.numel():,} entries** ({grad.numel() * 4 / 1e3:,.1f} kB as fp32).",
                notices=(Notice(f"Group-TopK skipped ratio(s) {skipped}: ratio × group size {group} rounds to k = 0.",
                                "warning"),) if skipped else ()),
        Section("cp_err", side="left", chart="compression.density_error_figure", chart_input={"rows": rows},
                kind="measured", caption="Relative error of the decompressed gradient against the original (L2 norms), "
                "computed on this gradient. Global Top-K is the best any k entries can do; Group-TopK pays for its "
                "per-group quota; Random-K ignores magnitudes."),
        Section("cp_time", side="right", chart="compression.time_figure", chart_input={"rows": rows},
                kind="measured", caption="Compression time on this machine (best of 3; the CPU is shared, so expect "
                "noise). bench/bench_compress.py times Group-TopK against global torch.topk on 25 M entries."),
        Section("cp_bytes", chart="compression.bytes_figure", chart_input={"rows": rows}, kind="measured",
                caption="Bytes of each payload, equal to the length of its real serialisation (tested)."),
        Section("cp", table=compressor_table(rows)),
    ]


def ring(v: Mapping[str, Any]) -> list[Section]:
    """The sparse ring simulated on the workers' gradients for the forms' values ``v`` (the gradient's and the
    ring's): each block's fill-in hop by hop, and the bytes each sharing method sends."""
    workers = int(v["ring_workers"])
    fill, hops, sharing = _ring(v["cp_source"], v["cp_model"], int(v["cp_n"]), workers, int(v["cp_batch"]),
                                int(v["cp_seed"]), v["ring_kind"], float(v["ring_ratio"]), int(v["cp_group"]))
    n = gradients(v, workers)[0].numel()
    return [
        Section("ring_fill", chart="compression.fill_in_figure", chart_input={"fill_rows": fill, "hop_rows": hops},
                kind="modelled", caption="Simulated in one process: the ring's own schedule code (lab.comm.sparse) run "
                f"for {workers} workers on these gradients (different digits batches, or generated with a shared "
                "part). The entries and bytes are exact counts; the tests check that real processes over gloo send "
                "exactly these bytes. Dotted: the sum of the workers' entries in the block (no overlap)."),
        Section("ring_bytes", chart="compression.sharing_bytes_figure", chart_input={"method_rows": sharing["methods"]},
                kind="modelled", caption="Bytes each worker sends per step, counted by the same simulation (8 B count "
                "before every message; ring pairs at 8 B, all-gather payloads in their own format). Dense: the lab's "
                "ring all-reduce of the decompressed fp32 tensor.",
                text=f"Each worker kept **{sharing['kept_per_worker'][0]:,}** entries; their sum has "
                     f"**{sharing['support']:,}** non-zero entries ({sharing['support'] / n:.2%} density)."),
    ]


def apply_ring(sc: Scenario, v: Mapping[str, Any]) -> tuple[Scenario, str]:
    """The Scenario with the ring's compressor and ratio and the gradient's group size, and the line that says so."""
    kind, ratio, group = v["ring_kind"], float(v["ring_ratio"]), int(v["cp_group"])
    c = Compression.from_dict({**sc.training.compression.to_dict(), "kind": kind, "ratio": ratio, "group_size": group})
    return (sc.replace(training=sc.training.replace(compression=c)),
            f"Scenario compression: {COMPRESSOR_LABELS[kind]}, ratio {ratio:g}, group size {group}.")


def cholesky(v: Mapping[str, Any]) -> list[Section]:
    """The Cholesky claim tested on the chosen matrix for the forms' values ``v``: whether the factor exists, and
    where it does what sending it costs and what adding the workers' factors gives."""
    ch = _cholesky(int(v["cp_seed"]), int(v["ch_batch"]), float(v["ch_damping"]), int(v["ch_workers"]),
                   bool(v["ch_by_class"]), v["ch_matrix"])
    out = [Section("ch_app", table=cholesky_applicability_table(ch["applicability"]), kind="measured",
                   caption="Properties of worker 0's matrix, computed.")]
    if "refusal" in ch:  # the lab's own words
        return out + [Section("ch_refusal", notices=(Notice(f"Not applicable: {ch['refusal']}", "info",
                                                            ":material/block:"),))]
    if "methods" not in ch:
        return out
    res, rr = ch["sum"], ch["ring"]
    return out + [
        Section("ch", chart="compression.cholesky_figure", chart_input={"rows": ch["methods"]}, kind="measured",
                caption="Bytes counted from the packed tensors; pack + unpack time on this machine, measured once for "
                        "these settings."),
        Section("ch_methods", table=cholesky_table(ch["methods"])),
        Section("ch_sum", chart="compression.factor_sum_figure", kind="measured", chart_input={
            "true_sum": ch["true_sum"], "factor_sum": ch["factor_sum"], "workers": ch["workers"]},
            caption=f"{ch['workers']} workers' matrices from different digits batches. Adding the factors gives "
                    f"(Σ L)(Σ L)ᵀ, off by **{res['rel_error_of_sum_of_factors']:.1%}** (the cross terms Lᵢ Lⱼᵀ); even "
                    f"rescaled by 1/N it is off by **{res['rel_error_of_sum_of_factors_rescaled']:.2%}** (zero only if "
                    "every worker had the same matrix: try non-IID). A ring must rebuild D, add and factorise again at "
                    f"every hop: {rr['hops']} factorisations, {fmt_seconds(rr['seconds'])} here, relative error "
                    f"{rr['rel_error']:.1e}."),
    ]


def grid_intro(comp: Compression) -> str:
    """What the grid of training runs runs, with the scenario's group size, sharing and PowerSGD settings."""
    sharing = comp.sharing if comp.sharing != Sharing.DENSE else Sharing.SPARSE_ALLGATHER
    return ("The current scenario trained for real (gradient all-reduce, the lab's ring) with the CXL design's three "
            "optimisers × the variants chosen below, one seed each, queued in turn. Group-TopK: group size "
            f"{comp.group_size}, shared by **{SHARING_LABELS[sharing]}**. Beside it, what anyone compressing gradients "
            f"in PyTorch tries first, torch's own DDP hooks: **PowerSGD** (rank {comp.rank}, after {comp.warmup} plain "
            "steps; set both on the Training page) sends each gradient matrix as two thin ones, and the **FP16** and "
            "**BF16** all-reduces send every entry in half precision. Their arithmetic runs on the lab's ring, checked "
            "against DDP with the hooks themselves. Bytes are counted from the real messages. Emulate the edge "
            "preset's 100 Mbit/s links (Training page) to see what links cost.")


def queue_label(variants) -> str:
    return f"Queue {GRID_OPTIMIZERS * len(variants)} runs"


def grid_runs(sc: Scenario, variants) -> list[tuple[Scenario, str]]:
    """The grid's runs: every optimiser × every chosen variant, one seed each."""
    return grid_scenarios(sc, variants)


def grid_active(ids) -> bool:
    """Whether a run of the grid ``ids`` is still queued or running (then its results are polled)."""
    return bool(ids) and bool(run_store().list_runs(statuses=ACTIVE).id.isin(ids).any())


def grid(ids, emulate: bool) -> tuple[list[Section], bool]:
    """The grid's results as the store has them (its finished runs' figure, where each variant wins, every run's
    row), and whether any of them is still queued or running."""
    rows = grid_results(run_store(), ids)
    done = [r for r in rows if r["status"] == "done"]
    out = []
    if done:
        out.append(Section("cp_grid", chart="compression.grid_figure", chart_input={"rows": done}))
        if wins := where_each_wins(rows):
            out.append(Section("cp_grid_wins", intro="**Where each one wins in these runs** (measured, one seed each, "
                               "averaged over the optimisers; the Compare page's repeats give the noise):",
                               text="\n".join(f"- {{w{i}}}" for i in range(len(wins))),
                               values={f"w{i}": w for i, w in enumerate(wins)}))
    if rows:
        out.append(Section("cp_grid_results", table=grid_table(rows), kind="emulated" if emulate else "measured",
                           caption="Measured in the runs (bytes from the real messages; times on this shared machine, "
                                   "emulated link waits included). Steps: count."))
    return out, any(r["status"] in ACTIVE for r in rows)


__all__ = ["Desk", "INTRO", "COMPRESSORS_FORM", "RING_INTRO", "RING_FORM", "CHOLESKY_INTRO", "CHOLESKY_FORM",
           "compressor_table", "cholesky_applicability_table", "cholesky_table", "gradients", "compressors", "ring",
           "apply_ring", "cholesky", "grid_intro", "queue_label", "grid_runs", "grid_active", "grid", "variant_label",
           "run_store"]
