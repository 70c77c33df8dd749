"""A job's ranks on a Ray cluster: the launcher hands them to Ray instead of forking them here.

The launcher stays what it is on one machine (the job manager starts it, it claims the run, watches
heartbeats, records alarms, restarts or fails the job, and ends with Stop); only where its ranks run
changes. :func:`spawn` gang-schedules a job with one placement group of a bundle per rank (a job
starts whole or waits whole; Ray queues it until every rank fits), starts one actor per bundle that
runs the very same rank code (:func:`lab.train.rank.run_rank`, the same trainer and gloo group, with
the rendezvous on rank 0's node) and returns a handle per rank that the launcher watches as it
watches a process (poll, kill, wait, a return code).

Ranks on other machines cannot open the server's SQLite file: their writes go to a
:class:`StoreWriter` actor on the launcher's node, which owns the run store for the job, and so do
their heartbeats, which the handles copy into the launcher's scratch folder where its watch reads
them. A rank whose node is lost is marked so (:attr:`RayRank.lost`): its run becomes interrupted,
as when a launcher dies with the machine, or starts again on the nodes left when its fault policy is
``recover``.

A rank stands for a device of the topology (a worker's device, or a placement run's stage device); where
the cluster has nodes that declare that device's type as a custom resource (``ray start --resources '{"fpga": 1}'``), the rank's bundle asks for a
sliver of it, so it lands on such a node.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path

import ray
from ray.util import placement_group_table
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from lab import processes, settings
from lab.errors import LabError
from lab.scenario.document import Scenario
from lab.train.ray_store import RemoteStore, StoreWriter
from lab.train.resilience import write_heartbeat

#: The share of a declared device resource one rank's bundle asks for: any node that has the resource has enough.
DEVICE_SHARE = 0.001
BEAT_COPY_S = 0.25
READY_POLL_S = 1.0

# Settings and protocol variables a rank reads; the rest of the launcher's environment (its PATH, its
# home) belongs to its own machine.
_RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             *settings.THREAD_VARIABLES)
_LOCAL_ONLY = ("LAB_DB", "LAB_LAUNCHER_PID", "LAB_STORE_FD", "LAB_ERROR_FILE", "LAB_HEARTBEAT_FILE",
               "LAB_RANK_CPUS", "LAB_RAY_ADDRESS", "LAB_DATA")


def connect(address: str) -> None:
    """Join the cluster at ``address`` as a driver (once per launcher), quietly: the launcher's log
    keeps the job's story, not Ray's."""
    if ray.is_initialized():
        return
    if address.startswith("ray://"):  # a client has no node: the store writer must run beside the run store
        raise LabError("LAB_RAY_ADDRESS is a Ray client address (ray://); the lab's server must be a node of the "
                       "cluster: use auto, or the head's host:port", where="LAB_RAY_ADDRESS")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # the lab sends no usage statistics
    reach(address)
    try:
        ray.init(address=address, namespace="lab", logging_level="ERROR", log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(settings.ROOT)}})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise LabError(f"the Ray cluster at {address!r} cannot be reached: {exc}", where="LAB_RAY_ADDRESS") from None


REACH_TIMEOUT_S = 5.0


def reach(address: str) -> None:
    """A LabError within seconds when ``address`` (host:port) answers no connection: ray.init would retry for
    minutes while the job showed "running" with nothing but failed connections in its log."""
    if address in ("", "auto", "local"):
        return  # found (or not) from this machine's own cluster files: ray.init says at once
    host, sep, port = address.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit():
        raise LabError(f"LAB_RAY_ADDRESS {address!r} is not auto nor host:port (the head's address and its GCS "
                       "port, 6379 unless changed)", where="LAB_RAY_ADDRESS")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise LabError(f"the Ray cluster at {address!r} answers no connection ({exc.strerror or exc}): check that "
                       "its head runs (ray status on the head), that the host and port are the head's (ray start "
                       "--head prints them) and that no firewall is between", where="LAB_RAY_ADDRESS") from None


#: A Ray rank's scratch folder, in its node's temporary directory: ``lab-rank-<run id>-<random>``.
RANK_SCRATCH = "lab-rank-"
#: The file in a rank's scratch folder that names the process using it.
SCRATCH_OWNER = "owner"


def sweep_rank_scratch(root: str | os.PathLike | None = None) -> int:
    """Remove the scratch folders of Ray ranks on this node whose process is gone (a killed actor cannot clean
    up after itself); a folder whose owner still runs, or that names none, stays. Returns how many went."""
    n = 0
    for d in Path(root or tempfile.gettempdir()).glob(RANK_SCRATCH + "*"):
        try:
            pid = int((d / SCRATCH_OWNER).read_text())
        except (OSError, ValueError):
            continue
        if not processes.running(pid):
            shutil.rmtree(d, ignore_errors=True)
            n += not d.exists()
    return n


@ray.remote(max_restarts=0, max_task_retries=0)
class RankActor:
    """One rank in its own Ray worker process: a fresh one for one job, or a warm one of the cluster's pool
    (:mod:`lab.train.ray_pool`) that runs job after job, each from the state it had when it warmed."""

    def warm(self) -> bool:
        """Load torch and the rank code (once), and keep what a job starts from: this process's environment and
        torch's first seed."""
        if not hasattr(self, "_env"):
            from lab.train.preload import load_rank_code

            load_rank_code()
            import torch

            self._env, self._seed = dict(os.environ), torch.initial_seed()
        return True

    def where(self) -> dict:
        ctx = ray.get_runtime_context()
        return {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "host": socket.gethostname(),
                "pid": os.getpid()}

    def free_port(self) -> int:
        # Bound and closed here, then taken by rank 0's TCPStore: another process may take it between the
        # two, and the launcher reads that failure (the port was taken) and starts the attempt again.
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def run(self, scenario: dict, run_id: str, env: dict, writer, group=None) -> dict:
        """The rank's job; ``clean`` in the answer says the process may run another (no process group left, its
        scratch folder gone). With the job's placement group, the process ends when the group is removed before
        the job returned: its launcher is gone (Ray removes a dead driver's groups), and a rank of a warm actor,
        which the launcher does not own, must not train on."""
        stop = threading.Event()
        if group is not None:
            threading.Thread(target=_end_with_job, args=(group, stop), daemon=True, name="lab-job-watch").start()
        try:
            return self._run(scenario, run_id, env, writer)
        finally:
            stop.set()

    def _run(self, scenario: dict, run_id: str, env: dict, writer) -> dict:
        self.warm()
        import torch
        import torch.distributed as dist

        from lab.train.rank import run_rank  # torch and the trainer, in the rank's process only

        os.environ.clear()  # what the last job set goes: every job starts from the warmed process's environment
        os.environ.update(self._env)
        torch.manual_seed(self._seed)
        torch.set_default_dtype(torch.float32)
        sweep_rank_scratch()  # what ranks killed on this node before left behind
        tmp = Path(tempfile.mkdtemp(prefix=f"{RANK_SCRATCH}{run_id}-"))
        try:
            (tmp / SCRATCH_OWNER).write_text(str(os.getpid()))
            os.environ.update(env, LAB_ERROR_FILE=str(tmp / "rank.err"), LAB_HEARTBEAT_FILE=str(tmp / "rank.hb"))
            rank = int(env["RANK"])
            cpu0 = time.process_time()  # the job's CPU in this process, which no process tree of the launcher holds
            code = run_rank(Scenario.from_dict(scenario), run_id, quiet=True, store=RemoteStore(writer),
                            relay=lambda doc: writer.beat.remote(rank, doc), exit_on_error=False)
            cpu = time.process_time() - cpu0
            try:
                error = json.loads((tmp / "rank.err").read_text())
            except (OSError, ValueError):
                error = None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return {"code": code, "error": error, "cpu_s": cpu, "clean": not dist.is_initialized() and not tmp.exists()}


