"""Group-TopK as a DDP communication hook on gloo, composed from the lab's one send step.

:func:`group_topk_hook` with :class:`GroupTopKHookState` plugs Group-TopK (with optional error feedback, one
memory per bucket) into ``DistributedDataParallel.register_comm_hook``: the bucket is compressed by
:meth:`lab.comm.sharing.GradientCompressor.compress`, the step every compressed sync of the lab uses. Every
worker keeps exactly k entries per group, so all payloads have the same length and gloo's asynchronous
``all_gather`` (whose ``get_future()`` gloo supports) carries them without padding. ``sharing="sparse_ring"``
runs the edge-compression design's ring (:func:`lab.comm.sparse.sparse_ring_allreduce`) inside the hook instead;
on gloo the point-to-point ``isend``/``irecv`` works have no future a hook could chain (``Work.get_future()``
raises "Work::getFuture not implemented", torch 2.13), so that variant completes synchronously and returns a
finished future (correct, but the communication no longer overlaps the rest of the backward pass).
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from lab.comm.sharing import GradientCompressor
from lab.comm.sparse import pack_pairs, sparse_ring_allreduce, unpack_pairs
from lab.errors import LabError
from lab.modelled.collectives.ring import allgather_steps
from lab.scenario.names import Sharing


class GroupTopKHookState:
    """State of :func:`group_topk_hook`: the one send step's compressor and memory, byte counters."""

    def __init__(self, ratio: float = 0.01, group_size: int = 1024, *, error_feedback: bool = True,
                 sharing: str = Sharing.SPARSE_ALLGATHER, process_group: Any = None):
        if sharing not in (Sharing.SPARSE_ALLGATHER, Sharing.SPARSE_RING):
            raise LabError(f"the hook shares by 'sparse_allgather' or 'sparse_ring' (got {sharing!r})")
        self.gc = GradientCompressor(kind="group_topk", ratio=ratio, group_size=group_size,
                                     error_feedback=error_feedback, sharing=sharing)
        self.sharing = sharing
        self.process_group = process_group
        self.bytes_sent = 0
        self.bytes_recv = 0
        self.calls = 0

    @property
    def residuals(self) -> dict:
        """Bucket index -> its error-feedback residual (empty without error feedback)."""
        return getattr(self.gc.compressor, "residuals", {})


def group_topk_hook(state: GroupTopKHookState, bucket: Any) -> torch.futures.Future:
    """DDP comm hook: Group-TopK each bucket, share, and average (the bucket's new gradient)."""
    buf = bucket.buffer()
    pg = state.process_group
    world = dist.get_world_size(pg)
    payload = state.gc.compress(buf.detach().to(torch.float32), key=bucket.index())
    state.calls += 1
    if state.sharing == Sharing.SPARSE_RING:
        dense, st = sparse_ring_allreduce(payload, payload.numel, group=pg)
        state.bytes_sent += st["bytes_sent"]
        state.bytes_recv += st["bytes_recv"]
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(dense.div_(world).to(buf.dtype))
        return fut
    # every worker sends the same number of entries (k per group), so all_gather needs no padding
    idx, val = payload.to_pairs()
    wire = pack_pairs(idx, val)
    outs = [torch.empty_like(wire) for _ in range(world)]
    nbytes = wire.numel() * 4
    state.bytes_sent += nbytes * allgather_steps(world)  # what an all-gather delivers from this rank (gloo's own)
    state.bytes_recv += nbytes * allgather_steps(world)
    n = buf.numel()

    def finish(fut: torch.futures.Future) -> torch.Tensor:
        total = torch.zeros(n, dtype=torch.float32)
        fut.wait()
        for w in outs:
            i, v = unpack_pairs(w)
            total.index_add_(0, i, v)
        return total.div_(world).to(buf.dtype)

    return dist.all_gather(outs, wire, group=pg, async_op=True).get_future().then(finish)


# DDP checks the hook's annotations against the real classes (not the strings this module's
# ``from __future__ import annotations`` would leave there).
group_topk_hook.__annotations__ = {"state": GroupTopKHookState, "bucket": dist.GradBucket,
                                   "return": torch.futures.Future[torch.Tensor]}

__all__ = ["GroupTopKHookState", "group_topk_hook"]
