"""What an ONNX network costs, priced from its operator graph before anything is converted or run.

ONNX's own shape inference (``strict_mode``, with data propagation, so shapes computed from ``Shape`` resolve)
gives every operator's input and output shapes at a batch the lab chooses; no tensor is made and no arithmetic
is done, so a file that would take hours or gigabytes is priced in the time it takes to read its graph. An
operator whose output shape inference cannot resolve to numbers (its shape depends on the values it reads, such
as ``NonZero``) cannot be priced and is refused.

The price of one forward pass at a batch:

* **FLOPs**, a multiply-add counted as 2 as torch's ``FlopCounterMode`` counts it: convolutions, transposed
  convolutions, ``Gemm`` and ``MatMul`` exactly as torch counts them (the bias add not counted); ``Einsum`` as
  the product of every index's size for each pair of operands; pooling per window element; reductions, softmax
  and normalisation per *input* element; element-wise operators per output element (1, or 4 for a
  transcendental); operators that make or move data (``ConstantOfShape``, ``Expand``, ``Tile``, ``Resize``,
  ``Pad``, ``Concat``, ``Gather``...) one per element they create, ``Resize`` two per output element and tap of
  its interpolation. The counts lean high where an operator's cost is not exact: a budget that admits a network
  must not be fooled by it.
* **bytes**: the weights and constants the file holds (initializers, sparse ones at their dense size), the input,
  every operator's output as if none were ever freed, and the largest scratch buffer any one operator needs
  (a convolution's unfolded input, a matrix product's broadcast operands).

:func:`per_sample` prices a network at a batch of 1, 2 and :data:`MAX_BATCH` and keeps, for FLOPs and bytes
alike, the largest cost a sample: a cost that grows faster than the batch (a product of the batch with itself)
shows at the largest batch, one that does not grow with it (a constant block) at a batch of one.

Shape inference itself runs on the file's numbers (a shape made by a ``Concat`` of ``Concat`` operators doubles
at every step), so :func:`per_sample` works in a child process forked for it, with at most :data:`CHILD_BYTES`
more memory and :data:`CHILD_SECONDS` of time: a file that would make inference take the server's memory or CPU
is refused when the child runs out, and the server only reads the child's numbers back (as JSON).
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import signal
import time
from dataclasses import asdict, dataclass
from functools import lru_cache

from lab.scenario.text import shown

MAX_BATCH = 65536  # the largest batch the pages offer (the Placement page's batch size)
BATCHES = (1, 2, MAX_BATCH)
CHILD_BYTES = 512 << 20  # memory the pricing child may take beyond the server's own (a 10 MB file needs < 128 MB)
CHILD_SECONDS = 20.0  # its time (a graph of 2,000 operators is priced in a fraction of a second)

# FLOPs an operator does per output element (element-wise) ...
_ELEMENTWISE = dict.fromkeys(
    ("Abs", "Add", "And", "Cast", "Ceil", "Clip", "Div", "Dropout", "Equal", "Floor", "Greater", "GreaterOrEqual",
     "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Mod", "Mul", "Neg", "Not", "Or", "PRelu", "Reciprocal",
     "Relu", "Round", "Sign", "Sub", "Where", "Xor", "HardSigmoid", "HardSwish"), 1)
_ELEMENTWISE.update(dict.fromkeys(
    ("Acos", "Asin", "Atan", "Cos", "Sin", "Tan", "Tanh", "Sigmoid", "Exp", "Log", "Erf", "Elu", "Celu", "Selu",
     "Softplus", "Softsign", "Sqrt", "Pow"), 4))
# ... per input element (reductions, normalisation) ...
_PER_INPUT = {
    **dict.fromkeys(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                     "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum", "GlobalAveragePool"), 1),
    "ReduceL2": 2, "ReduceLogSum": 2, "ReduceLogSumExp": 4, "Softmax": 5, "LogSoftmax": 5,
    "BatchNormalization": 5, "InstanceNormalization": 5, "LayerNormalization": 5,
}
# ... and one per element created by operators that make, copy or move data.
_MOVES = frozenset(
    ("Concat", "Constant", "ConstantOfShape", "DepthToSpace", "Expand", "EyeLike", "Flatten", "Gather",
     "GatherElements", "GatherND", "Identity", "Pad", "Range", "Reshape", "Shape", "Slice", "Split", "Squeeze",
     "Tile", "Transpose", "Unsqueeze", "NonZero"))
# The rest have rules of their own (see _flops).
_OWN = frozenset(("Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "MaxPool", "AveragePool", "LRN", "TopK",
                  "NonMaxSuppression", "Mean", "Sum", "Max", "Min", "ScatterND", "Resize", "RoiAlign"))
PRICED = frozenset(_ELEMENTWISE) | frozenset(_PER_INPUT) | _MOVES | _OWN


class Unpriced(ValueError):
    """The network cannot be priced: the one-line reason (the caller names the file)."""


@dataclass(frozen=True)
class Cost:
    """One forward pass at ``batch``: FLOPs, bytes, the operator that costs most FLOPs (its kind, its name or
    place in the file, its FLOPs) and the shape inference finds for the first output."""

    batch: int
    flops: float
    bytes: float
    heaviest: tuple[str, str, float] = ("", "", 0.0)
    output: tuple[int, ...] | None = None
    by_kind: tuple[tuple[str, float], ...] = ()  # FLOPs of each operator kind, costliest first

    def flops_of(self, *kinds: str) -> float:
        """The FLOPs of the operators of ``kinds`` (``"Conv"``, ``"MatMul"``...)."""
        return sum(f for k, f in self.by_kind if k in kinds)


@dataclass(frozen=True)
class PerSample:
    """The most a sample costs at any of :data:`BATCHES` (FLOPs, bytes), and each batch's cost."""

    flops: float
    bytes: float
    costs: tuple[Cost, ...]

    @property
    def heaviest(self) -> tuple[str, str, float]:
        """(kind, name, FLOPs a sample) of the costliest operator at the batch that sets :attr:`flops`."""
        c = max(self.costs, key=lambda c: c.flops / c.batch)
        return c.heaviest[0], c.heaviest[1], c.heaviest[2] / c.batch


