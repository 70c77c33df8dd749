"""The Compression page's preset grid: three optimisers x (dense, Group-TopK 1 %, + error feedback),
one seed each, and its results read back from the run store."""
from __future__ import annotations

from typing import Any, Iterable

from lab.jobs.comparison import comparison_scenarios
from lab.scenario.document import Compression, Scenario
from lab.scenario.names import COMPARED_OPTIMIZERS, Sharing

GRID_VARIANTS = ("dense", "gtk", "gtk_ef")
GRID_RATIO = 0.01


def variant_label(variant: str, ratio: float = GRID_RATIO) -> str:
    return {"dense": "dense (fp32 ring)", "gtk": f"Group-TopK {ratio:.0%}",
            "gtk_ef": f"Group-TopK {ratio:.0%} + error feedback"}[variant]


def grid_scenarios(sc: Scenario, ratio: float = GRID_RATIO, sharing: str | None = None) -> list[tuple[Scenario, str]]:
    """The 9 runs of the grid: the scenario's training settings with gradient all-reduce over the
    lab's ring (so dense bytes are counted too), each optimiser x each variant. Group-TopK uses the
    scenario's group size and sharing method (``sharing`` overrides; "dense" falls back to
    sparse all-gather, else the sparse variants would send as much as dense)."""
    base = sc.training.compression
    sharing = sharing or (base.sharing if base.sharing != Sharing.DENSE else Sharing.SPARSE_ALLGATHER)
    comps = [Compression() if v == "dense" else Compression(
        kind="group_topk", ratio=ratio, group_size=base.group_size, error_feedback=v == "gtk_ef", sharing=sharing)
        for v in GRID_VARIANTS]
    return comparison_scenarios(sc, comps, repeats=1, optimizers=COMPARED_OPTIMIZERS)


def variant_of(tr: dict) -> str:
    """The grid variant of a stored run's training settings (a dict)."""
    c = tr.get("compression", {})
    if c.get("kind", "none") == "none":
        return "dense"
    return "gtk_ef" if c.get("error_feedback") else "gtk"


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
                     "label": variant_label(variant_of(tr), c.get("ratio", GRID_RATIO)),
                     "sharing": "ring" if c.get("kind", "none") == "none" else c.get("sharing"),
                     "status": run["status"], "steps": int(r.steps), "final_test_acc": float(r.final_test_acc),
                     "wall_s": float(r.wall_s), "s_per_step": float(r.wall_s) / steps,
                     "bytes_per_worker_step": float(r.bytes_sent) / (workers * steps),
                     "t_compress_per_step": float(r.t_compress) / steps, "t_comm_per_step": float(r.t_comm) / steps})
    return rows
