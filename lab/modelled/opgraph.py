"""A torch model as an operator graph: what each operator is, how much work it does, what it sends.

:func:`trace` runs ``torch.fx.symbolic_trace`` and ``ShapeProp`` on a batch of zeros and returns an
:class:`OpGraph`: operators in topological order (the order fx records them), each with

* its class, one of :data:`lab.scenario.topology.OP_CLASSES`:

  ==============  ==========================================================================
  ``matmul``      ``nn.Linear``, ``torch.matmul`` / ``@``, ``mm``, ``bmm``, ``F.linear``, ``addmm``, ``baddbmm``,
                  ``addbmm`` (the product; the added term is not counted, as in torch) and ``einsum`` of two or
                  more operands that sums over an index (an einsum without one is element-wise,
                  one of a single operand is "other")
  ``conv``        ``nn.Conv1d/2d/3d``, ``nn.ConvTranspose*``, ``F.conv*``
  ``elementwise`` activations (ReLU, GELU, SiLU, sigmoid, tanh, dropout...) and arithmetic
                  between tensors or with scalars (add, sub, mul, div)
  ``norm``        BatchNorm, LayerNorm, GroupNorm, InstanceNorm
  ``pool``        max / average / adaptive pooling
  ``other``       everything else: softmax, mean / sum reductions, and the pure data-layout
                  ops (view, reshape, flatten, transpose, permute...) when they are kept
  ==============  ==========================================================================

* forward FLOPs, counted as torch's own ``FlopCounterMode`` counts them where it counts at all
  (a multiply-add is 2 FLOPs; the bias add of a linear or convolution is not counted), so the
  ``matmul`` and ``conv`` totals agree exactly with torch (see :func:`reference_flops`). The
  classes torch does not count use the lab's convention, per output element unless said:
  add / sub / mul / div / ReLU / dropout 1; GELU, SiLU, sigmoid, tanh, softplus, ELU 4 (a
  transcendental); normalisation 5 (mean, variance, normalise, scale, shift); softmax 5 (max,
  subtract, exp, sum, divide); max/avg pooling one per window element; adaptive pooling and
  mean/sum one per *input* element; any operator the lab does not know 1 per output element;
  data-layout ops 0.
* parameter bytes (the parameters of the module it calls, plus any ``get_attr`` tensors it reads),
* output activation bytes (the output tensor at the traced batch size, its own dtype: float32).

Shapes are propagated with fake tensors (no arithmetic, no memory), so large batches are cheap.
An uploaded network's converted operators read shapes as values, which fake tensors lack: it runs for real,
but only on one sample and on two, and its counts are drawn from those to the batch asked (``_uploaded_ops``).

**Data-layout ops.** ``view``, ``reshape``, ``flatten``, ``transpose``, ``permute``, ``contiguous``,
``squeeze``/``unsqueeze``, ``nn.Flatten`` and ``nn.Identity`` do no arithmetic. By default
(``merge_data_ops=True``) each one is *merged into the operator that produced its input*: it
disappears from the graph, its consumers read the producer directly (the bytes are the same, a
view keeps the element count) and its name is listed in the producer's ``absorbed``. One that
reads the model input directly simply disappears. With ``merge_data_ops=False`` they are kept as
``other`` operators with 0 FLOPs (and then need a device with an ``other`` kernel).

Shape arithmetic (``x.shape[0]``, ``size()``) is not an operator: those fx nodes carry no tensor
and are dropped. The model input is not an operator either; the lab assumes the data loader has
put each batch wherever the first operators run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch
import torch.fx as fx
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from lab.errors import LabError
from lab.modelled.node_cost import _classify, _fn_name, _metas, _nbytes, _tensor_inputs
from lab.scenario import onnx_models
from lab.scenario.models import build_model, graph_of
from lab.scenario.topology import OP_CLASSES

MAX_BATCH = 65536

@dataclass(frozen=True)
class Op:
    """One operator of a traced model. Bytes and FLOPs at the graph's batch size."""

    name: str  # fx node name, unique in the graph
    kind: str  # what it is: "Linear", "Conv2d", "ReLU", "add", "matmul", ...
    op_class: str  # one of OP_CLASSES
    flops: float  # forward FLOPs (multiply-add = 2)
    param_bytes: int
    out_bytes: int  # output activation bytes
    out_shape: tuple[int, ...]
    inputs: tuple[str, ...]  # operators whose output this one reads (the model input excluded)
    target: str = ""  # module path or function name
    absorbed: tuple[str, ...] = ()  # data-layout ops merged into this one


