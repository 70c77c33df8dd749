"""One seam to start a job's ranks: :class:`RankBackend`, with one implementation per way.

* :class:`ForkedRanks`: forked from the job's own launcher, which holds torch, the ranks' code and the data
  (:func:`load_rank_code`: the warm starter loaded them before it forked the launcher, a cold launcher loads
  them once before its first rank); the ranks inherit the scenario.
* :class:`ProcessRanks`: cold processes, ``python -m lab.train --spec -``, the scenario on standard input: for
  :func:`lab.train.launcher.launch` called inside another program (a test, a notebook), whose own threads make
  a fork unsafe.
* :class:`ClusterRanks`: actors on a Ray cluster (:mod:`lab.train.ray_ranks`), where Ray decides where they run.

The launcher chooses one per job (:func:`rank_backend`) and otherwise treats them alike: every handle answers as
a :class:`subprocess.Popen` does, and the launcher watches, restarts and reaps them the same way.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from lab import processes
from lab.errors import LabError
from lab.scenario.document import Scenario
from lab.settings import ROOT
from lab.train import fork
from lab.train.preload import load_rank_code


class RankBackend:
    """How a job's ranks start. ``remote``: they run on other machines (this machine's load and cores are not
    theirs, and their rendezvous is not on this machine's port)."""

    name = ""
    remote = False

    def prepare(self, store) -> None:
        """Before the ranks start (once per attempt)."""

    def spawn(self, sc: Scenario, run_id: str, world: int, env: dict, tmp: Path, logs: Path, sock: socket.socket,
              cpus: list[int] | None, on_wait, devices: tuple[str, ...] | None = None) -> list:
        """Start ``world`` ranks of run ``run_id`` with the environment ``env``; their handles, by rank.
        ``on_wait(seconds)`` is called while the ranks wait for room to start; ``devices``: a placement run's device
        of each rank, as decided at submit (:class:`lab.train.placed.PlacedRanks`)."""
        raise NotImplementedError

    def where(self, procs) -> dict:
        """What the run's "started" stage says of where the ranks run, beyond their pids."""
        return {}

    def release(self, procs) -> None:
        """Free what an attempt's ranks hold beyond their processes (after they are reaped)."""

    def outside_cpu(self, procs) -> float | None:
        """CPU seconds the attempt's ranks took on this machine outside the launcher's process tree, which its
        :class:`lab.processes.JobCpu` cannot see; None when some ran on another machine (this machine's load is
        then not the job's). Ranks this machine forks or starts are in the tree: none."""
        return 0.0


class _LocalRanks(RankBackend):
    """Ranks as processes of this machine: each with its error and heartbeat files, its log, and its core."""

    def spawn(self, sc, run_id, world, env, tmp, logs, sock, cpus, on_wait, devices=None) -> list:
        procs = []
        for rank in range(world):
            renv = dict(env, RANK=str(rank), LOCAL_RANK=str(rank), LAB_ERROR_FILE=str(tmp / f"rank{rank}.err"),
                        LAB_HEARTBEAT_FILE=str(tmp / f"rank{rank}.hb"))
            (tmp / f"rank{rank}.err").unlink(missing_ok=True)
            (tmp / f"rank{rank}.hb").unlink(missing_ok=True)
            fds: tuple = ()
            if rank == 0:  # rank 0 serves the job's rendezvous store on the launcher's listening socket
                renv["LAB_STORE_FD"] = str(sock.fileno())
                fds = (sock.fileno(),)
            cpu = cpus[rank % len(cpus)] if cpus else None
            log_file = logs / f"rank{rank}.log"
            with open(log_file, "ab") as err:
                err.write(f"===== {time.strftime('%Y-%m-%d %H:%M:%S')} attempt {env.get('LAB_ATTEMPT', '0')}: rank "
                          f"{rank} of {world}{f', cpu {cpu}' if cpu is not None else ''} =====\n".encode())
            procs.append(self.start(sc, run_id, renv, log_file, fds, cpu))
        return procs

    def start(self, sc: Scenario, run_id: str, env: dict, log_file: Path, fds: tuple, cpu: int | None):
        raise NotImplementedError


class ForkedRanks(_LocalRanks):
    """Ranks forked from this launcher, a process of the job's own: they hold the scenario, torch and the
    data already."""

    name = "forked"

    def prepare(self, store) -> None:
        load_rank_code()  # at once when the warm starter loaded it; about 3 s of CPU once in a cold launcher
        store.close()  # SQLite's per-process lock table must not reach a forked rank

    def start(self, sc, run_id, env, log_file, fds, cpu):
        return fork.fork_child(lambda: _rank_main(sc, run_id), env, log_file, fds, cpu)


class ProcessRanks(_LocalRanks):
    """Cold ranks: a new Python process each, which reads the run and its scenario on its standard input."""

    name = "cold"

    def start(self, sc, run_id, env, log_file, fds, cpu):
        spec = json.dumps({"run_id": run_id, "scenario": sc.to_dict()}).encode()
        with open(log_file, "ab") as err:
            p = subprocess.Popen([sys.executable, "-m", "lab.train", "--spec", "-"], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=err, cwd=str(ROOT), pass_fds=fds,
                                 preexec_fn=(lambda c=cpu: processes.pin(c)) if cpu is not None else None)
        try:
            p.stdin.write(spec)
            p.stdin.close()
        except OSError:  # it died at once: its exit code says so to the watch
            pass
        return p


class ClusterRanks(RankBackend):
    """Ranks as actors on the Ray cluster at ``address``; Ray holds a job until all its ranks fit."""

    name = "ray"
    remote = True

    def __init__(self, address: str):
        self.address = address

    def spawn(self, sc, run_id, world, env, tmp, logs, sock, cpus, on_wait, devices=None) -> list:
        try:
            from lab.train import ray_ranks  # Ray is loaded by the launchers of cluster jobs only
        except ImportError as exc:
            raise LabError(f"LAB_RAY_ADDRESS is set but Ray cannot be loaded ({exc}): install it with "
                           "pip install -r requirements-ray.txt", where="LAB_RAY_ADDRESS") from None

        def waiting(seconds: float) -> None:
            if seconds >= 2 * ray_ranks.READY_POLL_S:
                on_wait(seconds)

        return ray_ranks.spawn(sc, run_id, world, env, tmp, env["LAB_DB"], self.address, on_wait=waiting,
                               devices=devices)

    def where(self, procs) -> dict:
        return {"nodes": procs.nodes()}

    def release(self, procs) -> None:
        if procs:  # the attempt's placement group too: a restart needs its CPUs
            procs.release()

    def outside_cpu(self, procs) -> float | None:
        here = socket.gethostname()
        if not procs or any(r.where.get("host") != here for r in procs):
            return None
        return sum(r.cpu_s for r in procs)  # what each actor's process took while it ran its rank


def rank_backend(ray_address: str = "", own_process: bool = False) -> RankBackend:
    """The way a job's ranks start: on the Ray cluster at ``ray_address`` when one is given, else forked when the
    launcher is a process of the job's own (started for it from the command line or by the job manager, or
    forked for it by the warm starter), else as cold processes."""
    if ray_address:
        return ClusterRanks(ray_address)
    return ForkedRanks() if own_process else ProcessRanks()


def _rank_main(sc: Scenario, run_id: str) -> int:
    """A forked rank: the rank's code on the scenario it inherited."""
    from lab.train.rank import run_rank  # loaded before the fork (load_rank_code)

    return run_rank(sc, run_id, quiet=True)


__all__ = ["RankBackend", "ForkedRanks", "ProcessRanks", "ClusterRanks", "rank_backend", "load_rank_code"]
