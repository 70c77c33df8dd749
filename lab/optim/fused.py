"""The optimisers' maths fused into one pass over each parameter, compiled by ``torch.compile``.

The multi-tensor path (:mod:`lab.optim.functional`) makes one pass over memory per operation: six to nine passes
per step for AdaBelief. torch's fused Adam on CPU is a hand-written kernel that reads each parameter, gradient and
state once and writes them once. Here the same per-element update is written once per optimiser and handed to
``torch.compile`` (inductor), which emits one such loop: one pass per parameter, whatever the optimiser.

The arithmetic is the multi-tensor path's, term for term; the compiled loop may order and fuse it differently
(multiply-add instead of a multiply then an add), so results agree within float32 rounding, not bit for bit (the
tests hold both paths and torch's and adabelief-pytorch's to that). It serves the local step only: a distributed
step that all-reduces the optimiser state (the CXL design's) stays on the multi-tensor path, where the all-reduce
sits between the passes.

Step-dependent numbers (bias corrections) travel in one small float32 tensor, so a new step never recompiles. The
first call of each kernel compiles it (seconds; inductor keeps the result on disk for later processes). Inductor
builds CPU kernels with a C++ compiler: :func:`available` says whether one is installed.
"""
from __future__ import annotations

import functools
import math
import shutil
from typing import Sequence

import torch
from torch import Tensor

from lab.errors import LabError

@functools.cache
def available() -> bool:
    """Whether torch.compile can build CPU kernels here (it needs a C++ compiler; looked for once)."""
    return any(shutil.which(c) for c in ("g++", "c++", "clang++"))


# Every kernel takes flat tensors and h = [decay, l2, 1 - b1, b2, 1 - b2, eps, step scale, x]. Decoupled weight decay
# multiplies theta by decay (1 when off); L2 adds l2 x theta to the gradient (0 when off): one compiled loop serves
# every weight-decay form, and a new step or setting never recompiles.
def _moments(p: Tensor, g: Tensor, m: Tensor, h: Tensor) -> Tensor:
    p.mul_(h[0])
    g = g + h[1] * p
    m.lerp_(g, h[2])
    return g


def _adam(p: Tensor, g: Tensor, m: Tensor, v: Tensor, h: Tensor) -> None:
    # x = sqrt(1 - b2^t); step scale = -lr / (1 - b1^t)
    g = _moments(p, g, m, h)
    v.mul_(h[3]).add_(g * g * h[4])
    p.add_(m / (v.sqrt() / h[7] + h[5]) * h[6])


def _belief(g: Tensor, m: Tensor, s: Tensor, h: Tensor) -> None:
    d = g - m
    s.mul_(h[3]).add_(d * d * h[4]).add_(h[5])


def _adabelief(p: Tensor, g: Tensor, m: Tensor, s: Tensor, h: Tensor) -> None:
    # sqrt(s / bc2) + eps = (sqrt(s) + eps sqrt(bc2)) / sqrt(bc2): x = eps sqrt(bc2), step scale -lr sqrt(bc2) / bc1
    g = _moments(p, g, m, h)
    _belief(g, m, s, h)
    p.add_(m / (s.sqrt() + h[7]) * h[6])


def _maxadabelief(p: Tensor, g: Tensor, m: Tensor, s: Tensor, smax: Tensor, h: Tensor) -> None:
    # the running max of s, then as AdaBelief
    g = _moments(p, g, m, h)
    _belief(g, m, s, h)
    torch.maximum(smax, s, out=smax)
    p.add_(m / (smax.sqrt() + h[7]) * h[6])


def _maxadabelief_corrected(p: Tensor, g: Tensor, m: Tensor, s: Tensor, smax: Tensor, h: Tensor) -> None:
    # the running max of s / bc2 (x = bc2), then plain eps: the step scale is -lr / bc1
    g = _moments(p, g, m, h)
    _belief(g, m, s, h)
    torch.maximum(smax, s / h[7], out=smax)
    p.add_(m / (smax.sqrt() + h[5]) * h[6])


_KERNELS = {"adam": _adam, None: _adabelief, "raw": _maxadabelief, "corrected": _maxadabelief_corrected}


@functools.cache
def _kernel(name: str | None):
    if not available():
        raise LabError("the fused optimisers are compiled by torch.compile, which needs a C++ compiler (g++); "
                       "none is installed here. Install g++ or turn the fused optimiser off", where="training.fused")
    return torch.compile(_KERNELS[name], dynamic=True, fullgraph=True)


def _flat(ts: Sequence[Tensor | None]) -> list[Tensor | None]:
    """One-dimensional views (a kernel compiled for one dimension serves every parameter)."""
    return [None if t is None else t.view(-1) for t in ts]


