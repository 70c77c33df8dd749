"""lab.scenario.onnx_models: a person's own network from an ONNX file. A preset exported with torch.onnx.export
round-trips (the same outputs on the same weights, the same operator graph where the export keeps the layers,
matrix FLOPs equal to torch's counter); hostile files get a clear message naming the file and keep nothing; a
link to a model this server does not hold says so."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from lab.errors import LabError
from lab.modelled.opgraph import reference_flops, trace
from lab.scenario import onnx_models as om
from lab.scenario.document import Training
from lab.scenario.models import build_model

PRESETS = ["mlp", "cnn", "resnet", "transformer"]


@pytest.fixture(autouse=True)
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    return tmp_path


def exported(name: str) -> tuple[torch.nn.Module, bytes]:
    m = build_model(name, 64, 10, seed=4)
    buf = io.BytesIO()
    torch.onnx.export(m, (torch.zeros(2, 64),), buf, input_names=["x"], output_names=["y"], dynamo=False,
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17, do_constant_folding=False)
    return m, buf.getvalue()


@pytest.mark.parametrize("name", PRESETS)
def test_an_exported_preset_round_trips(name, data):
    m, blob = exported(name)
    info = om.keep(blob, f"{name}.onnx")
    assert om.kept() == [info] and (data / "models" / f"{info.name[5:]}.onnx").read_bytes() == blob
    net = build_model(info.name, 64, 10)
    x = torch.rand(5, 64)
    m.eval()
    net.eval()
    assert (net(x) - m(x)).abs().max().item() <= 1e-5
    assert sum(p.numel() for p in net.parameters()) == sum(p.numel() for p in m.parameters())  # weights train
    mine, theirs = trace(name, 8), trace(info.name, 8)
    assert mine.flops_by_class()["matmul"] == theirs.flops_by_class()["matmul"] == reference_flops(info.name, 8)["matmul"]
    assert theirs.flops_by_class()["conv"] == reference_flops(info.name, 8)["conv"]
    if name != "transformer":  # the export keeps every layer as one operator
        assert [o.op_class for o in mine.ops] == [o.op_class for o in theirs.ops]
    else:  # its linear layers on 3-d inputs become a matrix product and an addition, its GELU five operators
        assert len(theirs.ops) > len(mine.ops)
    assert om.keep(blob, "again.onnx") == info.__class__(**{**info.__dict__, "filename": "again.onnx"})


def test_an_uploaded_model_trains_one_step_and_the_scenario_takes_its_name():
    _, blob = exported("cnn")
    info = om.keep(blob, "cnn.onnx")
    net = build_model(info.name, 64, 10)
    before = [p.detach().clone() for p in net.parameters()]
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    torch.nn.functional.cross_entropy(net(torch.rand(8, 64)), torch.arange(8)).backward()
    opt.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert Training().replace(model=info.name).model == info.name
    with pytest.raises(LabError, match="not allowed"):
        Training().replace(model="onnx-12345")


def test_a_link_to_a_model_this_server_does_not_hold_says_so():
    with pytest.raises(LabError, match="does not hold the model onnx-0123456789ab"):
        build_model("onnx-0123456789ab", 64, 10)


def graph(nodes, inputs, outputs, inits=(), opset=17) -> bytes:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def io_(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def linear() -> bytes:
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 10], [0.01] * 640)
    return graph([helper.make_node("MatMul", ["x", "w"], ["y"])], [io_("x", ["n", 64])], [io_("y", ["n", 10])], [w])


def hostile() -> dict[str, tuple[bytes, str]]:
    good = linear()
    external = onnx.ModelProto.FromString(good)
    t = external.graph.initializer[0]
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="/etc/passwd")
    huge = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 30, 10])  # claims 40 GB, holds nothing
    nested = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "inner", [], [io_("y", ["n", 10])])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    return {
        "truncated": (good[: len(good) // 2], "cannot be read|not an ONNX model|not a valid"),
        "wrong magic": (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "not an ONNX model|not a valid"),
        "empty": (b"", "is empty"),
        "over the cap": (b"\0" * (om.MAX_BYTES + 1), "at most 5 MB"),
        "external data": (external.SerializeToString(), "weights in other files"),
        "huge dimensions": (graph([helper.make_node("MatMul", ["x", "w"], ["y"])], [io_("x", ["n", 64])],
                                  [io_("y", ["n", 10])], [huge]), "dimensions"),
        "an operator the converter lacks": (graph([helper.make_node("Hardmax", ["x"], ["h"]),
                                                   helper.make_node("MatMul", ["h", "w"], ["y"])],
                                                  [io_("x", ["n", 64])], [io_("y", ["n", 10])],
                                                  [helper.make_tensor("w", TensorProto.FLOAT, [64, 10], [0.0] * 640)]),
                                            "cannot turn into torch: Hardmax"),
        "a custom operator": (graph([helper.make_node("RunMyCode", ["x"], ["y"], domain="evil.example")],
                                    [io_("x", ["n", 64])], [io_("y", ["n", 10])]), "not a valid|cannot turn"),
        "nesting": (graph([helper.make_node("If", ["c"], ["y"], then_branch=nested, else_branch=nested)],
                          [io_("x", ["n", 64]), cond], [io_("y", ["n", 10])]), "control flow"),
        "deep protobuf nesting": (b"\x3a\x7f" * 20_000, "cannot be read|not an ONNX model|not a valid"),
        "a free input dimension": (graph([helper.make_node("Identity", ["x"], ["y"])], [io_("x", ["n", "m"])],
                                         [io_("y", ["n", 10])]), "every other dimension fixed"),
        "no score per class": (graph([helper.make_node("Identity", ["x"], ["y"])], [io_("x", ["n", 64])],
                                     [io_("y", ["n", 4, 16])]), "one score per class"),
    }


@pytest.mark.parametrize("case", list(hostile()))
def test_a_hostile_file_gets_a_clear_message_and_keeps_nothing(case, data):
    blob, says = hostile()[case]
    name = "<b>review</b> *net*.onnx"
    with pytest.raises(LabError) as got:
        om.keep(blob, name)
    msg = str(got.value)
    assert name in msg and "Traceback" not in msg, msg  # the file's name, as given (shown as text on the page)
    assert __import__("re").search(says, msg), msg
    assert om.kept() == [] and not list((data / "models").glob("*")) if (data / "models").exists() else True


def test_the_good_file_of_the_fuzz_is_accepted():
    info = om.keep(linear(), "linear.onnx")
    assert info.sample_shape == (64,) and info.classes == 10 and info.op_types == ("MatMul",)
    net = build_model(info.name, 64, 10)
    assert torch.allclose(net(torch.ones(2, 64)), torch.full((2, 10), 0.64))


def test_a_grey_digit_feeds_a_file_that_takes_colour_images():
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(4, 10))
    buf = io.BytesIO()
    torch.onnx.export(m, (torch.zeros(2, 3, 16, 16),), buf, input_names=["x"], output_names=["y"], dynamo=False,
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17)
    info = om.keep(buf.getvalue(), "colour.onnx")
    assert info.sample_shape == (3, 16, 16)
    net = build_model(info.name, 64, 10).eval()
    x = torch.rand(2, 64)
    img = torch.nn.functional.interpolate(x.view(2, 1, 8, 8), size=(16, 16)).expand(-1, 3, -1, -1)
    assert torch.allclose(net(x), m(img), atol=1e-5)


def test_a_file_of_any_other_shape_takes_the_samples_stretched_to_its_shape():
    # a network of sequences (2 channels of 30 steps): the lab's 64 values a sample are stretched to 60
    m = torch.nn.Sequential(torch.nn.Conv1d(2, 4, 5), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool1d(1),
                            torch.nn.Flatten(), torch.nn.Linear(4, 10))
    buf = io.BytesIO()
    torch.onnx.export(m, (torch.zeros(2, 2, 30),), buf, input_names=["x"], output_names=["y"], dynamo=False,
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17)
    info = om.keep(buf.getvalue(), "sequence.onnx")
    assert info.sample_shape == (2, 30)
    net = build_model(info.name, 64, 10).eval()
    x = torch.rand(3, 64)
    # numpy's linear interpolation at the sample centres torch's linear mode (align_corners off) uses
    centres = (np.arange(60) + 0.5) * 64 / 60 - 0.5
    seq = torch.from_numpy(np.stack([np.interp(centres, np.arange(64), r) for r in x.numpy()])).float()
    assert torch.allclose(net(x), m(seq.view(3, 2, 30)), atol=1e-5)
    og = trace(net, batch_size=4, in_features=64, name=info.name)
    ref, mine = reference_flops(net, 4, 64), og.flops_by_class()
    assert mine["conv"] == ref["conv"] > 0 and mine["matmul"] == ref["matmul"] > 0
