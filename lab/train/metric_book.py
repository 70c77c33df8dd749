"""Rank 0's book of a data-parallel job's measurements: the step records every rank gathered become the run
store's metric rows, one per worker and step and one for the job, with the job-level values rank 0 noted (the
loss over the combined batch, the test accuracy).

Idle time is the wait for the slowest worker: (latest ready stamp among the workers) - (own stamp), capped at the
time spent in the collective (lab.train.layout.IDLE_DEFINITION)."""

from __future__ import annotations

import math

import numpy as np

from lab.store.runs import JOB_WORKER
from lab.train.step_record import INDEX


class MetricBook:
    """The book of a job of ``workers`` workers (a parameter server's rank comes after them). ``job_loss``: how the
    workers' local losses make the job's (a compressed sync's weighting), or None (the all-reduced loss rank 0
    noted)."""

    def __init__(self, workers: int, job_loss=None):
        self.workers, self.job_loss = workers, job_loss
        self.noted: dict[int, dict] = {}  # step -> job-level values (loss, test_acc)
        self.resumed_from: float | None = None  # a restarted attempt: the first attempt's start
        self.start(0.0, 1)

    def start(self, now: float, world: int) -> None:
        """The attempt's steps start at ``now`` (wall clock); its wall times count from the first attempt's start."""
        self.t_start = self.resumed_from if self.resumed_from is not None else now
        self.prev_end = np.full(world, now)  # each rank's last step end: a step's throughput spans from it
        self.prev_job_end = now

    def note(self, step: int, **values: float) -> None:
        self.noted.setdefault(step, {}).update(values)

    def rows(self, recs: list) -> list[tuple]:
        """The gathered records (world x steps x record fields, one array per rank) as metric rows."""
        a = np.stack([np.asarray(r) for r in recs])
        world, k, _ = a.shape
        if k == 0:
            return []
        col = lambda name: a[:, :, INDEX[name]]  # noqa: E731 - (world, k)
        steps = a[0, :, INDEX["step"]].astype(np.int64)
        ready, end, coll, samples = col("ready"), col("end"), col("comm"), col("samples")
        latest = ready[: self.workers].max(0)  # the slowest worker's stamp, per step
        idle = np.minimum(np.clip(latest[None, :] - ready, 0.0, None), coll)
        prev = np.concatenate([self.prev_end[:, None], end[:, :-1]], axis=1)
        self.prev_end = end[:, -1].copy()
        per = np.stack([col("loss"), np.full((world, k), np.nan), col("sent"), col("recv"),
                        col("compute"), coll - idle, col("compress"), idle, col("emul_compute"),
                        col("emul_comm"), samples / np.maximum(end - prev, 1e-9), end - self.t_start], axis=-1)
        rows = [(int(steps[j]), r, *per[r, j].tolist()) for r in range(world) for j in range(k)]
        job_end = end.max(0)
        job_prev = np.concatenate([[self.prev_job_end], job_end[:-1]])
        self.prev_job_end = float(job_end[-1])
        tput = samples.sum(0) / np.maximum(job_end - job_prev, 1e-9)
        job_loss = self.job_loss(col("loss")[: self.workers]) if self.job_loss is not None else None
        for j in range(k):
            h = self.noted.pop(int(steps[j]), {})
            loss = h.get("loss", math.nan)
            if job_loss is not None and math.isfinite(loss):  # compressed: the workers' losses, weighted
                loss = float(job_loss[j])
            rows.append((int(steps[j]), JOB_WORKER, loss, h.get("test_acc", math.nan),
                         float(col("sent")[:, j].sum()), float(col("recv")[:, j].sum()),
                         *([math.nan] * 6), float(tput[j]), float(job_end[j] - self.t_start)))
        return rows
