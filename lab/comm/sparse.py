"""Sharing compressed gradients between real processes: the edge-compression design's sparse ring, sparse all-gather,
and the dense all-reduce of the decompressed tensors, all with exact byte counts.

Every method returns the dense float32 **sum** of what the workers sent (every rank gets the same
tensor) and a stats dict with ``bytes_sent`` / ``bytes_recv`` counted from the messages this rank
really sent and received.

Messages (both sparse methods)
------------------------------
Point-to-point over torch.distributed (gloo), variable length: first the count (one int64, 8 bytes),
then the payload (skipped when the count is 0). Sends are non-blocking, so neighbours never
deadlock, and each count's receive is posted one hop ahead, because gloo writes a message at once
only into a receive already posted. The training job uses this same transport.

* **Sparse ring** (the edge-compression design, :func:`sparse_ring_allreduce`). The index range ``0..n-1`` is cut into
  ``N`` near-equal blocks (the first ``n mod N`` blocks one entry longer, as the dense ring in
  :mod:`lab.comm.ring`). Reduce-scatter, N-1 hops (a1, a2, ...): at hop ``s`` rank ``r`` sends its
  block ``(r - s) mod N`` to rank ``r + 1`` and adds the block ``(r - s - 1) mod N`` received from
  ``r - 1`` into its own (union of the indices, values summed). All-gather, N-1 hops (b1, b2, ...):
  rank ``r`` sends block ``(r + 1 - s) mod N`` and replaces its stale block ``(r - s) mod N`` with the
  one received. (The edge-compression design draws four nodes with phases a1-a4 and b1-b4; a ring of N nodes needs N-1
  hops in each phase, which is what runs here.) A block travels as (index, value) pairs: int32
  global index and fp32 value, 8 bytes per entry, packed in one int32 tensor. The **fill-in**: the
  sum of sparse blocks has the union of their supports, so blocks grow hop by hop; every hop's
  entries and bytes are recorded in ``stats["hops"]``.
* **Sparse all-gather** (:func:`sparse_allgather`), what the published compression systems do
  (GRACE's allgather communicator): every worker's serialised payload (:meth:`Payload.to_bytes`,
  its own wire format: 6 B per entry for Group-TopK) goes round the ring unchanged, N-1 hops, so
  every rank receives all N payloads and sums them in rank order. It is a ring of exact-length
  messages rather than gloo's ``all_gather`` because that needs equal sizes and would pad every
  message to the largest. When every payload is known to have this rank's size (``equal_sizes``, as
  in training: same gradient length, same settings, a count fixed by the length), no count
  travels and all N-1 receives are posted at once.
* **Dense** (:func:`dense_allreduce`): each worker decompresses and the dense float32 tensors go
  through the lab's dense ring all-reduce (:func:`lab.comm.ring.ring_allreduce`),
  2 (N-1)/N x 4n bytes per worker whatever the compressor kept.

The ring schedules are Python generators shared by the real run and by the one-process
simulations :func:`simulate_sparse_ring` / :func:`simulate_sparse_allgather`, so the simulated hop
table is the real one (tested against real processes).

The DDP communication hook that shares through this transport is :mod:`lab.comm.hook`; the Compression
page's report on the simulations is :mod:`lab.view.sharing`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Generator

import torch
import torch.distributed as dist

from lab.comm.ring import LinkDelay, ring_allreduce
from lab.compression.compressors import Payload
from lab.errors import LabError
from lab.scenario.names import SHARING, Sharing
from lab.comm.peers import waits_for_peers
from lab.modelled.collectives.ring import allgather_steps, split

COUNT_BYTES = 8  # the int64 count sent before every variable-length message
PAIR_BYTES = 8  # int32 index + fp32 value
_TAG_COUNT, _TAG_DATA, _TAG_PAYLOAD = 11, 12, 13


# ---------------------------------------------------------------------------------------------
# Sparse blocks: (sorted int64 indices, float32 values)
# ---------------------------------------------------------------------------------------------
def merge_pairs(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]):
    """Sum of two sparse vectors: the union of their indices (sorted), values added."""
    ai, av = a
    bi, bv = b
    if ai.numel() == 0:
        return bi.clone(), bv.clone()
    if bi.numel() == 0:
        return ai, av
    idx = torch.cat([ai, bi])
    uniq, inv = torch.unique(idx, sorted=True, return_inverse=True)
    val = torch.zeros(uniq.numel(), dtype=torch.float32)
    val.index_add_(0, inv[: ai.numel()], av)  # each index at most once per side: the sum is a + b exactly
    val.index_add_(0, inv[ai.numel():], bv)
    return uniq, val


def split_pairs(idx: torch.Tensor, val: torch.Tensor, bounds: list[tuple[int, int]]):
    """Cut a sorted sparse vector into the blocks ``bounds``."""
    cuts = torch.searchsorted(idx, torch.tensor([s for s, _ in bounds[1:]], dtype=torch.int64)).tolist()
    edges = [0, *cuts, idx.numel()]
    return [(idx[edges[i]:edges[i + 1]], val[edges[i]:edges[i + 1]]) for i in range(len(bounds))]


def pack_pairs(idx: torch.Tensor, val: torch.Tensor) -> torch.Tensor:
    """One int32 tensor [indices..., value bits...]: 8 bytes per entry on the wire."""
    return torch.cat([idx.to(torch.int32), val.to(torch.float32).contiguous().view(torch.int32)])


def unpack_pairs(wire: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    c = wire.numel() // 2
    return wire[:c].to(torch.int64), wire[c:].contiguous().view(torch.float32)


def pairs_to_dense(blocks, n: int) -> torch.Tensor:
    out = torch.zeros(n, dtype=torch.float32)
    for idx, val in blocks:
        if idx.numel():
            out[idx] = val
    return out


def _pairs_of(payload_or_pairs) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(payload_or_pairs, Payload):
        idx, val = payload_or_pairs.to_pairs()
    else:
        idx, val = payload_or_pairs
        idx, val = idx.to(torch.int64), val.to(torch.float32)
    if idx.numel() > 1 and not bool((idx[1:] > idx[:-1]).all()):
        order = torch.argsort(idx)
        idx, val = idx[order], val[order]
        if bool((idx[1:] == idx[:-1]).any()):
            raise LabError("a sparse gradient lists the same index twice")
    return idx, val


# ---------------------------------------------------------------------------------------------
# The schedules, as generators: yield (wire tensor to send, dtype expected back), receive a tensor
# ---------------------------------------------------------------------------------------------
@dataclass
class RankLog:
    hops: list[dict] = field(default_factory=list)
    bytes_sent: int = 0
    bytes_recv: int = 0


def _ring_program(rank: int, world: int, blocks: list, log: RankLog) -> Generator:
    """The edge-compression design's sparse ring for one rank; ``blocks`` (its N sparse blocks) are updated in place."""
    n = world
    for s in range(n - 1):  # reduce-scatter
        send_b, recv_b = (rank - s) % n, (rank - s - 1) % n
        got = yield pack_pairs(*blocks[send_b]), torch.int32
        blocks[recv_b] = merge_pairs(blocks[recv_b], unpack_pairs(got))
        log.hops.append({"phase": "reduce-scatter", "hop": f"a{s + 1}", "index": s + 1, "rank": rank,
                         "sent_block": send_b, "sent_entries": int(blocks[send_b][0].numel()),
                         "recv_block": recv_b, "recv_entries": got.numel() // 2,
                         "block_entries_after": int(blocks[recv_b][0].numel())})
    for s in range(n - 1):  # all-gather
        send_b, recv_b = (rank + 1 - s) % n, (rank - s) % n
        got = yield pack_pairs(*blocks[send_b]), torch.int32
        blocks[recv_b] = unpack_pairs(got)
        log.hops.append({"phase": "all-gather", "hop": f"b{s + 1}", "index": n + s, "rank": rank,
                         "sent_block": send_b, "sent_entries": int(blocks[send_b][0].numel()),
                         "recv_block": recv_b, "recv_entries": got.numel() // 2,
                         "block_entries_after": int(blocks[recv_b][0].numel())})


