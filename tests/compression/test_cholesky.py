"""The CXL design's Cholesky claim: packing, refusals, equal sizes, and why a ring cannot add factors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lab.compression.cholesky import (
    applicability,
    asymmetry,
    cholesky_pack,
    cholesky_unpack,
    compare_methods,
    example_matrices,
    ring_reduce_factors,
    sum_of_factors,
    tril_pack,
    tril_unpack,
)
from lab.errors import LabError


def spd(n: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, generator=g, dtype=torch.float64)
    S = A @ A.T  # a BLAS product need not be bit-symmetric (it depends on the CPU's kernel)
    return ((S + S.T) / 2 + n * torch.eye(n, dtype=torch.float64)).to(dtype)


@pytest.mark.parametrize("n", [1, 2, 7, 40])
def test_round_trips_and_both_send_n_n_plus_1_over_2_values(n):
    D = spd(n, n)
    c, t = cholesky_pack(D), tril_pack(D)
    assert c.values.numel() == t.values.numel() == n * (n + 1) // 2
    assert c.nbytes == t.nbytes == 8 * n * (n + 1) // 2
    assert torch.equal(tril_unpack(t), D)  # no arithmetic at all: exact
    assert torch.allclose(cholesky_unpack(c), D, rtol=1e-12, atol=1e-12)
    L = torch.linalg.cholesky(D)
    r, col = torch.tril_indices(n, n)
    assert torch.equal(c.values, L[r, col])


def test_float32_gram_round_trip():
    X = torch.randn(200, 30, generator=torch.Generator().manual_seed(0))
    D = X.T @ X / 200
    D = 0.5 * (D + D.T)
    c = cholesky_pack(D)
    assert c.nbytes == 4 * 30 * 31 // 2
    assert (cholesky_unpack(c) - D).abs().max() < 1e-5


def test_refusals():
    with pytest.raises(LabError, match="square"):
        cholesky_pack(torch.randn(4, 3))
    with pytest.raises(LabError, match="square"):
        tril_pack(torch.randn(5))
    with pytest.raises(LabError, match="symmetric"):
        cholesky_pack(torch.randn(4, 4, generator=torch.Generator().manual_seed(1)))
    with pytest.raises(LabError, match="symmetric"):
        tril_pack(torch.tensor([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(LabError, match="positive-definite"):
        cholesky_pack(torch.tensor([[1.0, 2.0], [2.0, 1.0]]))  # symmetric, eigenvalues 3 and -1
    with pytest.raises(LabError, match="positive-definite"):
        cholesky_pack(torch.zeros(3, 3))
    with pytest.raises(LabError):
        cholesky_pack(torch.eye(3, dtype=torch.int64))
    with pytest.raises(LabError):
        cholesky_pack([[1.0]])
    with pytest.raises(LabError):
        cholesky_pack(torch.tensor([[float("nan")]]))
    with pytest.raises(LabError):
        cholesky_unpack(tril_pack(torch.eye(2)))
    with pytest.raises(LabError):
        tril_unpack(cholesky_pack(torch.eye(2)))
    # the lower triangle needs symmetry only: an indefinite symmetric matrix packs fine
    S = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    assert torch.equal(tril_unpack(tril_pack(S)), S)


def test_sum_of_factors_is_not_the_factor_of_the_sum():
    D1, D2 = spd(6, 1), spd(6, 2)
    L1, L2 = torch.linalg.cholesky(D1), torch.linalg.cholesky(D2)
    wrong = (L1 + L2) @ (L1 + L2).T
    res = sum_of_factors([D1, D2])
    want = float(torch.linalg.matrix_norm(wrong - (D1 + D2)) / torch.linalg.matrix_norm(D1 + D2))
    assert res["rel_error_of_sum_of_factors"] == pytest.approx(want, rel=1e-9)
    assert res["rel_error_of_sum_of_factors"] > 0.5
    assert res["rel_error_of_sum_of_factors_rescaled"] > 1e-3  # different matrices: no rescaling fixes it
    assert res["rel_error_of_rebuilt_sum"] < 1e-12
    # equal matrices: the cross terms make it exactly N^2 D instead of N D; a 1/N rescale would fix it
    same = sum_of_factors([D1, D1, D1])
    assert same["rel_error_of_sum_of_factors"] == pytest.approx(2.0, rel=1e-9)
    assert same["rel_error_of_sum_of_factors_rescaled"] < 1e-12
    with pytest.raises(LabError):
        sum_of_factors([D1])
    with pytest.raises(LabError):
        sum_of_factors([D1, torch.randn(6, 6)])


def test_ring_must_rebuild_and_refactorise_at_every_hop():
    Ds = [spd(10, s) for s in range(4)]
    res = ring_reduce_factors(Ds)
    assert res["hops"] == 3 and res["rel_error"] < 1e-12
    assert torch.allclose(res["result"], sum(Ds), rtol=1e-12)


def test_compare_methods_bytes_and_errors():
    rows = {r["method"]: r for r in compare_methods(spd(20, 0, torch.float32), repeats=1)}
    dense, tri = rows["dense (all n^2 values)"], rows["lower triangle (no factorisation)"]
    chol = rows["Cholesky factor L"]
    assert dense["bytes"] == 4 * 400 and tri["bytes"] == chol["bytes"] == 4 * 210
    assert tri["rel_error"] == 0.0 and 0 < chol["rel_error"] < 1e-6
    assert chol["t_pack"] > 0 and tri["t_pack"] > 0


def test_example_matrices_where_the_claim_applies():
    ex = example_matrices(seed=0, batch=128, damping=1e-3, workers=2)
    q = applicability(ex["weight gradient, transformer q (32x32)"][0])
    assert q["square"] and not q["symmetric"] and q["asymmetry"] > 0.1 and not q["applies"]
    w = applicability(ex["weight gradient, MLP layer 1 (128x64)"][0])
    assert not w["square"] and not w["applies"]
    for name in ("Gram of MLP hidden activations (128x128)", "Gram of the digit images (64x64)"):
        a = applicability(ex[name][0])
        assert a["symmetric"] and a["positive_definite"] and a["min_eigenvalue"] > 0 and a["applies"]
        assert asymmetry(ex[name][1]) == 0.0
    # without damping the digits' Gram is singular (border pixels are always 0): refused
    raw = example_matrices(seed=0, batch=128, damping=0.0, workers=2)["Gram of the digit images (64x64)"][0]
    assert not applicability(raw)["positive_definite"]
    with pytest.raises(LabError, match="positive-definite"):
        cholesky_pack(raw)
    skewed = example_matrices(seed=0, batch=128, workers=4, by_class=True)
    mixed = example_matrices(seed=0, batch=128, workers=4)
    name = "Gram of the digit images (64x64)"
    assert (sum_of_factors(skewed[name])["rel_error_of_sum_of_factors_rescaled"]
            > sum_of_factors(mixed[name])["rel_error_of_sum_of_factors_rescaled"])
    with pytest.raises(LabError):
        example_matrices(damping=2.0)


def test_the_study_holds_what_the_page_shows_and_refuses_a_matrix_without_a_factor():
    from lab.compression.cholesky import example_matrices, study

    mats = example_matrices(seed=0, batch=64, damping=1e-3, workers=3)
    spd = next(k for k, v in mats.items() if applicability(v[0])["applies"])
    out = study(mats[spd])
    assert out["workers"] == 3 and "refusal" not in out
    assert [r["method"] for r in out["methods"]] == [r["method"] for r in compare_methods(mats[spd][0])]
    assert out["sum"] == sum_of_factors(mats[spd])
    Ls = [torch.linalg.cholesky(D.double()) for D in mats[spd]]
    assert np.allclose(out["factor_sum"], (sum(Ls) @ sum(Ls).T / 3).numpy())
    assert np.allclose(out["true_sum"], sum(D.double() for D in mats[spd]).numpy())
    other = next((k for k, v in mats.items() if not applicability(v[0])["applies"]), None)
    if other is not None:
        refused = study(mats[other])
        assert "methods" not in refused and refused["refusal"]
