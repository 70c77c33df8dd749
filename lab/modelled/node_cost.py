"""What one node of a traced network costs: its kind (the lab's operator classes), its FLOPs as torch's FLOP
counter counts them (a multiply-add is 2), and the bytes of its tensors, read from the shapes ``ShapeProp``
left on the fx graph (:mod:`lab.modelled.opgraph` builds the operator graph from these)."""

from __future__ import annotations

import math
import operator
from typing import Any, Iterable

import torch
import torch.fx as fx
from torch import nn
from torch.fx.passes.shape_prop import TensorMetadata

from lab.modelled import op_classes as oc


def _numel(shape: Iterable[int]) -> int:
    return int(math.prod(shape))


def _metas(node: fx.Node) -> list[TensorMetadata]:
    meta = node.meta.get("tensor_meta")
    if isinstance(meta, TensorMetadata):
        return [meta]
    if isinstance(meta, (list, tuple)):
        return [m for m in meta if isinstance(m, TensorMetadata)]
    return []


def _nbytes(meta: TensorMetadata) -> int:
    return _numel(meta.shape) * torch.empty((), dtype=meta.dtype).element_size()


def _tensor_inputs(node: fx.Node) -> list[fx.Node]:
    out: list[fx.Node] = []
    for a in node.all_input_nodes:
        if _metas(a) and a not in out:
            out.append(a)
    return out


def _shape(node: fx.Node) -> tuple[int, ...]:
    metas = _metas(node)
    return tuple(metas[0].shape) if metas else ()


def _fn_name(target: Any) -> str:
    return getattr(target, "__name__", str(target))


_ADD_PRODUCT_FUNCTIONS = {torch.addmm, torch.baddbmm, torch.addbmm}


def _product_flops(kind: str, node: fx.Node) -> float:
    """FLOPs of a matrix product with an added term (addmm, baddbmm, addbmm), as torch's counter
    takes them: 2·m·n·k per product; the addition is not counted."""
    args = list(node.args)
    a, b = _shape(args[1]), _shape(args[2])  # (input, mat1, mat2)
    if not a or not b:
        return 0.0
    batch = a[0] if len(a) == 3 else 1
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


def _einsum_cost(node: fx.Node) -> tuple[str, float]:
    """(class, FLOPs) of an einsum. With two or more operands and an index summed over, it is the
    contraction torch runs as a bmm: 2 × the product of every index size, as torch's counter says.
    Without a summed index it is a broadcast product (torch runs a mul): element-wise, one per
    output element. With one operand it is a sum or a view: "other", one per input element."""
    args = list(node.args)
    eq = str(args[0]).replace(" ", "")
    operands = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:]
    lhs, arrow, rhs = eq.partition("->")
    specs = lhs.split(",")
    sizes: dict[str, int] = {}
    ell = 0  # dimensions "..." stands for (broadcast, aligned to the right), named by digits
    for spec, op in zip(specs, operands):
        shape = _shape(op) if isinstance(op, fx.Node) else ()
        if "..." in spec:
            n_ell = max(len(shape) - (len(spec) - 3), 0)
            ell = max(ell, n_ell)
            head, _, tail = spec.partition("...")
            spec = head + "".join(str(k) for k in range(ell - n_ell, ell)) + tail
        for letter, n in zip(spec, shape):
            sizes[letter] = max(sizes.get(letter, 1), int(n))
    dots = "".join(str(k) for k in range(ell))
    if arrow:
        out = rhs.replace("...", dots)
    else:  # implicit output: the broadcast dimensions, then every index seen once, in order
        letters = lhs.replace("...", "").replace(",", "")
        out = dots + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if len(operands) < 2:
        return "other", float(math.prod(sizes.values()) if sizes else 0)
    # Operands are contracted in pairs, left to right, as torch does; each pair costs 2 × the product of its index
    # sizes when it sums over an index (kept: the indices later operands or the output still need).
    names = [_einsum_spec(spec, _shape(op) if isinstance(op, fx.Node) else (), dots)
             for spec, op in zip(specs, operands)]
    # an index only one operand has, and the output lacks, is summed out of it first (no product)
    names = [set(n) & set(out).union(*(m for j, m in enumerate(names) if j != i)) for i, n in enumerate(names)]
    flops, summed, acc = 0.0, False, names[0]
    for i, nxt in enumerate(names[1:], start=1):
        pair = set(acc) | set(nxt)
        keep = set(out).union(*names[i + 1:])
        if pair - keep:
            summed = True
            flops += 2.0 * math.prod(sizes.get(c, 1) for c in pair)
        acc = "".join(sorted(pair & keep))
    if summed:
        return "matmul", flops
    return "elementwise", float(math.prod(sizes[c] for c in out if c in sizes))


def _einsum_spec(spec: str, shape: tuple, dots: str) -> str:
    """An operand's indices with "..." replaced by the names of the broadcast dimensions it has."""
    if "..." not in spec:
        return spec
    n = max(len(shape) - (len(spec) - 3), 0)
    return spec.replace("...", dots[len(dots) - n:] if n else "")


