"""The same queue of jobs on this machine's job manager and on a Ray cluster of three nodes started on
this same machine (Ray's test cluster: a head that runs no rank, standing for the class server, and two
worker nodes of one CPU each, so both paths have this machine's two cores): the time to the first step
of the first job, the time until every job is done, and the resident memory of everything the path runs
(the job manager, the warm starter, launchers and ranks; with Ray also its head, its node managers and
its workers), sampled every second as the sum of their proportional set sizes (a page shared by forked
processes counted once). Before the clock starts each path is warm: the local one's starter has loaded torch, and
the cluster's pool of warm rank actors (:mod:`lab.train.ray_pool`, one per CPU of each worker node) has too. Once
every job is done, what the jobs left behind on each path: their launchers' and ranks' scratch folders, rank actors
still alive beyond the pool's idle ones, and Ray placement groups not removed.

The last line: ``cluster: jobs <n>, nodes <n>, local all done <s> s, ray all done <s> s, ray first step <s> s,
ray/local <x>x, left behind <n>``.

    .venv/bin/python bench/bench_cluster.py [--jobs 12] [--steps 200] [--workers 2] [--smoke]

Both paths use the job manager as the Training page's Run does; the local one with the class server's
default capacity (LAB_JOB_CAPACITY), the Ray one hands every job to Ray (LAB_RAY_JOBS) and Ray's
placement groups queue them.

``--smoke``: one job of one worker and a few steps on each path, Ray's test cluster a single node (its head,
one CPU); it checks the bench still runs and measures nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from common import ROOT, bench_parser, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)



def pss_mb(p: psutil.Process) -> float:
    """A process's proportional set size: its private memory plus its share of pages it shares (forked
    processes share most of theirs), so that a sum over processes counts each page once."""
    return p.memory_full_info().pss / 2**20


class PeakMemory(threading.Thread):
    """The largest sum of the proportional set sizes (MB) of this process and its descendants, sampled
    every second."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self.done.wait(1.0):
            total = 0.0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += pss_mb(p)
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)


def ray_memory() -> float:
    """Memory (MB, proportional set size) of Ray's own processes started from here (its head, node
    managers, idle workers)."""
    total = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            if "ray" in " ".join(p.cmdline()).lower() or p.name() in ("raylet", "gcs_server"):
                total += pss_mb(p)
        except psutil.Error:
            continue
    return total


def run_queue(jobs: int, steps: int, workers: int, data: Path, ray_address: str) -> dict:
    from lab.jobs.manager import JobManager
    from lab.scenario.document import default_scenario

    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(workers=workers, steps=steps))
    jm = JobManager(data / "runs.db", ray_address=ray_address)
    peak = PeakMemory()
    try:  # the job manager ends its starter and any job still running, also when a job fails
        jm.launcher.warm_up()
        if jm.launcher.starter is not None and not jm.launcher.starter.wait_ready(180):
            raise SystemExit("the warm starter did not start")
        peak.start()
        t0 = time.monotonic()
        submitted = jm.submit_many([(sc, f"job {k}") for k in range(jobs)], owner="bench")
        first = submitted[0].run_id
        while not len(jm.store.metrics(first)):
            if jm.store.status(first) not in ("queued", "running"):
                raise SystemExit(f"job {first} {jm.store.status(first)}: {jm.store.get_run(first)['error']}")
            time.sleep(0.05)
        first_step = time.monotonic() - t0
        ends = [jm.wait(j.run_id, 1800) for j in submitted]
        all_done = time.monotonic() - t0
    finally:
        peak.done.set()
        if peak.is_alive():
            peak.join()
        jm.shutdown()
    if any(e != "done" for e in ends):
        raise SystemExit(f"not every job ended done: {ends}")
    return {"first": first_step, "all": all_done, "memory": peak.peak, "ids": [j.run_id for j in submitted]}


def left_behind(run_ids: list[str], ray_address: str = "", wait_s: float = 30.0) -> dict[str, int]:
    """What the jobs ``run_ids`` left once they were done: their launchers' and ranks' scratch folders, rank actor
    processes still alive and (on Ray) placement groups not removed; counted again for up to ``wait_s`` while
    anything is left (a rank ends a moment after its job)."""
    from lab.train.launcher_record import scratch_prefix
    from lab.train.ray_ranks import RANK_SCRATCH

    roots = {Path(tempfile.gettempdir()), Path("/tmp")}

    def count() -> dict[str, int]:
        folders = {d for root in roots for rid in run_ids for prefix in (scratch_prefix(rid), f"{RANK_SCRATCH}{rid}-")
                   for d in root.glob(prefix + "*")}
        actors = set()
        for p in psutil.process_iter(["cmdline"]):
            if "RankActor" in " ".join(p.info["cmdline"] or ()):
                actors.add(p.pid)
        out = {"scratch folders": len(folders)}
        if ray_address:
            # The pool's idle warm ranks stay by design (one per CPU, ready for the next class's jobs): what is
            # left is every other rank actor, and placement groups not removed.
            got = held(ray_address)
            out["rank actors"] = len(actors - set(got["pids"]))
            out["placement groups"] = got["placement_groups"]
        else:
            out["rank actors"] = len(actors)
        return out

    end = time.monotonic() + wait_s
    found = count()
    while sum(found.values()) and time.monotonic() < end:
        time.sleep(2.0)
        found = count()
    return found


