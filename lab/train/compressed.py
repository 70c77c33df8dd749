"""Compressed gradient all-reduce in the training job (issue 7), its one-process reference, and the
Compression page's preset grid of training runs.

In the job
----------
With ``training.compression.kind != "none"`` and ``sync = "allreduce"``, each worker's step is::

    forward/backward -> [emulated compute wait]
      -> compress the flat gradient (lab.compression.compressors, with error feedback when it is on)   t_compress
      -> share it by compression.sharing (below)                                        t_comm
      -> mean = sum / N -> the optimiser's ordinary local step (identical on every worker)

``bytes_sent`` / ``bytes_recv`` are the bytes of the messages this worker really sent and received
(counted here as they are posted; no modelled values), and with emulation on the link delay of
:func:`lab.train.emulation.ring_link_delay` is slept before every message, the hook the lab's ring
uses. ``kind = "none"`` keeps the ordinary path (gloo or the lab's ring, loss riding in the buffer).

Sharing methods (the schedules of lab.comm.sparse; a leaner transport)
----------------------------------------------------------------------
* ``sparse_ring`` (the edge-compression design): lab.comm.sparse's own ring program (reduce-scatter then all-gather of
  (int32 index, fp32 value) pairs, 8 B each, fill-in included), so the hops and bytes are exactly
  those of :func:`lab.comm.sparse.simulate_sparse_ring`: every message is an 8 B count, then the
  pairs. The transport differs from :func:`lab.comm.sparse.sparse_ring_allreduce` only in posting
  each count's receive one hop ahead, through the process group's own send/recv.
* ``sparse_allgather``: every worker's serialised payload (:meth:`lab.compression.compressors.Payload.to_bytes`,
  6 B per kept entry for Group-TopK) goes round the ring unchanged, N-1 hops. In training every
  worker compresses a gradient of the same length with the same settings, and each compressor keeps
  a count fixed by that length (Group-TopK: k per group; Top-K / Random-K: k; FP16: all), so every
  payload has the same size, known before anything arrives: the N-1 receives are posted at once and
  no count travels. Bytes per worker and step: (N-1) x payload bytes, each way.
* ``dense``: :func:`lab.comm.sparse.dense_allreduce`, the lab's ring all-reduce of the decompressed
  fp32 gradient (its bytes: the ring's count).

Why not lab.comm.sparse's transport as it is: it waits for each count before posting the data's
receive, and gloo writes a message at once only into a receive already posted (otherwise it costs a
round trip), so each hop pays two or three message latencies. With four workers on two shared cores
that latency (milliseconds under load) dominated the compressed step; see bench/bench_compress_train.py.

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
re-splits the data and starts the residuals from zero.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from lab.comm import sparse as sp
from lab.comm.sharing import GradientCompressor
from lab.comm.sparse import COUNT_BYTES, dense_allreduce
from lab.compression.compressors import Payload, make_compressor
from lab.errors import LabError
from lab.scenario.document import Training

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

    make_compressor(c.kind, c.ratio, c.group_size, seed=tr.seed)  # GroupTopK refuses k = 0 here
    if c.kind in ("topk", "randomk") and int(math.floor(c.ratio * numel + 0.5)) == 0:
        raise LabError(f"{c.kind}: ratio {c.ratio:g} of the model's {numel:,} gradient entries keeps none; raise "
                       f"the ratio to at least {0.5 / numel:.3g}", where="training.compression.ratio")


# ---------------------------------------------------------------------------------------------
# Sharing over the default process group, receives posted ahead (see "Sharing methods" above)
# ---------------------------------------------------------------------------------------------
_TAG_COUNT, _TAG_DATA, _TAG_PAYLOAD = 31, 32, 33  # apart from lab.comm.ring's and lab.comm.sparse's tags


def _peers() -> tuple[Any, int, int, int, int]:
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    return dist.group.WORLD, world, rank, (rank + 1) % world, (rank - 1) % world


def _sleep_link(link_delay: Any, rank: int, right: int, nbytes: int) -> float:
    if link_delay is None:
        return 0.0
    d = float(link_delay(rank, right, nbytes))
    if d > 0:
        time.sleep(d)
    return max(d, 0.0)


def sum_payloads(payloads: list) -> torch.Tensor:
    """The dense float32 sum of the workers' payloads, added in rank order (the same bits on every rank)."""
    out = torch.zeros(payloads[0].numel, dtype=torch.float32)
    for p in payloads:
        if p.index_format == 0:
            out += p.values.to(torch.float32)
        else:
            idx, val = p.to_pairs()
            out.index_add_(0, idx, val)
    return out


