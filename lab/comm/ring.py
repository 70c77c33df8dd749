"""The lab's own ring all-reduce, built from point-to-point send/recv over torch.distributed.

Reduce-scatter (N-1 steps) then all-gather (N-1 steps), exactly the schedule that
:func:`lab.collectives.ring_schedule` draws: at reduce-scatter step ``s`` rank ``r`` sends chunk
``(r - s) mod N`` to rank ``r + 1`` and adds chunk ``(r - s - 1) mod N`` received from ``r - 1``;
at all-gather step ``s`` it forwards chunk ``(r + 1 - s) mod N`` and receives chunk ``(r - s) mod N``
straight into place.

Speed: the buffer is one flat contiguous tensor and every chunk is a view of it (no copies).
Each chunk is cut into pieces (:data:`PIECE_BYTES`); the receive of piece ``k + 1`` is posted
before piece ``k`` is added, so the additions overlap the transfers (gloo's own ring does the
same). Sends and receives are non-blocking (isend/irecv), so neighbours never deadlock.

Every call counts the bytes it sent and received in :data:`BYTES` (a module-level
:class:`ByteCounter` callers may read and reset) and returns a :class:`RingStats`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from lab.errors import LabError

#: Piece size for pipelining the reduce-scatter additions with the transfers (bytes).
PIECE_BYTES = 1 << 20
#: Pieces in flight each way (the lag of the lock-step pipeline), at most.
WINDOW = 2

LinkDelay = Callable[[int, int, int], float]


class ByteCounter:
    """Bytes and messages this process sent and received through the lab's collectives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        self.received = 0
        self.messages_sent = 0
        self.messages_received = 0

    def add(self, sent: int = 0, received: int = 0, messages_sent: int = 0, messages_received: int = 0) -> None:
        with self._lock:
            self.sent += sent
            self.received += received
            self.messages_sent += messages_sent
            self.messages_received += messages_received

    def reset(self) -> None:
        with self._lock:
            self.sent = self.received = self.messages_sent = self.messages_received = 0

    def snapshot(self) -> dict:
        with self._lock:
            return {"sent": self.sent, "received": self.received,
                    "messages_sent": self.messages_sent, "messages_received": self.messages_received}

    def __repr__(self) -> str:
        return f"ByteCounter({self.snapshot()})"


#: The module-level counter every call of :func:`ring_allreduce` adds to.
BYTES = ByteCounter()


@dataclass(frozen=True)
class RingStats:
    """What one call did on this rank: bytes and messages, steps and wall-clock seconds."""

    world_size: int
    numel: int
    sent: int  # bytes
    received: int  # bytes
    messages_sent: int
    messages_received: int
    steps: int
    seconds: float
    delay_seconds: float = 0.0  # emulated link time slept (link_delay hook)


def chunk_bounds(numel: int, parts: int) -> list[tuple[int, int]]:
    """(offset, length) of ``parts`` near-equal chunks of ``numel`` elements (the first
    ``numel % parts`` chunks get one element more, as numpy.array_split)."""
    base, extra = divmod(numel, parts)
    out, off = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append((off, n))
        off += n
    return out


def _pieces(length: int, piece: int) -> list[tuple[int, int]]:
    if length <= 0:
        return []
    if length <= piece:
        return [(0, length)]
    return [(o, min(piece, length - o)) for o in range(0, length, piece)]


