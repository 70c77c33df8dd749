"""lab.scenario.zoo: torchvision's classic architectures as lab models. Each is torchvision's own class with
torchvision's parameter count, behind an adapter that turns a flat grey image into a 3x32x32 one; every
strategy places it (pins included); its cut pieces copy what they change in place."""

import pytest
import torch

from lab.errors import LabError
from lab.modelled.placement import STRATEGIES
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.scenario.models import build_model, parameter_count
from lab.scenario.zoo import BUILDERS, ImageAdapter, torchvision_models
from lab.train.placement_run import pieces, resolve
from tests.conftest import every_model

ZOO = list(BUILDERS)


def test_the_networks_are_torchvisions_own_classes_with_its_parameter_counts():
    tvm = torchvision_models()
    want = {"resnet18": (tvm.ResNet, 11_181_642), "mobilenet_v3_small": (tvm.MobileNetV3, 1_528_106),
            "vit_small": (tvm.VisionTransformer, 546_186)}
    for name, (cls, n) in want.items():
        m = build_model(name, 64, 10)
        assert isinstance(m.net, cls) and parameter_count(m) == n
        assert parameter_count(m) == sum(p.numel() for p in m.net.parameters())  # the adapter holds nothing
    vgg = build_model("vgg11", 64, 10).net
    assert isinstance(vgg, tvm.VGG)
    # VGG-11's convolutions with batch norm, as torchvision defines them, then the 512 -> 10 head
    convs = [m for m in vgg.features if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [64, 128, 256, 256, 512, 512, 512, 512]
    assert vgg.classifier.in_features == 512 and vgg.classifier.out_features == 10


def test_the_adapter_scales_each_pixel_to_a_block_in_every_channel():
    x = torch.arange(2 * 64, dtype=torch.float32).reshape(2, 64)
    img = ImageAdapter(64)(x)
    assert img.shape == (2, 3, 32, 32)
    for c in range(3):
        for i, j in ((0, 0), (3, 5), (7, 7)):
            block = img[1, c, 4 * i:4 * i + 4, 4 * j:4 * j + 4]
            assert (block == x[1, 8 * i + j]).all()
    with pytest.raises(LabError, match="square"):
        ImageAdapter(63)


@pytest.mark.parametrize("name", every_model(ZOO))
def test_every_strategy_places_every_operator_with_a_pin(name):
    topo = preset("cxl")
    first_conv = "net_conv1" if name == "resnet18" else None
    model = build_model(name, 64, 10)
    for strategy in STRATEGIES:
        pins = {first_conv: "fpga"} if first_conv else {}
        sc = Scenario("zoo", topo, Training(model=name, parallel="placement", batch_size=8, strategy=strategy,
                                            pins=pins))
        plan = resolve(sc, model, 64)
        assert set(plan.assignment) == set(plan.graph.names)
        assert set(plan.assignment.values()) <= {d.name for d in topo.devices}
        if first_conv:
            assert plan.assignment[first_conv] == "fpga", strategy


def test_pieces_that_write_in_place_are_marked():
    # ResNet-18's ReLUs and ``out += identity`` write in place; the Transformer preset writes nothing in place
    model = build_model("resnet18", 64, 10)
    sc = Scenario("zoo", preset("edge"), Training(model="resnet18", parallel="placement", batch_size=8,
                                                  strategy="round_robin"))
    cut, _ = pieces(model, resolve(sc, model, 64))
    assert len(cut) > 1 and any(p.writes_in_place for p in cut)
    model = build_model("transformer", 64, 10)
    sc = sc.replace(training=sc.training.replace(model="transformer"))
    cut, _ = pieces(model, resolve(sc, model, 64))
    assert len(cut) > 1 and not any(p.writes_in_place for p in cut)


def test_width_one_is_torchvisions_own_builder_weight_for_weight():
    tvm = torchvision_models()
    built = {"resnet18": lambda: tvm.resnet18(num_classes=10),
             "mobilenet_v3_small": lambda: tvm.mobilenet_v3_small(num_classes=10, dropout=0.0)}
    for name, make in built.items():
        torch.manual_seed(3)
        want = make().state_dict()
        got = build_model(name, 64, 10, seed=3, width=1.0).net.state_dict()
        assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want), name


def test_a_width_scales_each_architectures_channels_or_hidden_size():
    whole = {n: build_model(n, 64, 10, width=0.5) for n in ZOO}
    half = {n: m.net for n, m in whole.items()}
    r = half["resnet18"]
    assert [getattr(r, f"layer{i}")[0].conv1.out_channels for i in range(1, 5)] == [32, 64, 128, 256]
    assert r.conv1.out_channels == 32 and r.fc.in_features == 256
    convs = [m.out_channels for m in half["vgg11"].features if isinstance(m, torch.nn.Conv2d)]
    assert convs == [32, 64, 128, 128, 256, 256, 256, 256] and half["vgg11"].classifier.in_features == 256
    assert half["mobilenet_v3_small"].classifier[0].out_features == 512  # torchvision's width_mult: 1024 x 0.5
    assert half["vit_small"].hidden_dim == 64 and half["vit_small"].encoder.layers[0].mlp[0].out_features == 128
    for name, net in half.items():  # conv and linear weights shrink with the square of the width
        full = parameter_count(build_model(name, 64, 10))
        assert 0.15 < parameter_count(net) / full < 0.35, name
    for name, net in whole.items():  # every tensor is real (no frame left on the meta device) and computes
        assert {t.device.type for t in [*net.parameters(), *net.buffers()]} == {"cpu"}, name
        assert torch.isfinite(net(torch.randn(2, 64))).all(), name
    mlp = build_model("mlp", 64, 10, width=2.0)
    assert [m.out_features for m in mlp.net if isinstance(m, torch.nn.Linear)] == [256, 128, 10]
    assert build_model("cnn", 64, 10, width=0.25).conv1.out_channels == 2


@pytest.mark.parametrize("bad", [0.1, 2.5, float("inf"), float("nan"), "1", True, None])
def test_a_width_out_of_range_or_not_a_number_is_refused_by_name(bad):
    with pytest.raises(LabError, match="model width"):
        build_model("vit_small", 64, 10, width=bad)


@pytest.mark.parametrize("name", every_model())
def test_a_scaled_networks_operator_graph_counts_torchs_flops(name):
    from lab.modelled.opgraph import reference_flops, trace

    og = trace(name, 4, 64, width=0.5)
    ref = reference_flops(build_model(name, 64, 10, width=0.5), 4, 64)
    mine = og.flops_by_class()
    assert mine["matmul"] == ref["matmul"] and mine["conv"] == ref["conv"] and og.total_flops > 0
    assert og.total_flops < trace(name, 4, 64).total_flops
