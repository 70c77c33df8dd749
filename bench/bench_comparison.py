"""One real comparison: the three optimisers x {dense, Group-TopK 1 % + error feedback}, each with
several seeds, MLP on digits with 2 workers, queued through the job manager as the Training page
does; prints the summary by variant and the verdicts (lab.jobs.comparison), and the wall time.

    .venv/bin/python bench/bench_comparison.py --steps 200 --repeats 3 [--smoke]

``--smoke``: Adam alone, dense and Group-TopK, one seed of a few steps each, in a temporary run store that
is removed after; it checks the bench still runs and measures nothing.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.jobs import comparison  # noqa: E402
from lab.jobs import variants  # noqa: E402
from lab.scenario.names import COMPARED_OPTIMIZERS  # noqa: E402
from lab.jobs.manager import JobManager  # noqa: E402
from lab.scenario.document import Compression, default_scenario  # noqa: E402
from lab.store.runs import RunStore  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from common import bench_parser, score, SMOKE_NOTE, table as text_table  # noqa: E402



def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--db", default=None, help="run store (default: a fresh temporary one)")
    a = ap.parse_args()
    optimizers = COMPARED_OPTIMIZERS
    if a.smoke:
        a.steps, a.repeats, a.db = 5, 1, None
        optimizers = COMPARED_OPTIMIZERS[:1]
        print(SMOKE_NOTE, flush=True)

    folder = None if a.db else Path(tempfile.mkdtemp(prefix="bench-cmp-"))
    db = Path(a.db) if a.db else folder / "runs.db"
    try:
        run(a, db, optimizers)
    finally:
        if a.smoke:  # the real bench keeps its run store and names it
            shutil.rmtree(folder, ignore_errors=True)


def run(a, db: Path, optimizers) -> None:
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(workers=a.workers, steps=a.steps, eval_every=min(10, a.steps)))
    gtk = Compression(kind="group_topk", ratio=0.01, group_size=1024, error_feedback=True, sharing="sparse_allgather")
    items = variants.comparison_scenarios(sc, [Compression(), gtk], repeats=a.repeats, optimizers=optimizers)
    jm = JobManager(str(db), capacity=1)
    try:  # the job manager ends its starter and any job still running, also on an error here
        t0 = time.perf_counter()
        jobs = jm.submit_many(items, owner="bench")
        for j in jobs:
            jm.wait(j.run_id, timeout=3600)
        wall = time.perf_counter() - t0
    finally:
        jm.shutdown()
        if jm.launcher.starter is not None:  # the warm starter is this process's: it ends with the bench, reaped here
            jm.launcher.starter.stop()
    store = RunStore(db)
    ids = [j.run_id for j in jobs]
    statuses = {store.status(r) for r in ids}
    cmp = comparison.compare_runs(store, ids, target=a.target)
    table = cmp.table()
    print(f"{len(ids)} runs ({a.repeats} seeds x {len(items) // a.repeats} variants), {a.steps} steps, "
          f"{a.workers} workers, MLP on digits; statuses {sorted(statuses)}; wall {wall:.0f} s; store {db}")
    if a.smoke:
        print(text_table([str(c) for c in table.columns], table.values.tolist()))
    else:
        print(table.to_markdown(index=False) if hasattr(table, "to_markdown") else table.to_string(index=False))
    for v in cmp.verdicts:
        print(f"- {v['variant']} vs {v['against']}: {v['accuracy difference (points)']} points; {v['verdict']}")
    if a.smoke:
        print(SMOKE_NOTE)
    # Each variant's mean final accuracy against the best variant's: a run that did not finish leaves it no number.
    unfinished = sorted(statuses - {"done"})
    score("comparison", [("runs", len(ids)), ("done", sum(store.status(r) == "done" for r in ids)),
                         ("wall", wall, "s", 0),
                         *((f"{v['variant']} vs {v['against']}", float(v["accuracy difference (points)"]), "points")
                           for v in cmp.verdicts)],
          why_not=f"runs ended {', '.join(unfinished)}" if unfinished else None)


if __name__ == "__main__":
    main()