@dataclass(frozen=True)
class OpGraph:
    """A model's operators in topological order, at one batch size."""

    model: str
    batch_size: int
    ops: tuple[Op, ...]
    input_bytes: int
    merged_data_ops: bool = True
    _index: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index.update({op.name: op for op in self.ops})

    def __len__(self) -> int:
        return len(self.ops)

    def op(self, name: str) -> Op:
        try:
            return self._index[name]
        except KeyError:
            raise LabError(f"no operator named {name!r} in the graph of {self.model!r}") from None

    @property
    def names(self) -> list[str]:
        return [op.name for op in self.ops]

    @property
    def edges(self) -> list[tuple[str, str, int]]:
        """(producer, consumer, bytes sent) for every data dependency."""
        return [(u, op.name, self._index[u].out_bytes) for op in self.ops for u in op.inputs]

    @property
    def total_flops(self) -> float:
        return float(sum(op.flops for op in self.ops))

    @property
    def param_bytes(self) -> int:
        return sum(op.param_bytes for op in self.ops)

    def flops_by_class(self) -> dict[str, float]:
        out = {c: 0.0 for c in OP_CLASSES}
        for op in self.ops:
            out[op.op_class] += op.flops
        return out

    @property
    def classes(self) -> frozenset[str]:
        return frozenset(op.op_class for op in self.ops)

    def to_networkx(self) -> nx.DiGraph:
        g = nx.DiGraph()
        for op in self.ops:
            g.add_node(op.name, op=op)
        for u, v, nbytes in self.edges:
            g.add_edge(u, v, bytes=nbytes)
        return g


# ----- tracing ------------------------------------------------------------------------------------

def _fake_mode():
    """Shapes without arithmetic (FakeTensor), so a batch of 65,536 costs no compute or memory."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        return FakeTensorMode(allow_non_fake_inputs=True)
    except ImportError:  # pragma: no cover - older torch: propagate real zeros
        return None


def _check_batch(batch_size: Any) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH:
        raise LabError(f"batch size must be a whole number from 1 to {MAX_BATCH} (got {batch_size!r})",
                       where="operator graph")
    return batch_size


def trace(model: nn.Module | str, batch_size: int = 32, in_features: int = 64, *,
          merge_data_ops: bool = True, name: str | None = None, seed: int = 0, width: float = 1.0) -> OpGraph:
    """Trace ``model`` (a module, or a model name for :func:`lab.scenario.models.build_model`, at ``width``) at
    ``batch_size``.

    Raises :class:`LabError` if the model cannot be traced by torch.fx, fails on an input of shape
    ``(batch_size, in_features)``, or has no operators.
    """
    batch_size = _check_batch(batch_size)
    if isinstance(model, str):
        name = name or model
        model = build_model(model, in_features=in_features, seed=seed, width=width)
    if not isinstance(model, nn.Module):
        raise LabError(f"expected a torch module or a preset model name, got {type(model).__name__}",
                       where="operator graph")
    name = name or type(model).__name__
    where = f"operator graph of {name!r}"
    try:
        gm = graph_of(model)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds here
        raise LabError(f"torch.fx cannot trace this model ({type(exc).__name__}: {exc}); the lab needs "
                       "a model without data-dependent control flow", where=where) from None
    if any(onnx_models.is_leaf(m) for m in gm.modules()):
        ops = _uploaded_ops(gm, batch_size, in_features, merge_data_ops, where)
    else:
        _propagate(gm, batch_size, in_features, _fake_mode(), where)
        ops = _ops(gm, merge_data_ops)
    if not ops:
        raise LabError("the model has no operators (its forward returns the input unchanged)", where=where)
    frozen = tuple(Op(**{**d, "absorbed": tuple(d["absorbed"])}) for d in ops.values())
    return OpGraph(model=name, batch_size=batch_size, ops=frozen,
                   input_bytes=int(batch_size * in_features * torch.zeros(()).element_size()),
                   merged_data_ops=merge_data_ops)


def _propagate(gm: fx.GraphModule, batch_size: int, in_features: int, fake_mode, where: str) -> None:
    """Every node's output shape (``ShapeProp``) for a batch of zeros, in ``fake_mode`` when given."""
    try:
        with torch.no_grad():
            ShapeProp(gm, fake_mode=fake_mode).propagate(torch.zeros(batch_size, in_features))
    except Exception as exc:  # noqa: BLE001
        raise LabError(f"the model fails on an input of shape ({batch_size}, {in_features}): "
                       f"{type(exc).__name__}: {exc}", where=where) from None


