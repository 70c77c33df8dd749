"""The lab's launcher: starts N worker processes on this machine (N + 1 with a parameter server),
watches them, and ends the job -- or restarts it from its last checkpoint -- within seconds when
any of them fails.

It does what torchrun does for one machine, so the workers run the very same rank code either way:
each worker has RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in its environment and runs
:func:`lab.train.rank.run_rank` on the attempt's scenario, which it receives as data: a launcher
forked by the warm starter forks its workers, which hold the scenario already; a cold launcher
starts ``python -m lab.train --spec -`` for each and writes the scenario to its standard input.
The job manager hands a launcher a :class:`JobSpec` the same way (:func:`run_job`). The launcher also

* holds the rendezvous port: it binds and listens on a port the operating system picks and hands
  the socket to rank 0's TCPStore (LAB_STORE_FD), with a per-attempt key prefix
  (LAB_RDZV_PREFIX), so two jobs started at the same moment can never clash on a port,
* passes LAB_ERROR_FILE so a failing worker leaves its error for the launcher, which stores the
  root cause (not the "connection closed" its peers see afterwards),
* watches every worker's heartbeat file (LAB_HEARTBEAT_FILE, see :mod:`lab.train.resilience`): a
  worker that still beats but whose step has not moved for LAB_HEARTBEAT_TIMEOUT seconds (default
  30; before its first step LAB_START_TIMEOUT, default 180) while it is not waiting for its peers
  is *hung*; a process whose heartbeat file has not changed for LAB_FROZEN_TIMEOUT seconds (default
  30) is *frozen*. The latest heartbeats go to the run store
  every second (the Jobs page shows them),
* on a failure records an ``alarm`` stage (what, which worker, when) and follows the scenario's
  ``fault_policy``: ``fail`` ends the job (status failed, the root cause as its error);
  ``recover`` restarts it from the newest checkpoint without the failed worker (its data re-split
  over the others: the job migrates off the failed worker), at most LAB_MAX_RESTARTS times (default 3). A worker's
  own LabError (a wrong setting) is never retried,
* writes each worker's log to ``<data>/logs/<run id>/rank<k>.log`` (kept after the job),
* pins rank k to the CPU given in its spec (or LAB_RANK_CPUS, a comma list, on the command line),
* kills and reaps every worker on failure, on SIGTERM/SIGINT/SIGHUP (marking the run stopped), and
  -- through PR_SET_PDEATHSIG in the workers -- when the launcher itself is killed; then records
  ``ended`` and ``released`` (with the count of processes left behind: 0),
* claims the run in the run store (:meth:`lab.store.runs.RunStore.claim`): who it is (pid, process
  group, creation time, host, boot, and its scratch folder), and beats there every second, so that a
  job manager finds a launcher killed with SIGKILL (which can record nothing) while the app runs
  (:meth:`lab.jobs.manager.JobManager.sweep`) and finds the job's processes by their group
  (:func:`processes_of`).

The workers stay in the launcher's process group. Started by :mod:`lab.jobs.manager` (new session) or by an
interactive shell (its own job), the launcher leads that group, so one ``killpg`` ends the whole job.
"""

from __future__ import annotations

import dataclasses

import json
import math
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lab import processes, settings
from lab.errors import LabError
from lab.scenario.document import Scenario
from lab.settings import ROOT
from lab.scenario.groups import resource_groups
from lab.store.runs import ACTIVE, JOB_WORKER, RunStore, check_run_id
from lab.train import fork
from lab.train.resilience import latest_checkpoint, read_heartbeat

log = logging.getLogger("lab.train")

POLL_S = 0.05
KILL_GRACE_S = 5.0
BEATS_TO_STORE_S = 1.0


def heartbeat_timeout() -> float:
    return settings.number("LAB_HEARTBEAT_TIMEOUT")


def start_timeout() -> float:
    return settings.number("LAB_START_TIMEOUT")


def frozen_timeout() -> float:
    return settings.number("LAB_FROZEN_TIMEOUT")


def _fresh_s() -> float:
    """A heartbeat file rewritten within this many seconds counts as fresh (its process runs)."""
    return max(1.0, 5 * settings.number("LAB_HEARTBEAT_EVERY"))


def max_restarts() -> int:
    return settings.integer("LAB_MAX_RESTARTS")


class Stopped(BaseException):
    """The launcher received SIGTERM, SIGINT or SIGHUP."""


