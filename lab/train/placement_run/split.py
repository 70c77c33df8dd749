"""A piece's backward split in two for the zero-bubble schedule, by torch's own pipelining code: the gradient of its
inputs (which the piece before waits for) and, later, the gradient of its weights. A backward torch cannot split
is refused with what to change, not with torch's trace."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch
# torch pipelining's split of a stage's backward, as its zero-bubble schedules run it
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from lab.errors import LabError, first_line


def _refused(exc: RuntimeError) -> LabError:
    return LabError("the zero-bubble schedule splits each backward into its input's and its weights' gradients, and "
                    f"torch could not split this model's ({first_line(exc)}): use GPipe or 1F1B",
                    where="training.schedule")


def input_gradient(outs: Sequence[torch.Tensor], grads: Sequence[Any], leaves: Sequence[torch.Tensor],
                   params: Iterable[torch.nn.Parameter]) -> list:
    """The gradients of ``leaves`` (the piece's inputs; each gets its ``.grad``) from ``outs`` and their gradients
    ``grads`` (None for the loss); what the weights' gradient will start from."""
    try:
        return stage_backward_input(list(outs), list(grads), list(leaves), params)[1]
    except RuntimeError as exc:
        raise _refused(exc) from None


def weight_gradient(params: Iterable[torch.nn.Parameter], groups: list) -> None:
    """The gradients of ``params`` (added to their ``.grad``) from what :func:`input_gradient` kept."""
    try:
        stage_backward_weight(params, groups)
    except RuntimeError as exc:
        raise _refused(exc) from None
