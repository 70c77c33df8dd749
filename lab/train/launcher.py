"""The lab's launcher: starts N worker processes on this machine (N + 1 with a parameter server),
watches them, and ends the job -- or restarts it from its last checkpoint -- within seconds when
any of them fails.

It does what torchrun does for one machine, so the workers run the very same rank code either way:
each worker has RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in its environment and runs
:func:`lab.train.rank.run_rank` on the attempt's scenario, which it receives as data: a launcher
that is a process of the job's own (forked by the warm starter, or started from the command line or
by the job manager) forks its workers, which hold the scenario, torch and the data already; a launch
from inside another program starts ``python -m lab.train --spec -`` for each and writes the scenario
to its standard input (:mod:`lab.train.ranks`). The job manager hands a launcher a :class:`JobSpec`
the same way (:func:`run_job`). The launcher also

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
* claims the run in the run store (:meth:`lab.store.job_records.JobRecords.claim`): who it is (pid, process
  group, creation time, host, boot, and its scratch folder), and beats there every second, so that a
  job manager finds a launcher killed with SIGKILL (which can record nothing) while the app runs
  (:meth:`lab.jobs.manager.JobManager.sweep`) and finds the job's processes by their group
  (:func:`processes_of`).

The workers stay in the launcher's process group. Started by :mod:`lab.jobs.manager` (new session) or by an
interactive shell (its own job), the launcher leads that group, so one ``killpg`` ends the whole job.
"""

from __future__ import annotations

import dataclasses

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
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from lab import processes, settings
from lab.errors import LabError
from lab.scenario.document import Scenario
from lab.scenario.groups import resource_groups
from lab.store.runs import ACTIVE, JOB_WORKER, RunStore, check_run_id
from lab.train.launcher_record import identity, logs_dir, processes_of, scratch_prefix
from lab.train.placed import PlacedRanks
from lab.train.ranks import RankBackend, rank_backend
from lab.train.resilience import latest_checkpoint
from lab.train.watch import Failure, copy_logs, watch_ranks

log = logging.getLogger("lab.train")

POLL_S = 0.05
KILL_GRACE_S = 5.0
BEATS_TO_STORE_S = 1.0


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
    ray_address: str = ""  # a Ray cluster's address: the ranks run there (lab.train.ray_ranks)
    placed: dict | None = None  # a placement run's ranks as decided at submit (PlacedRanks.to_dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d) -> "JobSpec":
        if not isinstance(d, dict) or not isinstance(d.get("scenario"), dict) or not isinstance(d.get("db"), str):
            raise LabError("a job spec needs a run id, a scenario and a run store", where="job spec")
        try:
            cpus = tuple(int(c) for c in d.get("cpus") or ())
            placed = d.get("placed")
            if placed is not None and not isinstance(placed, dict):
                raise ValueError("its placement must be a record")
            return cls(check_run_id(d.get("run_id")), d["scenario"], d["db"], cpus, int(d.get("nice") or 0),
                       bool(d.get("idle")), str(d.get("ray_address") or ""), placed)
        except (TypeError, ValueError) as exc:
            raise LabError(f"a malformed job spec: {exc}", where="job spec") from None


def run_job(spec: JobSpec, log=sys.stderr) -> int:
    """The launcher of a job the job manager started (forked by the warm starter, or cold): its priority,
    then :func:`launch` on the spec's scenario, which the job manager checked already; returns the process's
    exit code. The process is the job's own, so its ranks fork from it."""
    processes.as_background_work(spec.nice, spec.idle)
    try:
        placed = PlacedRanks.from_dict(spec.placed) if spec.placed is not None else None
        res = launch(Scenario.from_dict(spec.scenario), spec.run_id, store_path=spec.db,
                     cpus=list(spec.cpus) or None, checked=True, placed=placed,
                     ranks=rank_backend(spec.ray_address, own_process=True))
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


class Checked(NamedTuple):
    """A scenario as its job runs it (a placement run's plan written out) and, for a placement run, its ranks as the
    plan decides them (None for data parallel)."""

    scenario: Scenario
    placed: PlacedRanks | None = None