#: How often a rank on a warm actor checks that its job's placement group is still there.
JOB_WATCH_S = 2.0


def _end_with_job(group, stop: threading.Event) -> None:
    while not stop.wait(JOB_WATCH_S):
        try:
            state = placement_group_table(group).get("state")
        except Exception:  # noqa: BLE001 - Ray itself answering nothing is no proof the job is gone
            continue
        if state == "REMOVED" and not stop.is_set():
            os._exit(1)


class RayRank:
    """The launcher's handle on a rank that runs on the cluster, read as a process is read: ``poll()``
    is None while it runs, then its return code (0 done, 1 failed with its error copied to the
    scratch folder, -9 killed); ``lost`` says why when its node went away."""

    def __init__(self, rank: int, actor, ref, where: dict, tmp: Path, beats: "_Beats", borrowed: bool = False):
        self.rank, self.actor, self.ref, self.where, self.tmp, self.beats = rank, actor, ref, where, tmp, beats
        self.pid = where["pid"]
        self.returncode: int | None = None
        self.lost: str | None = None
        self.cpu_s = 0.0  # the CPU its process took for the rank, once it ended (a killed rank reports none)
        self.borrowed = borrowed  # a warm actor of the pool, which gets it back if it ends clean
        self.clean = False

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _ = ray.wait([self.ref], timeout=0)
            if ready:
                self._end()
            else:
                self.beats.copy()
        return self.returncode

    def _end(self) -> None:
        try:
            out = ray.get(self.ref)
        except ray.exceptions.RayError as exc:
            self.returncode = -signal.SIGKILL
            # Ray says so when the node went ("because its node has died"); a killed worker's message also
            # speaks of nodes (of the OOM killer's), so the node's own state decides otherwise.
            if "because its node has died" in str(exc) or not _node_alive(self.where["node"]):
                self.lost = f"its node {self.where['ip']} ({self.where['node'][:8]}) left the cluster"
            return
        self.returncode = int(out["code"])
        self.cpu_s = float(out.get("cpu_s") or 0.0)
        self.clean = bool(out.get("clean"))
        if out.get("error"):
            (self.tmp / f"rank{self.rank}.err").write_text(json.dumps(out["error"]))

    def kill(self) -> None:
        self.clean = False  # whatever it was doing, it is gone
        ray.kill(self.actor, no_restart=True)

    def wait(self, timeout: float | None = None) -> int | None:
        ray.wait([self.ref], timeout=timeout)
        return self.poll()