@lru_cache(maxsize=64)
def _itemsize(elem_type: int) -> int:
    from onnx import helper  # noqa: PLC0415

    try:
        return max(1, helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except (KeyError, TypeError, ValueError):
        return 8  # strings and types numpy lacks: priced as the widest number


def _n(shape) -> int:
    return math.prod(shape) if shape is not None else 0


def _attr(node, name: str, default=None):
    from onnx import helper  # noqa: PLC0415

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _einsum(node, ins) -> tuple[float, float]:
    """(FLOPs, scratch elements) of an einsum: every index's size multiplied, twice for each pair of operands;
    as scratch, each operand broadcast over the output's indices (more than two operands: every index at once)."""
    eq = _attr(node, "equation", b"")
    eq = (eq.decode() if isinstance(eq, bytes) else str(eq)).replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ins) or any(s is None for s in ins):
        raise Unpriced(f"its Einsum {shown(eq, 40)} does not match its {len(ins)} operands")
    sizes: dict[str, int] = {}
    ellipsis: list[int] = []
    labels_of = []
    for term, shape in zip(terms, ins):
        letters = term.replace("...", "")
        if not re.fullmatch(r"[A-Za-z]*", letters):
            raise Unpriced(f"its Einsum equation {shown(eq, 40)} cannot be read")
        extra = len(shape) - len(letters)
        if extra < 0 or (extra and "..." not in term):
            raise Unpriced(f"its Einsum {shown(eq, 40)} does not match its operands' shapes")
        head = term.split("...")[0]
        ell = list(shape[len(head):len(head) + extra]) if "..." in term else []
        dims = list(shape[:len(head)]) + list(shape[len(head) + extra:])
        for ch, d in zip(letters, dims):
            sizes[ch] = max(sizes.get(ch, 1), d)
        for i, d in enumerate(reversed(ell)):  # broadcast, aligned on the right
            if i == len(ellipsis):
                ellipsis.append(d)
            ellipsis[i] = max(ellipsis[i], d)
        labels_of.append(set(letters))
    everything = math.prod(sizes.values()) * math.prod(ellipsis)
    flops = 2.0 * max(1, len(ins) - 1) * everything
    if len(ins) > 2:
        return flops, float(everything)
    out = set(rhs.replace("...", "")) if "->" in eq else set()
    scratch = sum(math.prod(sizes[c] for c in labels | out) * math.prod(ellipsis) for labels in labels_of)
    return flops, float(scratch)


