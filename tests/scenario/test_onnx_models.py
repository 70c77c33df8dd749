"""lab.scenario.onnx_models: a person's own network from an ONNX file. A preset exported with torch.onnx.export
round-trips (the same outputs on the same weights, the same operator graph where the export keeps the layers,
matrix FLOPs equal to torch's counter); hostile files get a clear message naming the file and keep nothing; a
link to a model this server does not hold says so. A file is priced from its graph (lab.scenario.onnx_cost)
before anything is converted: a compute or memory bomb is refused without one FLOP of torch, the price of
convolutions and matrix products is torch's own count, and the server runs an admitted network on two samples
at most, whatever the page's batch."""

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
from lab.testing import hostile_onnx

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
        "empty": (b"", r"is empty \(0 bytes\): upload an ONNX model file"),
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
        "no classes": (hostile_onnx.classes(0), r"output as \(batch, 0\): 0 classes; the lab needs a fixed number of classes"),
        "negative classes": (hostile_onnx.classes(-3), r"\(batch, -3\): -3 classes; the lab needs a fixed number"),
        "named classes": (hostile_onnx.classes("k"), r"\(batch, 'k'\): a name, not a number of classes"),
        "classes that are not what it declares": (hostile_onnx.classes(7), r"declares \(batch, 7\) scores but its operators "
                                                                r"give \(1, 10\) for a batch of 1"),
        "a shape read from values": (graph([helper.make_node("NonZero", ["x"], ["nz"]),
                                            helper.make_node("Cast", ["nz"], ["f"], to=TensorProto.FLOAT),
                                            helper.make_node("ReduceSum", ["f"], ["s"], keepdims=0),
                                            helper.make_node("MatMul", ["x", "w"], ["xw"]),
                                            helper.make_node("Add", ["xw", "s"], ["y"])],
                                           [io_("x", ["n", 64])], [io_("y", ["n", 10])],
                                           [helper.make_tensor("w", TensorProto.FLOAT, [64, 10], [0.0] * 640)]),
                                     r"cannot be priced before it runs: the shape of the output of its NonZero "
                                     r"operator number 1 cannot be worked out"),
        "a batch it does not take": (graph([helper.make_node("Reshape", ["x", "s"], ["r"]),
                                            helper.make_node("MatMul", ["r", "w"], ["y"])],
                                           [io_("x", ["n", 64])], [io_("y", ["n", 10])],
                                           [helper.make_tensor("s", TensorProto.INT64, [2], [1, 64]),
                                            helper.make_tensor("w", TensorProto.FLOAT, [64, 10], [0.0] * 640)]),
                                     r"declares \(batch, 10\) scores but its operators give \(1, 10\) for a "
                                     r"batch of 2"),
        "a compute bomb": (hostile_onnx.conv_bomb(1996), r"costs 7,384 GFLOPs a sample \(its Conv number 2 alone 3\.7\), "
                                              r"over this server's budget of 5 GFLOPs a sample; the teacher can "
                                              r"raise it with LAB_UPLOAD_FLOPS"),
        "a memory bomb": (hostile_onnx.constant_bomb(), r"takes 1\.07 GB a sample .* over this server's budget of 300 MB a "
                                             r"sample; the teacher can raise it with LAB_UPLOAD_BYTES"),
    }


@pytest.mark.parametrize("case", list(hostile()))
def test_a_hostile_file_gets_a_clear_message_and_keeps_nothing(case, data):
    blob, says = hostile()[case]
    name = "<b>review</b> *net*.onnx"
    with pytest.raises(LabError) as got:
        om.keep(blob, name)
    msg = str(got.value)
    assert name in msg and "Traceback" not in msg and "\n" not in msg, msg  # one line naming the file as given
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


def _no_conversion(monkeypatch):
    """Make converting a file to torch fail the test: a refusal must come from the graph alone."""
    onnx2torch, _ = om._onnx2torch()  # imported as the lab imports it (torchvision first)

    def never(*_a, **_k):
        raise AssertionError("the file was converted to torch")

    monkeypatch.setattr(om, "convert", never)
    monkeypatch.setattr(onnx2torch, "convert", never)


