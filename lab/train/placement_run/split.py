"""A piece's backward split in two for the zero-bubble schedule, by torch's own pipelining code: the gradient of its
inputs (which the piece before waits for) and, later, the gradient of its weights. A backward torch cannot split
is refused with what to change, not with torch's trace."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch
# torch pipelining's split of a stage's backward, as its zero-bubble schedules run it
from torch.distributed.pipelining._backward import (_get_grad_fn_or_grad_acc, construct_reverse_graph,
                                                    get_param_groups, stage_backward_input, stage_backward_weight)

from lab.errors import LabError, first_line


def _refused(why: str) -> LabError:
    return LabError("the zero-bubble schedule splits each backward into its input's and its weights' gradients, and "
                    f"this model's cannot be split: {why}; use GPipe or 1F1B", where="training.schedule")


def _torch_says(exc: BaseException) -> str:
    # torch wraps the error of a failed split in a RuntimeError of its own whose first line says only that
    return "torch: " + first_line(exc.__cause__ or exc)


def _reachable(roots: Sequence[Any]) -> set:
    """Every autograd node the backward from ``roots`` reaches."""
    seen, todo = set(), [r for r in roots if r is not None]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        todo.extend(n for n, _ in node.next_functions if n is not None)
    return seen


def input_gradient(outs: Sequence[torch.Tensor], grads: Sequence[Any], leaves: Sequence[torch.Tensor],
                   params: Iterable[torch.nn.Parameter]) -> list:
    """The gradients of ``leaves`` (the piece's inputs; each gets its ``.grad``) from ``outs`` and their gradients
    ``grads`` (None for the loss); what the weights' gradient will start from."""
    # torch detaches the outputs in place once their part of the graph is done with, which a view refuses (a
    # piece that ends in a flatten returns one): a view goes in as a copy, which the graph differentiates alike
    outs = [o.clone() if o._is_view() else o for o in outs]
    params = [q for q in params if q.requires_grad]
    out_fns = [f for f in map(_get_grad_fn_or_grad_acc, outs) if f is not None]
    weight_fns = [_get_grad_fn_or_grad_acc(q) for q in params]
    # torch's split finds each weight from the inputs' side of the graph: a weight reached only from the model's
    # input (which takes no gradient) would silently get none
    in_fns = [f for f in (_get_grad_fn_or_grad_acc(v) for v in leaves if v.requires_grad) if f is not None]
    covered = set().union(*(g["params"] for g in get_param_groups(in_fns, weight_fns,
                                                                   construct_reverse_graph(out_fns))))
    reached = _reachable(out_fns)
    if any(f in reached and f not in covered for f in weight_fns):
        raise _refused("a weight of a piece is reached from the model's input alone, not from what the piece receives "
                       "from the pieces before it")
    try:
        return stage_backward_input(outs, list(grads), list(leaves), iter(params))[1]
    except RuntimeError as exc:
        raise _refused(_torch_says(exc)) from None


def weight_gradient(params: Iterable[torch.nn.Parameter], groups: list) -> None:
    """The gradients of ``params`` (added to their ``.grad``) from what :func:`input_gradient` kept."""
    try:
        stage_backward_weight(params, groups)
    except RuntimeError as exc:
        raise _refused(_torch_says(exc)) from None
