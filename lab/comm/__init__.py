"""Real collectives over torch.distributed (gloo): the lab's ring all-reduce and its byte counter.

``lab.comm.measure`` times them against gloo's own all_reduce (nccl-tests style).
"""

from lab.comm.ring import BYTES, ByteCounter, RingStats, ring_allreduce

__all__ = ["BYTES", "ByteCounter", "RingStats", "ring_allreduce"]
