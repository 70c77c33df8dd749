"""Operator graphs from torch models: classes, FLOPs against torch's counter, bytes, errors."""

from __future__ import annotations

import math

import networkx as nx
import pytest
import torch
from torch import nn

from lab.errors import LabError
from lab.modelled.datasheet import LinkCost, compute_table, op_seconds, transfer_seconds
from lab.modelled.opgraph import reference_flops, trace
from lab.scenario.catalogue import preset
from lab.scenario.models import build_model, parameter_count
from tests.conftest import every_model
from lab.scenario.topology import OP_CLASSES


@pytest.mark.parametrize("name", every_model())
@pytest.mark.parametrize("batch", [1, 7])
def test_matmul_and_conv_flops_equal_torch_flop_counter(name, batch):
    if batch == 1 and name in ("resnet18", "mobilenet_v3_small"):  # batch norm over a 1x1 map: one value
        with pytest.raises(LabError, match="fails on an input of shape"):
            trace(name, batch)
        return
    g = trace(name, batch)
    ref = reference_flops(name, batch)
    mine = g.flops_by_class()
    assert mine["matmul"] == ref["matmul"]
    assert mine["conv"] == ref["conv"]
    assert ref["other"] == 0  # torch counts nothing else for the presets
    assert mine["matmul"] + mine["conv"] > 0


@pytest.mark.parametrize("name", every_model())
def test_graph_is_topological_acyclic_and_params_add_up(name):
    g = trace(name, 4)
    seen = set()
    for op in g.ops:
        assert op.op_class in OP_CLASSES
        assert all(u in seen for u in op.inputs), op.name  # topological order
        seen.add(op.name)
    assert nx.is_directed_acyclic_graph(g.to_networkx())
    assert g.param_bytes == parameter_count(build_model(name)) * 4
    # output bytes are float32 tensors of the traced shapes, batch first
    for op in g.ops:
        assert op.out_bytes == math.prod(op.out_shape) * 4
        assert op.out_shape[0] == 4


def test_mlp_hand_counted():
    g = trace("mlp", 4)
    assert [op.kind for op in g.ops] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert [op.op_class for op in g.ops] == ["matmul", "elementwise", "matmul", "elementwise", "matmul"]
    assert g.ops[0].flops == 2 * 4 * 64 * 128
    assert g.ops[1].flops == 4 * 128  # one per element
    assert g.ops[0].param_bytes == (64 * 128 + 128) * 4
    assert g.ops[0].out_bytes == 4 * 128 * 4
    assert g.edges[0] == ("net_0", "net_1", 4 * 128 * 4)
    assert g.input_bytes == 4 * 64 * 4


def test_cnn_hand_counted_and_data_ops_merged():
    g = trace("cnn", 2)
    conv1 = g.op("conv1")
    assert conv1.flops == 2 * (2 * 8 * 8 * 8) * (1 * 3 * 3)  # 2 x output elements x (Cin x k x k)
    assert g.op("pool1").flops == (2 * 8 * 4 * 4) * 4  # one per window element
    assert g.op("pool1").op_class == "pool"
    assert "view" not in g.names and "flatten" not in g.names
    assert g.op("pool2").absorbed == ("flatten",)
    assert g.op("fc1").inputs == ("pool2",)
    assert g.op("conv1").inputs == ()  # the view of the model input vanished


def test_data_ops_kept_as_other_with_zero_flops():
    g = trace("cnn", 2, merge_data_ops=False)
    for name in ("view", "flatten"):
        op = g.op(name)
        assert op.op_class == "other" and op.flops == 0
    assert g.op("conv1").inputs == ("view",)
    assert len(g) == len(trace("cnn", 2)) + 2
    assert trace("cnn", 2, merge_data_ops=False).total_flops == trace("cnn", 2).total_flops


def test_transformer_classes():
    g = trace("transformer", 3)
    cls = {op.name: op.op_class for op in g.ops}
    assert cls["matmul"] == "matmul" and cls["matmul_1"] == "matmul"
    assert cls["softmax"] == "other" and cls["mean"] == "other"
    assert cls["add"] == "elementwise" and cls["mul"] == "elementwise"
    assert cls["norm1"] == "norm"
    assert g.op("k").absorbed == ("transpose",)
    assert set(g.op("matmul").inputs) == {"q", "k"}
    assert g.op("matmul").flops == 2 * 3 * 8 * 8 * 32


def test_resnet_has_skip_edges():
    g = trace("resnet", 2)
    assert set(g.op("add").inputs) == {"blocks_0_bn2", "relu"}
    assert g.op("bn").op_class == "norm"
    assert g.op("pool").op_class == "pool"


class _Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: fx cannot trace it
            return x
        return -x


def test_untraceable_model_is_a_lab_error():
    with pytest.raises(LabError, match="cannot trace"):
        trace(_Branchy(), 2)


def test_model_without_operators_is_a_lab_error():
    with pytest.raises(LabError, match="no operators"):
        trace(nn.Identity(), 2)
    with pytest.raises(LabError, match="no operators"):
        trace(nn.Flatten(), 2)


def test_bad_input_and_batch_are_lab_errors():
    with pytest.raises(LabError, match="fails on an input"):
        trace(nn.Linear(10, 3), 2, in_features=64)
    with pytest.raises(LabError, match="batch size"):
        trace("mlp", 0)
    with pytest.raises(LabError, match="unknown model"):
        trace("nope", 2)


