"""The ring all-reduce's cost, said once: its steps, the share of the buffer each rank sends, the exact bytes of
the lab's own ring (near-equal chunks), and the one near-equal split every chunked transfer of the lab uses.

A ring all-reduce of N ranks is a reduce-scatter of N - 1 steps and an all-gather of N - 1 steps; in each step
every rank sends one of the N chunks of its buffer to its right neighbour. So 2(N - 1) steps, and each rank
sends 2(N - 1)/N of its buffer (exactly: the sizes of the chunks it sends, when N does not divide the buffer).
An all-gather of equal payloads alone takes N - 1 steps. The step-by-step schedule is in :mod:`.schedules`;
the modelled schedule, the lab's real ring (:mod:`lab.comm.ring`), the sparse transport, the emulation, the
calibration and the prediction all count with these functions."""
from __future__ import annotations


def near_equal(count: int, parts: int) -> list[int]:
    """Sizes of ``parts`` near-equal parts of ``count`` items (the first ``count % parts`` get one more, as
    numpy.array_split)."""
    base, extra = divmod(int(count), int(parts))
    return [base + (1 if i < extra else 0) for i in range(parts)]


def split(count: int, parts: int) -> list[tuple[int, int]]:
    """(start, end) of the :func:`near_equal` parts of ``range(count)``."""
    out, start = [], 0
    for size in near_equal(count, parts):
        out.append((start, start + size))
        start += size
    return out


def ring_steps(n: int) -> int:
    """Steps of a ring all-reduce of ``n`` ranks: 2(N - 1) (none for one rank)."""
    return 2 * (n - 1) if n > 1 else 0


def allgather_steps(n: int) -> int:
    """Steps of an all-gather of equal payloads over ``n`` ranks: N - 1."""
    return n - 1 if n > 1 else 0


def ring_share(n: int) -> float:
    """The part of its buffer each rank sends in a ring all-reduce: 2(N - 1)/N."""
    return ring_steps(n) / n if n > 1 else 0.0


def ring_bytes(nbytes: float, n: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``nbytes`` per rank, as the alpha-beta model counts them."""
    return ring_share(n) * nbytes


def ring_bytes_per_rank(count: int, n: int, item: int = 4) -> list[int]:
    """Exact bytes each rank sends in the lab's ring (:mod:`lab.comm.ring`) over ``count`` items of ``item``
    bytes: rank r sends chunk (r - s) mod N at reduce-scatter step s and chunk (r + 1 - s) mod N at all-gather
    step s."""
    if n < 2:
        return [0] * max(n, 1)
    size = [k * item for k in near_equal(count, n)]
    return [sum(size[(r - s) % n] for s in range(n - 1)) + sum(size[(r + 1 - s) % n] for s in range(n - 1))
            for r in range(n)]


def ring_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """The alpha-beta time of a ring all-reduce: 2(N - 1) alpha + 2(N - 1)/N S beta."""
    return ring_steps(n) * alpha + ring_bytes(nbytes, n) * beta


__all__ = ["near_equal", "split", "ring_steps", "allgather_steps", "ring_share", "ring_bytes", "ring_bytes_per_rank",
           "ring_time"]