@pytest.mark.parametrize("bomb, budget", [(lambda: hostile_onnx.conv_bomb(1996), "LAB_UPLOAD_FLOPS"),
                                          (lambda: hostile_onnx.conv_bomb(2), "LAB_UPLOAD_FLOPS"),
                                          (lambda: hostile_onnx.constant_bomb(16384), "LAB_UPLOAD_BYTES")],
                         ids=["1996 convolutions of one weight", "2 convolutions of one weight",
                              "a 16384x16384 constant"])
def test_a_bomb_is_refused_from_its_graph_without_one_flop_of_torch(bomb, budget, monkeypatch):
    from torch.utils.flop_counter import FlopCounterMode

    blob = bomb()
    assert len(blob) < 300_000  # a small file: what it would cost is in its graph, not its size
    _no_conversion(monkeypatch)
    counter = FlopCounterMode(display=False)
    with counter, pytest.raises(LabError, match=f"over this server's budget .* raise it with {budget}") as got:
        om.keep(blob, "bomb.onnx")
    assert counter.get_total_flops() == 0, counter.get_flop_counts()
    assert str(got.value).startswith("model file: 'bomb.onnx': ") and "\n" not in str(got.value)
    assert om.kept() == []


def test_shape_inference_that_would_take_the_servers_memory_is_stopped_in_its_own_process(monkeypatch):
    from lab.scenario import onnx_cost

    _no_conversion(monkeypatch)
    monkeypatch.setattr(onnx_cost, "CHILD_BYTES", 256 << 20)
    blob = hostile_onnx.shape_bomb(40)  # 2^41 numbers worked out by ONNX's data propagation, in a file of 4 kB
    assert len(blob) < 5000
    with pytest.raises(LabError, match=r"'bomb\.onnx': cannot be priced before it runs: working out its shapes "
                                       r"takes more than 256 MB"):
        om.read(blob, "bomb.onnx")
    _, info = om.read(hostile_onnx.shape_bomb(4), "small.onnx")  # the same chain, 32 numbers long, is priced
    assert info.flops == 2 * 64 * 10 + 10 + 32 + (2 + 4 + 8 + 16 + 32) + 1  # product, add, sum, concats, cast
    monkeypatch.setattr(onnx_cost, "CHILD_SECONDS", 0.01)  # 2,000 operators take longer than that to price
    monkeypatch.setattr(om, "_PRICES", {})  # priced now, not remembered from another test
    with pytest.raises(LabError, match=r"'slow\.onnx': cannot be priced before it runs: working out its shapes "
                                       r"takes more than 0\.01 s$"):
        om.read(hostile_onnx.conv_bomb(1996), "slow.onnx")


def test_the_budget_is_the_teachers_to_raise(monkeypatch):
    blob = hostile_onnx.constant_bomb(16384)
    with pytest.raises(LabError, match="budget of 1 kB a sample"):
        monkeypatch.setenv("LAB_UPLOAD_BYTES", "1000")
        om.read(linear(), "linear.onnx")
    monkeypatch.setenv("LAB_UPLOAD_BYTES", "2e9")
    _, info = om.read(blob, "big.onnx")
    # the block of ones (2^28 floats, made and summed) and the linear layer, at a batch of one
    assert 2**30 < info.bytes < 2**30 + 10_000 and info.flops == 2 * 2**28 + 2 * 64 * 10 + 10
    monkeypatch.setenv("LAB_UPLOAD_FLOPS", "7e9")
    with pytest.raises(LabError, match=r"costs 7\.58 GFLOPs a sample .* budget of 7 GFLOPs"):
        om.read(hostile_onnx.conv_bomb(2), "two.onnx")