def _flops(node, ins, outs) -> tuple[float, float]:
    """(FLOPs, scratch elements) of one operator from its input and output shapes."""
    op, out = node.op_type, _n(outs[0]) if outs else 0
    if op in _ELEMENTWISE:
        return float(_ELEMENTWISE[op] * out), 0.0
    if op in _PER_INPUT:
        return float(_PER_INPUT[op] * _n(ins[0])), 0.0
    if op in _MOVES:
        return float(sum(_n(o) for o in outs)), 0.0
    if op == "Conv":
        x, w = ins[0], ins[1]
        # torch: 2 x out elements x (in channels / groups) x kernel; the unfolded input as scratch
        per_out = _n(w[1:])
        group = int(_attr(node, "group", 1) or 1)
        return 2.0 * out * per_out, float(x[0] * group * per_out * _n(outs[0][2:]))
    if op == "ConvTranspose":
        x, w = ins[0], ins[1]
        # torch: 2 x batch x weight elements x input positions
        group = int(_attr(node, "group", 1) or 1)
        return 2.0 * x[0] * _n(w) * _n(x[2:]), float(x[0] * group * _n(w[1:]) * _n(x[2:]))
    if op == "Gemm":
        a = ins[0]
        k = a[0] if _attr(node, "transA", 0) else a[1]
        return 2.0 * out * k, 0.0
    if op == "MatMul":
        a, b = ins[0], ins[1]
        a2 = list(a) if len(a) >= 2 else [1, *a]
        b2 = list(b) if len(b) >= 2 else [*b, 1]
        m, k, p = a2[-2], a2[-1], b2[-1]
        stacks = out // (m * p) if m * p else 0
        # a broadcast operand is copied out to every matrix of the batch before the product
        broadcast = _n(a2[:-2]) != stacks or _n(b2[:-2]) != stacks
        return 2.0 * out * k, float(stacks * (m * k + k * p)) if broadcast else 0.0
    if op == "Einsum":
        return _einsum(node, ins)
    if op in ("MaxPool", "AveragePool"):
        kernel = _attr(node, "kernel_shape")
        if not kernel:
            raise Unpriced(f"its {op} has no kernel_shape")
        return float(out * math.prod(kernel)), 0.0
    if op == "LRN":
        return float(out * (int(_attr(node, "size", 1)) + 4)), 0.0
    if op == "TopK":
        axis = int(_attr(node, "axis", -1))
        x = ins[0]
        return float(_n(x) * max(1, math.ceil(math.log2(max(2, x[axis] if x else 2))))), 0.0
    if op == "NonMaxSuppression":
        boxes, scores = ins[0], ins[1]
        pairs = scores[0] * scores[1] * boxes[1] * boxes[1]  # every pair of boxes of each class
        return 8.0 * pairs, float(pairs)
    if op in ("Mean", "Sum", "Max", "Min"):
        return float(out * max(1, len(ins) - 1)), 0.0
    if op == "ScatterND":
        return float(out + _n(ins[2])), 0.0
    if op == "Resize":
        resized = sum(1 for a, b in zip(ins[0], outs[0]) if a != b)
        mode = _attr(node, "mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        taps = {"nearest": 1, "linear": 2 ** resized, "cubic": 4 ** resized}.get(mode, 4 ** resized)
        return 2.0 * out * taps, 0.0
    if op == "RoiAlign":
        ratio = int(_attr(node, "sampling_ratio", 0))
        if ratio <= 0:
            raise Unpriced("its RoiAlign samples adaptively (sampling_ratio 0), so its work depends on the boxes' "
                           "values; set sampling_ratio")
        return 8.0 * out * ratio * ratio, 0.0
    raise Unpriced(f"uses the operator {op}, which the lab cannot price")


def _with_batch(model, batch: int):
    """A copy of ``model`` whose input takes ``batch`` samples, with every shape it declares beyond its input
    cleared, so that what is priced is what inference finds, never what the file says of itself."""
    import onnx  # noqa: PLC0415

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    del g.value_info[:]
    for o in g.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    held = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
    for i in g.input:
        if i.name not in held and i.type.tensor_type.HasField("shape") and i.type.tensor_type.shape.dim:
            first = i.type.tensor_type.shape.dim[0]
            first.Clear()
            first.dim_value = batch
    return m


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def inferred(model, batch: int):
    """``model`` at ``batch`` samples with every value's type and shape ONNX's inference finds (strict: an
    operator whose shapes do not fit is an error)."""
    import onnx  # noqa: PLC0415

    try:
        return onnx.shape_inference.infer_shapes(_with_batch(model, batch), check_type=True, strict_mode=True,
                                                 data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError) as exc:
        raise Unpriced(f"its shapes cannot be worked out for a batch of {batch}: "
                       f"{shown(_first_line(exc), 160)}") from None


def _types(g) -> dict[str, tuple[int, tuple[int, ...] | None]]:
    """Each value's (element type, shape), the shape None where it is not all numbers."""
    out: dict[str, tuple[int, tuple[int, ...] | None]] = {}
    for v in (*g.input, *g.value_info, *g.output):
        t = v.type.tensor_type if v.type.HasField("tensor_type") else None
        if t is None or not t.HasField("shape"):
            out[v.name] = (t.elem_type if t is not None else 0, None)
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else -1 for d in t.shape.dim)
        out[v.name] = (t.elem_type, None if -1 in dims else dims)
    for t in g.initializer:
        out[t.name] = (t.data_type, tuple(t.dims))
    for s in g.sparse_initializer:
        out[s.values.name] = (s.values.data_type, tuple(s.dims))
    return out


