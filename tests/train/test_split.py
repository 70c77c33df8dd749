"""A piece's backward split for the zero-bubble schedule (lab.train.placement_run.split): the input's gradient, then
the weights', give what one whole backward gives; a backward torch cannot split is refused with what to change."""
from __future__ import annotations

import pytest
import torch

from lab.errors import LabError
from lab.train.placement_run.split import input_gradient, weight_gradient


def _piece() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.ReLU(),
                               torch.nn.Linear(5, 3)).double()


def _run(split: bool):
    piece = _piece()
    x = torch.randn(8, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
    out = piece(x)
    g = torch.randn(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    if split:
        groups = input_gradient([out], [g], [x], piece.parameters())
        assert x.grad is not None and all(q.grad is None for q in piece.parameters())  # the weights wait
        weight_gradient(piece.parameters(), groups)
    else:
        torch.autograd.backward([out], [g])
    return x.grad, [q.grad for q in piece.parameters()]


def test_the_input_then_the_weights_gradient_is_one_whole_backward():
    (x_split, w_split), (x_whole, w_whole) = _run(True), _run(False)
    assert torch.allclose(x_split, x_whole, rtol=0, atol=1e-12)
    assert len(w_split) == 6 and all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(w_split, w_whole))


def test_a_backward_torch_cannot_split_is_refused_with_what_to_change():
    piece = _piece()
    x = torch.randn(8, 6, dtype=torch.float64).requires_grad_(True)
    wrong = torch.ones(8, 4, dtype=torch.float64)  # not the output's shape: torch's backward refuses it
    with pytest.raises(LabError) as e:
        input_gradient([piece(x)], [wrong], [x], piece.parameters())
    text = str(e.value)
    assert text.startswith("training.schedule: the zero-bubble schedule splits each backward") and \
        text.endswith("use GPipe or 1F1B") and "Traceback" not in text and "\n" not in text
    assert "torch: Mismatch in shape" in text  # torch's own reason, not its wrapper's first line


class _TwoBranches(torch.nn.Module):
    """A piece with an output from what it receives and another from the model's input alone (an uploaded network
    may branch so)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 2).double(), torch.nn.Linear(4, 2).double()

    def forward(self, received, model_input):
        return self.a(received), self.b(model_input)


def test_a_weight_reached_from_the_model_input_alone_is_refused_not_left_without_a_gradient():
    piece = _TwoBranches()
    received = torch.randn(3, 4, dtype=torch.float64).requires_grad_(True)
    model_input = torch.randn(3, 4, dtype=torch.float64)  # the model's input takes no gradient
    outs = piece(received, model_input)
    with pytest.raises(LabError, match="a weight of a piece is reached from the model's input alone"):
        input_gradient(list(outs), [torch.ones_like(o) for o in outs], [received, model_input], piece.parameters())
    # torch's split alone leaves that weight without a gradient: what the refusal prevents
    outs = piece(received, model_input)
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

    weight = stage_backward_input(list(outs), [torch.ones_like(o) for o in outs], [received, model_input],
                                  piece.parameters())[1]
    stage_backward_weight(piece.parameters(), weight)
    assert piece.a.weight.grad is not None and piece.b.weight.grad is None


class _EndsInAView(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 4).double()

    def forward(self, x):
        return self.lin(x).view(2, -1)  # a piece that ends in a flatten returns a view as well


def test_a_piece_that_returns_a_view_splits_to_one_whole_backward():
    got = []
    for split in (True, False):
        torch.manual_seed(0)
        piece = _EndsInAView()
        x = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
        out = piece(x)
        assert out._is_view()
        g = torch.ones_like(out)
        if split:
            weight_gradient(piece.parameters(), input_gradient([out], [g], [x], piece.parameters()))
        else:
            torch.autograd.backward([out], [g])
        got.append([x.grad, *(q.grad for q in piece.parameters())])
    assert all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(*got))
