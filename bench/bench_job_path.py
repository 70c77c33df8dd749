"""The path of one job from Run to its first optimiser step, measured: every Python process of the
job (the app's job manager, the warm starter, the launcher, each rank) runs with a profile hook
(bench/tracing/sitecustomize.py) that records each function of ``lab/`` it calls; this script
submits one 2-worker run through the job manager as the Training page's Run does and counts, over
all processes, from the submit to the first optimiser step of the first rank that reaches it:

* files of ``lab/`` whose functions were called, and the functions (each counted once per process),
* scenario serialisations (``to_json``/``to_dict``) and parses (``from_json``/``from_dict``),
  ``preflight`` and ``job_layout`` calls, argv parses.

The page itself adds two files (the Training page and its ``ui`` helper) that are not traced here.

    .venv/bin/python bench/bench_job_path.py [--cold] [--list] [--smoke]

``--smoke``: the same traced path for a one-worker run of two steps, its folder removed after; it checks the
bench still runs and measures nothing.
"""

from __future__ import annotations

import collections
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import bench_parser, ROOT, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)

TRACE_DIR = ROOT / "bench" / "tracing"


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--cold", action="store_true", help="without the warm starter")
    ap.add_argument("--list", action="store_true", help="print every file and function on the path")
    args = ap.parse_args()
    if args.smoke:
        print(SMOKE_NOTE, flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="lab-jobpath-"))
    try:
        counted = trace(args, tmp)
    finally:
        if args.smoke:  # the real bench leaves its trace and run store for a closer look
            shutil.rmtree(tmp, ignore_errors=True)
    if args.smoke:
        print(SMOKE_NOTE)
    score("job path", counted)


def trace(args, tmp: Path) -> list[tuple]:
    """Runs the traced job and prints what its path crossed; returns the counts for the last line."""
    out = tmp / "trace.tsv"
    os.environ.update(JOBPATH_TRACE=str(out), JOBPATH_ROOT=str(ROOT), LAB_DB=str(tmp / "runs.db"),
                      LAB_DATA=str(tmp), PYTHONPATH=os.pathsep.join([str(TRACE_DIR), str(ROOT)]))
    sys.path.insert(0, str(TRACE_DIR))
    import sitecustomize  # noqa: F401  (this process is traced too: the job manager's side)

    from lab.jobs.manager import JobManager
    from lab.scenario.document import default_scenario
    from lab.store.runs import RunStore

    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(workers=1, steps=2) if args.smoke
                    else sc.training.replace(workers=2, steps=3))
    jm = JobManager(tmp / "runs.db", warm=not args.cold)
    try:  # the job manager ends its starter's job, also when the starter or the job fails here
        if not args.cold:
            jm.launcher.warm_up()
            if not jm.launcher.starter.wait_ready(180):
                raise SystemExit("the warm starter did not start")
        time.sleep(0.5)
        t0 = time.time()
        job = jm.submit(sc, "job path")
        status = jm.wait(job.run_id, timeout=300)
    finally:
        sys.setprofile(None)
        jm.shutdown()
        if jm.launcher.starter is not None:  # the warm starter is this process's: it ends with the bench, reaped here
            jm.launcher.starter.stop()
    if status != "done":
        raise SystemExit(f"run {job.run_id} {status}: {RunStore(tmp / 'runs.db').get_run(job.run_id)['error']}")
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    rows = [(int(p), float(t), f, q) for p, t, f, q in rows if float(t) >= t0]
    first_step = min(t for p, t, f, q in rows if f == "lab/optim/optimizers.py" and q.endswith(".step"))
    path = [r for r in rows if r[1] <= first_step]
    files = sorted({f for _, _, f, _ in path if f != "lab/argparse"})
    calls = {(p, f, q) for p, _, f, q in path if f != "lab/argparse"}
    # only the Scenario's own (de)serialisation: its parts' to_dict/from_dict are inside those calls
    counts = collections.Counter(q.rsplit(".", 1)[-1] for _, _, _, q in path
                                 if q.startswith("Scenario.") or "." not in q or q.endswith(".parse_args"))
    procs = len({p for p, *_ in path})
    if args.list:
        by_file = collections.defaultdict(set)
        for _, _, f, q in path:
            by_file[f].add(q)
        for f in files:
            print(f, ", ".join(sorted(by_file[f])))
    ser = counts["to_json"] + counts["to_dict"]
    parse = counts["from_json"] + counts["from_dict"]
    print(table(["measure", "value"], [
        ["start", "cold" if args.cold else "warm"], ["processes traced", procs], ["files of lab/", len(files)],
        ["functions called", len(calls)], ["scenario written (to_json/to_dict)", ser],
        ["scenario read (from_json/from_dict)", parse], ["preflight", counts["preflight"]],
        ["job_layout", counts["job_layout"]], ["argv parses", counts["parse_args"]]]))
    return [("files", len(files)), ("functions", len(calls)), ("scenario written", ser), ("read", parse),
            ("preflight", counts["preflight"]), ("job_layout", counts["job_layout"]),
            ("argv parses", counts["parse_args"])]


if __name__ == "__main__":
    main()