def _allgather_program(rank: int, world: int, items: list, log: RankLog) -> Generator:
    """Ring all-gather of opaque byte messages; ``items[r]`` is filled with rank r's message."""
    n = world
    for s in range(n - 1):
        send_i, recv_i = (rank - s) % n, (rank - s - 1) % n
        got = yield items[send_i], torch.uint8
        items[recv_i] = got
        log.hops.append({"phase": "all-gather", "hop": f"g{s + 1}", "index": s + 1, "rank": rank,
                         "sent_item": send_i, "sent_bytes": int(items[send_i].numel()),
                         "recv_item": recv_i, "recv_bytes": int(got.numel())})


def _msg_bytes(t: torch.Tensor) -> int:
    return COUNT_BYTES + t.numel() * t.element_size()


def _simulate(programs: list[Generator], logs: list[RankLog]) -> None:
    """Run N rank programs in lock-step, delivering rank r's message to rank r + 1."""
    n = len(programs)
    msgs = [next(p) for p in programs]
    while True:
        for r in range(n):
            logs[r].bytes_sent += _msg_bytes(msgs[r][0])
            logs[(r + 1) % n].bytes_recv += _msg_bytes(msgs[r][0])
        nxt = []
        for r, p in enumerate(programs):
            try:
                nxt.append(p.send(msgs[(r - 1) % n][0].clone()))
            except StopIteration:
                nxt.append(None)
        if any(m is None for m in nxt):
            assert all(m is None for m in nxt)
            return
        msgs = nxt


