"""A classroom on one server: N real browser-like sessions on the modelled pages while training
jobs from several sessions wait in the fair queue. Prints page response times (median, 95th
percentile) and the queue's behaviour.

Sessions are real: each one is a websocket to ``streamlit run app.py`` (the same
``/_stcore/stream`` protocol the browser speaks: BackMsg rerun requests in, ForwardMsg deltas out),
so the server does all the work it does for a browser (script runs, deltas, serialisation); only
the drawing in a browser is missing. A response time is from sending the rerun request of a page to
receiving its ``script_finished``. Each session cycles through Topology, Placement and All-reduce
and "thinks" between clicks (uniform, mean --think seconds; seeded). The peer, measured in the same
run on the same server: one session alone, no jobs. A second crowd phase on the Home page only
(almost no work of its own) separates Streamlit's own per-session cost from the pages' work.

The server runs with the app's .streamlit/config.toml: runner.postScriptGC = false (a full garbage
collection after every rerun took two thirds of the server's CPU per page view: py-spy on this bench;
with it on, p95 was 10.5 s at think 5 s, with it off 0.23 s, in consecutive runs); ``--post-script-gc`` turns it back on
for comparison. The server's resident memory is printed.

While each phase runs, a probe asks the server's health endpoint (``/_stcore/health``, what a load balancer or
a teacher's monitor asks) every half second: its median, p95 and worst answer per phase are printed. ``--caps
star`` (or chain, mesh) opens every session on the 256-device topology of the size caps, through the page link
(``?s=``) as a shared link would: the heaviest views a class can ask for.

Two crowd phases of the same sessions: an idle server, then the same while the bench's own JobManager
(capacity 1, as the app's) runs one student's long job and five other students queue a short job each, one
every few seconds. A short job's wait is from its submit to its start (the "scheduled" event); the class
queue lets it start beside the long one once that has run its slice (LAB_SLICE_S), so the aim is a wait
within 10 s plus the short job's own length. The last line:
``classroom: sessions <n>, page p95 <s> s, idle page p95 <s> s, worst short-job wait <s> s``.

    .venv/bin/python bench/bench_classroom.py [--sessions 10] [--duration 60] [--think 5] [--caps star] [--smoke]

``--smoke``: one session on one page, phases of a few seconds, a long and a short job of one worker and a
few steps each (the server without its own warm starter, so at most four processes run at once); it checks
the bench still runs and measures nothing.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import bench_parser, free_port, score, SMOKE_NOTE, start_app, table  # noqa: E402  (also puts the checkout on sys.path)

PAGES = ("topology", "placement", "allreduce")


def start_server(data: Path, port: int, post_script_gc: bool = False) -> subprocess.Popen:
    return start_app(data, port, "--runner.postScriptGC", str(post_script_gc).lower())


async def rerun(ws, page: str, query: str = "") -> float:
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    msg = BackMsg()
    msg.rerun_script.page_name = page
    msg.rerun_script.query_string = query
    t0 = time.perf_counter()
    await ws.send(msg.SerializeToString())
    while True:
        f = ForwardMsg()
        f.ParseFromString(await ws.recv())
        kind = f.WhichOneof("type")
        if kind == "page_not_found":
            raise SystemExit(f"page {page!r} not found")
        if kind == "script_finished":
            return time.perf_counter() - t0


async def session(url: str, k: int, until: float, think: float, out: list, seed: int,
                  pages: tuple = PAGES, query: str = "") -> None:
    import websockets

    rng = random.Random(seed * 1000 + k)
    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60,
                                  ping_interval=None) as ws:
        await rerun(ws, "", query)  # arrive on the home page, from the link when there is one (not counted)
        i = rng.randrange(len(pages))
        await asyncio.sleep(rng.uniform(0, think))  # students do not all click at once
        while time.monotonic() < until:
            page = pages[i % len(pages)]
            out.append((page, await rerun(ws, page)))
            i += 1
            await asyncio.sleep(rng.uniform(0.5, 1.5) * think)


def run_sessions(url: str, n: int, seconds: float, think: float, seed: int, pages: tuple = PAGES,
                 query: str = "") -> list:
    out: list = []
    until = time.monotonic() + seconds

    async def main():
        await asyncio.gather(*(session(url, k, until, think, out, seed, pages, query) for k in range(n)))

    asyncio.run(main())
    return out


class HealthProbe:
    """Asks ``base``/_stcore/health every ``every`` seconds in a thread while its ``with`` block runs; ``took``
    holds the seconds of each answer (a probe with no answer within 60 s counts as 60 s)."""

    def __init__(self, base: str, every: float = 0.5) -> None:
        import threading

        self.base, self.every, self.took = base, every, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import urllib.request

        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(self.base + "/_stcore/health", timeout=60) as r:
                    r.read()
                self.took.append(time.perf_counter() - t0)
            except OSError:
                self.took.append(60.0)
            self._stop.wait(self.every)

    def __enter__(self) -> "HealthProbe":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(70)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident memory of a process (MB, from /proc)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else float("nan")


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of each crowd phase (idle, then loaded)")
    ap.add_argument("--think", type=float, default=5.0, help="mean seconds between a session's clicks")
    ap.add_argument("--short", type=int, default=5, help="short jobs, one per student, while the long one runs")
    ap.add_argument("--short-steps", type=int, default=100)
    ap.add_argument("--slice", type=float, default=5.0, help="LAB_SLICE_S: seconds before a long job yields")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--job-cpus", default="", help="cores the jobs may use, e.g. 1 (default: every core)")
    ap.add_argument("--post-script-gc", action="store_true",
                    help="run the server with Streamlit's default runner.postScriptGC = true (the app turns it off)")
    ap.add_argument("--caps", choices=("", "star", "chain", "mesh"), default="",
                    help="open every session on this shape of the size caps' 256-device topology (by its link)")
    args = ap.parse_args()
    pages, workers, long_steps, alone_s = PAGES, 2, 20000, max(10.0, 2 * len(PAGES) * 1.0)
    if args.smoke:
        print(SMOKE_NOTE, flush=True)
        # The long job ends well within its slice, so the short one waits for it instead of running beside it.
        args.sessions, args.duration, args.think, args.short, args.short_steps, args.slice = 1, 2.0, 0.3, 1, 5, 120.0
        pages, workers, long_steps, alone_s = PAGES[:1], 1, 20, 3.0
    os.environ["LAB_SLICE_S"] = str(args.slice)

    from lab.jobs.manager import JobManager
    from lab.scenario.document import default_scenario
    from lab.train.launcher_record import processes_of

    query, where = "", "the default scenario's"
    if args.caps:
        from urllib.parse import urlencode

        from lab.testing import caps

        topo = caps.cap_topology(args.caps)
        query = urlencode({"s": default_scenario().replace(topology=topo).to_url_param()})
        where = f"the size caps' {args.caps} ({len(topo.device_names)} devices), opened by a link"

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        port = free_port()
        warm = os.environ.get("LAB_WARM")
        if args.smoke:  # the server's own warm starter would be a fifth process; the bench's job manager has one
            os.environ["LAB_WARM"] = "0"
        try:
            server = start_server(data, port, args.post_script_gc)
        finally:
            if args.smoke and warm is None:
                del os.environ["LAB_WARM"]
            elif args.smoke:
                os.environ["LAB_WARM"] = warm
        base, url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/_stcore/stream"
        jm = None
        try:
            for page in pages:  # first visit of each page in the server process (imports, caches)
                run_sessions_once(url, page, query)
            rss = {"warm": rss_mb(server.pid)}
            health = {}
            with HealthProbe(base) as probe:
                alone = run_sessions(url, 1, alone_s, 0.2, args.seed, pages, query)
            health["alone"] = probe.took
            load0 = os.getloadavg()[0]
            with HealthProbe(base) as probe:
                idle = run_sessions(url, args.sessions, args.duration, args.think, args.seed, pages, query)
            health["idle server"] = probe.took
            rss["idle"] = rss_mb(server.pid)
            os.environ["LAB_DB"] = str(data / "runs.db")
            os.environ["LAB_DATA"] = str(data)
            cpus = [int(c) for c in args.job_cpus.split(",") if c.strip()] or None
            jm = JobManager(data / "runs.db", capacity=1, cpus=cpus, slots_per_cpu=5 if cpus else None)
            sc = default_scenario()
            long_sc = sc.replace(training=sc.training.replace(workers=workers, steps=long_steps,
                                                              eval_every=min(1000, long_steps)))
            short_sc = sc.replace(training=sc.training.replace(workers=workers, steps=args.short_steps,
                                                               eval_every=args.short_steps))
            long_id = jm.submit(long_sc, "the long job", owner="student-0").run_id
            while jm.store.progress(long_id) == 0 and jm.store.status(long_id) in ("queued", "running"):
                time.sleep(0.2)
            shorts: list[tuple[str, float]] = []

            def submit_shorts():
                for k in range(args.short):
                    time.sleep(args.duration / (args.short + 1))
                    shorts.append((jm.submit(short_sc, f"short {k + 1}", owner=f"student-{k + 1}").run_id,
                                   time.time()))

            import threading

            t = threading.Thread(target=submit_shorts, daemon=True)
            t.start()
            with HealthProbe(base) as probe:
                loaded = run_sessions(url, args.sessions, args.duration, args.think, args.seed + 1, pages, query)
            health["with jobs"] = probe.took
            t.join()
            for rid, _ in shorts:
                jm.wait(rid, timeout=300)
            rss["loaded"] = rss_mb(server.pid)
            load1 = os.getloadavg()[0]
            waits = []
            for rid, _ in shorts:
                run = jm.store.get_run(rid)
                ev = jm.store.job_records.events(rid)
                sched = ev[ev.event == "scheduled"]
                waits.append((run["name"], run["status"], float(sched.detail.iloc[0]["queued_s"]) if len(sched)
                              else float("nan"), (run["end"] or float("nan")) - (run["start"] or float("nan"))))
            long_status = jm.store.status(long_id)
            yielded = bool(len((ev := jm.store.job_records.events(long_id))[ev.event == "yielded"]))
        finally:
            if jm is not None:
                jm.shutdown()
                if jm.launcher.starter is not None:  # the warm starter is this process's: it ends with the bench, reaped here
                    jm.launcher.starter.stop()
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        left = sum(len(processes_of(r)) for r in [long_id, *(r for r, _ in shorts)])

    print(f"classroom bench: {os.cpu_count()} cores, load average {load0:.1f} before the jobs and {load1:.1f} after "
          f"(other work on this machine included); real websocket sessions against `streamlit run`; "
          f"LAB_SLICE_S {args.slice:g}; topology: {where}")
    header = ["phase", "page", "reruns", "median s", "p95 s", "max s", "p95/idle"]
    if not args.smoke:
        print(f"{'phase':<30}{'page':<12}{'reruns':>8}{'median s':>10}{'p95 s':>8}{'max s':>8}{'p95/idle':>10}")
    rows = []
    iv, lv = [t for _, t in idle], [t for _, t in loaded]
    for name, runs, ref in (("alone (1 session, no jobs)", alone, None), (f"idle server ({args.sessions} sessions)", idle, iv),
                            (f"with jobs ({args.sessions} sessions)", loaded, iv)):
        for page in ("all", *pages):
            v = [t for p, t in runs if page == "all" or p == page]
            if not v:
                continue
            r = [t for p, t in (idle if ref is not None else alone) if page == "all" or p == page]
            if args.smoke:
                rows.append([name if page == "all" else "", page, len(v), f"{statistics.median(v):.3f}",
                             f"{pct(v, .95):.3f}", f"{max(v):.3f}", f"{pct(v, .95) / pct(r, .95):.2f}"])
                continue
            print(f"{name if page == 'all' else '':<30}{page:<12}{len(v):>8}{statistics.median(v):>10.3f}"
                  f"{pct(v, .95):>8.3f}{max(v):>8.3f}{pct(v, .95) / pct(r, .95):>10.2f}")
    if args.smoke:
        print(table(header, rows))
    print(f"server resident memory: {rss['warm']:.0f} MB warm, {rss['idle']:.0f} MB after the idle phase, "
          f"{rss['loaded']:.0f} MB after the loaded one (runner.postScriptGC {'on' if args.post_script_gc else 'off'})")
    if args.smoke:
        print()
        print(table(["short job (its own student)", "status", "waited s", "ran s", "wait - 10 s - ran"],
                    [[name, status, f"{wait:.2f}", f"{ran:.2f}", f"{wait - 10 - ran:.2f}"]
                     for name, status, wait, ran in waits]))
    else:
        print(f"\n{'short job (its own student)':<30}{'status':<10}{'waited s':>10}{'ran s':>8}{'wait - 10 s - ran':>20}")
        for name, status, wait, ran in waits:
            print(f"{name:<30}{status:<10}{wait:>10.2f}{ran:>8.2f}{wait - 10 - ran:>20.2f}")
    print(f"the long job ({long_sc.training.steps} steps, student 0) {'yielded' if yielded else 'never yielded'} and "
          f"was {long_status} when the bench stopped it; processes left after shutdown: {left}")
    print("\nthe health endpoint (/_stcore/health) asked every 0.5 s during each phase")
    print(table(["phase", "probes", "median s", "p95 s", "worst s"],
                [[name, len(v), f"{statistics.median(v):.3f}", f"{pct(v, .95):.3f}", f"{max(v):.3f}"]
                 for name, v in health.items() if v]))
    # A short job never scheduled has no wait: the worst wait is then unknown, not the worst of the others.
    unscheduled = [f"{name} ({status})" for name, status, wait, _ in waits if math.isnan(wait)]
    worst = float("nan") if unscheduled else max((w for _, _, w, _ in waits), default=float("nan"))
    if args.smoke:
        print(SMOKE_NOTE)
    score("classroom", [("sessions", args.sessions), ("page p95", pct(lv, .95), "s"),
                        ("idle page p95", pct(iv, .95), "s"), ("worst short-job wait", worst, "s"),
                        ("worst health answer", max(max(v, default=0) for v in health.values()), "s")],
          why_not={"page p95": "no page was opened while the jobs ran",
                   "idle page p95": "no page was opened on the idle server",
                   "worst short-job wait": ("never scheduled: " + "; ".join(unscheduled)) if unscheduled
                   else "no short job was queued"})


def run_sessions_once(url: str, page: str, query: str = "") -> None:
    async def once():
        import websockets

        async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60) as ws:
            await rerun(ws, page, query)

    asyncio.run(once())


if __name__ == "__main__":
    main()
