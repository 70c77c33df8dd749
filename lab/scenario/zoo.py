"""Classic architectures of torchvision's model zoo, at sizes this machine trains in seconds: ResNet-18,
MobileNetV3-Small, VGG-11 (with the 512 -> classes head CIFAR-size inputs use) and a small Vision Transformer.

Each is torchvision's own definition on 3x32x32 images. The lab's data sets are flat vectors (digits: 8x8 grey
pixels), so an input adapter in front reshapes a sample to its square image, scales it to 32x32 (nearest
pixel) and repeats it over three colour channels: the adapter is part of the traced graph, costs no FLOPs and
holds no parameters, and the network behind it is the zoo's.

torchvision is imported through :func:`torchvision_models`: the wheel this machine's package index holds is
linked against torch's CUDA libraries, so its compiled operators (non-maximum suppression, RoI pooling) do not
load beside the CPU torch. No zoo classifier uses them; the model definitions are plain Python.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
import types

import torch
from torch import nn

from lab.errors import LabError
from lab.scenario.names import MODEL_WIDTH_MAX, MODEL_WIDTH_MIN

IMAGE = 32  # the side of the zoo networks' input images
CHANNELS = 3


def torchvision_models() -> types.ModuleType:
    """``torchvision.models``, with or without torchvision's compiled operators (see the module's note)."""
    try:
        import torchvision.models as tvm  # noqa: PLC0415 - slow to import: only when a zoo model is built

        return tvm
    except (ImportError, RuntimeError, OSError):
        pass
    for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
        del sys.modules[k]  # what the failed import left half made
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        raise LabError("the zoo models need torchvision (pip install -r requirements.txt)", where="model")
    # The package without its __init__, which loads the compiled operators: its model modules import as usual.
    pkg = types.ModuleType("torchvision")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec
    pkg.__file__ = spec.origin
    sys.modules["torchvision"] = pkg
    return importlib.import_module("torchvision.models")


class ImageAdapter(nn.Module):
    """A flat sample of a square grey image -> a 3 x 32 x 32 image (nearest-pixel scaling, grey in every
    channel)."""

    def __init__(self, in_features: int):
        super().__init__()
        side = int(round(math.sqrt(in_features)))
        if side * side != in_features:
            raise LabError(f"a zoo model needs a square image: in_features={in_features} is not a square number")
        self.side = side

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(x.shape[0], 1, self.side, self.side)
        x = nn.functional.interpolate(x, size=(IMAGE, IMAGE), mode="nearest")
        return x.expand(-1, CHANNELS, -1, -1)


class ZooNet(nn.Module):
    """The input adapter, then a zoo network."""

    def __init__(self, in_features: int, net: nn.Module):
        super().__init__()
        self.adapt = ImageAdapter(in_features)
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.adapt(x))


def widen(n: int, width: float, multiple: int = 1) -> int:
    """``n`` channels (or hidden units) scaled by ``width``, a whole multiple of ``multiple``, at least one."""
    return max(multiple, multiple * int(round(n * width / multiple)))


def check_width(width) -> float:
    """``width`` when it is a model width the lab builds, else a LabError saying the range."""
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not math.isfinite(width) \
            or not MODEL_WIDTH_MIN <= width <= MODEL_WIDTH_MAX:
        raise LabError(f"a model width is a number from {MODEL_WIDTH_MIN:g} to {MODEL_WIDTH_MAX:g} (got {width!r})",
                       where="training.model_width")
    return float(width)


def _resnet18(tvm, classes: int, width: float) -> nn.Module:
    if width == 1:
        return tvm.resnet18(num_classes=classes)
    # torchvision's ResNet fixes its stages at 64, 128, 256 and 512 channels: its frame is made without storage
    # (on the meta device) and every part with weights is built again at the scaled widths, with its own block,
    # stage builder and initialisation.
    with torch.device("meta"):
        net = tvm.resnet18(num_classes=classes)
    c = [widen(64 << i, width) for i in range(4)]
    net.inplanes = c[0]
    net.conv1 = nn.Conv2d(CHANNELS, c[0], kernel_size=7, stride=2, padding=3, bias=False)
    net.bn1 = nn.BatchNorm2d(c[0])
    for i, ch in enumerate(c):
        setattr(net, f"layer{i + 1}", net._make_layer(tvm.resnet.BasicBlock, ch, 2, stride=1 if i == 0 else 2))
    net.fc = nn.Linear(c[3], classes)
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)
    return net


def _mobilenet_v3_small(tvm, classes: int, width: float) -> nn.Module:
    # Without dropout, like every lab model: a run cut over processes is checked against one process, and
    # the pieces would draw dropout's random numbers in another order. The width is torchvision's width_mult.
    setting, last = tvm.mobilenetv3._mobilenet_v3_conf("mobilenet_v3_small", width_mult=width)
    return tvm.mobilenetv3.MobileNetV3(setting, last, num_classes=classes, dropout=0.0)


def _vgg11(tvm, classes: int, width: float) -> nn.Module:
    # torchvision's VGG pools to 7x7 for 224-pixel images and then holds 120 M parameters in its classifier;
    # on 32x32 images the features end at 1x1 with 512 channels, and VGG's CIFAR form classifies those directly.
    cfg = [v if v == "M" else widen(v, width) for v in tvm.vgg.cfgs["A"]]
    net = tvm.vgg.VGG(tvm.vgg.make_layers(cfg, batch_norm=True), num_classes=classes)
    net.avgpool = nn.Identity()
    net.classifier = nn.Linear(cfg[-2], classes)
    return net


def _vit_small(tvm, classes: int, width: float) -> nn.Module:
    # 4x4 patches of a 32x32 image: 64 tokens and a class token, 4 encoder layers of 4 heads
    hidden = widen(128, width, multiple=4)
    return tvm.VisionTransformer(image_size=IMAGE, patch_size=4, num_layers=4, num_heads=4, hidden_dim=hidden,
                                 mlp_dim=2 * hidden, num_classes=classes)


BUILDERS = {"resnet18": _resnet18, "mobilenet_v3_small": _mobilenet_v3_small, "vgg11": _vgg11,
            "vit_small": _vit_small}


def build_zoo(name: str, in_features: int, classes: int, width: float = 1.0) -> nn.Module:
    """The zoo network ``name`` at ``width`` behind the input adapter (weights drawn from torch's current
    generator)."""
    return ZooNet(in_features, BUILDERS[name](torchvision_models(), classes, check_width(width)))