@dataclass(frozen=True)
class LaunchResult:
    run_id: str
    status: str
    test_accuracy: float
    error: str | None = None
    restarts: int = 0

    @property
    def exit_code(self) -> int:
        return {"done": 0, "diverged": 2, "stopped": 143}.get(self.status, 1)


@dataclass(frozen=True)
class Failure:
    """Why an attempt ended: which rank, what kind, the message, and whether retrying can help."""

    rank: int | None
    kind: str  # error | killed | lost | exited | hung | frozen | port-taken
    error: str
    step: int | None = None
    retryable: bool = True
    last_beat: float | None = None


@dataclass(frozen=True)
class JobSpec:
    """One job as the job manager hands it to its launcher: the run (queued in ``db``), its scenario as
    the store holds it (checked at submit, with a placement run's plan written out), the cores of its
    ranks and its priority. It travels as JSON once (the warm starter's pipe, or a cold launcher's
    standard input) and is read once."""

    run_id: str
    scenario: dict
    db: str
    cpus: tuple[int, ...] = ()
    nice: int = 0
    idle: bool = False
    cluster: str = ""  # a Ray cluster's address: the ranks run there (lab.train.ray_ranks)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d) -> "JobSpec":
        if not isinstance(d, dict) or not isinstance(d.get("scenario"), dict) or not isinstance(d.get("db"), str):
            raise LabError("a job spec needs a run id, a scenario and a run store", where="job spec")
        try:
            cpus = tuple(int(c) for c in d.get("cpus") or ())
            return cls(check_run_id(d.get("run_id")), d["scenario"], d["db"], cpus, int(d.get("nice") or 0),
                       bool(d.get("idle")), str(d.get("cluster") or ""))
        except (TypeError, ValueError) as exc:
            raise LabError(f"a malformed job spec: {exc}", where="job spec") from None


def run_job(spec: JobSpec, log=sys.stderr) -> int:
    """The launcher of a job the job manager started: its priority, then :func:`launch` on the
    spec's scenario, which the job manager checked already; returns the process's exit code."""
    processes.as_background_work(spec.nice, spec.idle)
    try:
        res = launch(Scenario.from_dict(spec.scenario), spec.run_id, store_path=spec.db,
                     cpus=list(spec.cpus) or None, checked=True, cluster=spec.cluster)
    except LabError as exc:
        print("lab.train: " + " ".join(str(exc).split()), file=log)
        return 2
    if res.status != "done":
        print(f"lab.train: run {res.run_id} {res.status}" + (f": {res.error}" if res.error else ""), file=log)
    print(f"run {res.run_id} test_accuracy {res.test_accuracy:.6f}", file=log, flush=True)
    return res.exit_code