def preflight(sc: Scenario) -> Checked:
    """Every check a worker would fail, run before any process starts, so that a wrong setting is one
    LabError here (exit 2 and one line on the command line) and never a failed job with a traceback
    per worker: the devices of the scenario, then what every worker's setup does
    (:func:`lab.train.layout.check_scenario`: the data, the model, the plan with each worker's device
    and its kernels, the optimiser, the shards). Returns the scenario as the job runs it: a placement run's
    with its plan written out (:func:`lab.train.placement_run.resolved`), and its ranks
    (:func:`lab.train.placement_run.placed_ranks`): the model is traced and cut here, once, at submit."""
    tr = sc.training
    sc.check_devices()
    if tr.parallel == "placement":  # the plan written out, so every process and the store see the same one
        from lab.train.placement_run import placed_ranks, resolved

        sc = resolved(sc)
        return Checked(sc, placed_ranks(sc))
    if (tr.emulate or tr.split == "weighted") and len(tr.worker_devices) < tr.workers:
        need = "emulation" if tr.emulate else "a weighted split"
        raise LabError(f"{need} needs the device of every worker: {tr.workers} workers but "
                       f"{len(tr.worker_devices)} device(s) listed (devices of the topology: "
                       f"{sc.topology.device_names})", where="training.worker_devices")
    # Imported here: the plan needs torch, which this module must not load when it is imported (the job
    # manager imports it); a launcher pays for torch only once it is about to start a job's workers.
    from lab.train.layout import check_scenario

    check_scenario(sc)
    return Checked(sc)


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


def parse_cpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        return None


def launch(sc: Scenario, run_id: str | None = None, *, name: str | None = None,
           store_path: str | os.PathLike | None = None, log=sys.stderr,
           cpus: list[int] | None = None, checked: bool = False, placed: PlacedRanks | None = None,
           ranks: RankBackend | None = None) -> LaunchResult:
    """Run the scenario's training job to its end (restarting it after faults when its policy is
    ``recover``); returns the run id, status and final accuracy. ``checked``: the scenario passed
    :func:`preflight` already (the job manager's, at submit), which decided a placement run's ranks ``placed``
    (a placement run checked without them is checked again). ``ranks``: how the ranks start
    (:mod:`lab.train.ranks`; default cold processes on this machine, as a fork from inside another
    program is not safe)."""
    ranks = ranks or rank_backend()
    store = RunStore(store_path)
    if not checked or (placed is None and sc.training.parallel == "placement"):
        sc, placed = preflight(sc)
    if placed is not None and (sc.training.parallel != "placement" or len(placed.devices) != world_size(sc)):
        raise LabError(f"the job spec places {len(placed.devices)} ranks, and the scenario's "
                       f"{sc.training.parallel} job has {world_size(sc)}", where="job spec")
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
    if store.job_records.last_event(run_id, "submitted") is None:  # started by hand, not through lab.jobs.manager
        store.job_records.add_event(run_id, "submitted", detail={"by": "command line", "pid": os.getpid()})
        store.job_records.add_event(run_id, "parsed", detail=parse_job(sc))
    if not checked:  # the scenario as it runs (a placement run's plan written out)
        store.update_run(run_id, scenario=sc.to_dict())
    # The run becomes running together with who runs it: a sweep never sees a running run without
    # its launcher, and a second launcher of the same run (a warm starter that died before it could
    # answer, and the cold start that replaced it) finds it taken.
    if not store.job_records.claim(run_id, **identity()):
        return LaunchResult(run_id, store.status(run_id), math.nan, "stopped, or started elsewhere, before it started")
    cpus = cpus if cpus is not None else parse_cpus(settings.raw("LAB_RANK_CPUS"))
    if cpus and not ranks.remote and placed is not None:
        cpus = placed.cores(cpus)
    # Other work on this machine slows a run the model does not know about: measure how much there was. A
    # cluster's ranks on other machines make it moot (:meth:`RankBackend.outside_cpu` says so after they ran).
    meter: processes.LoadMeter | None = processes.LoadMeter()
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    tmp = Path(tempfile.mkdtemp(prefix=scratch_prefix(run_id)))
    store.job_records.set_launcher(run_id, scratch=str(tmp))
    logs = logs_dir(store, run_id)
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    attempt, current, restarts = 0, sc, 0
    try:
        while True:
            sock = listening_socket()
            try:
                ranks.prepare(store)
                procs = _spawn(current, run_id, tmp, store, attempt, sock, logs, cpus, ranks,
                               placed.devices if placed is not None else None)
                store.job_records.add_event(run_id, "started", attempt=attempt, detail={
                    "launcher": "lab", "start": ranks.name,
                    "launcher_pid": os.getpid(), "world": len(procs),
                    "workers": current.training.workers, "pids": [p.pid for p in procs],
                    "port": None if ranks.remote else sock.getsockname()[1],
                    "cpus": (cpus or [])[:len(procs)] or None, **ranks.where(procs)})
                failure = named(watch_ranks(procs, tmp, store, run_id, attempt, logs), current, placed)
                outside = ranks.outside_cpu(procs)
                if outside is None:
                    meter = None
                elif meter is not None:
                    meter.own.add(outside)
            finally:
                sock.close()
            if failure is None:
                store.set_status(run_id, "done", only_from=("running",))  # normally rank 0 did this already
                break
            processes.kill_and_reap(procs, KILL_GRACE_S)
            ranks.release(procs)
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
            store.job_records.add_event(run_id, "alarm", attempt=attempt, step=failure.step, worker=failure.rank, detail={
                "kind": failure.kind, "summary": failure.error, "last_heartbeat": failure.last_beat,
                "policy": policy, "action": action})
            print(f"lab.train: attempt {attempt}: {failure.error}; {action}", file=log)
            copy_logs(logs, log, attempt)
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
        ranks.release(procs)
        for s, h in old.items():
            signal.signal(s, h)
        shutil.rmtree(tmp, ignore_errors=True)
        _record_end(store, run_id, attempt, meter)
    run = store.get_run(run_id)
    return LaunchResult(run_id, run["status"], final_accuracy(store, run_id), run["error"], restarts)


