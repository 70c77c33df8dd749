"""Parameters and gradients as views of two flat buffers, with one extra slot at the end.

A collective then moves one contiguous tensor without copies, and the extra slot carries the
step's loss with the gradient, so one all-reduce averages both.
"""
from __future__ import annotations

import torch
from torch import nn


def flatten_parameters(model: nn.Module) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """(trainable parameters, parameter buffer, gradient buffer). Each parameter's ``data`` and
    ``grad`` become views of the buffers (values kept); both buffers hold one more entry than the
    parameters, the loss slot."""
    params = [p for p in model.parameters() if p.requires_grad]
    numel = sum(p.numel() for p in params)
    pflat, gflat = torch.zeros(numel + 1), torch.zeros(numel + 1)
    off = 0
    with torch.no_grad():
        for p in params:
            k = p.numel()
            pflat[off:off + k].copy_(p.reshape(-1))
            p.data = pflat[off:off + k].view_as(p)
            p.grad = gflat[off:off + k].view_as(p)
            off += k
    return params, pflat, gflat


__all__ = ["flatten_parameters"]
