"""Real collectives over torch.distributed (gloo): the lab's ring all-reduce and its byte counter.

``lab.comm.measure`` times them against gloo's own all_reduce (nccl-tests style). The names below load
lab.comm.ring (and torch) when first used: :mod:`lab.comm.peers`, which the launcher's heartbeat reads,
must not pull torch into processes that start without it.
"""

_RING_NAMES = ("BYTES", "ByteCounter", "RingStats", "ring_allreduce")


def __getattr__(name: str):
    if name in _RING_NAMES:
        from lab.comm import ring

        return getattr(ring, name)
    raise AttributeError(f"module 'lab.comm' has no attribute {name!r}")


__all__ = list(_RING_NAMES)