def test_custom_module_with_functional_ops():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(64, 5))

        def forward(self, x):
            return torch.nn.functional.gelu(x @ self.w) + 1.0

    g = trace(M(), 3)
    assert [op.op_class for op in g.ops] == ["matmul", "elementwise", "elementwise"]
    assert g.ops[0].flops == 2 * 3 * 5 * 64 == reference_flops(M(), 3)["matmul"]
    assert g.ops[0].param_bytes == 64 * 5 * 4  # the get_attr parameter is charged to its reader
    assert g.ops[1].flops == 4 * 15


# ----- cost model -------------------------------------------------------------------------------

def test_cost_model_seconds():
    topo = preset("cxl")
    gpu, fpga = topo.device("gpu"), topo.device("fpga")
    assert op_seconds("matmul", 19.5e12, gpu) == pytest.approx(1.0)
    assert op_seconds("matmul", 19.5e12, gpu, speed=0.5) == pytest.approx(2.0)
    assert op_seconds("matmul", 1.0, fpga) == math.inf  # no kernel
    assert op_seconds("conv", 0.0, fpga) == 0.0
    assert transfer_seconds(topo, "gpu", "gpu", 1e9) == 0.0
    assert transfer_seconds(topo, "gpu", "fpga", 64e9) == pytest.approx(topo.transfer_time("gpu", "fpga", 64e9))
    lc = LinkCost(topo)
    for a in topo.device_names:
        for b in topo.device_names:
            want = 0.0 if a == b else topo.transfer_time(a, b, 12345.0)
            assert lc(a, b, 12345.0) == pytest.approx(want, rel=1e-12)
    g = trace("cnn", 8)
    table = compute_table(g, topo, speed={"gpu": 2.0})
    op = g.op("conv1")
    assert table["conv1"]["gpu"] == pytest.approx(op.flops / (15e12 * 2))
    assert table["fc1"]["fpga"] == math.inf
    with pytest.raises(LabError, match="not a device"):
        compute_table(g, topo, speed={"nope": 1.0})
    with pytest.raises(LabError, match="positive"):
        compute_table(g, topo, speed={"gpu": 0.0})


@pytest.mark.parametrize("form", ["addmm", "addmm_method", "baddbmm", "addbmm", "einsum"])
def test_products_with_an_added_term_and_einsum_count_as_matmul_like_torch(form):
    """GPT-2's Conv1D is an addmm: it must cost its matrix product, as torch's counter says."""
    import torch
    from torch import nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(64, 24))
            self.b = nn.Parameter(torch.randn(24))
            self.w3 = nn.Parameter(torch.randn(4, 16, 6))

        def forward(self, x):
            if form == "addmm":
                return torch.addmm(self.b, x, self.w)
            if form == "addmm_method":
                return self.b.expand(x.shape[0], 24).addmm(x, self.w)
            xb = x.reshape(x.shape[0], 4, 16).transpose(0, 1)  # (4, batch, 16)
            if form == "baddbmm":
                return torch.baddbmm(torch.zeros(1), xb, self.w3)
            if form == "addbmm":
                return torch.addbmm(torch.zeros(1), xb, self.w3)
            return torch.einsum("bij,bjk->bik", xb, self.w3)

    g = trace(M(), 5)
    ours = sum(op.flops for op in g.ops if op.op_class == "matmul")
    assert ours > 0
    if form == "addbmm":  # torch's counter has no formula for addbmm (it counts 0): the product by hand
        assert ours == 2 * 4 * 5 * 16 * 6
    else:
        assert ours == reference_flops(M(), 5)["matmul"]


EINSUMS = {  # equation: operand shapes (the first is the module's input, reshaped)
    "ij,jk->ik": [(5, 7), (7, 3)], "ij,jk": [(5, 7), (7, 3)], "bij,bkj->bik": [(2, 5, 7), (2, 3, 7)],
    "ij,ij->": [(5, 7), (5, 7)], "abc,cd->abd": [(5, 2, 3), (3, 4)], "...ij,...jk->...ik": [(2, 5, 7), (7, 3)],
    "...ij,jk": [(2, 2, 5, 7), (7, 3)], "b...,b...->b": [(5, 7), (5, 7)], "ij,jk,kl->il": [(5, 7), (7, 3), (3, 2)],
    "ij,kj,jl->il": [(5, 7), (4, 7), (7, 2)], "i,j->ij": [(5,), (7,)], "ij,ij->ij": [(5, 7), (5, 7)],
    "ij,kj->ikj": [(5, 3), (4, 3)], "ij->j": [(5, 7)],
}


@pytest.mark.parametrize("eq", list(EINSUMS))
def test_einsum_costs_what_torch_counts(eq):
    """A contraction is a matmul of torch's FLOPs; a product without a summed index is element-wise
    (torch counts none), an einsum of one operand is a reduction ("other")."""
    import math

    import torch
    from torch import nn

    shapes = EINSUMS[eq]

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.ParameterList([nn.Parameter(torch.randn(*s)) for s in shapes[1:]])

        def forward(self, x):
            return torch.einsum(eq, x.reshape(shapes[0]), *self.p)

    n = math.prod(shapes[0])
    g = trace(M(), 1, in_features=n)
    (op,) = [o for o in g.ops if o.kind == "einsum"]
    torch_matmul = reference_flops(M(), 1, in_features=n)["matmul"]
    if op.op_class == "matmul":
        assert op.flops == torch_matmul > 0
    else:
        assert torch_matmul == 0 and op.op_class == ("other" if len(shapes) == 1 else "elementwise")
        assert op.flops > 0