def ring_allreduce(tensor: torch.Tensor, op: str = "sum", *, group=None,
                   link_delay: LinkDelay | None = None, piece_bytes: int | None = None) -> RingStats:
    """All-reduce ``tensor`` in place over the ring of ranks 0 -> 1 -> ... -> N-1 -> 0.

    Call it inside an initialised process group, on every rank, with tensors of the same
    shape and dtype. ``op`` is "sum" or "mean" (mean needs a floating-point tensor). The
    result equals ``torch.distributed.all_reduce`` (SUM, divided by N for mean) up to
    floating-point summation order.

    ``link_delay(src, dst, nbytes) -> seconds``, when given, is slept before each message is
    sent (link emulation: the wall time of a step is then at least the modelled transfer time).
    """
    if op not in ("sum", "mean"):
        raise LabError(f"op {op!r} is not supported; allowed: 'sum', 'mean'", where="ring_allreduce")
    if not isinstance(tensor, torch.Tensor):
        raise LabError(f"expected a torch.Tensor, got {type(tensor).__name__}", where="ring_allreduce")
    if op == "mean" and not (tensor.is_floating_point() or tensor.is_complex()):
        raise LabError(f"op 'mean' needs a floating-point tensor (got {tensor.dtype})", where="ring_allreduce")
    if not dist.is_initialized():
        raise LabError("no process group: call torch.distributed.init_process_group first", where="ring_allreduce")
    t0 = time.perf_counter()
    n = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if n == 1 or tensor.numel() == 0:
        return RingStats(n, tensor.numel(), 0, 0, 0, 0, 0, time.perf_counter() - t0)

    def global_rank(r: int) -> int:
        return r if group is None else dist.get_global_rank(group, r)

    right, left = global_rank((rank + 1) % n), global_rank((rank - 1) % n)
    right_local = (rank + 1) % n
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    item = flat.element_size()
    bounds = chunk_bounds(flat.numel(), n)
    piece = max(1, (piece_bytes or PIECE_BYTES) // item)
    sent = received = msent = mrecv = 0
    delayed = 0.0

    def send(view: torch.Tensor) -> dist.Work:
        nonlocal sent, msent, delayed
        nbytes = view.numel() * item
        if link_delay is not None:
            d = float(link_delay(rank, right_local, nbytes))
            if d > 0:
                time.sleep(d)
                delayed += d
        sent += nbytes
        msent += 1
        return dist.isend(view, right)

    def recv(view: torch.Tensor) -> dist.Work:
        nonlocal received, mrecv
        received += view.numel() * item
        mrecv += 1
        return dist.irecv(view, left)

    # Every chunk is cut into the same number m of pieces (some may be empty when a chunk is
    # tiny), so all ranks agree on the piece sequence. Pieces move in lock step with a lag of
    # L <= m iterations, as gloo's own ring does (L = 2, 1 MiB segments): iteration i first
    # finishes the receive and send of iteration i - L, then posts receive i and send i.
    # Send i (i >= m) forwards the piece received at i - m, finished at i - m + L <= i. Waiting
    # for send i - L is safe: the neighbour posted that receive at its own iteration i - L.
    m = max(1, -(-bounds[0][1] // piece))
    lag = min(WINDOW, m)
    scratch = torch.empty(lag * min(piece, bounds[0][1]), dtype=flat.dtype)
    slot = scratch.numel() // lag

    def pieces_of(chunk: int) -> list[torch.Tensor]:
        o0, length = bounds[chunk % n]
        return [flat[o0 + o:o0 + o + l] for o, l in chunk_bounds(length, m)]

    def run(recv_views: list, first: list, reduce: bool) -> None:
        """Receive ``recv_views`` in order (into scratch then add, or in place) while sending
        ``first`` and then every received piece except those of the final step."""
        send_seq = first + recv_views[:len(recv_views) - m]
        nr = len(recv_views)
        rq: list = [None] * lag
        sq: list = [None] * lag
        tmps: list = [None] * lag
        for i in range(nr + lag):
            k = i % lag
            if i >= lag:
                if rq[k] is not None:
                    rq[k].wait()
                    if reduce:
                        done = recv_views[i - lag]
                        done.add_(tmps[k])
                        if op == "mean" and i - lag >= nr - m:
                            done.div_(n)
                if sq[k] is not None:
                    sq[k].wait()
            if i < nr:
                v = recv_views[i]
                rq[k] = None
                if v.numel():
                    tmps[k] = scratch[k * slot:k * slot + v.numel()] if reduce else v
                    rq[k] = recv(tmps[k])
                out = send_seq[i]
                sq[k] = send(out) if out.numel() else None

    # ---- reduce-scatter: after N-1 steps rank r owns the full sum of chunk (r + 1) mod N ----
    # Step s receives chunk (r - s - 1) (added into place) and sends chunk (r - s), which it
    # finished adding at step s - 1: a piece goes on as soon as it is added, so the steps
    # overlap (gloo's own ring does the same with two 1 MiB segments in flight).
    rs = [v for s in range(n - 1) for v in pieces_of(rank - s - 1)]
    run(rs, pieces_of(rank), reduce=True)
    # ---- all-gather: forward the finished chunks round the ring, received in place ----
    # Step s receives chunk (r - s) and sends chunk (r + 1 - s), the one it received at s - 1.
    ag = [v for s in range(n - 1) for v in pieces_of(rank - s)]
    run(ag, pieces_of(rank + 1), reduce=False)
    if flat.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    BYTES.add(sent, received, msent, mrecv)
    return RingStats(n, tensor.numel(), sent, received, msent, mrecv, 2 * (n - 1),
                     time.perf_counter() - t0, delayed)