def listening_socket() -> socket.socket:
    """A socket bound to a port the OS picked, already listening: the port is ours until closed."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    s.set_inheritable(True)
    return s


def world_size(sc: Scenario) -> int:
    """Processes of the job: the workers and a parameter server, or one per device of a placement plan
    (written out by :func:`preflight`)."""
    tr = sc.training
    if tr.parallel == "placement":
        if not tr.placement:
            raise LabError("a placement run's plan is written out before it starts (preflight)", where="placement")
        if tr.balance != "off":  # its plan changes between rounds: a process for every device it may use
            return len(sc.topology.devices)
        return len({dev for _, dev in tr.placement})
    return tr.workers + (1 if tr.sync == "param_server" else 0)


def parse_job(sc) -> dict:
    """The task-level design's parsing step: the job's roles (a task manager, a parameter server where the sync mode
    uses one, the compute workers), the device each worker stands for, and the topology's resource
    groups (one hardware type each) those devices belong to. Plain data (JSON-ready)."""
    tr = sc.training
    groups = resource_groups(sc.topology)
    group_of = {d.split("/", 1)[1]: g.name for g in groups for d in g.devices}
    if tr.parallel == "placement" and tr.placement:  # one process per device of the plan
        devs = sorted({dev for _, dev in tr.placement})  # ranks follow the model's order, decided by each process
        roles = [{"role": "task manager", "rank": None, "device": None, "group": None,
                  "process": "the launcher (starts one process per device, watches heartbeats)"}]
        roles += [{"role": "stage", "rank": None, "device": d, "group": group_of.get(d),
                   "process": f"the stage process of {d}", "operators": [op for op, x in tr.placement if x == d]}
                  for d in devs]
        return {"workers": len(devs), "parameter_server": None, "tasks": len(devs), "sync": "placement",
                "strategy": tr.strategy, "roles": roles,
                "resource_groups": [{"name": g.name, "type": g.type, "devices": g.size} for g in groups]}
    ps = tr.sync == "param_server"
    devs = list(tr.worker_devices)
    roles = [{"role": "task manager", "rank": None, "device": None, "group": None,
              "process": "the launcher (splits the job, watches heartbeats, restarts)"}]
    for r in range(tr.workers):
        dev = devs[r] if r < len(devs) else None
        roles.append({"role": "compute worker", "rank": r, "device": dev, "group": group_of.get(dev),
                      "process": f"worker rank {r}"})
    if ps:
        dev = devs[tr.workers] if len(devs) > tr.workers else None
        roles.append({"role": "parameter server", "rank": tr.workers, "device": dev, "group": group_of.get(dev),
                      "process": f"rank {tr.workers}"})
    return {"workers": tr.workers, "parameter_server": tr.workers if ps else None, "tasks": tr.workers + ps,
            "sync": tr.sync, "roles": roles,
            "resource_groups": [{"name": g.name, "type": g.type, "devices": g.size} for g in groups]}


def _on_signal(signum, frame):  # noqa: ARG001
    raise Stopped(signal.Signals(signum).name)


def final_accuracy(store: RunStore, run_id: str) -> float:
    m = store.metrics(run_id, worker=JOB_WORKER)
    acc = m.test_acc.dropna()
    return float(acc.iloc[-1]) if len(acc) else math.nan


def preflight(sc: Scenario) -> Scenario:
    """Every check a worker would fail, run before any process starts, so that a wrong setting is one
    LabError here (exit 2 and one line on the command line) and never a failed job with a traceback
    per worker: the devices of the scenario, then what every worker's setup does
    (:func:`lab.train.plan.check_scenario`: the data, the model, the plan with each worker's device
    and its kernels, the optimiser, the shards). Returns the scenario as the job runs it: a placement run's
    with its plan written out (:func:`lab.train.placement_run.resolved`)."""
    tr = sc.training
    sc.check_devices()
    if tr.parallel == "placement":  # the plan written out, so every process and the store see the same one
        from lab.train.placement_run import check_placement, resolved

        sc = resolved(sc)
        check_placement(sc)
        return sc
    if (tr.emulate or tr.split == "weighted") and len(tr.worker_devices) < tr.workers:
        need = "emulation" if tr.emulate else "a weighted split"
        raise LabError(f"{need} needs the device of every worker: {tr.workers} workers but "
                       f"{len(tr.worker_devices)} device(s) listed (devices of the topology: "
                       f"{sc.topology.device_names})", where="training.worker_devices")
    # Imported here: the plan needs torch, which this module must not load when it is imported (the job
    # manager imports it); a launcher pays for torch only once it is about to start a job's workers.
    from lab.train.plan import check_scenario

    check_scenario(sc)
    return sc


def without_worker(sc: Scenario, rank: int | None) -> Scenario:
    """The scenario for a restart without worker ``rank`` (its device dropped from the mapping).
    The parameter server's rank, an unknown rank, or the last worker: same size (a fresh process
    takes the role: migration)."""
    tr = sc.training
    if rank is None or tr.workers <= 1 or rank >= tr.workers:
        return sc
    devices = list(tr.worker_devices)
    if rank < len(devices):
        del devices[rank]
    return sc.replace(training=tr.replace(workers=tr.workers - 1, worker_devices=tuple(devices)))


def logs_dir(store: RunStore, run_id: str) -> Path:
    return store.data_dir() / "logs" / run_id


def processes_of(run_id: str, store: RunStore | str | os.PathLike | None = None,
                 exclude: tuple[int, ...] = ()) -> list[int]:
    """Live (non-zombie) processes of the job of ``run_id`` ([] before a launcher claimed the run, and
    for a launcher on another machine). A launcher that leads its process group (the job manager's,
    or one started from an interactive shell) holds the job in it: its members created since the
    launcher was. One in another's group (a script's, a test calling :func:`launch`) shares it with its
    callers: then the descendants it created since it claimed the run, while it runs (its workers
    die with it)."""
    store = store if isinstance(store, RunStore) else RunStore(store)
    try:
        rec = store.launcher(run_id)
    except LabError:
        return []
    if not rec or rec.get("host") != host_name() or not rec.get("pid"):
        return []
    if rec.get("boot") and processes.boot_id() and rec["boot"] != processes.boot_id():
        return []
    if rec.get("pgid") and rec["pgid"] == rec["pid"]:
        return processes.group_members(rec["pgid"], since=rec.get("created") or rec.get("started"),
                                       exclude=exclude)
    return [p for p in processes.descendants(rec, since=rec.get("started")) if p not in exclude]


def scratch_prefix(run_id: str) -> str:
    return f"lab-job-{run_id}-"


def remove_scratch(run_id: str, folder: str | os.PathLike | None = None) -> int:
    """Delete the scratch folders a launcher of this run left behind (a launcher killed with
    SIGKILL cannot clean up): ``folder`` (the one its launcher recorded, wherever its temporary
    directory was) when it is this run's, and any in this process's temporary directory; returns
    how many went."""
    found = set(Path(tempfile.gettempdir()).glob(scratch_prefix(run_id) + "*"))
    if folder:
        f = Path(folder)
        if f.name.startswith(scratch_prefix(run_id)) and f.is_dir():  # never anything else
            found.add(f)
    n = 0
    for d in found:
        shutil.rmtree(d, ignore_errors=True)
        n += not d.exists()
    return n


def host_name() -> str:
    return socket.gethostname()


def identity(pid: int | None = None) -> dict:
    """Who a launcher is: pid, process group, creation time, boot and host."""
    return {**processes.identity(pid), "host": host_name()}


def stale_after() -> float:
    """A launcher on another machine (or without /proc) whose heartbeat is older than this many
    seconds (LAB_LAUNCHER_STALE, default 30) is taken for dead."""
    return settings.number("LAB_LAUNCHER_STALE")


def launcher_gone(record: dict | None, now: float | None = None) -> str | None:
    """Why the launcher of a launcher record is gone, or None while it may still run.

    On this machine in this boot the process itself decides: gone when no process has its pid and
    creation time, or that process is a zombie (killed, not yet reaped). After a reboot every launcher
    is gone. Elsewhere (another host sharing the store) only its heartbeat can tell: gone once it
    is older than :func:`stale_after`."""
    if not record:
        return None
    now = time.time() if now is None else now
    pid = record.get("pid")
    here = record.get("host") == host_name()
    if here and record.get("boot") and processes.boot_id() and record["boot"] != processes.boot_id():
        return "the machine restarted since the launcher started"
    if here:
        made = processes.created(pid)
        if made is None or (record.get("created") is not None and made != record["created"]):
            return f"its launcher (pid {pid}) is gone"
        if not processes.running(pid):
            return f"its launcher (pid {pid}) was killed"
        return None
    beat = record.get("beat") or record.get("started")
    if beat is not None and now - beat > stale_after():
        return f"its launcher (pid {pid} on {record.get('host')}) has not beaten for {now - beat:.0f} s"
    return None


def parse_cpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        return None


def launch(sc: Scenario, run_id: str | None = None, *, name: str | None = None,
           store_path: str | os.PathLike | None = None, log=sys.stderr,
           cpus: list[int] | None = None, checked: bool = False, cluster: str = "") -> LaunchResult:
    """Run the scenario's training job to its end (restarting it after faults when its policy is
    ``recover``); returns the run id, status and final accuracy. ``checked``: the scenario passed
    :func:`preflight` already (the job manager's, at submit). ``cluster``: a Ray cluster's address,
    where the ranks run instead of this machine (:mod:`lab.train.ray_ranks`)."""
    store = RunStore(store_path)
    if not checked:
        sc = preflight(sc)
    if run_id is not None:
        try:
            run = store.get_run(run_id)
        except LabError:
            run = None
        if run is not None and run["status"] != "queued":
            raise LabError(f"run {run_id!r} is {run['status']}, not queued; it cannot be started again",
                           where="lab.train")
        if run is None:
            run_id = store.create_run(sc, name=name, status="queued", run_id=run_id)
    else:
        run_id = store.create_run(sc, name=name, status="queued")
    if store.last_stage(run_id, "submitted") is None:  # started by hand, not through lab.jobs.manager
        store.add_stage(run_id, "submitted", detail={"by": "command line", "pid": os.getpid()})
        store.add_stage(run_id, "parsed", detail=parse_job(sc))
    if not checked:  # the scenario as it runs (a placement run's plan written out)
        store.update_run(run_id, scenario=sc.to_dict())
    # The run becomes running together with who runs it: a sweep never sees a running run without
    # its launcher, and a second launcher of the same run (a warm starter that died before it could
    # answer, and the cold start that replaced it) finds it taken.
    if not store.claim(run_id, **identity()):
        return LaunchResult(run_id, store.status(run_id), math.nan, "stopped, or started elsewhere, before it started")
    cpus = cpus if cpus is not None else parse_cpus(settings.raw("LAB_RANK_CPUS"))
    if cpus and not cluster and sc.training.parallel == "placement":
        # Imported here: the plan needs torch, which a launcher of any other job never loads.
        from lab.train.placement_run.pieces import placed_cpus

        cpus = placed_cpus(sc, cpus)
    # Other work on this machine slows a run the model does not know about: measure how much there was.
    # A cluster's ranks run on other machines, whose load this one cannot see.
    meter = None if cluster else processes.LoadMeter()
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    tmp = Path(tempfile.mkdtemp(prefix=scratch_prefix(run_id)))
    store.set_launcher(run_id, scratch=str(tmp))
    logs = logs_dir(store, run_id)
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    attempt, current, restarts = 0, sc, 0
    try:
        while True:
            sock = listening_socket()
            try:
                if fork.FORK_WORKERS:  # SQLite's per-process lock table must not reach a forked worker
                    store.close()
                procs = _spawn(current, run_id, tmp, store, attempt, sock, logs, cpus, cluster)
                store.add_stage(run_id, "started", attempt=attempt, detail={
                    "launcher": "lab", "start": "ray" if cluster else "warm" if fork.FORK_WORKERS else "cold",
                    "launcher_pid": os.getpid(), "world": len(procs),
                    "workers": current.training.workers, "pids": [p.pid for p in procs],
                    "port": None if cluster else sock.getsockname()[1], "cpus": (cpus or [])[:len(procs)] or None,
                    **({"nodes": procs.nodes()} if cluster else {})})
                failure = named(_watch(procs, tmp, store, run_id, attempt, logs), current)
            finally:
                sock.close()
            if failure is None:
                store.set_status(run_id, "done", only_from=("running",))  # normally rank 0 did this already
                break
            processes.kill_and_reap(procs, KILL_GRACE_S)
            if cluster:  # the attempt's placement group too: a restart needs its CPUs
                procs.release()
            policy = current.training.fault_policy
            again = (policy == "recover" and failure.retryable and restarts < max_restarts()
                     and store.status(run_id) == "running")
            nxt = without_worker(current, failure.rank) if again else None
            ck = store.checkpoint_dir(run_id, create=False)
            ck_step = latest_checkpoint(ck) if ck.exists() else None
            if again:
                action = (f"restart from the checkpoint at step {ck_step}" if ck_step else
                          "restart from step 0 (no checkpoint yet)") + f" with {nxt.training.workers} worker(s)"
            else:
                action = "fail the job" + ("" if policy == "fail" or failure.retryable else
                                           " (a setting is wrong: restarting cannot help)")
            store.add_stage(run_id, "alarm", attempt=attempt, step=failure.step, worker=failure.rank, detail={
                "kind": failure.kind, "summary": failure.error, "last_heartbeat": failure.last_beat,
                "policy": policy, "action": action})
            print(f"lab.train: attempt {attempt}: {failure.error}; {action}", file=log)
            _copy_logs(logs, log, attempt)
            if not again:
                suffix = f" (after {restarts} restart(s))" if restarts else ""
                # A lost node is the cluster's fault, as a server's restart is: the run is interrupted, not failed
                store.set_status(run_id, "interrupted" if failure.kind == "lost" else "failed",
                                 error=failure.error + suffix, only_from=("running", "queued"))
                break
            restarts += 1
            attempt += 1
            current = nxt
    except Stopped as sig:
        processes.kill_and_reap(procs, KILL_GRACE_S)
        store.set_status(run_id, "stopped", error=f"stopped by {sig}", only_from=("running", "queued"))
    except LabError as exc:  # the cluster cannot take the job (too few CPUs, unreachable)
        store.set_status(run_id, "failed", error=str(exc), only_from=("running", "queued"))
    finally:
        processes.kill_and_reap(procs, KILL_GRACE_S)
        if cluster and procs:
            procs.release()
        for s, h in old.items():
            signal.signal(s, h)
        shutil.rmtree(tmp, ignore_errors=True)
        _record_end(store, run_id, attempt, meter)
    run = store.get_run(run_id)
    return LaunchResult(run_id, run["status"], final_accuracy(store, run_id), run["error"], restarts)


def named(failure: Failure | None, sc: Scenario) -> Failure | None:
    """A placement run's failure names the stage: which device's process failed, and the operators it held."""
    if failure is None or failure.rank is None or sc.training.parallel != "placement":
        return failure
    from lab.train.placement_run import stage_devices

    devices = stage_devices(sc)
    if not 0 <= failure.rank < len(devices):
        return failure
    dev = devices[failure.rank]
    ops = [op for op, d in sc.training.placement if d == dev]
    if sc.training.balance != "off":  # its operators move between rounds
        who = f"the stage process of device {dev} (rank {failure.rank})"
    else:
        who = (f"the stage process of device {dev} (rank {failure.rank}: "
               f"{', '.join(ops[:6])}{', ...' if len(ops) > 6 else ''})")
    return dataclasses.replace(failure, error=re.sub(r"^worker \d+", who, failure.error))


def _record_end(store: RunStore, run_id: str, attempt: int, meter: processes.LoadMeter | None = None) -> None:
    try:
        if meter is not None:  # after the ranks are reaped: their CPU time is the job's own
            store.merge_info(run_id, {"load": meter.result()})
        status = store.status(run_id)
        if status in ACTIVE:  # cannot happen through launch(); belt and braces
            store.set_status(run_id, "failed", error="the launcher ended without a result", only_from=ACTIVE)
            status = "failed"
        store.set_heartbeats(run_id, [])
        store.add_stage(run_id, "ended", attempt=attempt, detail={"status": status})
        left = processes_of(run_id, exclude=(os.getpid(),))
        store.add_stage(run_id, "released", attempt=attempt, detail={
            "by": "launcher", "worker_processes_left": len(left), "pids_left": left})
    except Exception as exc:  # noqa: BLE001 - the store may be gone; the processes are already reaped
        log.warning("the end of run %s could not be recorded: %s: %s", run_id, type(exc).__name__, exc)


def _spawn(sc: Scenario, run_id: str, tmp: Path, store: RunStore, attempt: int, sock: socket.socket, logs: Path,
           cpus: list[int] | None, cluster: str = "") -> list[subprocess.Popen]:
    world = world_size(sc)
    db = store.path
    base = settings.child_env()
    base.update({
        "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(sock.getsockname()[1]), "LAB_DB": str(Path(db).resolve()),
        "LAB_LAUNCHER_PID": str(os.getpid()), "LAB_ATTEMPT": str(attempt),
        "LAB_RDZV_PREFIX": f"lab/{run_id}/{attempt}/{os.getpid()}/", **settings.THREAD_VARIABLES,
    })
    for k in ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "LAB_STORE_FD"):
        base.pop(k, None)
    if cluster:
        try:
            from lab.train import ray_ranks  # Ray is loaded by the launchers of cluster jobs only
        except ImportError as exc:
            raise LabError(f"LAB_RAY_ADDRESS is set but Ray cannot be loaded ({exc}): install it with "
                           "pip install -r requirements-ray.txt", where="LAB_RAY_ADDRESS") from None

        said = []

        def waiting(seconds: float) -> None:  # said once: Ray queues the job until all its ranks fit
            if not said and seconds >= 2 * ray_ranks.READY_POLL_S:
                said.append(seconds)
                store.add_stage(run_id, "waiting", attempt=attempt, detail={
                    "for": f"room on the Ray cluster for {world} ranks at once"})

        return ray_ranks.spawn(sc, run_id, world, base, tmp, db, cluster, on_wait=waiting)
    spec = None  # what a cold worker reads on its standard input
    procs = []
    for rank in range(world):
        env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank), LAB_ERROR_FILE=str(tmp / f"rank{rank}.err"),
                   LAB_HEARTBEAT_FILE=str(tmp / f"rank{rank}.hb"))
        (tmp / f"rank{rank}.err").unlink(missing_ok=True)
        (tmp / f"rank{rank}.hb").unlink(missing_ok=True)
        fds: tuple = ()
        if rank == 0:
            env["LAB_STORE_FD"] = str(sock.fileno())
            fds = (sock.fileno(),)
        cpu = cpus[rank % len(cpus)] if cpus else None
        log_file = logs / f"rank{rank}.log"
        with open(log_file, "ab") as err:
            err.write(f"===== {time.strftime('%Y-%m-%d %H:%M:%S')} attempt {attempt}: rank {rank} of {world}"
                      f"{f', cpu {cpu}' if cpu is not None else ''} =====\n".encode())
        if fork.FORK_WORKERS:  # a launcher forked by the warm starter forks its workers, which hold the scenario
            procs.append(fork.fork_child(lambda: _rank_main(sc, run_id), env, log_file, fds, cpu))
            continue
        spec = spec or json.dumps({"run_id": run_id, "scenario": sc.to_dict()}).encode()
        with open(log_file, "ab") as err:
            p = subprocess.Popen([sys.executable, "-m", "lab.train", "--spec", "-"], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=err, cwd=str(ROOT), pass_fds=fds,
                                 preexec_fn=(lambda c=cpu: processes.pin(c)) if cpu is not None else None)
        procs.append(p)
        try:
            p.stdin.write(spec)
            p.stdin.close()
        except OSError:  # it died at once: its exit code says so to the watch
            pass
    return procs


def _rank_main(sc: Scenario, run_id: str) -> int:
    """A forked worker: the rank's code on the scenario it inherited."""
    from lab.train.rank import run_rank  # the starter imported it (and torch) before it forked this

    return run_rank(sc, run_id, quiet=True)


def _watch(procs: list[subprocess.Popen], tmp: Path, store: RunStore | None = None, run_id: str | None = None,
           attempt: int = 0, logs: Path | None = None) -> Failure | None:
    """Wait until every worker exits 0 (None) or one fails or hangs (a :class:`Failure`)."""

    started = time.time()
    stored = 0.0
    unrecorded: str | None = None  # the store's last failure, said once
    while True:
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            return None
        beats = [read_heartbeat(tmp / f"rank{r}.hb") for r in range(len(procs))]
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            return _root_cause(procs, failed, tmp, beats, logs)
        now = time.time()
        hung = _stuck(procs, beats, now, started)
        if hung is not None:
            return hung
        if store is not None and now - stored >= BEATS_TO_STORE_S:
            stored = now
            try:
                store.set_heartbeats(run_id, [dict(worker=r, attempt=attempt, pid=(b or {}).get("pid", p.pid),
                                                   step=(b or {}).get("step"), phase=(b or {}).get("phase"),
                                                   t=(b or {}).get("t"), progress_t=(b or {}).get("progress_t"))
                                              for r, (p, b) in enumerate(zip(procs, beats))])
                store.beat_launcher(run_id, now)
            except Exception as exc:  # noqa: BLE001 - monitoring must not end the job
                why = f"{type(exc).__name__}: {exc}"
                if why != unrecorded:  # said once while the same failure repeats, not every poll
                    log.warning("heartbeats of run %s could not be stored: %s", run_id, why)
                unrecorded = why
            else:
                unrecorded = None
        time.sleep(POLL_S)


def _stuck(procs, beats, now: float, started: float) -> Failure | None:
    """A worker that froze (its heartbeat file not rewritten for LAB_FROZEN_TIMEOUT s; before the
    first step LAB_START_TIMEOUT) or hangs (it still beats, but its step has not moved for
    LAB_HEARTBEAT_TIMEOUT s while it is busy, i.e. not waiting for its peers). Workers waiting for
    their peers are not blamed, except when every live worker waits and none moves (a deadlock).
    A stale file alone (a process starved of CPU on a loaded machine) only counts once it is older
    than the frozen timeout, so load does not cause false alarms."""
    hb, st, fz, fresh = heartbeat_timeout(), start_timeout(), frozen_timeout(), _fresh_s()
    live = [r for r, p in enumerate(procs) if p.poll() is None and (beats[r] or {}).get("phase") != "exiting"]
    culprits, stalled_comm, frozen = [], [], set()
    for r in live:
        b = beats[r]
        if b is None:
            if now - started > st:
                culprits.append(r)
            continue
        first = b.get("step", 0) == 0
        if now - b["t"] > (st if first else fz):
            culprits.append(r)
            frozen.add(r)
            continue
        if now - b["t"] > fresh or now - b["progress_t"] <= (st if first else hb):
            continue
        if b.get("phase") != "comm":
            culprits.append(r)
        else:
            stalled_comm.append(r)
    if not culprits:
        if not live or len(stalled_comm) < len(live):
            return None
        culprits = stalled_comm  # everyone waits for everyone
    r = culprits[0]
    b = beats[r]
    if b is None:
        return Failure(r, "hung", f"worker {r} (pid {procs[r].pid}) sent no heartbeat within {st:g} s of its start",
                       0, True, None)
    waiting = [k for k in live if k != r and beats[k] and beats[k].get("phase") == "comm"]
    if r in frozen:
        text = (f"worker {r} (pid {procs[r].pid}) froze at step {b['step']}: its heartbeat stopped "
                f"{now - b['t']:.1f} s ago (timeout {fz if b.get('step') else st:g} s)")
        kind = "frozen"
    else:
        text = (f"worker {r} (pid {procs[r].pid}) hangs at step {b['step']}"
                + (f" in {b['where']}()" if b.get("where") else "")
                + f": no progress for {now - b['progress_t']:.1f} s (heartbeat timeout {hb:g} s)")
        kind = "hung" if b.get("phase") != "comm" else "deadlock"
    if waiting:
        text += f"; worker(s) {', '.join(map(str, waiting))} wait for it"
    return Failure(r, kind, text, b.get("step"), True, b.get("t"))


def _read_error(tmp: Path, rank: int) -> dict | None:
    try:
        return json.loads((tmp / f"rank{rank}.err").read_text())
    except (OSError, ValueError):
        return None


def _root_cause(procs, failed: list[int], tmp: Path, beats: list | None = None, logs: Path | None = None) -> Failure:
    beats = beats or [None] * len(procs)
    errors = {r: _read_error(tmp, r) for r in failed}
    texts = " ".join((e or {}).get("summary", "") + (e or {}).get("traceback", "") for e in errors.values())
    if ("address already in use" in texts.lower() or "EADDRINUSE" in texts) and \
            all((e or {}).get("step", 0) == 0 for e in errors.values()):
        return Failure(None, "port-taken", "the rendezvous port was taken", 0, True)
    primary = [r for r in failed if errors[r] and not errors[r].get("secondary")]
    killed = [r for r in failed if procs[r].returncode < 0 and not errors[r]]
    lost = [r for r in killed if getattr(procs[r], "lost", None)]  # a rank on a Ray node that left the cluster
    if lost:
        r = lost[0]
        return Failure(r, "lost", f"worker {r} was lost: {procs[r].lost}", (beats[r] or {}).get("step"), True,
                       (beats[r] or {}).get("t"))
    if not primary and not killed:  # only "peer closed / timed out": blame a live worker that hangs
        now = time.time()
        busy = [r for r, p in enumerate(procs) if p.poll() is None and beats[r]
                and beats[r].get("phase") != "comm"]
        if busy:
            r = busy[0]
            b = beats[r]
            return Failure(r, "hung", f"worker {r} (pid {procs[r].pid}) hangs at step {b['step']}: its peers gave up "
                           f"waiting for it after {now - b['progress_t']:.1f} s ({errors[failed[0]]['summary']})",
                           b.get("step"), True, b.get("t"))
    for group in (primary, killed, [r for r in failed if errors[r]], failed):
        if group:
            r = group[0]
            break
    e, code = errors[r], procs[r].returncode
    last = (beats[r] or {}).get("t")
    step = (e or {}).get("step", (beats[r] or {}).get("step"))
    if e:
        return Failure(r, "error", e["summary"], step, e.get("type") != "LabError", last)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return Failure(r, "killed", f"worker {r} (pid {procs[r].pid}) was killed by signal {name}", step, True, last)
    tail = " ".join(processes.last_lines((logs or tmp) / f"rank{r}.log", 1))[-500:]
    return Failure(r, "exited", f"worker {r} (pid {procs[r].pid}) exited with code {code}" + (f": {tail}" if tail else ""),
                   step, True, last)


def _copy_logs(logs: Path, log, attempt: int) -> None:
    for f in sorted(logs.glob("rank*.log")):
        text = processes.tail_text(f).split(f"attempt {attempt}:")[-1].strip()
        if text:
            print(f"----- {f.stem} (attempt {attempt}) -----\n{text[-4000:]}", file=log)
