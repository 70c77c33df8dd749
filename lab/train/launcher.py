"""The lab's launcher: starts N worker processes on this machine (N + 1 with a parameter server),
watches them, and ends the whole job within a fraction of a second when any of them fails.

It does what torchrun does for one machine, so the workers run the very same code either way:
each worker is ``python -m lab.train --scenario FILE --run-id ID`` with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT in its environment. The launcher also

* picks a free port for the rendezvous (and retries with another if it was taken meanwhile),
* passes LAB_ERROR_FILE so a failing worker leaves its error for the launcher, which stores the
  root cause (not the "connection closed" its peers see afterwards),
* kills and reaps every worker on failure, on SIGTERM/SIGINT/SIGHUP (marking the run stopped), and
  -- through PR_SET_PDEATHSIG in the workers -- when the launcher itself is killed.

The workers stay in the launcher's process group. Started by :mod:`lab.jobs` (new session) or by an
interactive shell (its own job), the launcher leads that group, so one ``killpg`` ends the whole job.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lab.errors import LabError
from lab.runs import JOB_WORKER, RunStore
from lab.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.05
KILL_GRACE_S = 5.0


class Stopped(BaseException):
    """The launcher received SIGTERM, SIGINT or SIGHUP."""


@dataclass(frozen=True)
class LaunchResult:
    run_id: str
    status: str
    test_accuracy: float
    error: str | None = None

    @property
    def exit_code(self) -> int:
        return {"done": 0, "diverged": 2, "stopped": 143}.get(self.status, 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def world_size(sc: Scenario) -> int:
    tr = sc.training
    return tr.workers + (1 if tr.sync == "param_server" else 0)


def _on_signal(signum, frame):  # noqa: ARG001
    raise Stopped(signal.Signals(signum).name)


def final_accuracy(store: RunStore, run_id: str) -> float:
    m = store.metrics(run_id, worker=JOB_WORKER)
    acc = m.test_acc.dropna()
    return float(acc.iloc[-1]) if len(acc) else math.nan


def preflight(sc: Scenario) -> None:
    """Checks that need no worker: fail before any process starts (the workers check the rest)."""
    tr = sc.training
    sc.check_devices()
    if (tr.emulate or tr.split == "weighted") and len(tr.worker_devices) < tr.workers:
        need = "emulation" if tr.emulate else "a weighted split"
        raise LabError(f"{need} needs the device of every worker: {tr.workers} workers but "
                       f"{len(tr.worker_devices)} device(s) listed (devices of the topology: "
                       f"{sc.topology.device_names})", where="training.worker_devices")


def launch(sc: Scenario, run_id: str | None = None, *, name: str | None = None,
           store_path: str | os.PathLike | None = None, log=sys.stderr) -> LaunchResult:
    """Run the scenario's training job to its end; returns the run id, status and final accuracy."""
    store = RunStore(store_path)
    preflight(sc)
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
    store.update_run(run_id, pid=os.getpid(), scenario=sc.to_dict())
    if not store.set_status(run_id, "running", only_from=("queued",)):
        return LaunchResult(run_id, store.status(run_id), math.nan, "stopped before it started")
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    tmp = Path(tempfile.mkdtemp(prefix=f"lab-job-{run_id}-"))
    procs: list[subprocess.Popen] = []
    try:
        scenario_file = tmp / "scenario.json"
        scenario_file.write_text(sc.to_json())
        for attempt in range(3):
            procs = _spawn(sc, run_id, scenario_file, tmp, store.path)
            outcome = _watch(procs, tmp)
            if outcome == "port-taken" and attempt < 2:
                _kill_all(procs)
                print("lab.train: the rendezvous port was taken; retrying with another", file=log)
                continue
            break
        if outcome == "ok":
            store.set_status(run_id, "done", only_from=("running",))  # normally rank 0 did this already
        else:
            rank, error = outcome
            _kill_all(procs)
            _copy_logs(tmp, log)
            store.set_status(run_id, "failed", error=error, only_from=("running", "queued"))
    except Stopped as sig:
        _kill_all(procs)
        store.set_status(run_id, "stopped", error=f"stopped by {sig}", only_from=("running", "queued"))
    finally:
        _kill_all(procs)
        for s, h in old.items():
            signal.signal(s, h)
        shutil.rmtree(tmp, ignore_errors=True)
    run = store.get_run(run_id)
    return LaunchResult(run_id, run["status"], final_accuracy(store, run_id), run["error"])


def _spawn(sc: Scenario, run_id: str, scenario_file: Path, tmp: Path, db: Path) -> list[subprocess.Popen]:
    world = world_size(sc)
    port = free_port()
    base = dict(os.environ)
    base.update({
        "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port), "LAB_DB": str(Path(db).resolve()), "LAB_LAUNCHER_PID": str(os.getpid()),
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    })
    procs = []
    for rank in range(world):
        env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank), LAB_ERROR_FILE=str(tmp / f"rank{rank}.err"))
        err = open(tmp / f"rank{rank}.log", "wb")
        try:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "lab.train", "--scenario", str(scenario_file), "--run-id", run_id, "--quiet"],
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=str(ROOT)))
        finally:
            err.close()
    return procs


def _watch(procs: list[subprocess.Popen], tmp: Path):
    """Wait until every worker exits 0 ("ok") or one fails: returns (rank, error text)."""
    while True:
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            return "ok"
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            return _root_cause(procs, failed, tmp)
        time.sleep(POLL_S)


def _read_error(tmp: Path, rank: int) -> dict | None:
    try:
        return json.loads((tmp / f"rank{rank}.err").read_text())
    except (OSError, ValueError):
        return None


def _root_cause(procs, failed: list[int], tmp: Path):
    errors = {r: _read_error(tmp, r) for r in failed}
    texts = " ".join((e or {}).get("summary", "") + (e or {}).get("traceback", "") for e in errors.values())
    if ("address already in use" in texts.lower() or "EADDRINUSE" in texts) and \
            all((e or {}).get("step", 0) == 0 for e in errors.values()):
        return "port-taken"
    primary = [r for r in failed if errors[r] and not errors[r].get("secondary")]
    killed = [r for r in failed if procs[r].returncode < 0 and not errors[r]]
    for group in (primary, killed, [r for r in failed if errors[r]], failed):
        if group:
            r = group[0]
            break
    e, code = errors[r], procs[r].returncode
    if e:
        return r, e["summary"]
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return r, f"worker {r} (pid {procs[r].pid}) was killed by signal {name}"
    tail = _tail(tmp / f"rank{r}.log")
    return r, f"worker {r} (pid {procs[r].pid}) exited with code {code}" + (f": {tail}" if tail else "")


def _tail(path: Path, lines: int = 1) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " ".join(text[-lines:])[-500:]


def _copy_logs(tmp: Path, log) -> None:
    for f in sorted(tmp.glob("rank*.log")):
        text = f.read_text(errors="replace").strip()
        if text:
            print(f"----- {f.stem} -----\n{text[-4000:]}", file=log)


def _kill_all(procs: list[subprocess.Popen]) -> None:
    """SIGKILL every worker still running and reap them all."""
    for p in procs:
        if p.poll() is None:
            try:
                p.kill()
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + KILL_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
