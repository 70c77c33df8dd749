"""What an emulated wait multiplies: each task's warm time on this machine.

An emulated device's task takes its slow-down times the task's time on this machine. The executor runs the task
for real and then waits the rest. Right after a wait the task starts on a core that idled, and on a shared VM it
runs slower for a while (``bench/bench_cold.py``: operators 1.8-10x after 1-10 ms asleep). A wait of ``(s - 1)``
times that cold time would multiply the machine's cold start by the device's slow-down, so an emulated device would
be as much slower again as this machine happened to be cold. The wait multiplies the task's warm time instead:
measured once per piece and micro-batch size, back to back on a copy of the piece (its statistics, gradients and
the random stream of the run untouched), in CPU time, because every process of the run measures at the same time
and may share a core.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from lab.train.placement_run.pieces import INPUT, CutPiece
from lab.train.placement_run.split import input_gradient, weight_gradient
from lab.train.placement_run.step import Timed

#: Passes after a first one that warms up; each task's time is its least over them.
REPEATS = 3


@dataclass(frozen=True)
class WarmTimes:
    """One piece's warm CPU seconds on one micro-batch: per operator of its forward (None: its nodes after the last
    operator), its whole backward, and a split backward's input and weight gradients (None when not split)."""

    forward: Mapping
    backward: float = 0.0
    halves: tuple[float, float] | None = None


class _Stopwatch:
    """What :class:`Timed` reports to: each operator's time, and nothing else done."""

    def __init__(self, owner: Mapping[str, str]):
        self.owner, self.times = owner, {}

    def op_done(self, piece, micro, op, t0: float, t1: float) -> None:
        self.times[op] = self.times.get(op, 0.0) + (t1 - t0)


def warm_times(piece: CutPiece, inputs: Sequence[torch.Tensor], owner: Mapping[str, str], *, train: bool,
               split: bool, repeats: int = REPEATS) -> WarmTimes:
    """``piece``'s warm times on ``inputs`` (its arguments in order, as the run gives them): with ``train`` forward
    and backward as a training step runs them (``split``: the input and the weight gradients apart, as a zero-bubble
    schedule does), else the forward alone under no gradient."""
    clone = dataclasses.replace(piece, module=copy.deepcopy(piece.module))
    clone.module.train(train)
    best: dict = {}

    def keep(key, seconds: float) -> None:
        best[key] = min(best.get(key, seconds), seconds)

    with torch.random.fork_rng(devices=[]), torch.set_grad_enabled(train):
        for i in range(repeats + 1):
            ins = [v.detach().clone().requires_grad_(train and r is not INPUT and v.is_floating_point())
                   for r, v in zip(piece.reads, inputs)]  # as the run: the model's input takes no gradient
            watch = _Stopwatch(owner)
            # a piece that writes its input in place gets copies, as the run gives it (a leaf refuses the write)
            out = Timed(watch, clone, 0, clock=time.thread_time).run(*([v.clone() for v in ins]
                                                                      if piece.writes_in_place else ins))
            outs = [o for o in ((out,) if clone.single else tuple(out)) if o.requires_grad]
            if train and outs:
                grads = [torch.ones_like(o) for o in outs]
                params = list(clone.module.parameters())
                t0 = time.thread_time()
                if split and any(v.requires_grad for v in ins):
                    groups = input_gradient(outs, grads, ins, params)
                    t1 = time.thread_time()
                    weight_gradient(params, groups)
                else:  # a piece with no gradient to send back waits for its weights' turn whole, as the executor
                    torch.autograd.backward(outs, grads)
                    t1 = t0
                t2 = time.thread_time()
                if i:
                    keep("backward", t2 - t0)
                    keep("input", t1 - t0)
                    keep("weight", t2 - t1)
                clone.module.zero_grad(set_to_none=True)
            if i:
                for op, seconds in watch.times.items():
                    keep(("forward", op), seconds)
    forward = {k[1]: v for k, v in best.items() if isinstance(k, tuple)}
    return WarmTimes(forward, best.get("backward", 0.0),
                     (best.get("input", 0.0), best.get("weight", 0.0)) if split and train else None)


class WarmBook:
    """A process's warm times by (piece, micro-batch size, training), each measured once, on the first samples of
    ``samples`` (cycled) and what the pieces before make of them (``outputs_on``: samples -> every piece's
    outputs). A piece with no operator on a slower device (``scales``) has none: it waits nothing."""

    def __init__(self, outputs_on: Callable, samples: torch.Tensor, owner: Mapping[str, str],
                 scales: Mapping[str, float], split: bool):
        self.outputs_on, self.samples, self.owner, self.scales, self.split = outputs_on, samples, owner, scales, split
        self.times: dict = {}
        self._inputs: dict = {}  # rows -> (the samples, every piece's outputs on them): one run of the model each

    def of(self, piece: CutPiece, rows: int, train: bool) -> WarmTimes | None:
        if not any(self.scales.get(op, 1.0) > 1.0 for op in piece.ops):
            return None
        key = (piece.index, rows, train)
        if key not in self.times:
            if rows not in self._inputs:
                x = self.samples[torch.arange(rows) % len(self.samples)]
                self._inputs[rows] = (x, self.outputs_on(x))
            x, vals = self._inputs[rows]
            self.times[key] = warm_times(piece, [x if r is INPUT else vals[r[0]][r[1]] for r in piece.reads],
                                         self.owner, train=train, split=self.split)
        return self.times[key]


__all__ = ["REPEATS", "WarmBook", "WarmTimes", "warm_times"]
