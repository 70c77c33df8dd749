"""Where a job's launcher process starts, a part of the job manager with its own state: the job spec goes in, a
:class:`Launched` handle comes out. The launcher is forked by the warm starter (:mod:`lab.train.warm`, torch
already loaded) or started cold (``python -m lab.train --spec -``) when the starter is not ready or fails; either
way it leads a new session, so its process group holds every worker of the job."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import IO

from lab import settings
from lab.errors import LabError
from lab.processes import STOP_GRACE_S, end_group
from lab.settings import ROOT
from lab.train.fork import PopenLike
from lab.train.launcher import JobSpec
from lab.train.launcher_record import processes_of

log = logging.getLogger("lab.jobs")


class Starting(PopenLike):
    """A job whose slots are taken and whose launcher is being started (outside the manager's lock)."""

    pid = None
    args: list = []
    returncode = None

    def poll(self) -> None:
        return None

    def send_signal(self, sig: int) -> None:  # nothing to signal yet: its claim finds it stopped
        pass


class Launched:
    """A job's launcher as the manager follows it: its process (a :class:`subprocess.Popen`, one the warm starter
    forked, one still :class:`Starting`, or one adopted from a starter that died), its log file while it runs, and
    through the run store the processes of its job and its scratch folder."""

    def __init__(self, run_id: str, store, process: PopenLike | subprocess.Popen | None = None,
                 log_file: IO | None = None):
        self.run_id, self.store = run_id, store
        self.process = process if process is not None else Starting()
        self.log_file = log_file

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def poll(self) -> int | None:
        return self.process.poll()

    def gone(self) -> bool:
        return self.process.poll() is not None

    def close(self) -> None:
        """Its launcher ended: its log file is closed."""
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None

    def end(self) -> None:
        """End its whole process group (SIGTERM, then SIGKILL after a grace period) and wait for the launcher."""
        if self.pid is None:  # still starting: its claim of the run finds it stopped
            return
        end_group(self.pid, self.gone)
        try:
            self.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass

    def processes(self, exclude: tuple[int, ...] = ()) -> list[int]:
        """The live processes of its job (none before its launcher claimed the run)."""
        return processes_of(self.run_id, self.store, exclude=exclude)

    def scratch(self) -> str | None:
        """The scratch folder its launcher recorded."""
        return (self.store.job_records.launcher(self.run_id) or {}).get("scratch")


class Launcher:
    """Starts launchers for one run store's jobs, and keeps the warm starter they fork from (the process's own,
    :func:`lab.train.warm.shared_starter`, or None for cold starts only)."""

    def __init__(self, store, starter=None):
        self.store, self.starter = store, starter

    def log_path(self, run_id: str) -> Path:
        """The launcher's log (the workers' logs are in :meth:`worker_logs`)."""
        return self.store.data_dir() / "logs" / f"{run_id}.log"

    def worker_logs(self, run_id: str) -> dict[int, Path]:
        """rank -> its log file (every attempt appended)."""
        folder = self.store.data_dir() / "logs" / run_id
        out = {}
        for f in folder.glob("rank*.log") if folder.exists() else []:
            k = f.stem[4:]
            if k.isdigit():
                out[int(k)] = f
        return dict(sorted(out.items()))

    def start(self, spec: JobSpec) -> Launched:
        """Start the job's launcher: forked by the warm starter, or cold when the starter is not ready or fails (a
        launcher it forked before it failed and the cold one cannot both run the job: the first to claim the run
        in the store runs it). An OSError when no process could be started."""
        env = settings.child_env(LAB_DB=spec.db)
        log_path = self.log_path(spec.run_id)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.starter is not None and self.starter.ready():
            try:
                return Launched(spec.run_id, self.store, self.starter.launch(spec, env, str(log_path)))
            except LabError as exc:
                log.info("job %s starts cold: %s", spec.run_id, exc)
        log_file = open(log_path, "ab")
        try:
            p = subprocess.Popen([sys.executable, "-m", "lab.train", "--spec", "-"], cwd=str(ROOT), env=env,
                                 stdin=subprocess.PIPE, stdout=log_file, stderr=log_file, start_new_session=True)
        except OSError:
            log_file.close()
            raise
        try:
            p.stdin.write(json.dumps(spec.to_dict()).encode())
            p.stdin.close()
        except OSError:  # it died at once: its exit code says so
            pass
        return Launched(spec.run_id, self.store, p, log_file)

    def warm_up(self) -> None:
        """Start the warm starter now, in the background, so that the first job does not wait for it."""
        if self.starter is not None:
            self.starter.start()

    def keep_warm(self, jobs_waiting: bool) -> None:
        """The starter again when it died or outgrew its bound; while jobs wait, wait for it to be ready (outside
        the manager's lock: pages keep answering meanwhile)."""
        if self.starter is not None:
            self.starter.check()
            if jobs_waiting and not self.starter.ready():
                self.starter.wait_ready()

    def warming(self) -> bool:
        """The starter is loading (started, alive, not yet ready, within its time): jobs wait for it."""
        st = self.starter
        return st is not None and st.alive() and not st.ready() and st.loading_for() < st.ready_timeout
