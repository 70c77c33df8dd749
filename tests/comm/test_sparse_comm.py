"""Sharing sparse gradients: the edge-compression design's ring and sparse all-gather, simulated and over real processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lab.comm.spawn import run_local
from lab.comm.sparse import (
    COUNT_BYTES,
    PAIR_BYTES,
    merge_pairs,
    pack_pairs,
    simulate_sparse_allgather,
    simulate_sparse_ring,
    split_pairs,
    unpack_pairs,
)
from lab.compression.compressors import GroupTopK, NoCompression, TopK
from lab.modelled.collectives.ring import ring_bytes_per_rank as dense_ring_bytes_per_rank
from lab.modelled.collectives.ring import split as block_bounds
from lab.errors import LabError
from lab.testing.sparse_workers import check_worker


def int_grads(world: int, n: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(-9, 10, (n,), generator=g).float() for _ in range(world)]


def test_block_bounds_cover_the_range_like_array_split():
    for n, parts in [(10, 3), (3, 4), (0, 2), (101, 4)]:
        b = block_bounds(n, parts)
        assert b[0][0] == 0 and b[-1][1] == n and all(b[i][1] == b[i + 1][0] for i in range(parts - 1))
        lens = [e - s for s, e in b]
        assert lens == [len(a) for a in torch.arange(n).tensor_split(parts)]


def test_merge_split_pack_are_exact():
    a = (torch.tensor([1, 4, 7]), torch.tensor([1.0, 2.0, 3.0]))
    b = (torch.tensor([0, 4, 9]), torch.tensor([5.0, -2.0, 1.0]))
    idx, val = merge_pairs(a, b)
    assert idx.tolist() == [0, 1, 4, 7, 9] and val.tolist() == [5.0, 1.0, 0.0, 3.0, 1.0]
    parts = split_pairs(idx, val, block_bounds(10, 3))  # blocks [0,4) [4,7) [7,10)
    assert [p[0].tolist() for p in parts] == [[0, 1], [4], [7, 9]]
    wire = pack_pairs(idx, val)
    assert wire.dtype == torch.int32 and wire.numel() * 4 == PAIR_BYTES * 5
    i2, v2 = unpack_pairs(wire)
    assert torch.equal(i2, idx) and torch.equal(v2, val)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 7, 50, 203])
def test_simulated_sharing_gives_the_dense_sum(world, n):
    comp = GroupTopK(0.2, 10)
    payloads = [comp.compress(g) for g in int_grads(world, n, seed=n)]
    want = sum(p.to_dense() for p in payloads)
    sim = simulate_sparse_ring(payloads, n)
    total, sent, recv = simulate_sparse_allgather(payloads)
    assert torch.equal(sim.total, want) and torch.equal(total, want)
    # bytes: every message is the count plus 8 B per pair (ring) / the payload's own bytes (all-gather)
    for r in range(world):
        hops = [h for h in sim.hops if h["rank"] == r and h["phase"] != "start"]
        assert sim.bytes_sent[r] == sum(COUNT_BYTES + PAIR_BYTES * h["sent_entries"] for h in hops)
        assert sim.bytes_recv[r] == sum(COUNT_BYTES + PAIR_BYTES * h["recv_entries"] for h in hops)
        others = [payloads[(r - s) % world].nbytes for s in range(world - 1)]
        assert sent[r] == sum(COUNT_BYTES + b for b in others)
        assert recv[r] == sum(COUNT_BYTES + payloads[q].nbytes for q in range(world) if q != r)
    assert sum(sim.bytes_sent) == sum(sim.bytes_recv)


def test_ring_fill_in_grows_hop_by_hop():
    n, world = 4000, 4
    payloads = [TopK(0.05).compress(g) for g in int_grads(world, n, seed=3)]
    sim = simulate_sparse_ring(payloads, n)
    support = int(torch.count_nonzero(sum(p.to_dense() != 0 for p in payloads)))
    # a block's entries after the reduce-scatter: the union of the 4 workers' entries in it
    final = [h for h in sim.hops if h["phase"] == "reduce-scatter" and h["hop"] == f"a{world - 1}"]
    assert sum(h["block_entries_after"] for h in final) == support
    start = {(h["rank"], h["recv_block"]): h["block_entries_after"] for h in sim.hops if h["phase"] == "start"}
    for h in final:  # more than any one worker had in that block: fill-in
        assert h["block_entries_after"] > max(start[(r, h["recv_block"])] for r in range(world))
    # the reduce-scatter messages grow hop by hop; the all-gather ones carry the full blocks
    sizes = [sum(h["sent_entries"] for h in sim.hops if h["hop"] == f"a{s}") for s in range(1, world)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    ag = [sum(h["sent_entries"] for h in sim.hops if h["hop"] == f"b{s}") for s in range(1, world)]
    assert ag == [support] * (world - 1)


def test_dense_ring_bytes_per_rank():
    assert dense_ring_bytes_per_rank(100, 4) == [2 * 3 * 25 * 4] * 4
    b = dense_ring_bytes_per_rank(10, 3)  # blocks 4, 3, 3
    assert sum(b) == 2 * 2 * 10 * 4 and max(b) - min(b) == 4


def test_dense_payloads_also_share_exactly():
    payloads = [NoCompression().compress(g) for g in int_grads(3, 20)]
    sim = simulate_sparse_ring(payloads, 20)
    assert torch.equal(sim.total, sum(p.to_dense() for p in payloads))


def test_bad_sparse_input_is_refused():
    with pytest.raises(LabError):
        simulate_sparse_ring([(torch.tensor([3, 3]), torch.tensor([1.0, 2.0]))], 10)
    with pytest.raises(LabError):
        simulate_sparse_ring([(torch.tensor([12]), torch.tensor([1.0]))], 10)
    with pytest.raises(LabError):
        simulate_sparse_ring([], 10)


@pytest.fixture(scope="module")
def real_rows(tmp_path_factory) -> list[dict]:
    """One run of 4 real processes: ring sizes 2, 3, 4 (a process group each), several lengths."""
    out = tmp_path_factory.mktemp("sparse")
    run_local(check_worker, 4, (str(out), (1, 7, 33, 101)), timeout_s=240)
    rows = []
    for r in range(4):
        rows += json.loads(Path(out, f"rank{r}.json").read_text())
    errors = [row["error"] for row in rows if row["kind"] == "error"]
    assert not errors, errors
    return rows


@pytest.mark.timeout(300)
def test_real_sparse_ring_and_allgather_equal_the_dense_sum(real_rows, spawns):
    rows = [r for r in real_rows if r["kind"] == "sharing"]
    assert {(r["N"], r["n"]) for r in rows} == {(N, n) for N in (2, 3, 4) for n in (1, 7, 33, 101)}
    assert len(rows) == (2 + 3 + 4) * 4  # every rank of every group reported
    for r in rows:
        assert r["ring_exact"] and r["allgather_exact"], r
        # the bytes the real messages took are those the one-process simulation counts
        assert r["ring_bytes"] == r["sim_ring_bytes"] and r["allgather_bytes"] == r["sim_allgather_bytes"], r
        assert r["hops_equal"], r


@pytest.mark.timeout(300)
def test_gradient_compressor_step_for_every_sharing_method(real_rows, spawns):
    rows = [r for r in real_rows if r["kind"] == "step"]
    assert {r["method"] for r in rows} == {"dense", "sparse_ring", "sparse_allgather"}
    for r in rows:
        assert r["step_exact"], r
        if r["method"] == "dense":
            assert r["bytes_sent"] == dense_ring_bytes_per_rank(r["n"], r["N"])[r["rank"]]
        assert r["kept"] == GroupTopK(0.1, 16).kept(r["n"])


@pytest.mark.timeout(300)
def test_group_topk_ddp_comm_hook_on_gloo(real_rows, spawns):
    rows = [r for r in real_rows if r["kind"] == "ddp"]
    assert {(r["sharing"], r["rank"]) for r in rows} == {(s, k) for s in ("sparse_allgather", "sparse_ring") for k in range(4)}
    for r in rows:
        assert r["calls"] >= 1 and r["max_abs_ref"] > 0
        tol = 0.0 if r["sharing"] == "sparse_allgather" else 1e-6 * r["max_abs_ref"]  # the ring adds in another order
        assert r["max_abs_diff"] <= tol, r
        assert r["ef_finite"] and r["ef_calls"] >= 2 and r["ef_residuals"] >= 1


@pytest.mark.timeout(300)
def test_link_delay_hook_is_called_for_every_message(real_rows, spawns):
    rows = [r for r in real_rows if r["kind"] == "delay"]
    assert len(rows) == 4
    for r in rows:
        assert r["exact"] and r["calls"] == 2 * (4 - 1) and r["bytes_match"] and r["to_right"]
        assert r["delay"] == pytest.approx(r["calls"] * 1e-4)
