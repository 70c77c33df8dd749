"""Which operator class a traced torch module, function or method belongs to (matmul, conv, norm, pooling,
softmax, reduction, data movement): the tables the operator graph classifies an fx node by."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

MATMUL_MODULES = (nn.Linear, nn.Bilinear)
CONV_MODULES = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
NORM_MODULES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm,
                 nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d, nn.LocalResponseNorm)
MAXAVG_POOL_MODULES = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)
ADAPTIVE_POOL_MODULES = (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d,
                          nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)
#: FLOPs per output element of element-wise modules (1 unless listed here).
ELEMENTWISE_MODULES: dict[type, int] = {
    nn.ReLU: 1, nn.ReLU6: 1, nn.LeakyReLU: 1, nn.PReLU: 1, nn.Hardtanh: 1, nn.Dropout: 1,
    nn.Dropout1d: 1, nn.Dropout2d: 1, nn.Hardswish: 1, nn.Hardsigmoid: 1,
    nn.GELU: 4, nn.SiLU: 4, nn.Sigmoid: 4, nn.Tanh: 4, nn.Softplus: 4, nn.ELU: 4, nn.SELU: 4,
    nn.Mish: 4, nn.Softsign: 4,
}
SOFTMAX_MODULES = (nn.Softmax, nn.LogSoftmax, nn.Softmin)
DATA_MODULES = (nn.Flatten, nn.Identity, nn.Unflatten)
#: The operator modules onnx2torch converts an ONNX file's operators into where torch has none of its own, by
#: class name: (class, FLOPs per output element; per input element for a pooling). "data" moves or describes
#: values and computes nothing (it merges into its neighbours as reshapes do).
CONVERTED_MODULES: dict[str, tuple[str, int]] = {
    "OnnxMatMul": ("matmul", 0), "OnnxGemm": ("matmul", 0),
    "OnnxBinaryMathOperation": ("elementwise", 1), "OnnxErf": ("elementwise", 4), "OnnxSqrt": ("elementwise", 4),
    "OnnxPow": ("elementwise", 4), "OnnxHardSigmoid": ("elementwise", 1), "OnnxHardSwish": ("elementwise", 1),
    "OnnxClip": ("elementwise", 1), "OnnxBatchNorm": ("norm", 5), "OnnxLayerNorm": ("norm", 5),
    "OnnxGlobalAveragePool": ("pool", 1), "OnnxGlobalAveragePoolWithKnownInputShape": ("pool", 1),
    "OnnxReduceStaticAxes": ("other", 1), "OnnxReduceSumStaticAxes": ("other", 1),
    "OnnxShape": ("data", 0), "OnnxConstant": ("data", 0), "OnnxGather": ("data", 0), "OnnxConcat": ("data", 0),
    "OnnxReshape": ("data", 0), "OnnxUnsqueezeStaticAxes": ("data", 0), "OnnxUnsqueezeDynamicAxes": ("data", 0),
    "OnnxSqueezeStaticAxes": ("data", 0), "OnnxSqueezeDynamicAxes": ("data", 0), "OnnxTranspose": ("data", 0),
    "OnnxCopyIdentity": ("data", 0), "OnnxFlatten": ("data", 0), "OnnxExpand": ("data", 0), "OnnxSlice": ("data", 0),
    "OnnxCast": ("data", 0), "OnnxRange": ("data", 0), "OnnxConstantOfShape": ("data", 0),
}

MATMUL_FUNCTIONS = {torch.matmul, operator.matmul, torch.mm, torch.bmm, F.linear, torch.Tensor.matmul}
CONV_FUNCTIONS = {F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d}
ELEMENTWISE_FUNCTIONS: dict[Any, int] = {
    operator.add: 1, operator.sub: 1, operator.mul: 1, operator.truediv: 1, operator.neg: 1,
    operator.iadd: 1, operator.imul: 1, torch.add: 1, torch.sub: 1, torch.mul: 1, torch.div: 1,
    torch.relu: 1, F.relu: 1, F.leaky_relu: 1, F.dropout: 1, F.hardtanh: 1, torch.neg: 1,
    F.gelu: 4, F.silu: 4, torch.sigmoid: 4, F.sigmoid: 4, torch.tanh: 4, F.tanh: 4, F.softplus: 4,
    F.elu: 4, torch.exp: 4, torch.sqrt: 4, torch.rsqrt: 4,
}
NORM_FUNCTIONS = {F.layer_norm, F.batch_norm, F.group_norm, F.instance_norm}
POOL_FUNCTIONS = {F.max_pool1d, F.max_pool2d, F.max_pool3d, F.avg_pool1d, F.avg_pool2d, F.avg_pool3d}
ADAPTIVE_POOL_FUNCTIONS = {F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d,
                            F.adaptive_max_pool1d, F.adaptive_max_pool2d}
SOFTMAX_FUNCTIONS = {F.softmax, torch.softmax, F.log_softmax}
REDUCE_FUNCTIONS = {torch.mean, torch.sum}
DATA_FUNCTIONS = {torch.flatten, torch.reshape, torch.transpose, torch.permute, torch.squeeze,
                   torch.unsqueeze, torch.t}
DATA_METHODS = {"view", "reshape", "flatten", "transpose", "permute", "contiguous", "squeeze",
                 "unsqueeze", "t", "view_as", "reshape_as"}
ELEMENTWISE_METHODS: dict[str, int] = {"add": 1, "sub": 1, "mul": 1, "div": 1, "relu": 1, "neg": 1,
                                        "sigmoid": 4, "tanh": 4, "exp": 4, "sqrt": 4}
REDUCE_METHODS = {"mean", "sum"}
SOFTMAX_METHODS = {"softmax", "log_softmax"}
MATMUL_METHODS = {"matmul", "mm", "bmm"}


def attention_flops(mod: nn.MultiheadAttention, q: tuple[int, ...], k: tuple[int, ...]) -> float:
    """Forward FLOPs of multi-head attention on a query of shape ``q`` and keys of shape ``k``: the query, key and
    value projections, the scores, their weighted sum of the values and the output projection (what torch counts
    when attention runs as matrix products; see :func:`lab.modelled.opgraph.reference_flops`)."""
    e = mod.embed_dim
    batch = q[0] if mod.batch_first or len(q) == 2 else q[1]
    rows_q, rows_k = math.prod(q) // e, math.prod(k) // mod.kdim
    source = rows_k // batch if len(q) == 3 else rows_k
    return 2.0 * (rows_q * e * e + rows_k * mod.kdim * e + rows_k * mod.vdim * e  # projections
                  + 2 * rows_q * source * e  # scores and the weighted values
                  + rows_q * e * e)  # output projection
