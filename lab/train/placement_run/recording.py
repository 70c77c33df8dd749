"""What a placement run records: each operator's and tensor's span on the run's clock, every step's rows for the
run store, and the drawn steps' timelines."""
from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist

from lab.store.runs import JOB_WORKER
from lab.train import resilience as rz
from lab.train.placement_run.pieces import Piece
from lab.train.step_record import StepRecord


class Recording:
    """The recording of :class:`lab.train.placement_run.executor.PlacementTrainer`."""

    def event(self, **row) -> None:
        rz.progressed()  # every event is work done inside the step: the heartbeat sees the step move
        if self.timing:
            row.setdefault("device", self.device)
            row["rank"] = self.rank
            self.events.append(row)

    def op_done(self, piece: Piece, micro: int, op: str | None, t0: float, t1: float) -> None:
        """An operator (or a node it absorbs) ran from t0 to t1: record it and wait its emulated extra time."""
        self.fwd_time[(piece.index, micro)][op] = self.fwd_time[(piece.index, micro)].get(op, 0.0) + (t1 - t0)
        self.event(kind="forward", op=op, piece=piece.index, micro=micro, start=t0, end=t1)
        s = self.scales.get(op, 1.0)
        if s > 1.0:
            wait = (s - 1.0) * (t1 - t0)
            self.stats["emul_compute"] += wait
            self.emulated_wait(wait)
            self.event(kind="emulated", op=op, piece=piece.index, micro=micro, start=t1, end=time.perf_counter(),
                       wait=wait)

    def gather(self, rows: list[list[float]]) -> list[list[list[float]]]:
        t = torch.tensor(rows, dtype=torch.float64)
        if self.world == 1:
            return [t.tolist()]
        out = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(out, t)
        return [o.tolist() for o in out]

    def store_step_rows(self, gathered: list[list[list[float]]], accs: dict) -> None:
        """Rank 0: the gathered records (process x step) as metric rows, one per process and step and
        one for the job."""
        recs = [[StepRecord.of(row) for row in rows] for rows in gathered]
        rows = []
        for j in range(len(recs[0])):
            step = int(recs[0][j].step)
            start = min(r[j].start for r in recs)
            end = max(r[j].end for r in recs)
            span = max(end - start, 1e-9)
            loss = next((r[j].loss for r in recs if math.isfinite(r[j].loss)), math.nan)
            for rank, r in enumerate(recs):
                x = r[j]
                idle = max(0.0, span - x.compute - x.comm - x.emul_compute - x.emul_comm)
                rows.append((step, rank, loss if rank == self.rank_of[self.pieces[self.final[0]].device] else math.nan,
                             math.nan, x.sent, x.recv, x.compute, x.comm, x.compress, idle, x.emul_compute,
                             x.emul_comm, x.samples / span, x.end - self.wall0))
            rows.append((step, JOB_WORKER, loss, accs.get(step, math.nan), sum(r[j].sent for r in recs),
                         sum(r[j].recv for r in recs), *([math.nan] * 6), self.tr.batch_size / span, end - self.wall0))
        self._write(self.store.add_metric_rows, self.run_id, rows)

    def store_timelines(self) -> None:
        """Rank 0 stores every process's recorded steps, one clock."""
        if self.world > 1:
            everyone: list = [None] * self.world
            dist.all_gather_object(everyone, self.timelines)
        else:
            everyone = [self.timelines]
        if self.rank != 0 or self.store is None:
            return
        for step in self.timeline_steps:
            rows = [e for t in everyone for e in t.get(step, [])]
            if rows:
                t0 = min(e["start"] for e in rows if e["kind"] not in ("activation", "gradient"))
                self._write(self.store.add_plan_events, self.run_id, step,
                            [dict(e, start=e["start"] - t0, end=e["end"] - t0,
                                  **({"called": e["called"] - t0} if "called" in e else {})) for e in rows])
