"""The CXL design's "Cholesky compression", tested.

The claim: a device whose result is a matrix D sends the factor L of D = L L^T instead, and the
receiver rebuilds D, "halving" the traffic. What holds and what does not, each shown by a function:

* Only a symmetric positive-definite D has such an L: :func:`cholesky_pack` refuses (LabError) a
  non-square, non-symmetric or not positive-definite input, and :func:`applicability` says which.
* L has n(n+1)/2 entries, exactly what sending the lower triangle of a symmetric D costs with no
  factorisation at all (:func:`tril_pack` / :func:`tril_unpack`): the saving is symmetry's, not
  Cholesky's. :func:`compare_methods` measures bytes, time and reconstruction error of both.
* A weight gradient is in general not symmetric (not even square), so neither applies; a Gram
  matrix X^T X of activations (a symmetric positive semi-definite statistic, made definite by a
  small damping as in K-FAC) is where it does: :func:`example_matrices`.
* A sum of factors is not the factor of the sum: (L1 + L2)(L1 + L2)^T != L1 L1^T + L2 L2^T, so a
  ring cannot add the factors it receives (:func:`sum_of_factors`); it must rebuild D, add, and
  factorise again at every hop (:func:`ring_reduce_factors`), an O(n^3) step per hop.

Sizes: a packed triangle holds n(n+1)/2 values of the input's dtype (float32: 4 bytes each); n is
context both ends know, as the tensor shape is for the gradient compressors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from lab.compression.study import digits_batch
from lab.errors import LabError
from lab.scenario.models import build_model


@dataclass(frozen=True)
class Packed:
    """The lower triangle (row by row) of L (method "cholesky") or of D itself (method "tril")."""

    method: str
    n: int
    values: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.values.numel() * self.values.element_size()


def _tol(dtype: torch.dtype) -> float:
    return 100 * torch.finfo(dtype).eps


def asymmetry(D: torch.Tensor) -> float:
    """||D - D^T||_F / ||D||_F (0 for a symmetric matrix; defined for square D)."""
    Dd = D.double()
    den = float(torch.linalg.matrix_norm(Dd))
    return float(torch.linalg.matrix_norm(Dd - Dd.T)) / den if den else 0.0


def _check_matrix(D: object, who: str, need_symmetric: bool = True) -> torch.Tensor:
    if not isinstance(D, torch.Tensor):
        raise LabError(f"{who} packs a torch tensor (got {type(D).__name__})")
    if D.dim() != 2 or D.shape[0] != D.shape[1]:
        raise LabError(f"{who} needs a square matrix (got shape {tuple(D.shape)}); a weight gradient of a "
                       f"{D.shape[-2] if D.dim() >= 2 else '?'}x{D.shape[-1] if D.dim() >= 1 else '?'} layer has no "
                       f"symmetric form")
    if not D.is_floating_point():
        raise LabError(f"{who} needs a floating-point matrix (got {D.dtype})")
    if D.shape[0] == 0:
        raise LabError(f"{who}: the matrix is empty")
    if not bool(torch.isfinite(D).all()):
        raise LabError(f"{who}: the matrix has non-finite entries")
    if need_symmetric:
        a = asymmetry(D)
        if a > _tol(D.dtype):
            raise LabError(f"{who} needs a symmetric matrix; this one has ||D - D^T|| / ||D|| = {a:.3g} "
                           f"(allowed: {_tol(D.dtype):.1g} for {str(D.dtype).replace('torch.', '')})")
    return D


def _tril_index(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    r, c = torch.tril_indices(n, n)
    return r, c


def cholesky_pack(D: torch.Tensor) -> Packed:
    """Send L (lower triangle) with D = L L^T. Refuses non-square, non-symmetric, not positive-definite."""
    D = _check_matrix(D, "cholesky_pack")
    D = 0.5 * (D + D.T)  # exactly symmetric for the factorisation (the check allowed rounding noise)
    L, info = torch.linalg.cholesky_ex(D)
    if int(info) != 0:
        raise LabError(f"cholesky_pack needs a positive-definite matrix; the leading minor of order {int(info)} "
                       f"of this {D.shape[0]}x{D.shape[0]} matrix is not positive (add damping, or send the "
                       f"lower triangle with tril_pack)")
    r, c = _tril_index(D.shape[0])
    return Packed("cholesky", D.shape[0], L[r, c].contiguous())


def _triangle(p: Packed) -> torch.Tensor:
    n = p.n
    if p.values.numel() != n * (n + 1) // 2:
        raise LabError(f"a packed {n}x{n} triangle has {n * (n + 1) // 2} values (got {p.values.numel()})")
    T = torch.zeros(n, n, dtype=p.values.dtype)
    r, c = _tril_index(n)
    T[r, c] = p.values
    return T


def cholesky_unpack(p: Packed) -> torch.Tensor:
    """D = L L^T from a :func:`cholesky_pack` result."""
    if p.method != "cholesky":
        raise LabError(f"cholesky_unpack reads a cholesky packet (got {p.method!r})")
    L = _triangle(p)
    return L @ L.T


def tril_pack(D: torch.Tensor) -> Packed:
    """Send the lower triangle of a symmetric D as it is: n(n+1)/2 values, no factorisation."""
    D = _check_matrix(D, "tril_pack")
    r, c = _tril_index(D.shape[0])
    return Packed("tril", D.shape[0], D[r, c].contiguous())


def tril_unpack(p: Packed) -> torch.Tensor:
    """The symmetric D from its lower triangle."""
    if p.method != "tril":
        raise LabError(f"tril_unpack reads a tril packet (got {p.method!r})")
    T = _triangle(p)
    return T + T.T - torch.diag(torch.diagonal(T))


def applicability(D: torch.Tensor) -> dict:
    """Is Cholesky packing possible for D, and if not, why: shape, asymmetry, smallest eigenvalue."""
    out = {"shape": tuple(D.shape), "square": D.dim() == 2 and D.shape[0] == D.shape[1],
           "asymmetry": None, "symmetric": False, "min_eigenvalue": None, "positive_definite": False}
    if out["square"]:
        out["asymmetry"] = asymmetry(D)
        out["symmetric"] = out["asymmetry"] <= _tol(D.dtype)
        if out["symmetric"]:
            Ds = 0.5 * (D + D.T).double()
            out["min_eigenvalue"] = float(torch.linalg.eigvalsh(Ds)[0])
            out["positive_definite"] = int(torch.linalg.cholesky_ex(0.5 * (D + D.T))[1]) == 0
    out["applies"] = out["positive_definite"]
    return out


def _best_time(fn, repeats: int) -> tuple[float, object]:
    best, res = float("inf"), None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        res = fn()
        best = min(best, time.perf_counter() - t0)
    return best, res


def rel_error(D: torch.Tensor, R: torch.Tensor) -> float:
    den = float(torch.linalg.matrix_norm(D.double()))
    return float(torch.linalg.matrix_norm(D.double() - R.double())) / den if den else 0.0


def compare_methods(D: torch.Tensor, repeats: int = 5) -> list[dict]:
    """Dense, lower triangle and Cholesky factor of D: values, bytes, pack/unpack time (measured), error."""
    _check_matrix(D, "compare_methods")
    n, item = D.shape[0], D.element_size()
    rows = [{"method": "dense (all n^2 values)", "values": n * n, "bytes": n * n * item,
             "t_pack": 0.0, "t_unpack": 0.0, "rel_error": 0.0}]
    for name, pack, unpack in (("lower triangle (no factorisation)", tril_pack, tril_unpack),
                               ("Cholesky factor L", cholesky_pack, cholesky_unpack)):
        tp, p = _best_time(lambda: pack(D), repeats)
        tu, R = _best_time(lambda: unpack(p), repeats)
        rows.append({"method": name, "values": p.values.numel(), "bytes": p.nbytes, "t_pack": tp,
                     "t_unpack": tu, "rel_error": rel_error(D, R)})
    return rows


def sum_of_factors(Ds: list[torch.Tensor]) -> dict:
    """What a ring adding factors would get, against the true sum.

    (sum L)(sum L)^T = sum_i L_i L_i^T + the cross terms sum_{i != j} L_i L_j^T. Reported (relative,
    Frobenius): the plain sum of factors against sum D (about N - 1 when the workers' matrices are
    alike: the cross terms); the same rescaled by 1/N, which would be exact if every worker had the
    same D and is wrong by how much the workers' matrices differ; sum L (and sum L / sqrt N) against
    the factor of sum D; and, for contrast, rebuilding each D = L L^T before adding (rounding only).
    """
    if len(Ds) < 2:
        raise LabError("the demonstration needs at least two matrices (one per worker)")
    Ls = [torch.linalg.cholesky(0.5 * (D + D.T)) if _packable(D) else None for D in Ds]
    if any(L is None for L in Ls):
        raise LabError("every matrix must be symmetric positive-definite for its factor to exist")
    total = sum(D.double() for D in Ds)
    Lsum = sum(L.double() for L in Ls)
    L_true = torch.linalg.cholesky(total)
    N = len(Ds)
    return {"workers": N, "n": Ds[0].shape[0],
            "rel_error_of_sum_of_factors": rel_error(total, Lsum @ Lsum.T),
            "rel_error_of_sum_of_factors_rescaled": rel_error(total, Lsum @ Lsum.T / N),
            "rel_error_of_factor": rel_error(L_true, Lsum),
            "rel_error_of_factor_rescaled": rel_error(L_true, Lsum / N ** 0.5),
            "rel_error_of_rebuilt_sum": rel_error(total, sum(L.double() @ L.double().T for L in Ls))}


def _packable(D: torch.Tensor) -> bool:
    try:
        cholesky_pack(D)
        return True
    except LabError:
        return False


def ring_reduce_factors(Ds: list[torch.Tensor]) -> dict:
    """The only correct way to reduce factors round a ring: at each hop the receiver rebuilds D from
    the L it got, adds its own D, factorises the sum and sends the new L on. N-1 hops in sequence,
    one Cholesky factorisation (n^3 / 3 multiply-adds) each. Returns the result, its error against
    the plain sum, and the measured seconds spent in factorisations and rebuilds."""
    if len(Ds) < 2:
        raise LabError("a ring needs at least two matrices")
    t_fact = 0.0
    t0 = time.perf_counter()
    p = cholesky_pack(Ds[0])
    t_fact += time.perf_counter() - t0
    for D in Ds[1:]:
        t0 = time.perf_counter()
        p = cholesky_pack(cholesky_unpack(p) + D)
        t_fact += time.perf_counter() - t0
    result = cholesky_unpack(p)
    total = sum(D.double() for D in Ds)
    n = Ds[0].shape[0]
    return {"result": result, "rel_error": rel_error(total, result), "hops": len(Ds) - 1,
            "seconds": t_fact, "flops_per_hop": n ** 3 / 3 + n ** 3}


MATRIX_NAMES = ("weight gradient, transformer q (32x32)", "weight gradient, MLP layer 1 (128x64)",
                "Gram of MLP hidden activations (128x128)", "Gram of the digit images (64x64)")


def study(Ds: list[torch.Tensor]) -> dict:
    """The whole Cholesky test on the workers' matrices ``Ds``, as the Compression page shows it: worker 0's
    matrix checked (``applicability``); where it has a factor, the three ways of sending it measured
    (``methods``, :func:`compare_methods`), what adding the workers' factors gives (``sum``,
    :func:`sum_of_factors`, with ``true_sum`` and ``factor_sum``: sum D and (sum L)(sum L)^T / N as arrays) and
    the ring that rebuilds D at every hop (``ring``); else the refusal (``refusal``). Timed once: the page
    keeps the result per input, so a rerun does not measure again."""
    a = applicability(Ds[0])
    out: dict = {"applicability": a, "workers": len(Ds)}
    if not a["applies"]:
        try:
            cholesky_pack(Ds[0])
        except LabError as exc:  # the refusal is the point here: it is shown as information
            out["refusal"] = str(exc)
        return out
    Ls = [torch.linalg.cholesky(D.double()) for D in Ds]
    S = sum(Ls)
    out |= {"methods": compare_methods(Ds[0]), "sum": sum_of_factors(Ds), "ring": ring_reduce_factors(Ds),
            "true_sum": sum(D.double() for D in Ds).numpy(), "factor_sum": (S @ S.T / len(Ds)).numpy()}
    return out


def example_matrices(seed: int = 0, batch: int = 256, damping: float = 1e-3, workers: int = 2,
                     by_class: bool = False) -> dict:
    """Matrices from a real model on scikit-learn digits, for each of ``workers`` batches.

    * "weight gradient, transformer q (32x32)": square but not symmetric;
    * "weight gradient, MLP layer 1 (128x64)": not even square;
    * "Gram of MLP hidden activations (128x128)": H^T H / B + damping x mean(diag) x I, symmetric
      positive-definite once damping > 0 (the hidden ReLU units leave it singular without);
    * "Gram of the digit images (64x64)": X^T X / B + damping (...): the border pixels of digits are
      always 0, so without damping it is singular and Cholesky refuses it.

    ``by_class``: worker w sees only the digits whose class is w modulo ``workers`` (non-IID data),
    so the workers' matrices differ more. Returns {name: [matrix per worker]} in float32.
    """

    if not 0.0 <= damping <= 1.0:
        raise LabError(f"damping must be between 0 and 1 (got {damping})")
    if not 2 <= workers <= 8:
        raise LabError(f"workers must be between 2 and 8 (got {workers})")
    mlp = build_model("mlp", seed=seed)
    tr = build_model("transformer", seed=seed)
    out: dict[str, list[torch.Tensor]] = {k: [] for k in MATRIX_NAMES}

    def gram(A: torch.Tensor) -> torch.Tensor:
        G = (A.T @ A) / A.shape[0]
        G = 0.5 * (G + G.T)
        return G + damping * float(torch.diagonal(G).mean()) * torch.eye(G.shape[0])

    if not 2 <= batch <= 1797:
        raise LabError(f"batch must be between 2 and 1797 digits (got {batch})")
    xa, ya = digits_batch(1797, seed)
    for w in range(workers):
        if by_class:
            mine = (ya % workers) == w
            xw, yw = xa[mine], ya[mine]
            pick = torch.randperm(len(xw), generator=torch.Generator().manual_seed(seed * 1000 + w + 1))[:batch]
            x, y = xw[pick], yw[pick]
        else:
            x, y = digits_batch(batch, seed * 1000 + w + 1)
        tr.zero_grad()
        torch.nn.functional.cross_entropy(tr(x), y).backward()
        out["weight gradient, transformer q (32x32)"].append(tr.q.weight.grad.detach().clone())
        mlp.zero_grad()
        torch.nn.functional.cross_entropy(mlp(x), y).backward()
        out["weight gradient, MLP layer 1 (128x64)"].append(mlp.net[0].weight.grad.detach().clone())
        with torch.no_grad():
            h = mlp.net[1](mlp.net[0](x))
        out["Gram of MLP hidden activations (128x128)"].append(gram(h))
        out["Gram of the digit images (64x64)"].append(gram(x))
    return out


__all__ = ["Packed", "cholesky_pack", "cholesky_unpack", "tril_pack", "tril_unpack", "applicability",
           "compare_methods", "sum_of_factors", "ring_reduce_factors", "example_matrices", "MATRIX_NAMES",
           "asymmetry", "rel_error"]
