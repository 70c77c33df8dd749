"""The Compression page's report on sharing one set of gradients: the sparse ring simulated in one
process (:func:`lab.comm.sparse.simulate_sparse_ring`), each block's fill-in hop by hop, the bytes on the
wire per hop, and the bytes per worker of the three sharing methods. The counts are those the real
transports send (``tests/comm/test_sparse_comm.py`` checks the simulations against them)."""

from __future__ import annotations

import torch

from lab.comm.sparse import (
    COUNT_BYTES,
    PAIR_BYTES,
    RingSimulation,
    simulate_sparse_allgather,
    simulate_sparse_ring,
)
from lab.compression.compressors import Payload, make_compressor
from lab.modelled.collectives.ring import ring_bytes_per_rank, split
from lab.scenario.names import SHARING_LABELS, Sharing


def fill_in_table(sim: RingSimulation) -> list[dict]:
    """Each block's journey round the simulated ring: its entries after every hop.

    Block b starts on rank b (hop a0: that rank's own entries in it), is merged into a new rank's
    copy at each reduce-scatter hop (the entries grow: fill-in), and keeps its final size through
    the all-gather. Rows: block, hop, index (0 = start), phase, entries, plus the block's dense
    length and the no-overlap bound (the sum of every worker's entries in the block).
    """
    N = sim.world
    bounds = split(sim.n, N)
    start = {(h["rank"], h["recv_block"]): h["block_entries_after"] for h in sim.hops if h["phase"] == "start"}
    rows = []
    for b in range(N):
        common = {"block": b, "block_length": bounds[b][1] - bounds[b][0],
                  "no_overlap_bound": sum(start[(r, b)] for r in range(N))}
        rows.append({**common, "hop": "a0", "index": 0, "phase": "start", "entries": start[(b, b)]})
        for h in sim.hops:
            if h["phase"] != "start" and h["recv_block"] == b:
                rows.append({**common, "hop": h["hop"], "index": h["index"], "phase": h["phase"],
                             "entries": h["block_entries_after"]})
    return sorted(rows, key=lambda r: (r["block"], r["index"]))


def hop_bytes_table(sim: RingSimulation) -> list[dict]:
    """Bytes on the wire per hop of the simulated ring (all ranks together), counts included."""
    out: dict[tuple, dict] = {}
    for h in sim.hops:
        if h["phase"] == "start":
            continue
        row = out.setdefault((h["index"], h["hop"]), {"hop": h["hop"], "index": h["index"], "phase": h["phase"],
                                                      "bytes": 0, "entries": 0})
        row["bytes"] += COUNT_BYTES + PAIR_BYTES * h["sent_entries"]
        row["entries"] += h["sent_entries"]
    return [out[k] for k in sorted(out)]


def compare_sharing(payloads: list[Payload], sim: RingSimulation | None = None) -> dict:
    """Bytes per worker per step for the three sharing methods, from the one-process simulations.

    The counts are exactly those the real methods send (tests/comm/test_sparse_comm.py checks it); the
    dense ring's are lab.comm.ring's schedule for n float32 values. Returns {"methods": [row per
    method], "support": non-zeros of the sum, "kept_per_worker": [...]}.
    """
    N, n = len(payloads), payloads[0].numel
    sim = sim if sim is not None else simulate_sparse_ring(payloads, n)
    _, ag_sent, ag_recv = simulate_sparse_allgather(payloads)
    dense = ring_bytes_per_rank(n, N)
    rows = []
    for method, sent, recv in ((Sharing.DENSE, dense, dense), (Sharing.SPARSE_RING, sim.bytes_sent, sim.bytes_recv),
                               (Sharing.SPARSE_ALLGATHER, ag_sent, ag_recv)):
        rows.append({"method": method, "label": SHARING_LABELS[method], "workers": N, "numel": n,
                     "bytes_sent_mean": sum(sent) / N, "bytes_sent_max": max(sent),
                     "bytes_recv_mean": sum(recv) / N, "bytes_recv_max": max(recv),
                     "vs_dense": (sum(sent) / sum(dense)) if sum(dense) else float("nan")})
    return {"methods": rows, "support": int(torch.count_nonzero(sim.total)),
            "kept_per_worker": [p.count for p in payloads]}


def sharing_report(grads: list, kind: str, ratio: float, group_size: int, seed: int = 0) -> tuple:
    """The workers' gradients ``grads`` (arrays or tensors) compressed by ``kind``, the edge-compression design's sparse ring
    simulated on them: (:func:`fill_in_table`, :func:`hop_bytes_table`, :func:`compare_sharing`)."""

    payloads = [make_compressor(kind, ratio, group_size, seed=seed).compress(torch.as_tensor(g)) for g in grads]
    sim = simulate_sparse_ring(payloads, payloads[0].numel)
    return fill_in_table(sim), hop_bytes_table(sim), compare_sharing(payloads, sim)
