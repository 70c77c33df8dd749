"""Compressed gradient all-reduce in the training job.

In the job
----------
With ``training.compression.kind != "none"`` and ``sync = "allreduce"``, each worker's step is::

    forward/backward -> [emulated compute wait]
      -> compress the flat gradient (lab.compression.compressors, with error feedback when it is on)   t_compress
      -> share it by compression.sharing (below)                                        t_comm
      -> mean = sum / N -> the optimiser's ordinary local step (identical on every worker)

torch's DDP hooks (PowerSGD, the FP16 and BF16 all-reduces; :mod:`lab.comm.torch_hooks`) replace the compress and
share parts by their own all-reduces on the lab's ring and return the mean themselves. PowerSGD sees the flat
gradient as the model's parameters, in the order a backward pass makes them ready (found once at setup), as DDP does.

``bytes_sent`` / ``bytes_recv`` are the bytes of the messages this worker really sent and received
(counted here as they are posted; no modelled values), and with emulation on the link delay of
:func:`lab.train.emulation.ring_link_delay` is slept before every message, the hook the lab's ring
uses. ``kind = "none"`` keeps the ordinary path (gloo or the lab's ring, loss riding in the buffer).

Sharing methods (lab.comm.sparse's transport, one for the job, the pages and the benches)
------------------------------------------------------------------------------------------
* ``sparse_ring`` (the edge-compression design): reduce-scatter then all-gather of (int32 index,
  fp32 value) pairs, 8 B each, fill-in included; every message is an 8 B count, then the pairs, so
  the hops and bytes are exactly those of :func:`lab.comm.sparse.simulate_sparse_ring`.
* ``sparse_allgather``: every worker's serialised payload (:meth:`lab.compression.compressors.Payload.to_bytes`,
  6 B per kept entry for Group-TopK) goes round the ring unchanged, N-1 hops. Every worker's payload
  has the same size here, so no count travels (``equal_sizes``). Bytes per worker and step:
  (N-1) x payload bytes, each way.
* ``dense``: :func:`lab.comm.sparse.dense_allreduce`, the lab's ring all-reduce of the decompressed
  fp32 gradient (its bytes: the ring's count).

Loss and divergence
-------------------
The loss does not travel with the compressed gradient (it is not a gradient entry to compress):
every worker keeps its own, the records carry it to rank 0 anyway, and rank 0 stores the job's loss
as the batch-weighted mean of the workers' losses (what the dense path's all-reduce computes). A
NaN or inf loss on any worker turns its gradient into all NaN before compressing: every compressor
keeps NaN entries (top-k ranks NaN and inf first; FP16 keeps NaN), so the summed gradient is
non-finite on every worker, every optimiser skips that step together, and the run is marked
diverged at the same step everywhere. (A stray non-finite gradient entry under a finite loss is
kept by the top-k compressors too; Random-K may leave it out, and then every worker steps on the
same finite sum: the workers never disagree, since they all step on one identical tensor.)

Compression time is measured on this machine and is not scaled by the emulated device speed.
Refused (LabError at check time): compression with ``sync`` other than "allreduce" (the parameter
server and the optimiser-state all-reduce exchange other tensors than one gradient), and settings
that keep no entry of this model's gradient. The error-feedback residual lives in the worker
(``trainer.compressed.gc.compressor.residual``); every rank's checkpoint file holds it (and Random-K's
generator), so a resume with the same world size continues exactly; a recovery on fewer workers
re-splits the data and starts the residuals from zero
(PowerSGD also starts again: its warm-up of plain all-reduces, then fresh random Qs).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from lab.comm.sharing import GradientCompressor
from lab.comm.torch_hooks import ready_order
from lab.compression.compressors import make_compressor
from lab.errors import LabError
from lab.scenario.document import Training
from lab.scenario.names import TORCH_HOOKS

SUPPORTED_SYNC = ("allreduce",)


def enabled(tr: Training) -> bool:
    return tr.compression.kind != "none"


def check(tr: Training, numel: int) -> None:
    """Refuse compression settings the job cannot run, before any worker starts."""
    if not enabled(tr):
        return
    c = tr.compression
    if tr.sync not in SUPPORTED_SYNC:
        raise LabError(f"compression ({c.kind}) works with sync = 'allreduce' (gradient all-reduce) only; got "
                       f"sync = {tr.sync!r}. Set compression.kind = 'none' or sync = 'allreduce'",
                       where="training.compression")

    if c.kind in TORCH_HOOKS:
        if c.kind == "powersgd" and c.warmup >= tr.steps:
            raise LabError(f"PowerSGD's warm-up ({c.warmup} plain all-reduce steps) is as long as the run ({tr.steps} "
                           "steps), so PowerSGD would never send; shorten the warm-up or train longer",
                           where="training.compression.warmup")
        return
    make_compressor(c.kind, c.ratio, c.group_size, seed=tr.seed)  # GroupTopK refuses k = 0 here
    if c.kind in ("topk", "randomk") and int(math.floor(c.ratio * numel + 0.5)) == 0:
        raise LabError(f"{c.kind}: ratio {c.ratio:g} of the model's {numel:,} gradient entries keeps none; raise "
                       f"the ratio to at least {0.5 / numel:.3g}", where="training.compression.ratio")


class CompressedAllReduce:
    """One worker's compressed gradient sync (built by :func:`attach`)."""

    def __init__(self, tr: Training, world: int, batch_sizes: list[int], link_delay: Any = None,
                 shapes: Any = None, order: Any = None):
        self.gc = GradientCompressor(tr.compression, seed=tr.seed, shapes=shapes, order=order)
        self.world = world
        self.batch_sizes = np.asarray(batch_sizes, dtype=np.float64)
        self.link_delay = link_delay

    def sync(self, gflat: torch.Tensor, local_loss: float) -> tuple[float, int, int, float, float]:
        """Compress ``gflat[:-1]`` (the gradient; the last slot is the loss), share it, and leave the
        mean over the workers in place. Returns (ready wall-clock stamp, bytes sent, bytes received,
        emulated link seconds, compression seconds)."""
        grad = gflat[:-1]
        if not math.isfinite(local_loss):
            grad.fill_(math.nan)  # reaches every worker through the sum (see the module docstring)
        mean, st = self.gc.step(grad, link_delay=self.link_delay, equal_sizes=True, mean=True)
        ready = time.time() - st["t_comm"]  # when the payload was ready to send
        grad.copy_(mean.view(grad.shape))
        return ready, int(st["bytes_sent"]), int(st["bytes_recv"]), float(st["delay"]), st["t_compress"]

    def job_loss(self, losses: np.ndarray) -> np.ndarray:
        """(workers, steps) local losses -> the loss over the combined batch, per step."""
        w = self.batch_sizes[: losses.shape[0], None]
        return (losses * w).sum(0) / w.sum()


def attach(trainer: Any, link_delay: Any = None) -> CompressedAllReduce | None:
    """Called by the Trainer's setup: the compressed sync when the scenario asks for it, else None (``link_delay``:
    the emulated links' delay for the lab's ring, :func:`lab.train.emulation.ring_link_delay`)."""
    tr = trainer.tr
    if not enabled(tr) or trainer.layout.server is not None:
        return None
    shapes = order = None
    if tr.compression.kind == "powersgd":
        shapes = [p.shape for p in trainer.params]
        probe = trainer.ds.x_test[:2]  # any input: the order depends on the graph, not on the values
        order = ready_order(trainer.model, lambda m: m(probe).sum())
    return CompressedAllReduce(tr, trainer.world, trainer.layout.batch_sizes, link_delay, shapes, order)


__all__ = ["enabled", "check", "attach", "CompressedAllReduce"]
