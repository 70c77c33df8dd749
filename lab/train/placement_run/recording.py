"""What a placement run records: each operator's and tensor's span on the run's clock, every step's rows for the
run store, and the drawn steps' timelines."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from lab.store.runs import JOB_WORKER
from lab.train import resilience as rz
from lab.train.step_record import StepRecord


class Recorder:
    """What one process of a placement run records while it runs: the events of a timed step (each operator's and
    tensor's span), the step's sums (bytes, communication, emulated waits), the drawn steps' timelines on the run's
    clock, and the largest activation memory saved for a backward on a drawn step."""

    def __init__(self, rank: int, device: str, timeline_steps: list[int]):
        self.rank, self.device = rank, device
        self.timeline_steps = timeline_steps  # the steps whose timelines are kept (and whose saved bytes counted)
        self.offset = 0.0  # this process's clock minus the run's (lab.train.placement_run.clock)
        self.timelines: dict[int, list[dict]] = {}
        self.saved_peak = 0.0
        self.begin(0, timed=False)

    def begin(self, step: int, *, timed: bool) -> None:
        """A step starts: ``timed`` records its events (a drawn step, or every step of an emulated run, whose
        waits follow each operator's time)."""
        self.step = step
        self.timing = timed or step in self.timeline_steps
        self.measuring = step in self.timeline_steps  # the saved bytes: the same every step, counted on drawn ones
        self.events: list[dict] = []
        self.stats = {"sent": 0, "recv": 0, "comm": 0.0, "emul_comm": 0.0, "emul_compute": 0.0}

    def event(self, **row) -> None:
        rz.progressed()  # every event is work done inside the step: the heartbeat sees the step move
        if self.timing:
            row.setdefault("device", self.device)
            row["rank"] = self.rank
            self.events.append(row)

    def end(self, saved_peak: float) -> None:
        """The step is done: a drawn step keeps its events on the run's clock and its saved bytes."""
        if not self.measuring:
            return
        self.saved_peak = max(self.saved_peak, saved_peak)
        off = self.offset
        self.timelines[self.step] = [dict(e, start=e["start"] - off, end=e["end"] - off,
                                          **({"called": e["called"] - off} if "called" in e else {}))
                                     for e in self.events]


def gather(rows: list[list[float]], world: int) -> list[list[list[float]]]:
    """Every process's ``rows`` (floats), on every process, in rank order."""
    t = torch.tensor(rows, dtype=torch.float64)
    if world == 1:
        return [t.tolist()]
    out = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(out, t)
    return [o.tolist() for o in out]


def step_rows(gathered: list[list[list[float]]], accs: dict, loss_rank: int, batch: int, wall0: float) -> list[tuple]:
    """The gathered records (process x step) as metric rows: one per process and step, and one for the job.
    ``loss_rank`` holds the loss; ``wall0``: the run's start on its clock."""
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
            rows.append((step, rank, loss if rank == loss_rank else math.nan, math.nan, x.sent, x.recv, x.compute,
                         x.comm, x.compress, idle, x.emul_compute, x.emul_comm, x.samples / span, x.end - wall0))
        rows.append((step, JOB_WORKER, loss, accs.get(step, math.nan), sum(r[j].sent for r in recs),
                     sum(r[j].recv for r in recs), *([math.nan] * 6), batch / span, end - wall0))
    return rows


def all_timelines(recorder: Recorder, world: int) -> dict[int, list[dict]]:
    """Every process's drawn steps, one clock whose zero is each step's first task (on every process: a
    collective)."""
    if world > 1:
        everyone: list = [None] * world
        dist.all_gather_object(everyone, recorder.timelines)
    else:
        everyone = [recorder.timelines]
    out = {}
    for step in recorder.timeline_steps:
        rows = [e for t in everyone for e in t.get(step, [])]
        if rows:
            t0 = min(e["start"] for e in rows if e["kind"] not in ("activation", "gradient"))
            out[step] = [dict(e, start=e["start"] - t0, end=e["end"] - t0,
                              **({"called": e["called"] - t0} if "called" in e else {})) for e in rows]
    return out
