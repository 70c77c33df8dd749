"""How fast a job starts: through the job manager, forked from its warm starter, against the command
line, which starts a new Python for the launcher (cold), which loads torch once and forks its workers.
Then a 6-run comparison
(the three optimisers x dense and Group-TopK 1 % + error feedback, 200 steps, 2 workers, MLP on
digits) through the warm job manager, and the warm starter's resident memory. With ``--browser``,
the same as a person sees it: ``streamlit run app.py`` and headless Chromium clicking the Training
page's Run and "Compare optimisers × compression" buttons.

Then the small gloo groups the lab starts outside a job (the calibration's probes, the reference runs, the
tests' workers) through ``lab.comm.spawn.run_local``: 2 ranks that import the placement executor, join the
group and meet at a barrier, each rank forked from the fork server against each started in a fresh
interpreter (spawn), medians of ``--repeats`` groups after one that starts the server.

"First step" is the run store's ``running`` event (the first training step begins), from the
moment before the submit (warm) or before the command starts (cold); "done" is the job's end as
its caller sees it (the job manager's wait, the command's exit). Medians of ``--repeats`` runs.

    .venv/bin/python bench/bench_start.py [--browser] [--smoke]
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import bench_parser, free_port, ROOT, score, SMOKE_NOTE, start_app, stop_app, table  # noqa: E402  (also puts the checkout on sys.path)

from lab import settings  # noqa: E402
from lab.jobs import variants  # noqa: E402
from lab.scenario.names import COMPARED_OPTIMIZERS  # noqa: E402
from lab.jobs.guard import WINDOW_S  # noqa: E402
from lab.jobs.manager import JobManager  # noqa: E402
from lab.scenario.document import Compression, default_scenario  # noqa: E402
from lab.store.runs import RunStore, new_run_id  # noqa: E402
from lab.train.warm import rss_mb  # noqa: E402


def first_step_at(store: RunStore, rid: str) -> float:
    ev = store.job_records.events(rid)
    return float(ev[ev.event == "running"].t.iloc[0])


def warm_run(jm: JobManager, store: RunStore, sc) -> tuple[float, float]:
    t0 = time.time()
    job = jm.submit(sc, "bench warm")
    status = jm.wait(job.run_id, timeout=600)
    done = time.time() - t0
    if status != "done":
        raise SystemExit(f"warm run {job.run_id} {status}: {store.get_run(job.run_id)['error']}")
    return first_step_at(store, job.run_id) - t0, done


def cold_run(db: Path, store: RunStore, steps: int) -> tuple[float, float]:
    rid = new_run_id()
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "lab.train", "--workers", "2", "--steps", str(steps),
                           "--run-id", rid, "--quiet"], cwd=ROOT, env=settings.child_env(LAB_DB=str(db)),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    done = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"cold run failed: {proc.stderr[-2000:]}")
    return first_step_at(store, rid) - t0, done


def browser_runs(repeats: int, grid_steps: int) -> tuple[list[list], float]:
    """Click Run on the Training page of a running app ``repeats`` times (a 200-step, 2-worker job,
    the page open for a while as a student's would be) and the comparison button once; seconds from
    the click to the first step (the store's event), to the page showing one of the run's steps, and
    to the run's end."""
    from playwright.sync_api import sync_playwright

    data = Path(tempfile.mkdtemp(prefix="bench-start-app-"))
    server = start_app(data, free_port())
    store = RunStore(data / "runs.db")
    base = f"http://127.0.0.1:{server.args[server.args.index('--server.port') + 1]}"
    chromium = os.environ.get("LAB_CHROMIUM", "/usr/bin/chromium")
    try:
        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path=chromium, args=[
                "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                "--disable-background-networking", "--disable-component-update"])
            pg = b.new_context(viewport={"width": 1400, "height": 900}).new_page()
            pg.goto(base + "/training")
            pg.get_by_role("button", name="Run", exact=True).wait_for(timeout=60_000)
            box = pg.get_by_label("Steps (count)", exact=True).first
            box.fill("200")
            box.press("Enter")
            time.sleep(15)  # a student opens the page some time after the app started; the starter is loaded by then
            got, t0 = [], time.time()
            for k in range(repeats):
                if k:  # the same Run again within the guard's window is taken for a double click
                    time.sleep(max(0.0, WINDOW_S + 0.5 - (time.time() - t0)))
                before = set(store.list_runs().id)
                t0 = time.time()
                pg.get_by_role("button", name="Run", exact=True).click()
                shown = None
                rid = None
                while True:  # until the run ended and the page showed one of its steps
                    new = set(store.list_runs().id) - before
                    rid = next(iter(new)) if new else None
                    if rid and shown is None and pg.get_by_role("heading", name=f"Run {rid}").count() and \
                            pg.get_by_text(re.compile(r"(running|done): step [1-9]")).count():
                        shown = time.time() - t0
                    if rid and shown is not None and store.status(rid) not in ("queued", "running"):
                        break
                    if time.time() - t0 > 300:
                        raise SystemExit("a run from the browser did not end, or the page did not show it, within 300 s")
                    time.sleep(0.05)
                if store.status(rid) != "done":
                    raise SystemExit(f"browser run {rid} {store.status(rid)}: {store.get_run(rid)['error']}")
                done = float(store.get_run(rid)["end"] or time.time()) - t0
                got.append((first_step_at(store, rid) - t0, shown if shown is not None else float("nan"), done))
            rows = [["200 steps, 2 workers", "Run in the browser, warm",
                     f"{statistics.median(g[0] for g in got):.2f}", f"{statistics.median(g[1] for g in got):.2f}",
                     f"{statistics.median(g[2] for g in got):.2f}", repeats]]
            pg.get_by_label("Steps (count)", exact=True).first.fill(str(grid_steps))
            pg.get_by_label("Steps (count)", exact=True).first.press("Enter")
            pg.get_by_label("Repeats (seeds)", exact=True).first.fill("1")
            pg.get_by_label("Repeats (seeds)", exact=True).first.press("Enter")
            time.sleep(2)
            before = set(store.list_runs().id)
            t0 = time.time()
            pg.get_by_role("button", name="Compare optimisers × compression").click()
            while True:
                new = set(store.list_runs().id) - before
                if len(new) >= 6 and all(store.status(r) not in ("queued", "running") for r in new):
                    break
                if time.time() - t0 > 900:
                    raise SystemExit("the comparison from the browser did not end within 900 s")
                time.sleep(0.1)
            grid_s = max(float(store.get_run(r)["end"] or time.time()) for r in new) - t0
            bad = sorted({store.status(r) for r in new} - {"done"})
            if bad:
                raise SystemExit(f"comparison runs ended {bad}")
            b.close()
    finally:
        stop_app(server)
    return rows, grid_s


def _group_worker(rank: int, world: int, port: int) -> None:
    import torch.distributed as dist

    from lab.comm.spawn import init_worker
    from lab.train import placement_run  # noqa: F401  (what a reference run or a probe imports)

    init_worker(rank, world, port)
    dist.barrier()
    dist.destroy_process_group()


def group_times(repeats: int, warm_up: bool = True) -> list[list]:
    """Median seconds of a 2-rank run_local group, forked from the fork server and spawned, and the ratio.
    ``warm_up``: one group each way first, untimed (the fork server starts once per process)."""
    from lab.comm.spawn import run_local

    med = {}
    for how in ("forkserver", "spawn"):
        if warm_up:
            run_local(_group_worker, 2, start_method=how)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            run_local(_group_worker, 2, start_method=how)
            times.append(time.perf_counter() - t0)
        med[how] = statistics.median(times)
    return [["2 ranks, forked from the fork server", f"{med['forkserver']:.2f}", repeats],
            ["2 ranks, each a fresh interpreter (spawn)", f"{med['spawn']:.2f}", repeats],
            ["spawn / fork server", f"{med['spawn'] / med['forkserver']:.1f}x", ""]]


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--grid-steps", type=int, default=200)
    ap.add_argument("--browser", action="store_true", help="also click through a running app in Chromium")
    a = ap.parse_args()
    step_counts, optimizers = (1, 200), COMPARED_OPTIMIZERS
    if a.smoke:  # one 1-step job each way, and a comparison of one optimiser, compressed only
        a.repeats, a.grid_steps = 1, 1
        step_counts, optimizers = (1,), optimizers[:1]
        print(SMOKE_NOTE)

    db = Path(tempfile.mkdtemp(prefix="bench-start-")) / "runs.db"
    store = RunStore(db)
    jm = JobManager(str(db), capacity=1, warm=True)
    try:
        t0 = time.time()
        jm.launcher.warm_up()
        if not jm.launcher.starter.wait_ready(300):
            raise SystemExit("the warm starter did not get ready")
        ready_s = time.time() - t0
        base = default_scenario()
        rows, med = [], {}
        for steps in step_counts:
            sc = base.replace(training=base.training.replace(workers=2, steps=steps))
            for how in ("warm", "cold"):
                got = [warm_run(jm, store, sc) if how == "warm" else cold_run(db, store, steps)
                       for _ in range(a.repeats)]
                first = statistics.median(g[0] for g in got)
                done = statistics.median(g[1] for g in got)
                med[(how, steps)] = (first, done)
                rows.append([f"{steps} step{'s' if steps > 1 else ''}, 2 workers",
                             "job manager, warm starter" if how == "warm" else "command line, cold",
                             f"{first:.2f}", f"{done:.2f}", a.repeats])
        for steps in step_counts:
            (wf, wd), (cf, cd) = med[("warm", steps)], med[("cold", steps)]
            rows.append([f"{steps} step{'s' if steps > 1 else ''}: cold / warm", "ratio", f"{cf / wf:.1f}x",
                         f"{cd / wd:.1f}x", ""])
        print(f"median seconds from the click (or the command) to the first step and to the end; the starter "
              f"was ready {ready_s:.1f} s after it was started")
        print(table(["job", "started by", "first step (s)", "done (s)", "runs"], rows))

        sc = base.replace(training=base.training.replace(workers=2, steps=a.grid_steps, eval_every=10))
        gtk = Compression(kind="group_topk", ratio=0.01, group_size=1024, error_feedback=True,
                          sharing="sparse_allgather")
        # The smoke run queues the compressed run only: the comparison's path, at one run.
        items = variants.comparison_scenarios(sc, [gtk] if a.smoke else [Compression(), gtk], repeats=1,
                                              optimizers=optimizers)
        t0 = time.time()
        jobs = jm.submit_many(items, owner="bench")
        statuses = [jm.wait(j.run_id, timeout=3600) for j in jobs]
        grid_s = time.time() - t0
        print(f"\n{len(jobs)}-run comparison ({len(optimizers)} optimisers x {'' if a.smoke else 'dense / '}Group-TopK 1 % + EF, "
              f"{a.grid_steps} steps, 2 workers, MLP on digits) through the warm job manager: {grid_s:.1f} s, "
              f"statuses {sorted(set(statuses))}")

        mem = rss_mb(jm.launcher.starter.pid)
        jm.shutdown()
        print("\nmedian seconds of a gloo group started by run_local (start, join, barrier, end)")
        groups = group_times(1, warm_up=False) if a.smoke else group_times(max(3, a.repeats))
        print(table(["group", "seconds", "groups"], groups))
        if a.browser:
            rows, bgrid = browser_runs(a.repeats, a.grid_steps)
            print("\nmedian seconds from the click in Chromium on a running app (streamlit run app.py)")
            print(table(["job", "started by", "first step (s)", "page shows a step (s)", "done (s)", "runs"], rows))
            print(f"6-run comparison from one click on 'Compare optimisers × compression' (1 repeat, {a.grid_steps} "
                  f"steps): all done {bgrid:.1f} s after the click")
        print(f"warm starter: pid {jm.launcher.starter.pid}, resident {mem:.0f} MB (bound {jm.launcher.starter.max_mb:.0f} MB), "
              f"restarts {jm.launcher.starter.restarts}")
        score("start", [("warm first step", med[("warm", 1)][0], "s"), ("cold first step", med[("cold", 1)][0], "s"),
                        ("grid runs", len(jobs)), ("grid all done", grid_s, "s", 1), ("starter", mem, "MB", 0)])
    finally:
        jm.shutdown()
        jm.launcher.starter.stop()  # the warm starter is the process's: it outlives the manager


if __name__ == "__main__":
    main()
