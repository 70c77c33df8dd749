"""The Compression page's study of one gradient: gradients to look at (real ones from one backward pass per
worker on the digits, or generated heavy-tailed ones) and every compressor's kept density, relative error,
bytes and time on them (measured on this machine)."""
from __future__ import annotations

import math
import time

import torch

from lab.compression.compressors import flat32, make_compressor
from lab.errors import LabError
from lab.scenario.models import build_model
from lab.scenario.names import COMPRESSOR_LABELS, SPARSIFIERS


def digits_batch(batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch of scikit-learn's 8x8 digits (pixels scaled to [0, 1]), seeded."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    pick = torch.randperm(len(x), generator=g)[:batch_size]
    return x[pick], y[pick]


def real_gradients(model: str = "mlp", workers: int = 1, batch_size: int = 64, seed: int = 0) -> list[torch.Tensor]:
    """One backward pass per worker (same initial model, different digits batches): flat gradients."""

    if not 1 <= workers <= 16:
        raise LabError(f"workers must be between 1 and 16 (got {workers})")
    if not 1 <= batch_size <= 1797:
        raise LabError(f"batch size must be between 1 and 1797 digits (got {batch_size})")
    net = build_model(model, seed=seed)
    out = []
    for w in range(workers):
        x, y = digits_batch(batch_size, seed * 1000 + w + 1)
        net.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        out.append(torch.cat([p.grad.reshape(-1) for p in net.parameters()]).clone())
    return out


def generated_gradients(n: int, workers: int = 1, seed: int = 0, shared: float = 0.7) -> list[torch.Tensor]:
    """Heavy-tailed synthetic gradients with a common part (share ``shared``) and a per-worker part.

    Layer-like blocks of different scales; the common part makes the workers' large entries overlap
    partly, as real gradients of different batches do.
    """
    if not 1 <= n <= 50_000_000:
        raise LabError(f"the generated gradient has 1 to 50,000,000 entries (got {n})")
    if not 0.0 <= shared <= 1.0:
        raise LabError(f"shared must be in [0, 1] (got {shared})")
    g = torch.Generator().manual_seed(seed)
    blocks = max(1, min(8, n // 64))
    scale = torch.exp(torch.randn(blocks, generator=g) * 1.5)
    scale = scale.repeat_interleave(-(-n // blocks))[:n]
    common = torch.randn(n, generator=g) * torch.exp(torch.randn(n, generator=g))
    out = []
    for _ in range(workers):
        own = torch.randn(n, generator=g) * torch.exp(torch.randn(n, generator=g))
        out.append(((shared ** 0.5) * common + ((1 - shared) ** 0.5) * own) * scale * 1e-3)
    return out


def relative_error(g: torch.Tensor, approx: torch.Tensor) -> float:
    den = float(torch.linalg.vector_norm(g.double()))
    return float(torch.linalg.vector_norm((g.double() - approx.double()).reshape(-1))) / den if den else 0.0


def evaluate(grad: torch.Tensor, kinds: tuple[str, ...] = (*SPARSIFIERS, "fp16", "none"),
             ratios: tuple[float, ...] = (0.001, 0.01, 0.05, 0.1), group_size: int = 1024, seed: int = 0,
             repeats: int = 3) -> list[dict]:
    """For every compressor (and ratio, where it has one): kept density, relative error, bytes, time.

    Times are measured on this machine (the best of ``repeats``). Ratios giving k = 0 are skipped.
    """
    flat = flat32(grad, "evaluate")
    rows = []
    for kind in kinds:
        for ratio in (ratios if kind in SPARSIFIERS else (1.0,)):
            try:
                comp = make_compressor(kind, ratio, group_size, seed=seed)
                best = math.inf
                for _ in range(max(1, repeats)):
                    t0 = time.perf_counter()
                    p = comp.compress(flat)
                    best = min(best, time.perf_counter() - t0)
            except LabError:
                continue
            rows.append({"compressor": kind, "label": COMPRESSOR_LABELS[kind], "ratio": ratio,
                         "kept": p.count, "density": p.count / p.numel,
                         "rel_error": relative_error(flat, p.to_dense()),
                         "bytes": p.nbytes, "bytes_per_entry": p.bytes_per_entry,
                         "wire_format": p.wire_format, "t_compress": best})
    return rows
