"""ONNX files a hostile student could upload, built with ``onnx.helper`` (small files, nothing executed): the
tests and the hostile bench hand them to :func:`lab.scenario.onnx_models.keep`, which must refuse each in about a
second without running any of its arithmetic.

* :func:`conv_bomb`: ``convs`` 3x3 convolutions over a 3x224x224 image that all share one 64x64x3x3 weight, so
  the file stays small (157 kB at 2 convolutions, 243 kB at 1,996) while each convolution costs 3.7 GFLOPs a
  sample.
* :func:`constant_bomb`: a ``ConstantOfShape`` of ``side`` x ``side`` floats (1 GiB at 16,384) in a file of a
  few hundred bytes.
* :func:`batch_bomb`: a ``ConstantOfShape`` of (batch, ``per_sample``) floats: small a sample, 16 GiB at a batch
  of 65,536 if anything ran it at the page's batch.
* :func:`shape_bomb`: a shape vector concatenated with itself ``doublings`` times (2^40 numbers at 40), which
  ONNX's shape inference works out in full: a file of a few kB that takes its memory.
* :func:`external_data`: a tensor that names a file on the server as its external data, in any of the places a
  tensor can sit (``where``: one of :data:`EXTERNAL_PLACES`).
* :func:`classes`: a linear network whose output declares ``n`` classes (0, negative, or a name).
* :func:`linear`: the harmless 64 -> 10 linear network the others are variations of.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
EXTERNAL_PLACES = ("initializer", "sparse values", "sparse indices", "tensor attribute", "tensors attribute",
                   "sparse tensor attribute", "subgraph initializer")


def _model(nodes, inputs, outputs, inits=(), sparse=()) -> bytes:
    g = helper.make_graph(nodes, "hostile", inputs, outputs, initializer=list(inits), sparse_initializer=list(sparse))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]).SerializeToString()


def _io(name: str, dims, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, dims)


def _weight(name: str, shape, seed: int = 0) -> TensorProto:
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.01
    return numpy_helper.from_array(values, name)


def linear(classes: int = 10, features: int = 64) -> bytes:
    """``y = x @ w``: samples of ``features`` values, ``classes`` scores each."""
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_io("x", ["n", features])],
                  [_io("y", ["n", classes])], [_weight("w", (features, classes))])


def conv_bomb(convs: int = 1996, channels: int = 64, side: int = 224, classes: int = 10) -> bytes:
    """A 3-channel ``side`` x ``side`` image lifted to ``channels`` by one convolution, then ``convs`` padded 3x3
    convolutions that share one weight, pooled to ``classes`` scores: 2 x 9 x channels² x side² FLOPs a sample
    for each shared convolution."""
    nodes = [helper.make_node("Conv", ["x", "w0"], ["h0"], pads=[1, 1, 1, 1])]
    for i in range(convs):
        nodes.append(helper.make_node("Conv", [f"h{i}", "w"], [f"h{i + 1}"], pads=[1, 1, 1, 1]))
    nodes += [helper.make_node("GlobalAveragePool", [f"h{convs}"], ["p"]),
              helper.make_node("Flatten", ["p"], ["f"]),
              helper.make_node("Gemm", ["f", "fc"], ["y"])]
    inits = [_weight("w0", (channels, 3, 3, 3)), _weight("w", (channels, channels, 3, 3), 1),
             _weight("fc", (channels, classes), 2)]
    return _model(nodes, [_io("x", ["n", 3, side, side])], [_io("y", ["n", classes])], inits)


def constant_bomb(side: int = 16384, classes: int = 10) -> bytes:
    """A linear network plus the sum of a ``side`` x ``side`` block of ones made at run time (``ConstantOfShape``):
    ``side``² x 4 bytes created from a shape of two numbers."""
    shape = numpy_helper.from_array(np.array([side, side], dtype=np.int64), "shape")
    one = numpy_helper.from_array(np.array([1.0], dtype=np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["block"], value=one),
             helper.make_node("ReduceSum", ["block"], ["total"], keepdims=0),
             helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "total"], ["y"])]
    return _model(nodes, [_io("x", ["n", 64])], [_io("y", ["n", classes])],
                  [shape, _weight("w", (64, classes))])


def batch_bomb(per_sample: int = 65536, classes: int = 10) -> bytes:
    """A linear network plus the sum of a (batch, ``per_sample``) block of ones whose shape follows the batch
    (``Shape`` of the input): 256 kB a sample at 65,536, 16 GiB at a batch of 65,536."""
    width = numpy_helper.from_array(np.array([per_sample], dtype=np.int64), "width")
    start = numpy_helper.from_array(np.array([0], dtype=np.int64), "start")
    stop = numpy_helper.from_array(np.array([1], dtype=np.int64), "stop")
    one = numpy_helper.from_array(np.array([1.0], dtype=np.float32))
    nodes = [helper.make_node("Shape", ["x"], ["xs"]),
             helper.make_node("Slice", ["xs", "start", "stop"], ["batch"]),
             helper.make_node("Concat", ["batch", "width"], ["shape"], axis=0),
             helper.make_node("ConstantOfShape", ["shape"], ["block"], value=one),
             helper.make_node("ReduceSum", ["block"], ["total"], keepdims=0),
             helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("Add", ["xw", "total"], ["y"])]
    return _model(nodes, [_io("x", ["n", 64])], [_io("y", ["n", classes])],
                  [width, start, stop, _weight("w", (64, classes))])


def shape_bomb(doublings: int = 40, classes: int = 10) -> bytes:
    """The linear network beside a chain of ``Concat`` operators, each of the one before with itself, starting
    from the input's shape: ``2 ** (doublings + 1)`` numbers that shape inference's data propagation holds at once."""
    nodes = [helper.make_node("Shape", ["x"], ["c0"])]
    for i in range(doublings):
        nodes.append(helper.make_node("Concat", [f"c{i}", f"c{i}"], [f"c{i + 1}"], axis=0))
    nodes += [helper.make_node("ReduceSum", [f"c{doublings}"], ["s"], keepdims=0),
              helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
              helper.make_node("MatMul", ["x", "w"], ["xw"]),
              helper.make_node("Add", ["xw", "f"], ["y"])]
    return _model(nodes, [_io("x", ["n", 64])], [_io("y", ["n", classes])], [_weight("w", (64, classes))])


def _pointing(name: str, path: str, dims=(64, 10), dtype=TensorProto.FLOAT) -> TensorProto:
    t = TensorProto(name=name, data_type=dtype, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=path)
    t.external_data.add(key="offset", value="0")
    return t


def external_data(path: str, where: str = "initializer") -> bytes:
    """The linear network with one tensor whose data is said to be in the file at ``path`` on the server,
    placed as ``where`` names (one of :data:`EXTERNAL_PLACES`)."""
    if where not in EXTERNAL_PLACES:
        raise ValueError(f"where must be one of {EXTERNAL_PLACES}")
    x, y = _io("x", ["n", 64]), _io("y", ["n", 10])
    matmul = helper.make_node("MatMul", ["x", "w"], ["y"])
    w = _weight("w", (64, 10))
    if where == "initializer":
        return _model([matmul], [x], [y], [_pointing("w", path)])
    if where in ("sparse values", "sparse indices"):
        values = numpy_helper.from_array(np.ones(4, dtype=np.float32), "w")
        indices = numpy_helper.from_array(np.arange(4, dtype=np.int64), "")
        if where == "sparse values":
            values = _pointing("w", path, (4,))
        else:
            indices = _pointing("", path, (4,), TensorProto.INT64)
        sparse = helper.make_sparse_tensor(values, indices, [64, 10])
        return _model([matmul], [x], [y], [], [sparse])
    if where == "tensor attribute":
        node = helper.make_node("Constant", [], ["w"], value=_pointing("c", path))
        return _model([node, matmul], [x], [y])
    if where == "tensors attribute":
        node = helper.make_node("Identity", ["x"], ["x1"])
        node.attribute.append(helper.make_attribute("payload", [_pointing("c", path)]))
        return _model([node, helper.make_node("MatMul", ["x1", "w"], ["y"])], [x], [y], [w])
    if where == "sparse tensor attribute":
        values = _pointing("s", path, (4,))
        indices = numpy_helper.from_array(np.arange(4, dtype=np.int64), "")
        node = helper.make_node("Constant", [], ["w"], sparse_value=helper.make_sparse_tensor(values, indices,
                                                                                              [64, 10]))
        return _model([node, matmul], [x], [y])
    # a subgraph (refused later as control flow) whose own initializer points at the file
    inner = helper.make_graph([helper.make_node("Identity", ["k"], ["z"])], "inner", [], [_io("z", [64, 10])],
                              initializer=[_pointing("k", path)])
    cond = numpy_helper.from_array(np.array(True), "c")
    node = helper.make_node("If", ["c"], ["w"], then_branch=inner, else_branch=inner)
    return _model([node, matmul], [x], [y], [cond])


def classes(n: int | str) -> bytes:
    """The linear network with its output declared as (batch, ``n``): a number of classes, or a name."""
    got = linear()
    model = onnx.ModelProto.FromString(got)
    dim = model.graph.output[0].type.tensor_type.shape.dim[1]
    if isinstance(n, str):
        dim.dim_param = n
    else:
        dim.dim_value = n
    return model.SerializeToString()


__all__ = ["EXTERNAL_PLACES", "batch_bomb", "classes", "constant_bomb", "conv_bomb", "external_data", "linear",
           "shape_bomb"]