def _ring_peers(group: Any) -> tuple[int, int, int, int]:
    """(world, rank, right, left) of this rank in ``group``; right and left as global ranks."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)

    def glob(r: int) -> int:
        return r if group is None else dist.get_global_rank(group, r)

    return world, rank, glob((rank + 1) % world), glob((rank - 1) % world)


def _sleep_link(link_delay: LinkDelay | None, rank: int, right: int, nbytes: int) -> float:
    """Sleep the emulated link's time for ``nbytes`` to the right neighbour; the seconds slept."""
    if link_delay is None:
        return 0.0
    d = float(link_delay(rank, right, nbytes))
    if d > 0:
        time.sleep(d)
    return max(d, 0.0)


def _run_real(program: Generator, log: RankLog, group: Any, link_delay: LinkDelay | None) -> float:
    """Drive one rank's program over real point-to-point messages. Returns seconds of emulated delay.

    Each count's receive is posted one hop ahead: gloo writes a message at once only into a receive
    already posted (otherwise it costs a round trip), so a hop pays one message latency, not three."""
    world, rank, right, left = _ring_peers(group)
    delayed = 0.0
    try:
        wire, rdtype = next(program)
    except StopIteration:
        return 0.0
    cnt_in = torch.empty(1, dtype=torch.int64)
    rc = dist.irecv(cnt_in, left, group=group, tag=_TAG_COUNT)
    while True:
        wire = wire.contiguous()
        nbytes = _msg_bytes(wire)
        delayed += _sleep_link(link_delay, rank, (rank + 1) % world, nbytes)
        works = [dist.isend(torch.tensor([wire.numel()], dtype=torch.int64), right, group=group, tag=_TAG_COUNT)]
        if wire.numel():
            works.append(dist.isend(wire, right, group=group, tag=_TAG_DATA))
        rc.wait()
        got = torch.empty(int(cnt_in.item()), dtype=rdtype)
        rd = dist.irecv(got, left, group=group, tag=_TAG_DATA) if got.numel() else None
        try:
            if rd is not None:
                rd.wait()
            for w in works:
                w.wait()
            log.bytes_sent += nbytes
            log.bytes_recv += _msg_bytes(got)
            wire, rdtype = program.send(got)
        except StopIteration:
            return delayed
        cnt_in = torch.empty(1, dtype=torch.int64)
        rc = dist.irecv(cnt_in, left, group=group, tag=_TAG_COUNT)


# ---------------------------------------------------------------------------------------------
# Sparse ring
# ---------------------------------------------------------------------------------------------
def _initial_blocks(pairs, n: int, world: int):
    idx, val = _pairs_of(pairs)
    if idx.numel() and (int(idx[0]) < 0 or int(idx[-1]) >= n):
        raise LabError(f"sparse indices must lie in 0..{n - 1}")
    return split_pairs(idx, val, split(n, world))


def _start_rows(blocks, rank: int) -> list[dict]:
    return [{"phase": "start", "hop": "a0", "index": 0, "rank": rank, "sent_block": None, "sent_entries": 0,
             "recv_block": b, "recv_entries": 0, "block_entries_after": int(blk[0].numel())}
            for b, blk in enumerate(blocks)]