class _Beats:
    """Copies the ranks' latest heartbeats from the writer into the launcher's scratch folder, at most
    every BEAT_COPY_S seconds, without waiting for the answer."""

    def __init__(self, writer, tmp: Path):
        self.writer, self.tmp = writer, tmp
        self.pending = None
        self.last = 0.0

    def copy(self) -> None:
        if self.pending is not None:
            ready, _ = ray.wait([self.pending], timeout=0)
            if not ready:
                return
            try:
                latest = ray.get(self.pending)
            except ray.exceptions.RayError:
                latest = {}
            self.pending = None
            for rank, doc in latest.items():
                write_heartbeat(self.tmp / f"rank{rank}.hb", doc)
        if time.monotonic() - self.last >= BEAT_COPY_S:
            self.last = time.monotonic()
            self.pending = self.writer.latest.remote()


def _node_alive(node_id: str) -> bool:
    return any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes())


def bundles(sc: Scenario, world: int, devices: tuple[str, ...] | None = None) -> list[dict]:
    """One bundle per rank: a CPU, and a sliver of its device's type where a node declares that type. ``devices``:
    a placement run's device of each rank (decided at submit); a data-parallel job's are its worker devices."""
    offered = ray.cluster_resources()
    kinds = {d.name: d.type for d in sc.topology.devices}
    devices = list(devices) if devices is not None else list(sc.training.worker_devices)
    out = []
    for r in range(world):
        kind = kinds.get(devices[r]) if r < len(devices) else None
        out.append({"CPU": 1, kind: DEVICE_SHARE} if kind and offered.get(kind) else {"CPU": 1})
    return out


class RayRanks(list):
    """The handles of a job's ranks (a list the launcher watches as it watches its processes), with what
    the job holds on the cluster besides them."""

    def __init__(self, ranks: list[RayRank], group, writer, keeper=None):
        super().__init__(ranks)
        self.group, self.writer, self.keeper = group, writer, keeper
        self.released = False

    def release(self) -> None:
        """End what the attempt holds on the cluster: its writer, its placement group and its rank actors, but
        for the pool's that ended clean, which go back to it (once; again is nothing)."""
        if self.released:
            return
        self.released = True
        ending = [self.writer]
        for r in self:
            if r.borrowed and self.keeper is not None and r.poll() is not None and r.clean:
                self.keeper.give_back.remote(r.actor, r.where["node"])
            else:
                ending.append(r.actor)
        for actor in ending:
            try:
                ray.kill(actor, no_restart=True)
            except ray.exceptions.RayError:  # gone already, with its node
                pass
        remove_placement_group(self.group)
        if self.keeper is not None:
            self.keeper.refill.remote()  # in place of what the job killed or lost

    def nodes(self) -> list[dict]:
        """Where each rank runs: node id, address and host name, its process and whether it is a warm one of the
        pool, for the run's events (the Jobs page)."""
        return [{"rank": r.rank, "node": r.where["node"], "ip": r.where["ip"], "host": r.where["host"],
                 "pid": r.pid, "warm": r.borrowed} for r in self]


