"""Preset torch models (and, through :mod:`lab.scenario.zoo`, torchvision's classic architectures). Every one takes flat inputs of ``in_features`` (digits: 64 = 8x8 pixels)
and returns class logits, so the training job can use any of them on any data set.

All are small, deterministic given ``seed``, and traceable with torch.fx (no data-dependent control
flow; attention is written out so each matmul is an operator of its own).
"""

from __future__ import annotations

import math

import torch
import torch.fx as fx
from torch import nn

from lab.errors import LabError
from lab.scenario import onnx_models, zoo
from lab.scenario.names import MODELS, is_uploaded_model
from lab.scenario.zoo import check_width, widen


def _side(in_features: int) -> int:
    side = int(round(math.sqrt(in_features)))
    if side * side != in_features:
        raise LabError(f"this model needs a square image: in_features={in_features} is not a square number")
    return side


class MLP(nn.Module):
    def __init__(self, in_features: int = 64, hidden: tuple[int, ...] = (128, 64), classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CNN(nn.Module):
    """LeNet-style: two conv+ReLU+max-pool stages, then two linear layers."""

    def __init__(self, in_features: int = 64, classes: int = 10, channels: tuple[int, int] = (8, 16)):
        super().__init__()
        self.side = _side(in_features)
        c1, c2 = channels
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1)
        self.act1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.act2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        flat = c2 * (self.side // 4) ** 2
        self.fc1 = nn.Linear(flat, 32)
        self.act3 = nn.ReLU()
        self.fc2 = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(x.shape[0], 1, self.side, self.side)
        x = self.pool1(self.act1(self.conv1(x)))
        x = self.pool2(self.act2(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.fc2(self.act3(self.fc1(x)))


class ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu2(y + x)


class SmallResNet(nn.Module):
    def __init__(self, in_features: int = 64, classes: int = 10, channels: int = 16, blocks: int = 3):
        super().__init__()
        self.side = _side(in_features)
        self.stem = nn.Conv2d(1, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.blocks = nn.Sequential(*[ResidualBlock(channels) for _ in range(blocks)])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(x.shape[0], 1, self.side, self.side)
        x = self.relu(self.bn(self.stem(x)))
        x = self.blocks(x)
        return self.fc(torch.flatten(self.pool(x), 1))


class EncoderBlock(nn.Module):
    """One pre-norm Transformer encoder block over the image rows as tokens (single head)."""

    def __init__(self, in_features: int = 64, classes: int = 10, d_model: int = 32, d_ff: int = 64):
        super().__init__()
        self.side = _side(in_features)
        self.embed = nn.Linear(self.side, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.softmax = nn.Softmax(dim=-1)
        self.out = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.ff2 = nn.Linear(d_ff, d_model)
        self.head = nn.Linear(d_model, classes)
        self.scale = 1.0 / math.sqrt(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x.view(x.shape[0], self.side, self.side))
        h = self.norm1(x)
        att = self.softmax(torch.matmul(self.q(h), self.k(h).transpose(1, 2)) * self.scale)
        x = x + self.out(torch.matmul(att, self.v(h)))
        x = x + self.ff2(self.act(self.ff1(self.norm2(x))))
        return self.head(x.mean(dim=1))


# Each preset's widths (hidden sizes, channels) at width 1, scaled by the Scenario's model width.
_BUILDERS = {
    "mlp": lambda f, c, w: MLP(f, (widen(128, w), widen(64, w)), c),
    "cnn": lambda f, c, w: CNN(f, c, (widen(8, w), widen(16, w))),
    "resnet": lambda f, c, w: SmallResNet(f, c, widen(16, w)),
    "transformer": lambda f, c, w: EncoderBlock(f, c, widen(32, w), widen(64, w)),
}


def build_model(name: str, in_features: int = 64, classes: int = 10, seed: int = 0, width: float = 1.0) -> nn.Module:
    """A fresh model with deterministic initial weights for ``seed``, its channels or hidden sizes scaled by
    ``width`` (1: the size the lab ships; an uploaded network keeps the file's)."""
    if name not in _BUILDERS and name not in zoo.BUILDERS and not is_uploaded_model(name):
        raise LabError(f"unknown model {name!r}; choose one of {list(MODELS)}")
    if in_features < 1 or classes < 2:
        raise LabError(f"a model needs at least 1 input feature and 2 classes (got {in_features}, {classes})")
    check_width(width)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    if is_uploaded_model(name):  # the file's own weights: the seed draws none
        return onnx_models.build(name, in_features, classes)
    try:
        if name in zoo.BUILDERS:
            return zoo.build_zoo(name, in_features, classes, width)
        return _BUILDERS[name](in_features, classes, float(width))
    finally:
        torch.random.set_rng_state(gen_state)


def model_of(training, in_features: int = 64, classes: int = 10) -> nn.Module:
    """The model a Scenario's ``training`` settings name, at their seed and model width."""
    return build_model(training.model, in_features, classes, seed=training.seed, width=training.model_width)


class _Tracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return onnx_models.is_leaf(m) or super().is_leaf_module(m, qualname)


def graph_of(model: nn.Module) -> fx.GraphModule:
    """``model`` traced by torch.fx, as the operator graph and the placement executor both cut it: an uploaded
    network's converted operators stay whole."""
    tracer = _Tracer()
    graph = tracer.trace(model)
    return fx.GraphModule(tracer.root, graph, type(model).__name__)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