@waits_for_peers
def sparse_ring_allreduce(pairs, n: int, *, group: Any = None,
                          link_delay: LinkDelay | None = None) -> tuple[torch.Tensor, dict]:
    """The edge-compression design's sparse ring over real processes. ``pairs`` is a Payload or (indices, values).

    Returns the dense float32 sum (length ``n``) and stats: bytes_sent, bytes_recv, hops (one row
    per hop of this rank, plus ``a0`` rows with the starting entries of each block), t_comm, delay.
    """
    world, rank = _world(group)
    blocks = _initial_blocks(pairs, n, world)
    log = RankLog(hops=_start_rows(blocks, rank))
    t0 = time.perf_counter()
    delay = _run_real(_ring_program(rank, world, blocks, log), log, group, link_delay) if world > 1 else 0.0
    dense = pairs_to_dense(blocks, n)
    return dense, {"bytes_sent": log.bytes_sent, "bytes_recv": log.bytes_recv, "hops": log.hops,
                   "t_comm": time.perf_counter() - t0, "delay": delay}


@dataclass(frozen=True)
class RingSimulation:
    """The sparse ring run in one process: the sum, every rank's hop rows and byte counts."""

    total: torch.Tensor
    hops: list[dict]
    bytes_sent: list[int]
    bytes_recv: list[int]
    n: int
    world: int


def simulate_sparse_ring(worker_pairs: list, n: int) -> RingSimulation:
    """Mirror of :func:`sparse_ring_allreduce` for N workers in one process (same schedule code)."""
    world = len(worker_pairs)
    if world < 1:
        raise LabError("the ring needs at least one worker")
    blocks = [_initial_blocks(p, n, world) for p in worker_pairs]
    logs = [RankLog(hops=_start_rows(blocks[r], r)) for r in range(world)]
    if world > 1:
        _simulate([_ring_program(r, world, blocks[r], logs[r]) for r in range(world)], logs)
    total = pairs_to_dense(blocks[0], n)
    return RingSimulation(total, [h for lg in logs for h in lg.hops], [lg.bytes_sent for lg in logs],
                          [lg.bytes_recv for lg in logs], n, world)


# ---------------------------------------------------------------------------------------------
# Sparse all-gather and dense
# ---------------------------------------------------------------------------------------------
def _payload_wire(payload: Payload) -> torch.Tensor:
    return torch.frombuffer(bytearray(payload.to_bytes()), dtype=torch.uint8)


def sum_payloads(payloads: list[Payload]) -> torch.Tensor:
    """The dense float32 sum of the workers' payloads, added in rank order: every rank adds in the
    same order, so every rank gets the same bits."""
    n = payloads[0].numel
    out = torch.zeros(n, dtype=torch.float32)
    for p in payloads:
        if p.numel != n:
            raise LabError(f"workers disagree on the gradient length ({p.numel} != {n}); every worker must "
                           "train the same model")
        if p.index_format == 0:
            out += p.values.to(torch.float32)
        else:
            idx, val = p.to_pairs()
            out.index_add_(0, idx, val)
    return out


@waits_for_peers
def sparse_allgather(payload: Payload, *, group: Any = None, link_delay: LinkDelay | None = None,
                     equal_sizes: bool = False) -> tuple[torch.Tensor, dict]:
    """Every worker's serialised payload to every worker (exact-length ring all-gather), summed.

    ``equal_sizes``: every worker's payload has this one's length (in training every worker
    compresses a gradient of the same length with the same settings, and each compressor keeps a
    count fixed by that length), so no count travels and all N-1 receives are posted at once."""
    world, rank = _world(group)
    if equal_sizes and world > 1:
        return _allgather_equal(payload, group, link_delay)
    items: list = [None] * world
    items[rank] = _payload_wire(payload)
    log = RankLog()
    t0 = time.perf_counter()
    delay = _run_real(_allgather_program(rank, world, items, log), log, group, link_delay) if world > 1 else 0.0
    dense = sum_payloads([Payload.from_bytes(w.numpy().tobytes()) for w in items])
    return dense, {"bytes_sent": log.bytes_sent, "bytes_recv": log.bytes_recv, "hops": log.hops,
                   "t_comm": time.perf_counter() - t0, "delay": delay}