def allgather_equal(payload: Any, link_delay: Any = None) -> tuple[torch.Tensor, dict]:
    """Ring all-gather of equal-size serialised payloads (every rank's is ``payload.nbytes`` long):
    all N-1 receives posted first, each received payload forwarded at once; the sum in rank order."""

    pg, world, rank, right, left = _peers()
    if world == 1:
        return payload.to_dense(), {"bytes_sent": 0, "bytes_recv": 0, "delay": 0.0}
    wire = torch.frombuffer(bytearray(payload.to_bytes()), dtype=torch.uint8)
    bufs = [torch.empty_like(wire) for _ in range(world - 1)]
    recvs = [pg.recv([b], left, _TAG_PAYLOAD) for b in bufs]
    delay = _sleep_link(link_delay, rank, right, wire.numel())
    sends = [pg.send([wire], right, _TAG_PAYLOAD)]
    got: list = [None] * world
    got[rank] = payload
    for s in range(world - 1):  # hop s brings rank (r - s - 1)'s payload; forward it unless it is the last
        recvs[s].wait()
        got[(rank - s - 1) % world] = Payload.from_bytes(bufs[s].numpy().tobytes())
        if s < world - 2:
            delay += _sleep_link(link_delay, rank, right, bufs[s].numel())
            sends.append(pg.send([bufs[s]], right, _TAG_PAYLOAD))
    for w in sends:
        w.wait()
    if any(p.numel != payload.numel for p in got):
        raise LabError("the workers' gradients differ in length; every worker must train the same model")
    nbytes = (world - 1) * wire.numel()
    return sum_payloads(got), {"bytes_sent": nbytes, "bytes_recv": nbytes, "delay": delay}


def sparse_ring(payload: Any, link_delay: Any = None) -> tuple[torch.Tensor, dict]:
    """The edge-compression design's sparse ring: lab.comm.sparse's ring program (and so its hops and bytes), with each
    count's receive posted one hop ahead."""

    pg, world, rank, right, left = _peers()
    n = payload.numel
    blocks = sp._initial_blocks(payload, n, world)
    if world == 1:
        return sp.pairs_to_dense(blocks, n), {"bytes_sent": 0, "bytes_recv": 0, "delay": 0.0}
    log = sp.RankLog()
    program = sp._ring_program(rank, world, blocks, log)
    hops = 2 * (world - 1)
    sent = recv = 0
    delay = 0.0
    cnt_in = torch.empty(1, dtype=torch.int64)
    rc = pg.recv([cnt_in], left, _TAG_COUNT)
    wire, rdtype = next(program)
    for h in range(hops):
        wire = wire.contiguous()
        nbytes = COUNT_BYTES + wire.numel() * wire.element_size()
        delay += _sleep_link(link_delay, rank, right, nbytes)
        cnt_out = torch.tensor([wire.numel()], dtype=torch.int64)
        sends = [pg.send([cnt_out], right, _TAG_COUNT)]
        if wire.numel():
            sends.append(pg.send([wire], right, _TAG_DATA))
        rc.wait()
        k = int(cnt_in.item())
        got = torch.empty(k, dtype=rdtype)
        rd = pg.recv([got], left, _TAG_DATA) if k else None
        if h < hops - 1:
            cnt_in = torch.empty(1, dtype=torch.int64)
            rc = pg.recv([cnt_in], left, _TAG_COUNT)
        if rd is not None:
            rd.wait()
        for w in sends:
            w.wait()
        sent += nbytes
        recv += COUNT_BYTES + got.numel() * got.element_size()
        try:
            wire, rdtype = program.send(got)
        except StopIteration:
            break
    return sp.pairs_to_dense(blocks, n), {"bytes_sent": sent, "bytes_recv": recv, "delay": delay}


def share(payload: Any, sharing: str, link_delay: Any = None) -> tuple[torch.Tensor, dict]:
    """The dense float32 sum over the workers of what each sent, and this worker's byte counts."""
    if sharing == "sparse_allgather":
        return allgather_equal(payload, link_delay)
    if sharing == "sparse_ring":
        return sparse_ring(payload, link_delay)
    if sharing == "dense":

        return dense_allreduce(payload, link_delay=link_delay)
    raise LabError(f"unknown sharing method {sharing!r}; choose dense, sparse_ring or sparse_allgather",
                   where="compression.sharing")


class CompressedAllReduce:
    """One worker's compressed gradient sync (built by :func:`attach`)."""

    def __init__(self, tr: Training, world: int, batch_sizes: list[int], link_delay: Any = None):
        self.gc = GradientCompressor(tr.compression, seed=tr.seed)
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
        t0 = time.perf_counter()
        payload = self.gc.compressor.compress(grad)
        t_compress = time.perf_counter() - t0
        ready = time.time()
        summed, st = share(payload, self.gc.sharing, link_delay=self.link_delay)
        grad.copy_(summed.view(grad.shape)).div_(self.world)
        return ready, int(st["bytes_sent"]), int(st["bytes_recv"]), float(st.get("delay", 0.0)), t_compress

    def job_loss(self, losses: np.ndarray) -> np.ndarray:
        """(workers, steps) local losses -> the loss over the combined batch, per step."""
        w = self.batch_sizes[: losses.shape[0], None]
        return (losses * w).sum(0) / w.sum()


def attach(trainer: Any) -> CompressedAllReduce | None:
    """Called by the Trainer's setup: the compressed sync when the scenario asks for it, else None."""
    trainer.t_compress = 0.0
    tr = trainer.tr
    if not enabled(tr) or trainer.plan.server is not None:
        return None
    trainer.bytes_kind = "measured"
    return CompressedAllReduce(tr, trainer.world, trainer.plan.batch_sizes, trainer.link_delay)


__all__ = ["enabled", "check", "attach", "CompressedAllReduce", "share", "allgather_equal", "sparse_ring",
           "sum_payloads"]