def named(failure: Failure | None, sc: Scenario, placed: PlacedRanks | None) -> Failure | None:
    """A placement run's failure names the stage: which device's process failed, and the operators it held."""
    if failure is None or failure.rank is None or placed is None:
        return failure
    devices = placed.devices
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
        store.job_records.set_heartbeats(run_id, [])
        store.job_records.add_event(run_id, "ended", attempt=attempt, detail={"status": status})
        left = processes_of(run_id, exclude=(os.getpid(),))
        store.job_records.add_event(run_id, "released", attempt=attempt, detail={
            "by": "launcher", "worker_processes_left": len(left), "pids_left": left})
    except Exception as exc:  # noqa: BLE001 - the store may be gone; the processes are already reaped
        log.warning("the end of run %s could not be recorded: %s: %s", run_id, type(exc).__name__, exc)


def _spawn(sc: Scenario, run_id: str, tmp: Path, store: RunStore, attempt: int, sock: socket.socket, logs: Path,
           cpus: list[int] | None, ranks: RankBackend, devices: tuple[str, ...] | None) -> list[subprocess.Popen]:
    """Start one attempt's ranks through ``ranks``, with the environment every rank shares."""
    world = world_size(sc)
    base = settings.child_env()
    base.update({
        "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(sock.getsockname()[1]), "LAB_DB": str(Path(store.path).resolve()),
        "LAB_LAUNCHER_PID": str(os.getpid()), "LAB_ATTEMPT": str(attempt),
        "LAB_RDZV_PREFIX": f"lab/{run_id}/{attempt}/{os.getpid()}/", **settings.THREAD_VARIABLES,
    })
    for k in ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "LAB_STORE_FD"):
        base.pop(k, None)
    said = []

    def waiting(seconds: float) -> None:  # said once: the ranks wait until all of them fit
        if not said:
            said.append(seconds)
            store.job_records.add_event(run_id, "waiting", attempt=attempt, detail={
                "for": f"room on the Ray cluster for {world} ranks at once"})

    return ranks.spawn(sc, run_id, world, base, tmp, logs, sock, cpus, waiting, devices)