def _allgather_equal(payload: Payload, group: Any, link_delay: LinkDelay | None) -> tuple[torch.Tensor, dict]:
    """The ring all-gather of equal-size payloads: hop s brings rank (r - s - 1)'s payload, forwarded
    at once unless it is the last."""
    world, rank, right, left = _ring_peers(group)
    t0 = time.perf_counter()
    wire = _payload_wire(payload)
    bufs = [torch.empty_like(wire) for _ in range(world - 1)]
    recvs = [dist.irecv(b, left, group=group, tag=_TAG_PAYLOAD) for b in bufs]
    delay = _sleep_link(link_delay, rank, (rank + 1) % world, wire.numel())
    sends = [dist.isend(wire, right, group=group, tag=_TAG_PAYLOAD)]
    got: list = [None] * world
    got[rank] = payload
    hops = []
    for s in range(world - 1):
        recvs[s].wait()
        src = (rank - s - 1) % world
        got[src] = Payload.from_bytes(bufs[s].numpy().tobytes())
        hops.append({"phase": "all-gather", "hop": f"g{s + 1}", "index": s + 1, "rank": rank,
                     "sent_item": (rank - s) % world, "sent_bytes": int(wire.numel()),
                     "recv_item": src, "recv_bytes": int(bufs[s].numel())})
        if s < world - 2:
            delay += _sleep_link(link_delay, rank, (rank + 1) % world, bufs[s].numel())
            sends.append(dist.isend(bufs[s], right, group=group, tag=_TAG_PAYLOAD))
    for w in sends:
        w.wait()
    nbytes = allgather_steps(world) * wire.numel()
    return sum_payloads(got), {"bytes_sent": nbytes, "bytes_recv": nbytes, "hops": hops,
                               "t_comm": time.perf_counter() - t0, "delay": delay}


def simulate_sparse_allgather(payloads: list[Payload]) -> tuple[torch.Tensor, list[int], list[int]]:
    """Mirror of :func:`sparse_allgather` in one process: (sum, bytes sent per rank, bytes received)."""
    world = len(payloads)
    items = [[None] * world for _ in range(world)]
    logs = [RankLog() for _ in range(world)]
    for r, p in enumerate(payloads):
        items[r][r] = _payload_wire(p)
    if world > 1:
        _simulate([_allgather_program(r, world, items[r], logs[r]) for r in range(world)], logs)
    return (sum_payloads([Payload.from_bytes(w.numpy().tobytes()) for w in items[0]]), [lg.bytes_sent for lg in logs],
            [lg.bytes_recv for lg in logs])


@waits_for_peers
def dense_allreduce(payload: Payload, *, group: Any = None,
                    link_delay: LinkDelay | None = None) -> tuple[torch.Tensor, dict]:
    """Decompress, then the lab's dense ring all-reduce of the float32 tensor (bytes counted by it)."""

    dense = payload.to_dense()
    t0 = time.perf_counter()
    st = ring_allreduce(dense, "sum", group=group, link_delay=link_delay)
    return dense, {"bytes_sent": st.sent, "bytes_recv": st.received, "hops": [],
                   "t_comm": time.perf_counter() - t0, "delay": st.delay_seconds}


@waits_for_peers
def share(payload: Payload, method: str, *, group: Any = None, link_delay: LinkDelay | None = None,
          equal_sizes: bool = False) -> tuple[torch.Tensor, dict]:
    """Share one worker's payload by ``method`` (dense | sparse_ring | sparse_allgather): the dense
    sum and this rank's byte counts. ``equal_sizes``: see :func:`sparse_allgather`."""
    if not dist.is_available() or not dist.is_initialized():
        raise LabError("no process group: call torch.distributed.init_process_group first")
    if method == "dense":
        return dense_allreduce(payload, group=group, link_delay=link_delay)
    if method == Sharing.SPARSE_RING:
        return sparse_ring_allreduce(payload, payload.numel, group=group, link_delay=link_delay)
    if method == Sharing.SPARSE_ALLGATHER:
        return sparse_allgather(payload, group=group, link_delay=link_delay, equal_sizes=equal_sizes)
    raise LabError(f"unknown sharing method {method!r}; choose one of {list(SHARING)}",
                   where="compression.sharing")


def _world(group: Any) -> tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise LabError("no process group: call torch.distributed.init_process_group first")
    return dist.get_world_size(group), dist.get_rank(group)

