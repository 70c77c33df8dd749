"""A network of the kind a reviewer brings, made outside the lab: depthwise-separable convolutions with batch
norm, a residual addition, layer norm and GELU on 8x8 grey images, exported by torch.onnx.export at opset 17."""
from __future__ import annotations

import io

import torch
from torch import nn


class ReviewerNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.GELU())
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8), nn.GELU(),
                                nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8))
        self.norm = nn.LayerNorm(8 * 64)
        self.head = nn.Linear(8 * 64, 10)

    def forward(self, x):
        y = self.stem(x)
        y = y + self.dw(y)
        return self.head(self.norm(y.flatten(1)))


def exported(*, fold: bool = False, training: bool = False, opset: int = 17) -> tuple[ReviewerNet, bytes]:
    """The network (seeded) and its ONNX file. Without constant folding the exporter keeps batch norm and reads
    its statistics through Identity nodes; with it (in evaluation mode) batch norm is folded into the
    convolutions; exported for training, batch norm also writes its statistics as outputs."""
    torch.manual_seed(0)
    m = ReviewerNet()
    m.train(training)
    buf = io.BytesIO()
    torch.onnx.export(m, (torch.zeros(2, 1, 8, 8),), buf, input_names=["x"], output_names=["y"], dynamo=False,
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=opset, do_constant_folding=fold,
                      training=torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL)
    return m, buf.getvalue()
