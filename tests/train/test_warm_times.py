"""The warm times an emulated wait multiplies: one per operator of a piece and per backward, measured on a copy
that leaves the run's piece, its statistics, its gradients and the random stream as they were."""
from __future__ import annotations

import math

import pytest
import torch
import torch.fx as fx
from torch import nn

from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.train.placement_run import INPUT, CutPiece, pieces, resolve, resolved
from lab.train.placement_run.pieces import outputs_on
from lab.train.placement_run.plan import model_for
from lab.train.placement_run.warm_times import warm_times


def cut(model: str, split: int):
    """The model cut in two by the order of its operators, the first ``split`` on the host."""
    sc = Scenario("w", preset("edge"), Training(model=model, parallel="placement", batch_size=8, micro_batches=2))
    ds, net = model_for(sc)
    ops = resolve(sc, net, ds.in_features).graph.ops
    sc = sc.replace(training=sc.training.replace(
        placement={op.name: ("edge0" if i < split else "edge1") for i, op in enumerate(ops)}))
    plan = resolve(sc, net, ds.in_features)
    return ds, net, plan, pieces(net, plan)[0]


def owner_of(plan) -> dict:
    return {name: op.name for op in plan.graph.ops for name in (op.name, *op.absorbed)}


def inputs_of(net, cut_pieces, piece, x):
    vals = outputs_on(net, cut_pieces, x)
    return [x if r is INPUT else vals[r[0]][r[1]] for r in piece.reads]


@pytest.mark.parametrize("split", [False, True])
def test_each_operator_and_backward_gets_a_warm_time_and_the_run_s_piece_is_untouched(split):
    ds, net, plan, cut_pieces = cut("resnet", 5)
    piece = cut_pieces[1]  # reads the first piece's output: it has an input gradient to send back
    x = ds.x_test[:4].float()
    ins = inputs_of(net, cut_pieces, piece, x)
    params = {k: v.detach().clone() for k, v in piece.module.state_dict().items()}  # weights and BatchNorm statistics
    rng = torch.get_rng_state()
    got = warm_times(piece, ins, owner_of(plan), train=True, split=split)
    assert set(got.forward) - {None} == set(piece.ops) - {None}
    assert all(math.isfinite(t) and t > 0 for t in got.forward.values())
    assert got.backward > 0
    if split:
        assert got.halves is not None and got.halves[0] > 0 and got.halves[1] > 0
    else:
        assert got.halves is None
    after = piece.module.state_dict()
    assert all(torch.equal(after[k], v) for k, v in params.items())  # BatchNorm statistics did not move
    assert all(q.grad is None for q in piece.module.parameters())
    assert torch.equal(torch.get_rng_state(), rng)
    assert not any(v.requires_grad for v in ins)


def test_a_first_piece_with_no_gradient_to_send_back_waits_for_its_weights_whole():
    ds, net, plan, cut_pieces = cut("cnn", 3)
    piece = cut_pieces[0]  # reads only the model's input
    got = warm_times(piece, inputs_of(net, cut_pieces, piece, ds.x_test[:4].float()), owner_of(plan), train=True,
                     split=True)
    assert got.halves[0] == 0.0 and got.halves[1] > 0


def test_a_forward_without_gradients_has_no_backward_and_the_random_stream_is_the_run_s():
    torch.manual_seed(3)
    module = fx.symbolic_trace(nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2)))
    names = [n.name for n in module.graph.nodes if n.op == "call_module"]
    piece = CutPiece(index=0, device="host", forward=tuple((n, 0.0, 1.0) for n in names), module=module,
                     reads=(INPUT,))
    x = torch.randn(4, 8)
    rng = torch.get_rng_state()
    got = warm_times(piece, [x], {n: n for n in names}, train=True, split=False)
    assert set(got.forward) == set(names)
    assert torch.equal(torch.get_rng_state(), rng)  # the dropout of the copy drew from a stream of its own
    got = warm_times(piece, [x], {n: n for n in names}, train=False, split=False)
    assert got.backward == 0.0 and got.halves is None and set(got.forward) == set(names)


def test_an_uploaded_onnx_network_s_pieces_get_warm_times(tmp_path, monkeypatch):
    from lab.scenario import onnx_models
    from tests.scenario.test_onnx_models import exported

    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    name = onnx_models.keep(exported("cnn")[1], "cnn.onnx").name
    ds, net, plan, cut_pieces = cut(name, 2)
    x = ds.x_test[:4].float()
    for piece in cut_pieces:
        got = warm_times(piece, inputs_of(net, cut_pieces, piece, x), owner_of(plan), train=True, split=False)
        assert set(got.forward) - {None} == set(piece.ops) - {None} and got.backward > 0


def plan_cut(model: str, strategy: str, topology: str, width: float = 1.0):
    sc = resolved(Scenario("w", preset(topology), Training(model=model, model_width=width, parallel="placement",
                                                          strategy=strategy, batch_size=8, micro_batches=2)))
    ds, net = model_for(sc)
    plan = resolve(sc, net, ds.in_features)
    return ds, net, plan, pieces(net, plan)[0]


@pytest.mark.parametrize("model", ["transformer", "resnet"])
def test_each_piece_times_its_own_operators_though_the_cut_names_its_nodes_afresh(model):
    # round robin cuts the transformer's second matmul into a piece of its own, whose node the cut names "matmul":
    # the operator by that name is another device's
    ds, net, plan, cut_pieces = plan_cut(model, "round_robin", "cxl")
    x = ds.x_test[:4].float()
    for piece in cut_pieces:
        got = warm_times(piece, inputs_of(net, cut_pieces, piece, x), owner_of(plan), train=False, split=False)
        assert set(got.forward) - {None} == set(piece.ops) - {None}, piece.index


def test_a_piece_that_writes_its_input_in_place_gets_warm_times():
    ds, net, plan, cut_pieces = plan_cut("resnet18", "round_robin", "edge", 0.25)
    x = ds.x_test[:4].float()
    in_place = [p for p in cut_pieces if p.writes_in_place and any(r is not INPUT for r in p.reads)]
    assert in_place  # a ReLU(inplace=True) on another piece's output
    for piece in in_place:
        got = warm_times(piece, inputs_of(net, cut_pieces, piece, x), owner_of(plan), train=True, split=True)
        assert got.backward > 0 and got.halves[0] > 0