def _uploaded_ops(gm: fx.GraphModule, batch_size: int, in_features: int, merge_data_ops: bool,
                  where: str) -> dict[str, dict]:
    """The operators of an uploaded network at ``batch_size``, from real runs on one sample and on two.

    Its converted operators read shapes as values, which FakeTensors do not have, so its shapes come from real
    arithmetic; that arithmetic never runs at the page's batch (up to 65,536) inside the server: the network
    was priced and admitted for a batch of one and of two (:mod:`lab.scenario.onnx_cost`), it runs at those, in
    eval mode (batch norm of one sample; no running statistics moved), and every count is the straight line
    through the two, drawn out to ``batch_size``. That line is exact for a network whose work and outputs grow
    with the batch as a constant plus a multiple of it, as every layer that treats samples alike does."""
    modes = {m: m.training for m in gm.modules()}
    gm.eval()
    try:
        _propagate(gm, 1, in_features, None, where)
        one = _ops(gm, merge_data_ops)
        _propagate(gm, 2, in_features, None, where)
        two = _ops(gm, merge_data_ops)
    finally:
        for m, training in modes.items():
            m.training = training
    if list(one) != list(two):
        raise LabError("the network's operators differ between a batch of one sample and of two, so the lab cannot "
                       "draw its graph at other batches", where=where)

    def line(a, b):
        return a + (batch_size - 1) * (b - a)

    out = {}
    for name, a in one.items():
        b = two[name]
        shape = (tuple(max(0, line(x, y)) for x, y in zip(a["out_shape"], b["out_shape"]))
                 if len(a["out_shape"]) == len(b["out_shape"]) else b["out_shape"])
        out[name] = {**b, "flops": max(0.0, float(line(a["flops"], b["flops"]))),
                     "out_bytes": max(0, int(line(a["out_bytes"], b["out_bytes"]))), "out_shape": shape}
    return out


def _ops(gm: fx.GraphModule, merge_data_ops: bool) -> dict[str, dict]:
    """The operators of ``gm`` as its nodes' shapes (:func:`_propagate`) have them: name -> Op's fields."""
    alias: dict[fx.Node, str | None] = {}  # fx node -> op name it stands for (None: the model input)
    ops: dict[str, dict] = {}
    attr_bytes: dict[fx.Node, int] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            alias[node] = None
            continue
        if node.op == "output":
            continue
        if node.op == "get_attr":
            metas = _metas(node)
            if metas:
                attr_bytes[node] = sum(_nbytes(m) for m in metas)
            continue
        metas = _metas(node)
        if not metas:
            continue  # shape arithmetic (x.shape[0], size()): no tensor, not an operator
        kind, cls, flops, pbytes, is_data = _classify(node, gm)
        pbytes += sum(attr_bytes.get(a, 0) for a in node.all_input_nodes)
        tensor_ins = [a for a in _tensor_inputs(node) if a not in attr_bytes]
        if is_data and not tensor_ins and pbytes:  # an exported weight passed on (an identity): still a weight
            attr_bytes[node] = pbytes
            continue
        sources = {alias.get(a) for a in tensor_ins}
        # A data op of one source (a reshape, or an exported model's shape arithmetic on tensors: a constant, a
        # gather of a shape, a concatenation of those) is part of what it reads.
        if merge_data_ops and is_data and len(sources) <= 1 and pbytes == 0:
            src = next(iter(sources), None)
            alias[node] = src
            if src is not None:
                ops[src]["absorbed"].append(node.name)
            continue
        inputs: list[str] = []
        for a in tensor_ins:
            src = alias.get(a)
            if src is not None and src not in inputs:
                inputs.append(src)
        target = str(node.target) if node.op != "call_function" else _fn_name(node.target)
        ops[node.name] = dict(name=node.name, kind=kind, op_class=cls, flops=float(flops), param_bytes=int(pbytes),
                              out_bytes=int(sum(_nbytes(m) for m in metas)), out_shape=tuple(metas[0].shape),
                              inputs=tuple(inputs), target=target, absorbed=[])
        alias[node] = node.name
    return ops


def reference_flops(model: nn.Module | str, batch_size: int = 32, in_features: int = 64,
                    seed: int = 0) -> dict[str, float]:
    """torch's own forward FLOP count (``FlopCounterMode``) split into the lab's classes.

    torch counts matrix products (mm, addmm, bmm, baddbmm) and convolutions; everything it
    counts that is neither lands in ``"other"`` (zero for the presets).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    batch_size = _check_batch(batch_size)
    if isinstance(model, str):

        model = build_model(model, in_features=in_features, seed=seed)
    out = {"matmul": 0.0, "conv": 0.0, "other": 0.0}
    counter = FlopCounterMode(display=False)
    # The fused CPU attention kernel is a single operator torch's counter does not count; as matrix
    # products (the math kernel) every product of attention is counted.
    # A converted ONNX operator can hand a weight on unchanged, a leaf that torch's module tracker cannot hook:
    # nothing here needs gradients.
    wants = [p for p in model.parameters() if p.requires_grad]
    for p in wants:
        p.requires_grad_(False)
    try:
        with counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
            model(torch.zeros(batch_size, in_features))
    finally:
        for p in wants:
            p.requires_grad_(True)
    for op, n in counter.get_flop_counts().get("Global", {}).items():
        name = str(op).split(".")[1] if "." in str(op) else str(op)
        if name in ("mm", "addmm", "bmm", "baddbmm", "matmul", "addbmm"):
            out["matmul"] += n
        elif "convolution" in name:
            out["conv"] += n
        else:
            out["other"] += n
    return out


__all__ = ["Op", "OpGraph", "trace", "reference_flops", "MAX_BATCH"]