def held(ray_address: str) -> dict:
    """What the cluster holds for the lab, asked by a process of its own (a Ray driver ends with its process)."""
    done = subprocess.run([sys.executable, "-m", "lab.train.ray_pool", ray_address, "--held"], cwd=str(ROOT),
                          capture_output=True, text=True, timeout=300)
    if done.returncode:
        raise SystemExit(f"the cluster did not say what it holds: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def warm_pool(ray_address: str) -> float:
    """Fill the cluster's pool of warm ranks and wait for them, as the local path waits for its warm starter; the
    seconds it took."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "lab.train.ray_pool", ray_address], cwd=str(ROOT),
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise SystemExit(f"the warm ranks did not start: {done.stderr.strip()[-500:]}")
    return time.monotonic() - t0


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    # The smoke run's cluster is its head alone, with the one CPU its one rank needs.
    head_cpus, worker_nodes = (1, 0) if args.smoke else (0, 2)
    if args.smoke:
        args.jobs, args.steps, args.workers = 1, 5, 1
        print(SMOKE_NOTE, flush=True)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # the lab sends no usage statistics
    from ray.cluster_utils import Cluster

    base = Path(tempfile.mkdtemp(prefix="lab-cluster-"))
    ray_tmp = ""
    os.environ.update(LAB_DATA=str(base))
    try:
        local = run_queue(args.jobs, args.steps, args.workers, base / "local", "")
        # counted before Ray starts: Ray's rank actors are not this path's
        left = {f"this machine: {k}": n for k, n in left_behind(local["ids"]).items()}
        t0 = time.monotonic()
        store_mb = 80 * 2**20
        if args.smoke:
            # Ray's sockets live in its temporary folder (under TMPDIR), and a socket's path may not pass 107
            # bytes: under a long TMPDIR (a test's) Ray cannot start, so the smoke run gives it a short folder.
            ray_tmp = tempfile.mkdtemp(prefix="lab-ray-", dir="/tmp")
            os.environ["RAY_TMPDIR"] = ray_tmp
        cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=head_cpus, object_store_memory=store_mb,
                                                                    include_dashboard=False))
        try:
            for _ in range(worker_nodes):
                cluster.add_node(num_cpus=1, object_store_memory=store_mb)
            cluster.wait_for_nodes()
            up = time.monotonic() - t0
            idle = ray_memory()
            warmed = warm_pool(cluster.address)
            pool = len(held(cluster.address)["pids"])
            on_ray = run_queue(args.jobs, args.steps, args.workers, base / "ray", cluster.address)
            left |= {f"Ray: {k}": n for k, n in left_behind(on_ray["ids"], cluster.address).items()}
        finally:
            cluster.shutdown()
    finally:
        from lab.train.warm import shared_starter

        shared_starter().stop()  # both paths' warm starter is this process's: it ends with the bench, reaped here
        if args.smoke:  # a smoke run leaves nothing behind; the real bench keeps its run stores
            shutil.rmtree(base, ignore_errors=True)
            if ray_tmp:
                shutil.rmtree(ray_tmp, ignore_errors=True)
    nodes = 1 + worker_nodes
    print(table(["path", "first step of the first job (s)", "all done (s)", "peak memory (MB, PSS)"], [
        ["this machine (job manager, warm starter)", f"{local['first']:.1f}", f"{local['all']:.1f}",
         f"{local['memory']:.0f}"],
        [f"Ray, {nodes} nodes on this machine", f"{on_ray['first']:.1f}", f"{on_ray['all']:.1f}",
         f"{on_ray['memory']:.0f}"],
        ["ratio Ray / this machine", f"{on_ray['first'] / local['first']:.2f}", f"{on_ray['all'] / local['all']:.2f}",
         f"{on_ray['memory'] / local['memory']:.2f}"],
    ]))
    print(f"Ray's test cluster: up in {up:.1f} s, {idle:.0f} MB resident for its {nodes} nodes before any job "
          f"({idle / nodes:.0f} MB a node); its pool of warm ranks: {pool} actors, warm in {warmed:.1f} s before the "
          "first job (as the local path's starter is), kept after the last")
    if args.smoke:
        print(SMOKE_NOTE)
    print("left behind once every job was done: " + ", ".join(f"{k} {n}" for k, n in left.items()))
    score("cluster", [("jobs", args.jobs), ("nodes", nodes), ("local all done", local["all"], "s", 1),
                      ("ray all done", on_ray["all"], "s", 1), ("ray first step", on_ray["first"], "s", 1),
                      ("ray/local", on_ray["all"] / local["all"], "x"), ("left behind", sum(left.values()))])


if __name__ == "__main__":
    main()