def test_the_price_of_convolutions_and_products_is_exact_and_the_rest_leans_high():
    from lab.scenario import onnx_cost

    model = onnx.ModelProto.FromString(hostile_onnx.conv_bomb(2))
    at = {b: onnx_cost.cost(model, b) for b in (1, 3)}
    shared = 2 * 64 * 64 * 9 * 224 * 224  # out elements x in channels x kernel, twice
    first = 2 * 64 * 3 * 9 * 224 * 224
    for b, c in at.items():
        assert c.flops_of("Conv") == b * (first + 2 * shared)
        assert c.flops_of("Gemm") == b * 2 * 64 * 10
        assert c.flops_of("GlobalAveragePool") == b * 64 * 224 * 224  # one per element read
        assert c.output == (b, 10) and c.heaviest[:2] == ("Conv", "number 2")
    # every output kept as if none were freed: three 64x224x224 maps of floats a sample, and the input
    assert at[1].bytes > (3 * 64 + 3) * 224 * 224 * 4


def test_every_operator_the_converter_takes_has_a_price():
    from lab.scenario import onnx_cost

    om._onnx2torch()  # torchvision first, as the lab imports the converter
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY
    taken = {k.operation_type for k in _CONVERTER_REGISTRY}
    assert len(taken) > 100 and taken <= onnx_cost.PRICED, sorted(taken - onnx_cost.PRICED)


def test_the_price_of_matrix_operators_is_torchs_own_count():
    from torch.utils.flop_counter import FlopCounterMode

    from lab.scenario import onnx_cost

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2, groups=2)
            self.grouped = torch.nn.Conv2d(4, 6, 3, stride=2, groups=2)
            self.fc = torch.nn.Linear(6 * 7 * 7, 20)
            self.mix = torch.nn.Parameter(torch.rand(4, 5, 5))

        def forward(self, x):
            h = self.grouped(torch.relu(self.up(self.conv(x)))).flatten(1)
            h = self.fc(h).reshape(x.shape[0], 4, 1, 5) @ self.mix  # a batched product, broadcast
            return h.reshape(x.shape[0], 20)[:, :10]

    m = Net().eval()
    buf = io.BytesIO()
    torch.onnx.export(m, (torch.zeros(2, 3, 8, 8),), buf, input_names=["x"], output_names=["y"], dynamo=False,
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17)
    model, info = om.read(buf.getvalue(), "matrices.onnx")
    assert {"Conv", "ConvTranspose", "Gemm", "MatMul"} <= set(info.op_types)
    net = om.convert(model, info).eval()
    for batch in (1, 5):
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            net(torch.rand(batch, 3, 8, 8))
        counts = {str(k).split(".")[-1]: v for k, v in counter.get_flop_counts()["Global"].items()}
        convs = sum(v for k, v in counts.items() if "convolution" in k)
        products = sum(v for k, v in counts.items() if k in ("mm", "addmm", "bmm", "baddbmm", "matmul"))
        priced = onnx_cost.cost(model, batch)
        assert convs > 0 and priced.flops_of("Conv", "ConvTranspose") == convs
        assert products > 0 and priced.flops_of("Gemm", "MatMul") == products
        assert priced.flops >= convs + products


@pytest.mark.parametrize("where", hostile_onnx.EXTERNAL_PLACES)
def test_whether_a_named_file_exists_on_the_server_is_never_told(where, tmp_path, monkeypatch):
    from lab.settings import ROOT

    (tmp_path / "secret.bin").write_bytes(b"\0" * 4096)
    assert (ROOT / "app.py").exists() and not (tmp_path / "no-such-file.bin").exists()
    said = set()
    for folder, path in ((ROOT, "app.py"), (tmp_path, "secret.bin"), (tmp_path, "no-such-file.bin"),
                         (tmp_path, "/etc/passwd")):
        monkeypatch.chdir(folder)  # a relative location is read from where the server runs
        with pytest.raises(LabError) as got:
            om.keep(hostile_onnx.external_data(path, where), "probe.onnx")
        said.add(str(got.value))
    assert said == {"model file: 'probe.onnx': keeps weights in other files; the lab takes only a model whose "
                    "weights are inside it (save it with save_as_external_data=False)"}


def test_an_empty_upload_says_so_on_the_page():
    from types import SimpleNamespace

    from lab.view.placement import upload

    session: dict = {}
    assert upload.take(session, SimpleNamespace(file_id="e", name="empty.onnx", getvalue=lambda: b"")) is None
    notice = upload.notes(session)[0].notices[0]
    assert notice.level == "error" and "'empty.onnx': is empty (0 bytes): upload an ONNX model file" in notice.text