def _classify(node: fx.Node, gm: fx.GraphModule) -> tuple[str, str, float, int, bool]:
    """(kind, class, flops, param_bytes, is_data_op) of one call node."""
    out_shape = _shape(node)
    out_n = _numel(out_shape) if out_shape else sum(_numel(m.shape) for m in _metas(node))
    ins = _tensor_inputs(node)
    in_n = _numel(_shape(ins[0])) if ins else 0

    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        kind = type(mod).__name__
        pbytes = sum(p.numel() * p.element_size() for p in mod.parameters())
        if isinstance(mod, oc.MATMUL_MODULES):
            if isinstance(mod, nn.Linear):
                return kind, "matmul", 2.0 * out_n * mod.in_features, pbytes, False
            return kind, "matmul", 2.0 * out_n * mod.in1_features * mod.in2_features, pbytes, False
        if type(mod).__name__ in oc.CONVERTED_MODULES:  # one operator of an uploaded ONNX file
            cls, per = oc.CONVERTED_MODULES[type(mod).__name__]
            if cls == "data":
                return kind, "other", 0.0, pbytes, True
            if cls == "matmul":
                k = _shape(ins[0])[-1] if ins and _shape(ins[0]) else 1
                return kind, "matmul", 2.0 * out_n * k, pbytes, False
            return kind, cls, float(per * (in_n if cls == "pool" else out_n)), pbytes, False
        if isinstance(mod, nn.MultiheadAttention):
            q = _shape(ins[0])
            return kind, "matmul", oc.attention_flops(mod, q, _shape(ins[1]) if len(ins) > 1 else q), pbytes, False
        if isinstance(mod, oc.CONV_MODULES):
            w = mod.weight.shape
            if isinstance(mod, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
                # torch: input spatial x prod(w) x batch x 2, w = [Cin, Cout/groups, *k]
                x = _shape(ins[0])
                return kind, "conv", 2.0 * x[0] * _numel(x[2:]) * _numel(w), pbytes, False
            return kind, "conv", 2.0 * out_n * _numel(w[1:]), pbytes, False
        if isinstance(mod, oc.NORM_MODULES):
            return kind, "norm", 5.0 * out_n, pbytes, False
        if isinstance(mod, oc.MAXAVG_POOL_MODULES):
            k = mod.kernel_size
            dims = int(kind[-2])  # MaxPool2d -> 2
            window = _numel(k) if isinstance(k, (tuple, list)) else k ** dims
            return kind, "pool", float(out_n * window), pbytes, False
        if isinstance(mod, oc.ADAPTIVE_POOL_MODULES):
            return kind, "pool", float(in_n), pbytes, False
        if type(mod) in oc.ELEMENTWISE_MODULES:
            return kind, "elementwise", float(oc.ELEMENTWISE_MODULES[type(mod)] * out_n), pbytes, False
        if isinstance(mod, oc.SOFTMAX_MODULES):
            return kind, "other", 5.0 * out_n, pbytes, False
        if isinstance(mod, oc.DATA_MODULES):
            return kind, "other", 0.0, pbytes, True
        return kind, "other", float(out_n), pbytes, False

    if node.op == "call_function":
        fn = node.target
        kind = _fn_name(fn)
        if fn is torch.einsum:
            cls, flops = _einsum_cost(node)
            return kind, cls, flops, 0, False
        if fn in _ADD_PRODUCT_FUNCTIONS:
            return kind, "matmul", _product_flops(kind, node), 0, False
        if fn in oc.MATMUL_FUNCTIONS:
            k = _shape(ins[0])[-1] if ins and _shape(ins[0]) else 1
            return kind, "matmul", 2.0 * out_n * k, 0, False
        if fn in oc.CONV_FUNCTIONS:
            w = _shape(ins[1])
            if "transpose" in kind:
                x = _shape(ins[0])
                return kind, "conv", 2.0 * x[0] * _numel(x[2:]) * _numel(w), 0, False
            return kind, "conv", 2.0 * out_n * _numel(w[1:]), 0, False
        if fn in oc.ELEMENTWISE_FUNCTIONS:
            return kind, "elementwise", float(oc.ELEMENTWISE_FUNCTIONS[fn] * out_n), 0, False
        if fn in oc.NORM_FUNCTIONS:
            return kind, "norm", 5.0 * out_n, 0, False
        if fn in oc.POOL_FUNCTIONS:
            ks = node.args[1] if len(node.args) > 1 else node.kwargs.get("kernel_size", 1)
            window = _numel(ks) if isinstance(ks, (tuple, list)) else ks ** max(len(out_shape) - 2, 1)
            return kind, "pool", float(out_n * window), 0, False
        if fn in oc.ADAPTIVE_POOL_FUNCTIONS:
            return kind, "pool", float(in_n), 0, False
        if fn in oc.SOFTMAX_FUNCTIONS:
            return kind, "other", 5.0 * out_n, 0, False
        if fn in oc.REDUCE_FUNCTIONS:
            return kind, "other", float(in_n), 0, False
        if fn in oc.DATA_FUNCTIONS or fn is operator.getitem:
            return kind, "other", 0.0, 0, True
        return kind, "other", float(out_n), 0, False

    # call_method
    name = str(node.target)
    if name in ("addmm", "baddbmm", "addbmm"):
        return name, "matmul", _product_flops(name, node), 0, False
    if name in oc.MATMUL_METHODS:
        k = _shape(ins[0])[-1] if ins and _shape(ins[0]) else 1
        return name, "matmul", 2.0 * out_n * k, 0, False
    if name in oc.ELEMENTWISE_METHODS:
        return name, "elementwise", float(oc.ELEMENTWISE_METHODS[name] * out_n), 0, False
    if name in oc.SOFTMAX_METHODS:
        return name, "other", 5.0 * out_n, 0, False
    if name in oc.REDUCE_METHODS:
        return name, "other", float(in_n), 0, False
    if name in oc.DATA_METHODS:
        return name, "other", 0.0, 0, True
    return name, "other", float(out_n), 0, False
