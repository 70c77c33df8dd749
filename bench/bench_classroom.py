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

Meanwhile the bench's own JobManager (capacity 1, as the app's) gets --jobs short training jobs
from --owners sessions; they must run one at a time, in round-robin order of owners.

    .venv/bin/python bench/bench_classroom.py [--sessions 30] [--duration 60] [--think 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import start_app  # noqa: E402  (also puts the checkout on sys.path)

PAGES = ("topology", "placement", "allreduce")


def start_server(data: Path, port: int, post_script_gc: bool = False) -> subprocess.Popen:
    return start_app(data, port, "--runner.postScriptGC", str(post_script_gc).lower())


async def rerun(ws, page: str) -> float:
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    msg = BackMsg()
    msg.rerun_script.page_name = page
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
                  pages: tuple = PAGES) -> None:
    import websockets

    rng = random.Random(seed * 1000 + k)
    async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60,
                                  ping_interval=None) as ws:
        await rerun(ws, "")  # arrive on the home page (not counted)
        i = rng.randrange(len(pages))
        await asyncio.sleep(rng.uniform(0, think))  # students do not all click at once
        while time.monotonic() < until:
            page = pages[i % len(pages)]
            out.append((page, await rerun(ws, page)))
            i += 1
            await asyncio.sleep(rng.uniform(0.5, 1.5) * think)


def run_sessions(url: str, n: int, seconds: float, think: float, seed: int, pages: tuple = PAGES) -> list:
    out: list = []
    until = time.monotonic() + seconds

    async def main():
        await asyncio.gather(*(session(url, k, until, think, out, seed, pages) for k in range(n)))

    asyncio.run(main())
    return out


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
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--duration", type=float, default=60.0,
                    help="seconds of the classroom phase (the Home-only phase lasts half as long)")
    ap.add_argument("--think", type=float, default=5.0, help="mean seconds between a session's clicks")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--owners", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--post-script-gc", action="store_true",
                    help="run the server with Streamlit's default runner.postScriptGC = true (the app turns it off)")
    args = ap.parse_args()

    from lab.jobs.manager import JobManager
    from lab.scenario.document import default_scenario
    from lab.train.launcher import free_port, processes_of

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        port = free_port()
        server = start_server(data, port, args.post_script_gc)
        url = f"ws://127.0.0.1:{port}/_stcore/stream"
        jm = None
        try:
            for page in PAGES:  # first visit of each page in the server process (imports, caches)
                run_sessions_once(url, page)
            cpu = {}
            rss = {"warm": rss_mb(server.pid)}
            c0 = cpu_seconds(server.pid)
            alone = run_sessions(url, 1, max(10.0, 2 * len(PAGES) * 1.0), 0.2, args.seed)
            cpu["alone"] = cpu_seconds(server.pid) - c0
            load0 = os.getloadavg()[0]
            os.environ["LAB_DB"] = str(data / "runs.db")
            os.environ["LAB_DATA"] = str(data)
            jm = JobManager(data / "runs.db", capacity=1)
            sc = default_scenario()
            sc = sc.replace(training=sc.training.replace(workers=2, steps=300, eval_every=50))
            # one greedy session queues several jobs first; the others one each: the fair queue
            # must not make them wait behind all of the greedy one's
            greedy = max(1, args.jobs - (args.owners - 1))
            ids = [j.run_id for j in jm.submit_many([(sc, f"o0-{k}") for k in range(greedy)], owner="o0")]
            ids += [jm.submit(sc, f"o{o}", owner=f"o{o}").run_id for o in range(1, args.owners)]
            peak = {"running": 0}

            def watch():
                while not stop_watch:
                    peak["running"] = max(peak["running"], len(jm.running()))
                    time.sleep(0.05)

            import threading

            stop_watch = False
            w = threading.Thread(target=watch, daemon=True)
            w.start()
            c0 = cpu_seconds(server.pid)
            home = run_sessions(url, args.sessions, args.duration / 2, args.think, args.seed, ("",))
            c1 = cpu_seconds(server.pid)
            crowd = run_sessions(url, args.sessions, args.duration, args.think, args.seed)
            cpu["home"], cpu["crowd"] = c1 - c0, cpu_seconds(server.pid) - c1
            rss["end"] = rss_mb(server.pid)
            stop_watch = True
            w.join()
            load1 = os.getloadavg()[0]
            stages = jm.store.stages(ids)
            sched = stages[stages.stage == "scheduled"].sort_values("seq")
            owners_in_order = [jm.store.get_run(r)["info"]["owner"] for r in sched.run_id]
            finished = sum(jm.store.status(r) == "done" for r in ids)
        finally:
            if jm is not None:
                jm.shutdown()
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
        left = sum(len(processes_of(r)) for r in ids)

    a = [t for _, t in alone]
    c = [t for _, t in crowd]
    print(f"classroom bench: {os.cpu_count()} cores, load average {load0:.1f} before and {load1:.1f} after "
          f"(other work on this machine included); real websocket sessions against `streamlit run`")
    print(f"{'phase':<34}{'sessions':>9}{'jobs':>6}{'reruns':>8}{'median s':>10}{'p95 s':>8}{'max s':>8}"
          f"{'p95/alone':>11}{'server CPU s/rerun':>20}")
    rows = [("alone (peer), no jobs", 1, 0, a, cpu["alone"]),
            (f"classroom on Home only, think {args.think:g} s", args.sessions, peak["running"], [t for _, t in home],
             cpu["home"]),
            (f"classroom, think {args.think:g} s", args.sessions, peak["running"], c, cpu["crowd"])]
    for name, n, jobs, v, used in rows:
        print(f"{name:<34}{n:>9}{jobs:>6}{len(v):>8}{statistics.median(v):>10.3f}{pct(v, .95):>8.3f}"
              f"{max(v):>8.3f}{pct(v, .95) / pct(a, .95):>11.2f}{used / len(v):>20.3f}")
    per_view = cpu["crowd"] / len(c)
    offered = args.sessions / args.think
    print(f"offered load: {args.sessions} sessions / {args.think:g} s think = {offered:.1f} page views/s x "
          f"{per_view:.3f} server CPU s each = {offered * per_view:.2f} CPU-s/s for one Streamlit process "
          f"(at most 1.0: one interpreter runs the scripts)")
    for page in PAGES:
        v = [t for p, t in crowd if p == page]
        if v:
            print(f"{'  ' + page + ' (classroom)':<34}{'':>9}{'':>6}{len(v):>8}{statistics.median(v):>10.3f}"
                  f"{pct(v, .95):>8.3f}{max(v):>8.3f}")
    print(f"server resident memory: {rss['warm']:.0f} MB after the first visit of each page, {rss['end']:.0f} MB "
          f"after the classroom ({len(alone) + len(home) + len(crowd)} reruns; runner.postScriptGC "
          f"{'on' if args.post_script_gc else 'off'})")
    print(f"training jobs: {len(ids)} submitted by {args.owners} sessions, capacity 1: at most {peak['running']} ran at "
          f"once; {finished} finished during the {args.duration:g} s; start order by owner: {' '.join(owners_in_order)}; "
          f"processes left after shutdown: {left}")


def run_sessions_once(url: str, page: str) -> None:
    async def once():
        import websockets

        async with websockets.connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60) as ws:
            await rerun(ws, page)

    asyncio.run(once())


if __name__ == "__main__":
    main()