def weights_bytes(g) -> float:
    """The bytes of every weight and constant the graph holds (a sparse one at its dense size)."""
    return float(sum(_n(t.dims) * _itemsize(t.data_type) for t in g.initializer)
                 + sum(_n(s.dims) * _itemsize(s.values.data_type) for s in g.sparse_initializer))


def cost(model, batch: int) -> Cost:
    """One forward pass of ``model`` (checked by ``onnx.checker``) at ``batch`` samples, priced (see the
    module's note). Raises :class:`Unpriced` with the reason when it cannot be."""
    g = inferred(model, batch).graph
    types = _types(g)
    held = {t.name for t in g.initializer} | {s.values.name for s in g.sparse_initializer}
    total_bytes = weights_bytes(g)
    for i in g.input:
        if i.name not in held:
            et, shape = types.get(i.name, (0, None))
            total_bytes += _n(shape) * _itemsize(et)
    flops, scratch, heaviest = 0.0, 0.0, ("", "", 0.0)
    kinds: dict[str, float] = {}
    for k, node in enumerate(g.node):
        label = shown(node.name, 40) if node.name else f"number {k + 1:,}"
        ins = [types.get(n, (0, None))[1] if n else None for n in node.input]
        outs = []
        for name in node.output:
            if not name:
                continue  # an optional output left out
            et, shape = types.get(name, (0, None))
            if shape is None:
                raise Unpriced(f"the shape of the output of its {node.op_type} operator {label} cannot be "
                               "worked out before it runs (it depends on the values it reads), so the lab cannot "
                               "price it")
            outs.append(shape)
            total_bytes += _n(shape) * _itemsize(et)
        needed = [s for n, s in zip(node.input, ins) if n]
        if any(s is None for s in needed):
            raise Unpriced(f"the shape of an input of its {node.op_type} operator {label} cannot be worked "
                           "out before it runs, so the lab cannot price it")
        try:
            f, temp = _flops(node, ins, outs)
        except (IndexError, TypeError, ValueError, ZeroDivisionError) as exc:
            if isinstance(exc, Unpriced):
                raise
            raise Unpriced(f"its {node.op_type} operator {label} has inputs the lab cannot price "
                           f"({type(exc).__name__})") from None
        flops += f
        kinds[node.op_type] = kinds.get(node.op_type, 0.0) + f
        first = types.get(node.output[0], (1, None))[0] if node.output else 1
        scratch = max(scratch, temp * _itemsize(first))
        if f > heaviest[2]:
            heaviest = (node.op_type, label, f)
    output = types.get(g.output[0].name, (0, None))[1] if g.output else None
    return Cost(batch=batch, flops=flops, bytes=total_bytes + scratch, heaviest=heaviest, output=output,
                by_kind=tuple(sorted(kinds.items(), key=lambda kv: -kv[1])))


