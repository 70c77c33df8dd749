"""One rank of a job as a process: its entry point (run_rank), agreeing on the run, reporting its own error for the launcher, dying with its launcher."""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist

from lab import settings
from lab.errors import LabError, first_line
from lab.scenario.document import Scenario
from lab.store.runs import RunStore
from lab.train import resilience as rz
from lab.train.placement_run import PlacementTrainer
from lab.train.trainer import Trainer
from lab.comm.peers import waits_for_peers


def _die_with_parent() -> None:
    """Launcher mode: the kernel kills this worker if the launcher dies (Linux prctl PDEATHSIG)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    ppid = int(settings.raw("LAB_LAUNCHER_PID") or 0)
    if ppid and os.getppid() != ppid:  # the launcher was already gone
        os._exit(1)

    def watch() -> None:  # portable fallback
        while True:
            time.sleep(1.0)
            if ppid and os.getppid() != ppid:
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _report_error(exc: BaseException, rank: int, step: int, run_id: str | None, store: RunStore | None) -> None:
    summary = f"worker {rank} failed at step {step}: {type(exc).__name__}: {first_line(str(exc))}"
    if isinstance(exc, LabError):
        summary = f"worker {rank} stopped at step {step}: {exc}"
    tb = traceback.format_exc()
    err_file = settings.raw("LAB_ERROR_FILE")
    if err_file:
        try:
            tmp = err_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"rank": rank, "step": step, "type": type(exc).__name__, "summary": summary,
                           "secondary": _is_secondary(exc), "traceback": tb}, f)
            os.replace(tmp, err_file)
        except OSError:
            pass
    elif store is not None and run_id:

        try:
            if rz.under_torchrun() and rz.torchrun_restarts_left():  # torchrun starts the job again
                store.job_records.add_event(run_id, "alarm", attempt=rz.attempt(), step=step, worker=rank,
                                detail={"summary": summary, "secondary": _is_secondary(exc),
                                        "action": "torchrun restarts the job (--max-restarts)"})
            else:
                store.set_status(run_id, "failed", error=summary, only_from=("queued", "running"))
        except Exception as store_exc:  # noqa: BLE001 - the store may be unreachable on this machine
            sys.stderr.write(f"the failure could not be recorded in the run store: "
                             f"{type(store_exc).__name__}: {store_exc}\n")
    sys.stderr.write(tb)
    sys.stderr.flush()


def _is_secondary(exc: BaseException) -> bool:
    """An error caused by another worker's failure (a peer closed its connection, or timed out)."""
    if isinstance(exc, (LabError,)) and "parameters differ" not in str(exc):
        return False
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(s in text for s in ("connection closed", "connection reset", "broken pipe", "timed out",
                                   "timeout", "gloo", "peer", "socket", "distbackenderror", "distnetworkerror"))


def run_rank(sc: Scenario, run_id: str | None, *, store_path: str | None = None, name: str | None = None,
             quiet: bool = False, store: RunStore | None = None, relay=None, exit_on_error: bool = True) -> int:
    """Entry point of one rank: reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment
    (set by torchrun or by the lab's launcher). Returns the process exit code. A rank on a Ray node
    (:mod:`lab.train.ray_ranks`) passes the run store it reaches through Ray, where its heartbeats go too
    (``relay``), and returns 1 on a failure instead of ending its process (Ray's worker reports it)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    launched = bool(settings.raw("LAB_ERROR_FILE"))
    if launched and store is None:  # a Ray rank's parent is Ray's own daemon, and its process runs job after job
        _die_with_parent()
    torch.set_num_threads(1)
    if store is None:
        store = RunStore(store_path)  # opened only when used: rank 0 writes, the checkpoint owner saves
    trainer = None

    holder: list = []
    beat = None
    if settings.raw("LAB_HEARTBEAT_FILE"):
        beat = rz.Heartbeat(settings.raw("LAB_HEARTBEAT_FILE"), lambda: holder[0].step_no if holder else 0,
                            relay=relay).start()
    try:
        rz.init_process_group(rank, world, settings.number("LAB_GLOO_TIMEOUT"))
        run_id = _agree_run_id(sc, run_id, rank, world, store, name)
        job = PlacementTrainer if sc.training.parallel == "placement" else Trainer
        trainer = job(sc, rank, world, run_id, store, launched=launched)
        holder.append(trainer)
        trainer.setup()
        trainer.resume()
        result = trainer.run()
        if world > 1:
            dist.barrier()
        if rank == 0 and store is not None:
            if result["diverged"] is not None:
                s, v = result["diverged"]
                store.set_status(run_id, "diverged", error=f"the training loss became {v} at step {s}; "
                                 "the run stopped (lower the learning rate)", only_from=("running",))
            else:
                store.set_status(run_id, "done", only_from=("running",))
            if not launched and not quiet:
                print(f"run {run_id} test_accuracy {result['test_acc']:.6f}", flush=True)
        dist.destroy_process_group()
        if beat is not None:
            beat.stop("exiting")  # the launcher expects no more heartbeats from this worker
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, then the process ends
        _report_error(exc, rank, trainer.step_no if trainer else 0, run_id, store)
        sys.stdout.flush()
        if not exit_on_error:  # a Ray worker: its actor returns the failure, and the launcher ends the process
            if beat is not None:
                beat.stop()
            if dist.is_initialized():  # the process lives on: its next job needs a process group of its own
                try:
                    dist.destroy_process_group()
                except RuntimeError as err:  # torch's DistBackendError: a group its peers broke is gone either way
                    print(f"rank {rank}: the broken process group could not be shut down cleanly: {err}",
                          file=sys.stderr, flush=True)
            return 1
        os._exit(1)


@waits_for_peers
def _agree_run_id(sc: Scenario, run_id: str | None, rank: int, world: int, store: RunStore | None,
                  name: str | None) -> str:
    """Rank 0 makes sure the run exists in the store. Under torchrun without --run-id, rank 0 creates
    it and tells the others its id (every rank got the same arguments, so all take the same path)."""

    given = run_id is not None
    elastic = os.environ.get("TORCHELASTIC_RUN_ID") if rz.under_torchrun() else None
    if rank == 0 and store is not None and run_id is None and elastic and rz.attempt() > 0:
        run_id = store.find_run(elastic_run_id=elastic)  # torchrun restarted us: the same run
    if rank == 0 and store is not None:
        if run_id is None or not _exists(store, run_id):
            run_id = store.create_run(sc, name=name, status="running", run_id=run_id)
            store.update_run(run_id, pid=os.getpid())
            if elastic:
                store.merge_info(run_id, {"elastic_run_id": elastic})
        elif not settings.raw("LAB_ERROR_FILE"):
            store.set_status(run_id, "running", only_from=("queued",))
            store.update_run(run_id, pid=os.getpid())
        if elastic:
            store.job_records.add_event(run_id, "started", attempt=rz.attempt(), detail={
                "launcher": "torchrun", "world": world, "elastic_run_id": elastic, "rank0_pid": os.getpid(),
                "max_restarts": os.environ.get("TORCHELASTIC_MAX_RESTARTS")})
    if given or world == 1:
        return run_id
    buf = torch.zeros(64, dtype=torch.uint8)
    if rank == 0:
        raw = run_id.encode()
        buf[:len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    dist.broadcast(buf, 0)
    return bytes(buf[buf > 0].tolist()).decode()


def _exists(store: RunStore, run_id: str) -> bool:
    try:
        store.get_run(run_id)
        return True
    except LabError:
        return False
