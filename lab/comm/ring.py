"""The lab's own ring all-reduce, built from point-to-point send/recv over torch.distributed.

Reduce-scatter (N-1 steps) then all-gather (N-1 steps), exactly the schedule that
:func:`lab.modelled.collectives.build_schedule` draws for ``"ring"``: at reduce-scatter step ``s`` rank ``r`` sends chunk
``(r - s) mod N`` to rank ``r + 1`` and adds chunk ``(r - s - 1) mod N`` received from ``r - 1``;
at all-gather step ``s`` it forwards chunk ``(r + 1 - s) mod N`` and receives chunk ``(r - s) mod N``
straight into place.

Speed: the buffer is one flat contiguous tensor and every chunk and piece is a view of it (no
copies). Chunks travel in pieces (:data:`REDUCE_PIECE_BYTES`, :data:`PIECE_BYTES`) in a
lock-step pipeline like gloo's own ring: a piece is forwarded as soon as it has been added, so
transfers and additions of consecutive pieces and steps overlap, with :data:`LAG` pieces in
flight each way. The receive scratch buffer is reused across calls.
Sends and receives are non-blocking (the process group's isend/irecv), and every wait is for
something the neighbour has already started, so neighbours never deadlock.

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
from lab.comm.peers import waits_for_peers
from lab.modelled.collectives.ring import ring_steps, split

#: Chunks travel in pieces of at most this many bytes, and in at least two pieces when a chunk
#: has 2 x MIN_PIECE_BYTES or more (so transfers and additions overlap). Pieces are larger than
#: gloo's 1 MiB segments because every piece costs Python calls and thread wake-ups that gloo's C++
#: loop does not pay (bench/bench_allreduce.py measures the ring against gloo).
PIECE_BYTES = 8 << 20
MIN_PIECE_BYTES = 1 << 20
#: Reduce-scatter pieces: small enough that the received piece is still in cache when it is added.
REDUCE_PIECE_BYTES = 2 << 20
#: Pieces in flight each way: piece i - LAG is finished before piece i is sent.
LAG = 2
#: Receives posted ahead of the piece about to be sent.
AHEAD = 1
#: Up to this many bytes of reduce-scatter receives, all are posted at once.
ALL_AHEAD_BYTES = 8 << 20

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


_CACHE = threading.local()


def _scratch(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """A reusable receive buffer (per thread and dtype): a fresh one every call would be
    page-faulted and zeroed by the kernel each time, megabytes of extra work per call."""
    bufs = _CACHE.__dict__.setdefault("bufs", {})
    buf = bufs.get(dtype)
    if buf is None or buf.numel() < numel:
        buf = bufs[dtype] = torch.empty(numel, dtype=dtype)
    return buf[:numel]


@waits_for_peers
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

    # The process group's own send/recv (ranks local to the group) skip torch.distributed's
    # per-call Python checks, which matter at hundreds of pieces per call.
    pg = group if group is not None else dist.group.WORLD
    right, left = (rank + 1) % n, (rank - 1) % n
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    item = flat.element_size()
    bounds = split(flat.numel(), n)
    first = bounds[0][1]  # the largest chunk (the first of near-equal chunks)

    def pieces_per_chunk(limit: int) -> int:
        m = max(1, -(-first // max(1, limit // item)))
        if piece_bytes is None and first * item >= 2 * MIN_PIECE_BYTES:
            m = max(2, m)
        return m

    m_rs = pieces_per_chunk(piece_bytes or REDUCE_PIECE_BYTES)
    m_ag = pieces_per_chunk(piece_bytes or PIECE_BYTES)
    sent = received = msent = mrecv = 0
    delayed = 0.0

    def send(view: torch.Tensor) -> dist.Work:
        nonlocal sent, msent, delayed
        nbytes = view.numel() * item
        if link_delay is not None:
            d = float(link_delay(rank, right, nbytes))
            if d > 0:
                time.sleep(d)
                delayed += d
        sent += nbytes
        msent += 1
        return pg.send([view], right, 0)

    def recv(view: torch.Tensor) -> dist.Work:
        nonlocal received, mrecv
        received += view.numel() * item
        mrecv += 1
        return pg.recv([view], left, 0)

    # Every chunk is cut into the same number m of pieces (some may be empty when a chunk is
    # tiny), so all ranks agree on the piece sequence. Pieces move in lock step, as in gloo's own
    # ring (1 MiB segments, two in flight): iteration i finishes receive and send i - L (L =
    # LAG), posts the receives up to i + AHEAD - 1, then sends piece i. Send i (i >= m) forwards
    # the piece received at i - m, finished at i - m + L <= i. Sender and receiver post piece i
    # at about the same iteration, so gloo mostly finds the receive posted and writes the piece
    # at once from this thread. Every wait is for something the neighbour started at an earlier
    # iteration, so the ring cannot deadlock. Reduce-scatter pieces land in L + AHEAD
    # piece-sized scratch slots that stay in cache while they are added; all-gather pieces are
    # received in place, all posted at once.
    slot = -(-first // m_rs)
    n_rs = (n - 1) * m_rs
    # small buffers: post every reduce-scatter receive at once (no piece ever waits for its
    # receive to be announced, which is what small messages are most sensitive to)
    ahead = n_rs if n_rs * slot * item <= ALL_AHEAD_BYTES else max(1, AHEAD)
    slots = min(n_rs, min(LAG, m_rs) + ahead)
    scratch = _scratch(slots * slot, flat.dtype)

    def pieces_of(chunk: int, m: int) -> list[torch.Tensor]:
        s0, e0 = bounds[chunk % n]
        return [flat[s0 + a:s0 + b] for a, b in split(e0 - s0, m)]

    def run(recv_views: list, first: list, reduce: bool) -> None:
        """Receive ``recv_views`` in order (into scratch then add, or in place) while sending
        ``first`` and then every received piece except those of the final step."""
        m = len(first)
        lag = min(LAG, m)
        send_seq = first + recv_views[:len(recv_views) - m]
        nr = len(recv_views)
        rq: list = [None] * nr
        tmps: list = [None] * nr
        sq: list = [None] * nr
        ah = ahead if reduce else nr  # received in place, every piece has its home: post all at once
        posted = 0

        def post_until(end: int) -> None:
            nonlocal posted
            while posted < min(nr, end):
                v = recv_views[posted]
                if v.numel():
                    k = posted % slots
                    tmps[posted] = scratch[k * slot:k * slot + v.numel()] if reduce else v
                    rq[posted] = recv(tmps[posted])
                posted += 1

        post_until(lag + ah - 1)
        for i in range(nr + lag):
            j = i - lag
            if j >= 0:
                if rq[j] is not None:
                    rq[j].wait()
                    if reduce:
                        done = recv_views[j]
                        done.add_(tmps[j])
                        if op == "mean" and j >= nr - m:
                            done.div_(n)
                    rq[j] = tmps[j] = None
                if sq[j] is not None:
                    sq[j].wait()
                    sq[j] = None
            post_until(i + ah)
            if i < nr and send_seq[i].numel():
                sq[i] = send(send_seq[i])

    # ---- reduce-scatter: after N-1 steps rank r owns the full sum of chunk (r + 1) mod N ----
    # Step s receives chunk (r - s - 1) (added into place) and sends chunk (r - s), which it
    # finished adding at step s - 1: a piece goes on as soon as it is added, so the steps
    # overlap (gloo's own ring does the same with two 1 MiB segments in flight).
    rs = [v for s in range(n - 1) for v in pieces_of(rank - s - 1, m_rs)]
    run(rs, pieces_of(rank, m_rs), reduce=True)
    # ---- all-gather: forward the finished chunks round the ring, received in place ----
    # Step s receives chunk (r - s) and sends chunk (r + 1 - s), the one it received at s - 1.
    ag = [v for s in range(n - 1) for v in pieces_of(rank - s, m_ag)]
    run(ag, pieces_of(rank + 1, m_ag), reduce=False)
    if flat.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    BYTES.add(sent, received, msent, mrecv)
    return RingStats(n, tensor.numel(), sent, received, msent, mrecv, ring_steps(n),
                     time.perf_counter() - t0, delayed)
