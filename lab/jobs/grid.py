"""The Compression page's grid of training runs: three optimisers x the chosen variants (dense, Group-TopK 1 %,
+ error feedback by default; torch's PowerSGD, FP16 and BF16 hooks beside them), one seed each, and its results
read back from the run store."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from lab.errors import LabError
from lab.jobs.variants import comparison_scenarios
from lab.scenario.document import Compression, Scenario
from lab.scenario.names import COMPARED_OPTIMIZERS, COMPRESSOR_SHORT, TORCH_HOOKS, Sharing

GRID_VARIANTS = ("dense", "gtk", "gtk_ef", *TORCH_HOOKS)
GRID_DEFAULT = ("dense", "gtk", "gtk_ef")
GRID_RATIO = 0.01


def variant_label(variant: str, ratio: float = GRID_RATIO, rank: int | None = None) -> str:
    if variant == "powersgd":
        return "PowerSGD" + (f" rank {rank}" if rank is not None else "") + " (torch's hook)"
    if variant in TORCH_HOOKS:
        return f"{COMPRESSOR_SHORT[variant]} (torch's)"
    return {"dense": "dense (fp32 ring)", "gtk": f"Group-TopK {ratio:.0%}",
            "gtk_ef": f"Group-TopK {ratio:.0%} + error feedback"}[variant]


def _compression(variant: str, base: Compression, ratio: float, sharing: str) -> Compression:
    if variant == "dense":
        return Compression()
    if variant in TORCH_HOOKS:
        return Compression(kind=variant, rank=base.rank, warmup=base.warmup)
    return Compression(kind="group_topk", ratio=ratio, group_size=base.group_size, error_feedback=variant == "gtk_ef",
                       sharing=sharing)


def grid_scenarios(sc: Scenario, variants: Sequence[str] = GRID_DEFAULT, ratio: float = GRID_RATIO,
                   sharing: str | None = None) -> list[tuple[Scenario, str]]:
    """The grid's runs: the scenario's training settings with gradient all-reduce over the lab's ring (so dense
    bytes are counted too), each optimiser x each variant. Group-TopK uses the scenario's group size and sharing
    method (``sharing`` overrides; "dense" falls back to sparse all-gather, else the sparse variants would send as
    much as dense); PowerSGD the scenario's rank and warm-up."""
    unknown = [v for v in variants if v not in GRID_VARIANTS]
    if unknown or not variants:
        raise LabError(f"the grid runs some of {list(GRID_VARIANTS)} (got {list(variants)!r})", where="grid")
    base = sc.training.compression
    sharing = sharing or (base.sharing if base.sharing != Sharing.DENSE else Sharing.SPARSE_ALLGATHER)
    comps = [_compression(v, base, ratio, sharing) for v in dict.fromkeys(variants)]
    return comparison_scenarios(sc, comps, repeats=1, optimizers=COMPARED_OPTIMIZERS)


def variant_of(tr: dict) -> str:
    """The grid variant of a stored run's training settings (a dict)."""
    c = tr.get("compression", {})
    kind = c.get("kind", "none")
    if kind == "none":
        return "dense"
    if kind in TORCH_HOOKS:
        return kind
    return "gtk_ef" if c.get("error_feedback") else "gtk"


def where_each_wins(rows: list[dict]) -> list[str]:
    """Sentences on the finished runs of a grid (:func:`grid_results` rows): which variant, averaged over the
    optimisers, reached the highest final accuracy, sent the fewest bytes, took the shortest step, and was most
    accurate among those sending at most a tenth of dense's bytes. Measured, one seed: the page says so."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        if r["status"] == "done":
            by.setdefault(r["label"], []).append(r)
    if len(by) < 2:
        return []
    mean = {k: {m: sum(r[m] for r in rs) / len(rs) for m in ("final_test_acc", "bytes_per_worker_step", "s_per_step")}
            for k, rs in by.items()}
    best = max(mean, key=lambda k: mean[k]["final_test_acc"])
    fewest = min(mean, key=lambda k: mean[k]["bytes_per_worker_step"])
    fastest = min(mean, key=lambda k: mean[k]["s_per_step"])
    out = [f"Highest final test accuracy: {best} ({100 * mean[best]['final_test_acc']:.1f} %).",
           f"Fewest bytes per worker per step: {fewest} ({mean[fewest]['bytes_per_worker_step'] / 1e3:,.2f} kB).",
           f"Shortest step: {fastest} ({1e3 * mean[fastest]['s_per_step']:.1f} ms)."]
    dense = [r for r in rows if r["variant"] == "dense" and r["status"] == "done"]
    if dense:
        budget = 0.1 * sum(r["bytes_per_worker_step"] for r in dense) / len(dense)
        small = [k for k in mean if mean[k]["bytes_per_worker_step"] <= budget]
        if small:
            k = max(small, key=lambda k: mean[k]["final_test_acc"])
            out.append(f"Most accurate within a tenth of dense's bytes ({budget / 1e3:,.2f} kB): {k} "
                       f"({100 * mean[k]['final_test_acc']:.1f} %).")
    return out


def grid_table(rows: list[dict]) -> list[dict]:
    """The page's table of :func:`grid_results` rows, units in the column names."""
    return [{"optimiser": r["optimizer"], "variant": r["label"], "status": r["status"], "steps": r["steps"],
             "final test accuracy (%)": 100 * r["final_test_acc"], "time per step (ms)": 1e3 * r["s_per_step"],
             "sent per worker per step (kB)": r["bytes_per_worker_step"] / 1e3,
             "compression per step (ms)": 1e3 * r["t_compress_per_step"]} for r in rows]


def grid_results(store: Any, run_ids: Iterable[str]) -> list[dict]:
    """One row per run of the grid still in the store (units: SI; s = seconds, bytes)."""
    known = set(store.list_runs().id)
    ids = [r for r in run_ids if r in known]
    if not ids:
        return []
    s = store.summary(ids).set_index("id")
    rows = []
    for rid in ids:
        run = store.get_run(rid)
        tr = run["scenario"]["training"]
        r = s.loc[rid]
        steps = int(r.steps) or 1
        workers = int(tr.get("workers", 1))
        c = tr.get("compression", {})
        rows.append({"id": rid, "optimizer": tr["optimizer"], "variant": variant_of(tr),
                     "label": variant_label(variant_of(tr), c.get("ratio", GRID_RATIO), c.get("rank")),
                     "sharing": "ring" if c.get("kind", "none") in ("none", *TORCH_HOOKS) else c.get("sharing"),
                     "status": run["status"], "steps": int(r.steps), "final_test_acc": float(r.final_test_acc),
                     "wall_s": float(r.wall_s), "s_per_step": float(r.wall_s) / steps,
                     "bytes_per_worker_step": float(r.bytes_sent) / (workers * steps),
                     "t_compress_per_step": float(r.t_compress) / steps, "t_comm_per_step": float(r.t_comm) / steps})
    return rows