def test_the_server_runs_an_uploaded_network_on_two_samples_at_most_whatever_the_batch():
    # 256 kB a sample of ones made from the batch's shape: 16 GiB if anything ran it at a batch of 65,536
    info = om.keep(hostile_onnx.batch_bomb(65536), "grows.onnx")
    assert 65536 * 4 < info.bytes < 65536 * 4 + 10_000
    net = build_model(info.name, 64, 10)
    seen: list[int] = []
    for m in net.modules():
        if om.is_leaf(m):
            m.register_forward_pre_hook(lambda _m, args: seen.extend(a.shape[0] for a in args[:1]
                                                                     if isinstance(a, torch.Tensor) and a.dim()))
    big, small = trace(net, 65536, 64, name=info.name, merge_data_ops=False), trace(net, 8, 64, name=info.name)
    assert seen and max(seen) <= 2, sorted(set(seen))
    block = next(o for o in big.ops if o.kind == "OnnxConstantOfShape")
    assert block.out_shape == (65536, 65536) and block.out_bytes == 65536 * 65536 * 4  # drawn, never made
    assert big.flops_by_class()["matmul"] == 65536 / 8 * small.flops_by_class()["matmul"] == 65536 * 2 * 64 * 10
    assert net.training  # its modes are as they were


def test_a_reviewers_network_keeps_batch_norm_statistics_as_statistics():
    # exported without constant folding: the statistics reach batch norm through ONNX Identity nodes
    from tests.scenario.reviewer_net import exported as reviewer

    m, blob = reviewer()
    assert "Identity" in {n.op_type for n in onnx.ModelProto.FromString(blob).graph.node}
    info = om.keep(blob, "reviewer.onnx")
    net = build_model(info.name, 64, 10)
    assert sum(p.numel() for p in net.parameters()) == sum(p.numel() for p in m.parameters())
    stats = sorted(b.numel() for b in net.buffers() if b.is_floating_point() and b.numel() > 1)
    assert stats == sorted(b.numel() for n, b in m.named_buffers() if "running" in n)
    x = torch.rand(6, 64)
    m.train()
    net.train()
    assert torch.allclose(net(x), m(x.view(6, 1, 8, 8)), atol=1e-5)  # batch statistics in training
    m.eval()
    net.eval()
    x = torch.rand(6, 64)  # in evaluation, each reads its running statistics: both moved the same way
    assert torch.allclose(net(x), m(x.view(6, 1, 8, 8)), atol=1e-5)
    # the training forward moved the running statistics, the converted network's as torch's own
    theirs = sorted(float(b.sum()) for n, b in m.named_buffers() if "running" in n)
    mine = sorted(float(b.sum()) for b in net.buffers() if b.is_floating_point() and b.numel() > 1)
    assert mine == pytest.approx(theirs, abs=1e-5) and theirs != pytest.approx(sorted([0.0] * 3 + [8.0] * 3))


def test_a_file_for_training_or_at_a_newer_opset_is_told_which_export_loads():
    from tests.scenario.reviewer_net import exported as reviewer

    with pytest.raises(LabError, match=r"model\.eval\(\) before torch\.onnx\.export"):
        om.keep(reviewer(training=True)[1], "for-training.onnx")
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 10], [0.01] * 640)
    newer = graph([helper.make_node("Identity", ["x"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])],
                  [io_("x", ["n", 64])], [io_("y", ["n", 10])], [w], opset=20)
    with pytest.raises(LabError, match=r"Identity \(opset 20\); the converter reads them at opset 18: export "
                                       r"again with torch\.onnx\.export\(\.\.\., opset_version=18\)"):
        om.keep(newer, "opset20.onnx")
    om.keep(graph([helper.make_node("Identity", ["x"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])],
                  [io_("x", ["n", 64])], [io_("y", ["n", 10])], [w], opset=18), "opset18.onnx")  # as it says