def span(ts: Sequence[Tensor]) -> Tensor | None:
    """One flat view over ``ts`` when they lie back to back in one storage, in order (a training job's parameters
    and gradients, views of two flat buffers; the states :func:`pack` makes), else None."""
    if not ts or not all(t.is_contiguous() for t in ts):
        return None
    store, at = ts[0].untyped_storage().data_ptr(), ts[0].storage_offset()
    for t in ts:
        if t.untyped_storage().data_ptr() != store or t.storage_offset() != at or t.dtype != ts[0].dtype:
            return None
        at += t.numel()
    base = ts[0].detach()
    return torch.empty(0, dtype=base.dtype).set_(base.untyped_storage(), ts[0].storage_offset(), (at - ts[0].storage_offset(),))


def pack(states: Sequence[dict], keys: Sequence[str]) -> None:
    """Put each state tensor named in ``keys`` into one flat buffer per key, in the states' order, values kept: the
    kernel then steps a job's whole model in one call."""
    for key in keys:
        flat = torch.cat([s[key].reshape(-1) for s in states])
        at = 0
        for s in states:
            n = s[key].numel()
            s[key] = flat[at:at + n].view_as(s[key])
            at += n


def _spans(steps: Sequence[int], *lists: Sequence[Tensor | None]) -> list[Tensor | None] | None:
    """The flat views over every list, when all lie back to back and every parameter is at the same step."""
    if len(set(steps)) != 1:
        return None
    out = []
    for ts in lists:
        if ts[0] is None:
            out.append(None)
            continue
        v = span(ts)
        if v is None:
            return None
        out.append(v)
    return out


def _hyper(values: Sequence[float]) -> Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _decay(weight_decay: float, decoupled: bool, lr: float) -> tuple[float, float]:
    if decoupled:
        return 1 - lr * weight_decay, 0.0
    return 1.0, weight_decay


def _check_contiguous(*lists: Sequence[Tensor]) -> None:
    if not all(t.is_contiguous() for ts in lists for t in ts if t is not None):
        raise LabError("the fused optimisers step contiguous parameters and gradients; turn the fused optimiser off "
                       "for this model", where="training.fused")


def adam_update(params: list[Tensor], grads: list[Tensor], exp_avgs: list[Tensor], exp_avg_sqs: list[Tensor],
                steps: Sequence[int], *, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float = 0.0,
                decoupled_weight_decay: bool = False) -> None:
    """One Adam step, in place, one compiled pass per parameter (:func:`lab.optim.functional.adam_update`'s maths)."""
    _check_contiguous(params, grads, exp_avgs, exp_avg_sqs)
    decay, l2 = _decay(weight_decay, decoupled_weight_decay, lr)
    kernel = _kernel("adam")
    if (whole := _spans(steps, params, grads, exp_avgs, exp_avg_sqs)) is not None:
        params, grads, exp_avgs, exp_avg_sqs = ([t] for t in whole)
        steps = steps[:1]
    for p, g, m, v, t in zip(*map(_flat, (params, grads, exp_avgs, exp_avg_sqs)), steps):
        kernel(p, g, m, v, _hyper([decay, l2, 1 - beta1, beta2, 1 - beta2, eps, -lr / (1 - beta1 ** t),
                                   math.sqrt(1 - beta2 ** t)]))


def adabelief_update(params: list[Tensor], grads: list[Tensor], exp_avgs: list[Tensor], exp_avg_vars: list[Tensor],
                     max_exp_avg_vars: list[Tensor] | None, steps: Sequence[int], *, lr: float, beta1: float,
                     beta2: float, eps: float, weight_decay: float = 0.0, decoupled_weight_decay: bool = True,
                     max_mode: str | None = None) -> None:
    """One AdaBelief / Max-AdaBelief step, in place, one compiled pass per parameter
    (:func:`lab.optim.functional.adabelief_update`'s maths)."""
    maxes = max_exp_avg_vars if max_mode is not None else [None] * len(params)
    _check_contiguous(params, grads, exp_avgs, exp_avg_vars, maxes)
    decay, l2 = _decay(weight_decay, decoupled_weight_decay, lr)
    kernel = _kernel(max_mode)
    if (whole := _spans(steps, params, grads, exp_avgs, exp_avg_vars, maxes)) is not None:
        params, grads, exp_avgs, exp_avg_vars, maxes = ([t] for t in whole)
        steps = steps[:1]
    for p, g, m, s, smax, t in zip(*map(_flat, (params, grads, exp_avgs, exp_avg_vars, maxes)), steps):
        bc1, bc2 = 1 - beta1 ** t, 1 - beta2 ** t
        if max_mode == "corrected":
            h = _hyper([decay, l2, 1 - beta1, beta2, 1 - beta2, eps, -lr / bc1, bc2])
            kernel(p, g, m, s, smax, h)
            continue
        h = _hyper([decay, l2, 1 - beta1, beta2, 1 - beta2, eps, -lr * math.sqrt(bc2) / bc1, eps * math.sqrt(bc2)])
        if max_mode == "raw":
            kernel(p, g, m, s, smax, h)
        else:
            kernel(p, g, m, s, h)


__all__ = ["available", "adam_update", "adabelief_update", "span", "pack"]
