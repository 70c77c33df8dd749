"""Compressors: selection against brute force, wire sizes against real serialisation, error feedback."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.comm.sharing import GradientCompressor
from lab.compression.compressors import (
    FP16,
    HEADER_BYTES,
    ErrorFeedback,
    GroupTopK,
    NoCompression,
    Payload,
    RandomK,
    TopK,
    make_compressor,
)
from lab.compression.study import evaluate, generated_gradients, real_gradients, relative_error
from lab.errors import LabError
from lab.scenario.models import build_model, parameter_count


def brute_group_topk(x: np.ndarray, ratio: float, gs: int) -> list[np.ndarray]:
    """Per group (tail included): the sorted magnitudes a correct selection must keep."""
    out = []
    k = int(np.floor(ratio * gs + 0.5))
    for start in range(0, len(x), gs):
        grp = np.abs(x[start:start + gs])
        kk = k if len(grp) == gs else min(len(grp), max(1, int(np.floor(ratio * len(grp) + 0.5))))
        out.append(np.sort(grp)[::-1][:kk])
    return out


def check_group_selection(x: torch.Tensor, ratio: float, gs: int) -> None:
    comp = GroupTopK(ratio, gs)
    p = comp.compress(x)
    idx = p.global_indices().numpy()
    vals = p.values.numpy()
    xs = x.numpy()
    assert len(np.unique(idx)) == len(idx), "an index is kept twice"
    np.testing.assert_array_equal(vals, xs[idx])  # kept values are the original, signed
    want = brute_group_topk(xs, ratio, gs)
    assert p.count == sum(len(w) == 0 or len(w) for w in want) == comp.kept(len(xs))
    for gi, w in enumerate(want):
        mask = (idx >= gi * gs) & (idx < (gi + 1) * gs)
        got = np.sort(np.abs(xs[idx[mask]]))[::-1]
        np.testing.assert_array_equal(got, w)  # the multiset of kept magnitudes is exactly the k largest


@pytest.mark.parametrize("n,gs,ratio", [(1000, 100, 0.05), (1003, 100, 0.05), (37, 8, 0.25), (5, 8, 0.25),
                                        (4096, 1024, 0.01), (70, 7, 1.0), (129, 64, 0.5)])
def test_group_topk_matches_brute_force(n, gs, ratio):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n + gs))
    check_group_selection(x, ratio, gs)


def test_group_topk_with_ties_keeps_the_largest_magnitudes():
    # integer values with many equal magnitudes (and signs): which tied entry is kept is torch's
    # choice; the magnitudes kept must still be the k largest in every group
    x = torch.randint(-3, 4, (1000,), generator=torch.Generator().manual_seed(1)).float()
    check_group_selection(x, 0.1, 50)
    check_group_selection(torch.zeros(64), 0.25, 16)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 400), gs=st.integers(1, 70), ratio=st.floats(0.02, 1.0), seed=st.integers(0, 99))
def test_group_topk_property(n, gs, ratio, seed):
    if round(ratio * gs + 1e-9) == 0 and ratio * gs < 0.5:
        with pytest.raises(LabError):
            GroupTopK(ratio, gs)
        return
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    check_group_selection(x, ratio, gs)


def test_tail_group_rule():
    c = GroupTopK(0.5, 4)  # k = 2 per full group
    assert (c.k, c.tail_k(2), c.tail_k(1), c.tail_k(0)) == (2, 1, 1, 0)
    assert c.kept(10) == 2 * 2 + 1
    c = GroupTopK(0.01, 1024)  # k = round(10.24) = 10; a 100-entry tail keeps round(1.0) = 1
    assert c.k == 10 and c.tail_k(100) == 1 and c.tail_k(1000) == 10 and c.tail_k(3) == 1
    p = c.compress(torch.randn(1024 * 3 + 100))
    assert p.count == 31


def test_ratio_giving_k_zero_is_refused():
    with pytest.raises(LabError, match="k = 0"):
        GroupTopK(0.001, 100)
    with pytest.raises(LabError, match="k = 0"):
        TopK(0.001).compress(torch.randn(100))
    with pytest.raises(LabError, match="k = 0"):
        RandomK(0.001).compress(torch.randn(100))
    for bad in (0.0, -0.1, 1.5, float("nan"), "0.1"):
        with pytest.raises(LabError):
            GroupTopK(bad, 16)
    with pytest.raises(LabError):
        GroupTopK(0.1, 0)
    with pytest.raises(LabError):
        GroupTopK(0.1, 70_000, index_format="uint16")
    with pytest.raises(LabError):
        make_compressor("zip")
    with pytest.raises(LabError):
        GroupTopK(0.1, 16).compress(torch.arange(10))  # integer tensor
    with pytest.raises(LabError):
        GroupTopK(0.1, 16).compress(torch.empty(0))


def test_global_topk_matches_brute_force():
    x = torch.randn(5000, generator=torch.Generator().manual_seed(3))
    p = TopK(0.013).compress(x)
    assert p.count == 65
    got = np.sort(np.abs(x.numpy()[p.global_indices().numpy()]))
    want = np.sort(np.abs(x.numpy()))[-65:]
    np.testing.assert_array_equal(got, want)


def test_randomk_is_seeded_and_without_replacement():
    x = torch.randn(1000)
    a, b, c = RandomK(0.1, seed=5), RandomK(0.1, seed=5), RandomK(0.1, seed=6)
    pa, pb, pc = a.compress(x), b.compress(x), c.compress(x)
    assert torch.equal(pa.indices, pb.indices) and not torch.equal(pa.indices, pc.indices)
    assert pa.count == 100 and len(set(pa.indices.tolist())) == 100
    assert torch.equal(pa.values, x[pa.global_indices()])
    assert not torch.equal(a.compress(x).indices, pa.indices)  # the generator advances each step


def test_fp16_rounds_and_clamps():
    x = torch.tensor([1.0, 1e-3, -2.5, 1e6, -1e6, 3.14159])
    out = FP16().decompress(FP16().compress(x))
    want = x.clamp(-65504, 65504).half().float()
    assert torch.equal(out, want)


COMPRESSORS = [NoCompression(), FP16(), TopK(0.05), RandomK(0.05, 1), GroupTopK(0.05, 40),
               GroupTopK(0.05, 70_000), GroupTopK(0.1, 40, index_format="int32")]


@pytest.mark.parametrize("comp", COMPRESSORS, ids=repr)
def test_round_trip_and_exact_wire_size(comp):
    x = torch.randn(30, 41, generator=torch.Generator().manual_seed(0))  # 1230 entries, 2-D
    p = comp.compress(x)
    wire = p.to_bytes()
    assert len(wire) == p.nbytes == HEADER_BYTES + p.count * p.bytes_per_entry
    q = Payload.from_bytes(wire, shape=x.shape)
    out = comp.decompress(q)
    assert out.shape == x.shape and torch.equal(out, comp.decompress(p))
    kept = out != 0
    assert torch.equal(out[kept], x[kept].half().float() if isinstance(comp, FP16) else x[kept])


def test_bytes_per_entry_by_format():
    x = torch.randn(10_000)
    assert GroupTopK(0.01, 1000).compress(x).bytes_per_entry == 6  # fp32 + uint16 offset
    assert GroupTopK(0.01, 65536).compress(torch.randn(70_000)).bytes_per_entry == 6
    assert GroupTopK(0.001, 70_000).compress(torch.randn(70_000)).bytes_per_entry == 8  # offsets need > 16 bits
    assert TopK(0.01).compress(x).bytes_per_entry == 8
    assert RandomK(0.01).compress(x).bytes_per_entry == 8
    assert FP16().compress(x).nbytes == HEADER_BYTES + 2 * 10_000
    assert NoCompression().compress(x).nbytes == HEADER_BYTES + 4 * 10_000
    assert GroupTopK(0.01, 1000).compress(x).nbytes == HEADER_BYTES + 6 * 100


def test_damaged_payload_is_refused():
    wire = GroupTopK(0.1, 10).compress(torch.randn(100)).to_bytes()
    with pytest.raises(LabError):
        Payload.from_bytes(wire[:-1])
    with pytest.raises(LabError):
        Payload.from_bytes(wire[:10])


@pytest.mark.parametrize("inner", [GroupTopK(0.05, 32), TopK(0.02), RandomK(0.1, 3), FP16(), NoCompression()],
                         ids=repr)
def test_error_feedback_invariant_bit_for_bit(inner):
    ef = ErrorFeedback(inner)
    gen = torch.Generator().manual_seed(7)
    total_g = torch.zeros(500, dtype=torch.float64)
    total_sent = torch.zeros(500, dtype=torch.float64)
    for step in range(6):
        g = torch.randn(500, generator=gen) * (1 + step)
        old = ef.residual if ef.residual is not None else torch.zeros(500)
        p = ef.compress(g)
        sent = ef.decompress(p)
        assert torch.equal(sent + ef.residual, g + old)  # bit for bit
        total_g += g.double()
        total_sent += sent.double()
    # nothing is lost: what was sent over all steps plus the last residual is everything
    assert torch.allclose(total_sent + ef.residual.double(), total_g, atol=1e-4)


def test_error_feedback_sends_what_topk_alone_never_would():
    g = torch.tensor([10.0, 1.0, 1.0, 1.0])  # TopK keeps only entry 0 every step without memory
    plain, ef = TopK(0.25), ErrorFeedback(TopK(0.25))
    sent_plain = sum(plain.decompress(plain.compress(g)) for _ in range(12))
    sent_ef = sum(ef.decompress(ef.compress(g)) for _ in range(12))
    assert sent_plain[1:].abs().sum() == 0 and sent_ef[1:].abs().sum() > 0


def test_error_feedback_refuses_a_changed_layout():
    ef = ErrorFeedback(GroupTopK(0.1, 10))
    ef.compress(torch.randn(100))
    with pytest.raises(LabError):
        ef.compress(torch.randn(101))
    with pytest.raises(LabError):
        ErrorFeedback(ef)


def test_make_compressor_and_gradient_compressor_settings():
    from lab.scenario.document import Compression

    assert isinstance(make_compressor("group_topk", 0.01, 1024, error_feedback=True), ErrorFeedback)
    gc = GradientCompressor(Compression(kind="topk", ratio=0.1, error_feedback=False, sharing="sparse_ring"))
    assert isinstance(gc.compressor, TopK) and gc.sharing == "sparse_ring"
    with pytest.raises(LabError):
        GradientCompressor(Compression(), sharing="carrier_pigeon")
    with pytest.raises(LabError, match="process group"):
        GradientCompressor(Compression(kind="topk")).step(torch.randn(100))


def test_topk_error_is_the_lowest_for_the_same_budget():
    # the global top-k is the best k-sparse approximation; Group-TopK keeps as many entries
    # (ratio x 1000 is whole, 1000 divides n) under a per-group constraint; random-k ignores magnitudes
    g = generated_gradients(1000 * 64, seed=2)[0]
    rows = {(r["compressor"], r["ratio"]): r for r in evaluate(g, ratios=(0.01, 0.1), group_size=1000, repeats=1)}
    for ratio in (0.01, 0.1):
        top, grp, rnd = (rows[(k, ratio)] for k in ("topk", "group_topk", "randomk"))
        assert top["kept"] == grp["kept"] == rnd["kept"]
        assert top["rel_error"] <= grp["rel_error"] < rnd["rel_error"]
        assert grp["bytes"] < top["bytes"]  # 6 B against 8 B per entry
    assert rows[("topk", 0.1)]["rel_error"] < rows[("topk", 0.01)]["rel_error"]
    assert rows[("none", 1.0)]["rel_error"] == 0.0 and 0 < rows[("fp16", 1.0)]["rel_error"] < 1e-3
    assert abs(relative_error(g, torch.zeros_like(g)) - 1.0) < 1e-12


def test_real_gradients_are_one_backward_pass_of_the_model():
    grads = real_gradients("mlp", workers=2, batch_size=32, seed=0)
    assert len(grads) == 2 and grads[0].numel() == parameter_count(build_model("mlp"))
    assert not torch.equal(grads[0], grads[1])  # different batches
    assert torch.equal(grads[0], real_gradients("mlp", workers=1, batch_size=32, seed=0)[0])  # seeded
    with pytest.raises(LabError):
        real_gradients("mlp", batch_size=0)


def test_fp16_error_feedback_invariant_holds_except_where_documented():
    from lab.compression.compressors import FP16, ErrorFeedback

    # every float32 around the two edges: 2^29 + 2^16 (the residual stops being exact) and 2^30
    grid = [torch.arange(2**29 - 2**12, 2**29, 32, dtype=torch.float64),
            torch.arange(2**29, 2**29 + 2**17, 64, dtype=torch.float64),
            torch.arange(2**30 - 2**13, 2**30, 64, dtype=torch.float64),
            torch.arange(2**30, 2**30 + 2**14, 128, dtype=torch.float64),
            torch.tensor([2.0**33 + 2.0**10, 2.0**40, 3.0e38, 65504.0, 65505.0, 1e6], dtype=torch.float64)]
    c = torch.cat(grid + [-g for g in grid]).float()
    ef = ErrorFeedback(FP16())
    sent = ef.decompress(ef.compress(c))
    assert (sent[c.abs() >= 65504].abs() == 65504).all()  # every one of them is clamped
    a = c.double().abs()
    broken = (sent + ef.residual != c)  # the invariant, in float32
    assert torch.equal(broken, (a >= 2**29 + 2**16) & (a < 2**30) & ((a / 64) % 2 == 1))
    assert broken.any()  # the exception is real
    inexact = (ef.residual.double() != c.double() - sent.double())  # the residual itself
    assert torch.equal(inexact, (a >= 2**29 + 2**16) & (a < 2.0**53))
    err = (ef.residual.double() - (c.double() - sent.double())).abs()
    assert (err[inexact] == 32).all() and (err <= a * 2.0**-24).all()