def spawn(sc: Scenario, run_id: str, world: int, env: dict, tmp: Path, db: str | os.PathLike, address: str,
          on_wait=None, devices: tuple[str, ...] | None = None) -> RayRanks:
    """Start the job's ``world`` ranks on the cluster once all of them fit, and return their handles.
    ``on_wait(seconds)`` is called while Ray waits for room (the launcher says so in the run's events)."""
    connect(address)
    shape = bundles(sc, world, devices)
    cpus = ray.cluster_resources().get("CPU", 0)
    if world > cpus:
        raise LabError(f"the job needs {world} ranks but the Ray cluster has {cpus:g} CPUs", where="ray")
    group = placement_group(shape, strategy="PACK", name=f"lab-{run_id}-{env.get('LAB_ATTEMPT', '0')}")
    t0 = time.monotonic()
    while not ray.wait([group.ready()], timeout=READY_POLL_S)[0]:
        if on_wait is not None:
            on_wait(time.monotonic() - t0)
    here = ray.get_runtime_context().get_node_id()
    keeper = _keeper()
    db = str(Path(db).resolve())
    writer = _spare_writer(keeper, here, db, group) or StoreWriter.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote(db)
    actors: list = []
    try:
        return _start(sc, run_id, world, env, tmp, shape, group, writer, keeper, actors)
    except BaseException:
        # What the job holds goes with it: the pool's actors too (it starts others), and Ray's group.
        for actor in [writer, *actors]:
            try:
                ray.kill(actor, no_restart=True)
            except ray.exceptions.RayError:
                pass
        remove_placement_group(group)
        raise


def _start(sc: Scenario, run_id: str, world: int, env: dict, tmp: Path, shape: list, group, writer, keeper,
           actors: list) -> RayRanks:
    """The job's ranks on the pool's warm actors where it has them, else fresh ones in the job's placement group
    (``actors`` fills as they are taken, for the caller to end on a failure)."""

    def fresh(r: int):
        return RankActor.options(num_cpus=1, resources={k: v for k, v in shape[r].items() if k != "CPU"},
                                 scheduling_strategy=PlacementGroupSchedulingStrategy(group, r)).remote()

    lent = _borrow(keeper, group, world)
    actors.extend(lent[r] if lent[r] is not None else fresh(r) for r in range(world))
    borrowed = [lent[r] is not None for r in range(world)]
    where = []
    for r in range(world):
        try:
            where.append(ray.get(actors[r].where.remote()))
        except ray.exceptions.RayActorError:  # a warm actor that died while it waited (its node, a kill)
            actors[r], borrowed[r] = fresh(r), False
            where.append(ray.get(actors[r].where.remote()))
    port = ray.get(actors[0].free_port.remote())
    base = {k: v for k, v in env.items()
            if (k.startswith("LAB_") and k not in _LOCAL_ONLY) or k in _RANK_ENV}
    base.update(MASTER_ADDR=where[0]["ip"], MASTER_PORT=str(port), LAB_LAUNCHER_PID="")
    beats = _Beats(writer, tmp)
    scenario = sc.to_dict()
    ranks = []
    for r, actor in enumerate(actors):
        ref = actor.run.remote(scenario, run_id, dict(base, RANK=str(r), LOCAL_RANK=str(r)), writer, group)
        ranks.append(RayRank(r, actor, ref, where[r], tmp, beats, borrowed=borrowed[r]))
    return RayRanks(ranks, group, writer, keeper)


BORROW_TIMEOUT_S = 30.0


def _code_digest() -> str:
    """A digest of the lab's code: a pool's warm actors run the code they loaded, so a pool serves only its own."""
    h = hashlib.sha1()
    for f in sorted(Path(__file__).resolve().parents[1].rglob("*.py")):
        h.update(f.as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


#: The cluster's pool of warm rank actors for this code (:mod:`lab.train.ray_pool`), a detached actor in the lab's
#: namespace.
POOL_PREFIX = "lab-rank-pool-"
POOL_NAME = POOL_PREFIX + _code_digest()


def _keeper():
    """The cluster's pool of warm actors, or None where there is none (the job manager's first look at the nodes
    makes it): the job then starts fresh actors."""
    try:
        return ray.get_actor(POOL_NAME, namespace="lab")
    except ValueError:
        return None


def _borrow(keeper, group, world: int) -> list:
    """A warm actor of the pool on each bundle's node (None where it has none): a job on the pool's actors starts
    in a second, where fresh ones load torch first. A pool that does not answer lends nothing."""
    if keeper is None:
        return [None] * world
    try:
        nodes = placement_group_table(group)["bundles_to_node_id"]
        return ray.get(keeper.borrow.remote([nodes[r] for r in range(world)], group), timeout=BORROW_TIMEOUT_S)
    except (ray.exceptions.RayError, KeyError):
        return [None] * world


def _spare_writer(keeper, node: str, db: str, group):
    """The pool's spare store writer on the launcher's node, opened on the job's run store; None when it has
    none (the job starts its own, a Ray worker that takes most of a second to start)."""
    if keeper is None:
        return None
    try:
        writer = ray.get(keeper.borrow_writer.remote(node, group), timeout=BORROW_TIMEOUT_S)
        if writer is not None:
            ray.get(writer.open.remote(db), timeout=BORROW_TIMEOUT_S)
        return writer
    except ray.exceptions.RayError:
        return None
