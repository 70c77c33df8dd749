"""The optimisers' maths: Adam's and AdaBelief's (and the max variants') updates as plain functions over lists of tensors, in place, bit for bit what the classes do."""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

from lab.errors import LabError
from lab.optim.distributed import AllReduceFn, allreduce_tensors

MAX_MODES = (None, "raw", "corrected")


def _bias_corrections(beta: float, steps: Sequence[int]) -> list[float]:
    return [1 - beta ** t for t in steps]


def _weight_decay(params: list[Tensor], grads: list[Tensor], lr: float, weight_decay: float,
                  decoupled: bool) -> list[Tensor]:
    """Decoupled (AdamW style): theta *= 1 - lr x weight_decay, in place. Otherwise L2: the gradients
    plus weight_decay x theta, as new tensors (the caller's gradients stay as they were)."""
    if weight_decay == 0:
        return grads
    if decoupled:
        torch._foreach_mul_(params, 1 - lr * weight_decay)
        return grads
    return torch._foreach_add(grads, params, alpha=weight_decay)


def adam_update(params: list[Tensor], grads: list[Tensor], exp_avgs: list[Tensor],
                exp_avg_sqs: list[Tensor], steps: Sequence[int], *, lr: float, beta1: float,
                beta2: float, eps: float, weight_decay: float = 0.0,
                decoupled_weight_decay: bool = False, allreduce_fn: AllReduceFn | None = None) -> None:
    """One Adam step, in place, on lists of tensors (the same operations as ``torch.optim.Adam``).

    ``steps[i]`` is the step number t >= 1 of tensor i, already counted for this step. With
    ``allreduce_fn`` the bias-corrected moments are all-reduced (mean) before the update
    (``reduce="state"``; see the module docstring). The gradients are not modified.
    """
    if not params:
        return
    grads = _weight_decay(params, grads, lr, weight_decay, decoupled_weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    bc1 = _bias_corrections(beta1, steps)
    bc2 = _bias_corrections(beta2, steps)
    if allreduce_fn is None:
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, [math.sqrt(b) for b in bc2])
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(params, exp_avgs, denom, [-lr / b for b in bc1])
        return
    m_hat = torch._foreach_div(exp_avgs, bc1)
    allreduce_tensors(m_hat, "mean", allreduce_fn)
    v_hat = torch._foreach_div(exp_avg_sqs, bc2)
    allreduce_tensors(v_hat, "mean", allreduce_fn)
    torch._foreach_sqrt_(v_hat)
    torch._foreach_add_(v_hat, eps)
    torch._foreach_addcdiv_(params, m_hat, v_hat, value=-lr)


def adabelief_update(params: list[Tensor], grads: list[Tensor], exp_avgs: list[Tensor],
                     exp_avg_vars: list[Tensor], max_exp_avg_vars: list[Tensor] | None,
                     steps: Sequence[int], *, lr: float, beta1: float, beta2: float, eps: float,
                     weight_decay: float = 0.0, decoupled_weight_decay: bool = True,
                     max_mode: str | None = None, allreduce_fn: AllReduceFn | None = None) -> None:
    """One AdaBelief / Max-AdaBelief step (rectification off), in place, on lists of tensors.

    ``max_mode``: None (AdaBelief), "raw" (running max of s_t; ``max_exp_avg_vars`` holds it) or
    "corrected" (running max of s_t / (1-b2^t); ``max_exp_avg_vars`` holds it). Decoupled weight decay
    multiplies theta by (1 - lr * weight_decay) first (AdamW style); otherwise weight_decay * theta is
    added to the gradient (L2), without modifying ``grads``. With ``allreduce_fn``: the state
    all-reduce of the module docstring.
    """
    if max_mode not in MAX_MODES:
        raise LabError(f"max_mode must be one of None, 'raw', 'corrected'; got {max_mode!r}",
                       where="adabelief_update")
    if not params:
        return
    if max_mode is not None and max_exp_avg_vars is None:
        raise LabError("max_exp_avg_vars is needed when max_mode is set", where="adabelief_update")
    grads = _weight_decay(params, grads, lr, weight_decay, decoupled_weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    work = torch._foreach_sub(grads, exp_avgs)            # g - m_t, the surprise
    torch._foreach_mul_(exp_avg_vars, beta2)
    torch._foreach_addcmul_(exp_avg_vars, work, work, value=1 - beta2)
    torch._foreach_add_(exp_avg_vars, eps)
    bc1 = _bias_corrections(beta1, steps)
    bc2 = _bias_corrections(beta2, steps)
    bc2_sqrt = [math.sqrt(b) for b in bc2]
    if allreduce_fn is not None:                            # the CXL design's order: m_hat first
        m_hat = torch._foreach_div(exp_avgs, bc1)
        allreduce_tensors(m_hat, "mean", allreduce_fn)

    # `work` (free after the addcmul) becomes the denominator, written in place to spare an
    # allocation. Uncorrected second moments use sqrt(s)/sqrt(bc2) + eps
    # = (sqrt(s) + eps*sqrt(bc2)) / sqrt(bc2), the 1/sqrt(bc2) going into the final scalar.
    if max_mode == "raw":
        torch._foreach_maximum_(max_exp_avg_vars, exp_avg_vars)
        if allreduce_fn is not None:
            allreduce_tensors(max_exp_avg_vars, "max", allreduce_fn)
        _sqrt_into(work, max_exp_avg_vars)
        corrected = False
    elif max_mode == "corrected":
        _div_into(work, exp_avg_vars, bc2)
        torch._foreach_maximum_(max_exp_avg_vars, work)
        if allreduce_fn is not None:
            allreduce_tensors(max_exp_avg_vars, "max", allreduce_fn)
        _sqrt_into(work, max_exp_avg_vars)
        corrected = True
    elif allreduce_fn is not None:
        _div_into(work, exp_avg_vars, bc2)
        allreduce_tensors(work, "mean", allreduce_fn)
        torch._foreach_sqrt_(work)
        corrected = True
    else:
        _sqrt_into(work, exp_avg_vars)
        corrected = False

    if corrected:
        torch._foreach_add_(work, eps)
        scale = [1.0] * len(params)
    else:
        torch._foreach_add_(work, [eps * b for b in bc2_sqrt])
        scale = bc2_sqrt
    if allreduce_fn is None:
        torch._foreach_addcdiv_(params, exp_avgs, work, [-lr * c / b for c, b in zip(scale, bc1)])
    else:
        torch._foreach_addcdiv_(params, m_hat, work, [-lr * c for c in scale])


def _sqrt_into(dst: list[Tensor], src: list[Tensor]) -> None:
    for d, s in zip(dst, src):
        torch.sqrt(s, out=d)


def _div_into(dst: list[Tensor], src: list[Tensor], divisors: list[float]) -> None:
    for d, s, b in zip(dst, src, divisors):
        torch.div(s, b, out=d)
