"""Soak: fifty short training jobs one after another through one JobManager (the app's process
role), with the Jobs page's views (overview, slot timeline, log tails) read after each, as a polling
page would. Prints, at intervals, what the manager's process holds: resident memory, open file
descriptors, threads, child processes, and processes of any job still alive; and the launchers'
temporary folders left behind. The comparison is within the run: the last ten jobs against jobs
11-20 (after warm-up: imports and caches).

    .venv/bin/python bench/bench_soak.py [--jobs 50] [--smoke]
"""

from __future__ import annotations

import gc
import glob
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import bench_parser, score, SMOKE_NOTE, table  # noqa: E402


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def children() -> int:
    me = str(os.getpid())
    n = 0
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "stat").read_text().rsplit(")", 1)[1].split()[1] == me:
                    n += 1
            except (OSError, IndexError):
                pass
    return n


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    if args.smoke:  # two jobs: the second runs through a manager that has already run one
        args.jobs, args.steps = 2, 1

    from lab.jobs import manager as jobs_mod
    from lab.view import jobs as job_views
    from lab.scenario.document import default_scenario
    from lab.train.launcher_record import processes_of

    tmp_before = set(glob.glob(os.path.join(tempfile.gettempdir(), "lab-job-*")))
    rows, ids = [], []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LAB_DB"] = str(Path(tmp) / "runs.db")
        os.environ["LAB_DATA"] = tmp
        jm = jobs_mod.JobManager(Path(tmp) / "runs.db", capacity=1)
        sc = default_scenario()
        sc = sc.replace(training=sc.training.replace(workers=1, steps=args.steps, eval_every=args.steps))
        t0 = time.time()
        try:
            for k in range(1, args.jobs + 1):
                rid = jm.submit(sc, f"soak {k}", owner=f"s{k % 5}").run_id
                ids.append(rid)
                status = jm.wait(rid, timeout=300)
                if status != "done":
                    raise SystemExit(f"job {k} ended {status}: {jm.store.get_run(rid)['error']}")
                job_views.overview(jm.store, jm, owner="s0")
                job_views.slot_timeline(jm.store, ids[-20:])
                job_views.log_tails(jm, rid)
                gc.collect()
                rows.append({"job": k, "t": time.time() - t0, "rss": rss_mb(), "fds": fds(), "threads": threads(),
                             "children": children(), "left": sum(len(processes_of(r)) for r in ids)})
        finally:
            jm.shutdown()
            if jm.launcher.starter is not None:  # the warm starter is the process's: it outlives the manager
                jm.launcher.starter.stop()
    tmp_left = {d for d in set(glob.glob(os.path.join(tempfile.gettempdir(), "lab-job-*"))) - tmp_before
                if any(f"lab-job-{r}-" in d for r in ids)}  # only this run's launchers

    if args.smoke:
        print(SMOKE_NOTE)
    print(f"soak: {args.jobs} jobs (1 worker, {args.steps} steps, MLP) one after another through one JobManager; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    marks = sorted({1, 5, 10, 20, 30, 40, args.jobs} & set(range(1, args.jobs + 1)))
    print(table(["after job", "time s", "RSS MB", "open fds", "threads", "children", "job processes alive"],
                [[r["job"], f"{r['t']:.1f}", f"{r['rss']:.1f}", r["fds"], r["threads"], r["children"], r["left"]]
                 for r in rows if r["job"] in marks]))
    growth = []  # resident memory of the last ten jobs over jobs 11-20: only a run of 20 jobs or more has both
    if len(rows) >= 20:
        early = [r for r in rows if 11 <= r["job"] <= 20]
        late = rows[-10:]
        for key, unit in (("rss", "MB"), ("fds", ""), ("threads", "")):
            a, b = statistics.mean(r[key] for r in early), statistics.mean(r[key] for r in late)
            print(f"{key:>10}: jobs 11-20 mean {a:.1f}{unit}, last 10 mean {b:.1f}{unit}, ratio {b / a:.3f}")
            if key == "rss":
                growth = [("rss growth", b / a, "x", 3)]
    print(f"max open fds {max(r['fds'] for r in rows)}, max threads {max(r['threads'] for r in rows)}, "
          f"max job processes alive after a job {max(r['left'] for r in rows)}, launcher temp folders left "
          f"{len(tmp_left)}")
    score("soak", [("jobs", args.jobs), *growth, ("max open fds", max(r["fds"] for r in rows)),
                   ("max threads", max(r["threads"] for r in rows)),
                   ("max job processes alive", max(r["left"] for r in rows)),
                   ("launcher temp folders left", len(tmp_left))])


if __name__ == "__main__":
    main()
