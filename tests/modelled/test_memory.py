"""The activation memory model: a process's peak from its list of actions against the textbook counts, and the
saved bytes per operator against autograd's own saved tensors on a real forward."""
from __future__ import annotations

import pytest
import torch

from lab.errors import LabError
from lab.modelled.opgraph import trace
from lab.modelled.placement.memory import SavedCounter, held_peak, micro_rows, model_state, peaks, saved_by_op
from lab.modelled.placement.order import schedule
from lab.scenario.models import build_model, graph_of


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("micro", [1, 2, 3, 5, 8])
def test_a_chain_of_equal_pieces_holds_the_textbook_micro_batches(stages, micro):
    b = 1000.0
    devices = [f"d{k}" for k in range(stages)]
    each = [[b] * micro for _ in range(stages)]
    g = peaks("gpipe", devices, devices, each, micro)
    f = peaks("1f1b", devices, devices, each, micro)
    for k, d in enumerate(devices):
        assert g[d] == micro * b  # GPipe: every micro-batch before the first backward
        assert f[d] == min(stages - k, micro) * b  # 1F1B: at most S - k in flight on stage k
    if micro > stages:
        assert f["d0"] / g["d0"] == pytest.approx(stages / micro)


def test_a_backward_frees_only_its_own_micro_batch():
    acts = schedule("1f1b", [0], 2, 3)  # F0 F1 B0 F2 B1 B2
    saved = {(0, 0): 1.0, (0, 1): 10.0, (0, 2): 100.0}
    assert held_peak(acts, saved) == 110.0  # micro 1 and 2 held together once micro 0's backward freed 1
    gp = schedule("gpipe", [0, 1], 2, 2)  # a process with two pieces holds both pieces' micro-batches
    assert held_peak(gp, {(0, 0): 1, (0, 1): 2, (1, 0): 4, (1, 1): 8}) == 15


def test_micro_rows_are_the_executors_tensor_split():
    for batch, m in [(24, 4), (10, 3), (7, 7), (5, 2)]:
        assert micro_rows(batch, m) == [len(c) for c in torch.arange(batch).tensor_split(m)]


@pytest.mark.parametrize("model", ["mlp", "cnn", "resnet", "transformer"])
@pytest.mark.parametrize("rows", [3, 16])
def test_saved_bytes_per_operator_add_up_to_what_autograd_saves_on_a_real_forward(model, rows):
    m = build_model(model, in_features=64, seed=0)
    og = trace(m, rows, 64)
    owner = {a: op.name for op in og.ops for a in op.absorbed}
    saved = saved_by_op(m, 64, owner)
    assert set(saved.by_op) <= set(og.names)  # every saving node belongs to an operator of the lab's graph
    gm = graph_of(m).train()
    counter = SavedCounter(model_state(gm))
    with counter.hooks():
        gm(torch.randn(rows, 64))
    assert counter.bytes > 0
    assert saved.piece(og.names, rows) == counter.bytes
    # A piece of half the operators saves what its own forward on its own inputs saves: part of the whole.
    half = saved.piece(og.names[: len(og.names) // 2], rows)
    assert 0 < half < counter.bytes


def test_parameters_and_buffers_are_not_activations():
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    counter = SavedCounter(model_state(m))
    with counter.hooks():
        m(torch.randn(4, 8))
    ptrs = model_state(m)
    assert ptrs and not (set(counter.seen) & ptrs)


def test_a_model_that_fails_on_a_small_batch_is_named():
    class Needs5(torch.nn.Module):
        def forward(self, x):
            return x.reshape(5, -1)

    with pytest.raises(LabError, match="fails on a batch of 2 samples"):
        saved_by_op(Needs5(), 64)