def _priced_here(model) -> PerSample:
    costs = tuple(cost(model, b) for b in BATCHES)
    return PerSample(flops=max(c.flops / c.batch for c in costs), bytes=max(c.bytes / c.batch for c in costs),
                     costs=costs)


def per_sample(model) -> PerSample:
    """The most a sample of ``model`` costs at any of :data:`BATCHES` (see the module's note), worked out in a
    child process of bounded memory and time. Raises :class:`Unpriced` with the reason when it cannot be."""
    if not hasattr(os, "fork"):  # pragma: no cover - the lab's servers run on Linux
        return _priced_here(model)
    import onnx.helper  # noqa: F401, PLC0415 - imported before the fork: the child imports nothing
    import onnx.shape_inference  # noqa: F401, PLC0415

    got = _in_child(lambda: asdict(_priced_here(model)))
    try:  # the child's numbers, read as data
        costs = tuple(Cost(batch=int(c["batch"]), flops=float(c["flops"]), bytes=float(c["bytes"]),
                           heaviest=(str(c["heaviest"][0]), str(c["heaviest"][1]), float(c["heaviest"][2])),
                           output=None if c["output"] is None else tuple(int(d) for d in c["output"]),
                           by_kind=tuple((str(k), float(f)) for k, f in c["by_kind"])) for c in got["costs"])
        return PerSample(flops=float(got["flops"]), bytes=float(got["bytes"]), costs=costs)
    except (KeyError, IndexError, TypeError, ValueError):
        raise Unpriced("pricing it gives no price the lab can read") from None


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _in_child(work) -> dict:
    """``work()``'s dict, computed in a forked child with :data:`CHILD_BYTES` more address space than this process
    has and :data:`CHILD_SECONDS` of time, and read back as JSON; :class:`Unpriced` when it raises that, runs out
    or is stopped."""
    import resource  # noqa: PLC0415

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: work, write, and leave without running the server's exit handlers
        code = 0
        try:
            os.close(r)
            limit = _vm_bytes() + CHILD_BYTES
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            seconds = int(CHILD_SECONDS) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
            try:
                out = {"ok": work()}
            except Unpriced as exc:
                out = {"unpriced": str(exc)}
            except MemoryError:
                out = {"unpriced": f"working out its shapes takes more than {CHILD_BYTES >> 20:,} MB"}
            except Exception as exc:  # noqa: BLE001 - said in one line, as every refusal is
                out = {"unpriced": f"pricing it fails ({type(exc).__name__}: {shown(str(exc), 120)})"}
            data = json.dumps(out).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BaseException:  # noqa: BLE001 - nothing of the child's may reach the server's handlers
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks, deadline, stopped = [], time.monotonic() + CHILD_SECONDS, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                stopped = True
                break
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        # the child this call forked, by its pid: unreaped, its pid cannot be anyone else's yet
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    if stopped:
        raise Unpriced(f"working out its shapes takes more than {CHILD_SECONDS:g} s")
    try:
        out = json.loads(b"".join(chunks))
    except ValueError:
        raise Unpriced(f"working out its shapes takes more than {CHILD_BYTES >> 20:,} MB or fails") from None
    if "unpriced" in out:
        raise Unpriced(str(out["unpriced"]))
    return out["ok"]


__all__ = ["BATCHES", "MAX_BATCH", "PRICED", "Cost", "PerSample", "Unpriced", "cost", "inferred", "per_sample",
           "weights_bytes"]
