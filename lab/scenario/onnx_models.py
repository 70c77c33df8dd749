"""A person's own network from an ONNX file: read as data by ``onnx`` (nothing in the file is executed), checked,
converted to a torch module by ``onnx2torch``, and from then on a lab model like the presets.

The checks, before anything is converted: at most :data:`MAX_BYTES`; a protobuf ``onnx`` can read; no tensor
anywhere in it stored outside the file (a file that points elsewhere is refused, never followed, and before
``onnx.checker`` looks, so the answer never depends on whether the named file exists on the server); a graph
``onnx.checker`` accepts; no control-flow subgraphs; at most :data:`MAX_NODES` operators and :data:`MAX_PARAMS`
weights, no dimension beyond :data:`MAX_DIM`; one input whose per-sample shape is fixed, one output of a fixed
number of scores per class (at least one); every operator one the converter has; and a price within this
server's budget. The price comes from the operator graph alone (:mod:`lab.scenario.onnx_cost`: ONNX's shape
inference, no tensor made, nothing run): FLOPs a sample at most ``LAB_UPLOAD_FLOPS`` and bytes a sample (weights
and constants, every operator's output) at most ``LAB_UPLOAD_BYTES``. A refusal names the file (as text) and what
is wrong, in one line.

A model travels by its content: its name is ``onnx-`` and the first 12 hex digits of the file's SHA-256, and the
file is kept in the data folder (``models/``), so a link reopens the same view on the same server and a link to a
model this server does not hold says so. Its weights are the file's (the scenario's seed does not draw them);
its floating-point initializers of more than one element train as the model's parameters.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from lab.errors import LabError
from lab.scenario import onnx_cost
from lab.scenario.names import is_uploaded_model
from lab.scenario.text import shown
from lab.scenario.units import fmt_bytes

MAX_BYTES = 5 * 2**20
MAX_NODES = 2000
MAX_PARAMS = 20_000_000
MAX_DIM = 1 << 20
MAX_SAMPLE = 3 * 224 * 224  # elements of one input sample
WHERE = "model file"


@dataclass(frozen=True)
class OnnxModel:
    """What the lab keeps of an uploaded file: its model name, the file's name as given, its input's
    per-sample shape, its classes, operators and weights, and its price a sample (forward FLOPs and bytes, see
    :mod:`lab.scenario.onnx_cost`; 0 in a record kept before the lab priced files)."""

    name: str
    filename: str
    sample_shape: tuple[int, ...]
    classes: int
    operators: int
    params: int
    op_types: tuple[str, ...]
    flops: float = 0.0
    bytes: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.filename} (ONNX, {self.operators} operators)"


def _converts(get_converter, op_type: str, version: int, domain: str) -> bool:
    try:
        get_converter(op_type, version, domain)
    except NotImplementedError:
        return False
    return True


def _refuse(filename: str, why: str) -> LabError:
    return LabError(f"{shown(filename, 60)}: {why}", where=WHERE)


def _onnx2torch():
    from lab.scenario.zoo import torchvision_models

    torchvision_models()  # onnx2torch imports torchvision, whose compiled operators this machine lacks
    import onnx2torch  # noqa: PLC0415
    from onnx2torch.node_converters.registry import get_converter  # noqa: PLC0415

    return onnx2torch, get_converter


def _dims(value_info) -> list[int | None]:
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]


def read(data: bytes, filename: str = "model.onnx"):
    """The ONNX model in ``data`` as checked (see the module's note), and what the lab keeps of it."""
    import onnx  # noqa: PLC0415 - slow to import: only when a file is read
    from google.protobuf.message import DecodeError  # noqa: PLC0415

    filename = str(filename)[:200] or "model.onnx"
    if not isinstance(data, (bytes, bytearray)):
        raise _refuse(filename, "is not a file's bytes")
    if len(data) > MAX_BYTES:
        raise _refuse(filename, f"is {len(data) / 2**20:.1f} MB; the lab takes ONNX files of at most "
                                f"{MAX_BYTES // 2**20} MB")
    if not data:
        raise _refuse(filename, "is empty (0 bytes): upload an ONNX model file, as torch.onnx.export or onnx.save "
                                "writes it")
    try:
        model = onnx.ModelProto.FromString(bytes(data))
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise _refuse(filename, f"is not an ONNX model (it cannot be read as one: {shown(str(exc), 80)})") from None
    g = model.graph
    if not model.opset_import or not g.node:
        raise _refuse(filename, "is not an ONNX model (it holds no graph of operators)")
    if _points_outside(model):
        raise _refuse(filename, "keeps weights in other files; the lab takes only a model whose weights are inside "
                                "it (save it with save_as_external_data=False)")
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in g.node for a in n.attribute):
        raise _refuse(filename, "has control flow (If, Loop or Scan subgraphs), which the lab's operator graph "
                                "cannot place")
    if len(g.node) > MAX_NODES:
        raise _refuse(filename, f"has {len(g.node):,} operators; the lab takes at most {MAX_NODES:,}")
    tensors = [*g.initializer, *(s.values for s in g.sparse_initializer),
               *(a.t for n in g.node for a in n.attribute if a.HasField("t"))]
    for dims in [t.dims for t in tensors] + [s.dims for s in g.sparse_initializer]:
        if any(d < 0 or d > MAX_DIM for d in dims):
            raise _refuse(filename, f"declares a tensor of dimensions {list(dims)[:6]}; the lab takes at most "
                                    f"{MAX_DIM:,} along one")
    params = sum(math.prod(t.dims) for t in g.initializer) + sum(math.prod(s.dims) for s in g.sparse_initializer)
    if params > MAX_PARAMS:
        raise _refuse(filename, f"holds {params:,} weights; the lab takes at most {MAX_PARAMS:,}")
    try:
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - the checker raises several kinds (its shape inference's among them)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _refuse(filename, f"is not a valid ONNX model: {shown(first, 160)}") from None
    held = {t.name for t in g.initializer} | {s.values.name for s in g.sparse_initializer}
    inputs = [i for i in g.input if i.name not in held]
    if len(inputs) != 1 or len(g.output) != 1:
        raise _refuse(filename, f"has {len(inputs)} inputs and {len(g.output)} outputs; the lab trains a model "
                                "of one input (a batch of samples) and one output (a score per class)")
    dims, out = _dims(inputs[0]), _dims(g.output[0])
    sample = dims[1:]
    if len(dims) < 2 or any(d is None or d < 1 for d in sample):
        raise _refuse(filename, f"declares its input as {_shape_text(dims)}; the lab needs the batch first and "
                                "every other dimension fixed")
    if any(d > MAX_DIM for d in sample) or math.prod(sample) > MAX_SAMPLE:
        raise _refuse(filename, f"takes samples of shape {_shape_text(sample)}; the lab takes at most "
                                f"{MAX_SAMPLE:,} values a sample")
    if len(out) != 2:
        raise _refuse(filename, f"gives an output of shape {_shape_text(out)}; the lab needs one score per class "
                                "for every sample (batch, classes)")
    if out[1] is None or out[1] < 1:
        raise _refuse(filename, f"declares its output as (batch, {_class_dim(g.output[0])}; the lab needs a fixed "
                                "number of classes, at least 1")
    _, get_converter = _onnx2torch()
    versions = {o.domain or "": o.version for o in model.opset_import}
    missing, older = [], []
    for n in g.node:
        version = versions.get(n.domain or "", 1)
        if not _converts(get_converter, n.op_type, version, n.domain or ""):
            missing.append(f"{n.op_type} (opset {versions.get(n.domain or '', '?')})")
            older.append(next((v for v in range(version - 1, 0, -1)
                               if _converts(get_converter, n.op_type, v, n.domain or "")), None))
    if missing:
        hint = ""
        if None not in older:  # each of them converts at an older opset: say which export loads
            hint = (f"; the converter reads them at opset {min(older)}: export again with "
                    f"torch.onnx.export(..., opset_version={min(older)})")
        raise _refuse(filename, "uses operators the converter cannot turn into torch: "
                                f"{', '.join(sorted(set(missing))[:8])}{hint}")
    digest = hashlib.sha256(bytes(data)).hexdigest()
    price = _priced(model, filename, int(out[1]), digest)
    info = OnnxModel(name=f"onnx-{digest[:12]}", filename=filename, sample_shape=tuple(int(d) for d in sample),
                     classes=int(out[1]), operators=len(g.node), params=int(params),
                     op_types=tuple(sorted({n.op_type for n in g.node})), flops=price.flops, bytes=price.bytes)
    return model, info


@lru_cache(maxsize=1)
def _holds_tensors() -> frozenset[str]:
    """The ONNX message types a tensor can sit in, however deep (a graph in a node's attribute in a graph...)."""
    import onnx  # noqa: PLC0415

    kinds = {d.full_name: d for d in (onnx.ModelProto.DESCRIPTOR, onnx.FunctionProto.DESCRIPTOR)}
    todo = list(kinds.values())
    while todo:  # every message type reachable from a model
        for f in todo.pop().fields:
            if f.message_type is not None and f.message_type.full_name not in kinds:
                kinds[f.message_type.full_name] = f.message_type
                todo.append(f.message_type)
    holds = {onnx.TensorProto.DESCRIPTOR.full_name}
    grew = True
    while grew:  # a type holds tensors when one of its fields' types does
        grew = False
        for name, d in kinds.items():
            if name not in holds and any(f.message_type is not None and f.message_type.full_name in holds
                                         for f in d.fields):
                holds.add(name)
                grew = True
    return frozenset(holds)


def _points_outside(model) -> bool:
    """Whether any tensor in ``model`` says its data is in another file: initializers, sparse ones (values and
    indices), every tensor, tensors, sparse tensor and graph attribute, nested graphs, local functions and
    training graphs alike, found by walking every field that can hold a tensor (shapes and types, which
    cannot, are skipped)."""
    import onnx  # noqa: PLC0415
    from google.protobuf.message import Message  # noqa: PLC0415

    holds = _holds_tensors()
    stack = [model]
    while stack:  # iterative: a file's nesting never becomes Python's recursion
        msg = stack.pop()
        if isinstance(msg, onnx.TensorProto):
            if msg.data_location == onnx.TensorProto.EXTERNAL or len(msg.external_data):
                return True
            continue
        for f, value in msg.ListFields():
            if f.message_type is None or f.message_type.full_name not in holds:
                continue
            if isinstance(value, Message):
                stack.append(value)
            else:  # a repeated field: its messages
                stack.extend(value)
    return False


def _class_dim(value_info) -> str:
    """The output's second dimension as the file declares it: its classes, a name, or none."""
    d = value_info.type.tensor_type.shape.dim[1]
    if d.HasField("dim_value"):
        return f"{d.dim_value}): {d.dim_value} classes"
    if d.HasField("dim_param"):
        return f"{shown(d.dim_param, 40)}): a name, not a number of classes"
    return "?): no number of classes"


def budget() -> tuple[float, float]:
    """This server's budget for a sample of an uploaded network: (forward FLOPs, bytes), from
    ``LAB_UPLOAD_FLOPS`` and ``LAB_UPLOAD_BYTES``."""
    from lab import settings  # noqa: PLC0415

    return settings.number("LAB_UPLOAD_FLOPS"), settings.number("LAB_UPLOAD_BYTES")


def _giga(flops: float) -> str:
    return f"{flops / 1e9:,.0f}" if flops >= 1e12 else f"{flops / 1e9:.3g}"


_PRICES: dict[str, onnx_cost.PerSample] = {}  # by the file's SHA-256: a kept model is read again at every build
_PRICES_KEPT = 64
_PRICES_LOCK = threading.Lock()  # each session's page runs in a thread of its own


def _priced(model, filename: str, classes: int, digest: str) -> onnx_cost.PerSample:
    """``model``'s price a sample (:func:`lab.scenario.onnx_cost.per_sample`), or a refusal: it cannot be priced,
    its output is not (batch, ``classes``) at every batch priced, or it is over this server's budget (read now:
    a file admitted before the teacher lowered it is refused when it is built again)."""
    with _PRICES_LOCK:
        price = _PRICES.get(digest)
    if price is None:
        try:
            price = onnx_cost.per_sample(model)
        except onnx_cost.Unpriced as exc:
            raise _refuse(filename, f"cannot be priced before it runs: {exc}") from None
        with _PRICES_LOCK:
            if len(_PRICES) >= _PRICES_KEPT:
                _PRICES.pop(next(iter(_PRICES)))
            _PRICES[digest] = price
    for c in price.costs:
        if c.output != (c.batch, classes):
            got = "a shape that is not all numbers" if c.output is None else _shape_text(c.output)
            raise _refuse(filename, f"declares (batch, {classes}) scores but its operators give {got} for a batch "
                                    f"of {c.batch}")
    flops, nbytes = budget()
    if price.flops > flops:
        kind, name, most = price.heaviest
        raise _refuse(filename, f"costs {_giga(price.flops)} GFLOPs a sample (its {kind} {name} alone "
                                f"{_giga(most)}), over this server's budget of {_giga(flops)} GFLOPs a sample; the "
                                "teacher can raise it with LAB_UPLOAD_FLOPS (FLOPs) when starting the server")
    if price.bytes > nbytes:
        raise _refuse(filename, f"takes {fmt_bytes(price.bytes)} a sample (weights, constants and every "
                                f"operator's output), over this server's budget of {fmt_bytes(nbytes)} a sample; "
                                "the teacher can raise it with LAB_UPLOAD_BYTES (bytes) when starting the server")
    return price


def _shape_text(dims) -> str:
    return "(" + ", ".join("batch" if d is None else str(d) for d in dims) + ")"


def folder(data_dir: Path | None = None) -> Path:
    from lab import settings

    return Path(data_dir) if data_dir is not None else settings.data_dir() / "models"


def keep(data: bytes, filename: str, data_dir: Path | None = None) -> OnnxModel:
    """Check ``data`` (see :func:`read`), convert it once to find what the converter refuses, and keep the file
    under its content's name. Returns what is kept; keeping the same file again changes nothing."""
    model, info = read(data, filename)
    convert(model, info)
    where = folder(data_dir)
    where.mkdir(parents=True, exist_ok=True)
    digest = info.name[len("onnx-"):]
    path = where / f"{digest}.onnx"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(bytes(data))
        tmp.replace(path)
    (where / f"{digest}.json").write_text(json.dumps(asdict(info)))
    return info


def kept(data_dir: Path | None = None) -> list[OnnxModel]:
    """Every model this server holds, oldest first."""
    where = folder(data_dir)
    out = []
    for p in sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime) if where.exists() else ():
        try:
            d = json.loads(p.read_text())
            out.append(OnnxModel(**{**d, "sample_shape": tuple(d["sample_shape"]), "op_types": tuple(d["op_types"])}))
        except (OSError, ValueError, TypeError, KeyError):
            continue  # a damaged record: its model is not offered
    return out


def load(name: str, data_dir: Path | None = None):
    """The kept model called ``name``, read and checked again (a file on disk is input like any other)."""
    if not is_uploaded_model(name):
        raise LabError(f"{shown(name)} is not the name of an uploaded model", where=WHERE)
    path = folder(data_dir) / f"{name[len('onnx-'):]}.onnx"
    if not path.exists():
        raise LabError(f"this server does not hold the model {name}: a model travels in a link by its content's "
                       "hash and is kept on the server it was uploaded to; upload the ONNX file here to open this "
                       "view", where=WHERE)
    meta = path.with_suffix(".json")
    filename = json.loads(meta.read_text()).get("filename", path.name) if meta.exists() else path.name
    return read(path.read_bytes(), filename)


def convert(model, info: OnnxModel) -> nn.Module:
    """The torch module of a checked ONNX model, its float initializers as parameters."""
    onnx2torch, _ = _onnx2torch()
    try:
        gm = onnx2torch.convert(model)
    except NotImplementedError as exc:
        hint = ""
        if "mean/var output" in str(exc):  # an export for training writes batch norm's statistics as outputs
            hint = "; export the network in evaluation mode (model.eval() before torch.onnx.export)"
        raise _refuse(info.filename, f"uses an operator the converter cannot turn into torch: "
                                     f"{shown(str(exc), 160)}{hint}") from None
    except Exception as exc:  # noqa: BLE001 - the converter raises many kinds on odd files
        raise _refuse(info.filename, f"could not be converted to torch ({type(exc).__name__}: "
                                     f"{shown(str(exc), 160)})") from None
    _read_stored_tensors_directly(gm)
    held = getattr(gm, "initializers", None)
    if isinstance(held, nn.Module):
        # batch norm's running statistics stay what they are: statistics, not weights
        stats = {str(n.target).rpartition(".")[2] for n in gm.graph.nodes
                 if n.op == "get_attr" and _feeds_statistics(gm, n)}
        for name, buf in list(held.named_buffers(recurse=False)):
            if buf.is_floating_point() and buf.numel() > 1 and name not in stats:  # a weight, not a shape or scale
                delattr(held, name)
                held.register_parameter(name, nn.Parameter(buf.detach().clone()))
    return gm


def _read_stored_tensors_directly(gm) -> None:
    """An ONNX Identity of a stored tensor (the exporter writes one before each batch norm's statistics when it
    does not fold constants) is read as the stored tensor itself. The converter's identity is a copy: through it,
    batch norm would update a copy of its running statistics and never the model's, and a placement run that
    put the identity on another device would send the statistics as an activation that takes a gradient."""
    changed = False
    for n in list(gm.graph.nodes):
        if (n.op == "call_module" and type(gm.get_submodule(str(n.target))).__name__ == "OnnxCopyIdentity"
                and len(n.args) == 1 and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "get_attr"):
            n.replace_all_uses_with(n.args[0])
            gm.graph.erase_node(n)
            changed = True
    if changed:
        gm.delete_all_unused_submodules()
        gm.recompile()


def _feeds_statistics(gm, node) -> bool:
    """Whether ``node`` is a batch norm's running mean or variance."""
    return any(u.op == "call_module" and type(gm.get_submodule(str(u.target))).__name__ == "OnnxBatchNorm"
               and node in u.args[3:] for u in node.users)


def feed(shape: tuple[int, ...], in_features: int) -> tuple[str, str]:
    """How the lab's flat samples of ``in_features`` values reach a file that takes samples of ``shape``: a mode
    (``reshape``, ``image``, ``stretch``) and the words that say it on the page."""
    values, side = math.prod(shape), int(round(math.sqrt(in_features)))
    if values == in_features:
        return "reshape", f"the lab's {in_features} values a sample, reshaped"
    if len(shape) == 3 and side * side == in_features:
        return "image", f"the lab's {side}x{side} grey images scaled to {shape[1]}x{shape[2]} on {shape[0]} channels"
    return "stretch", f"the lab's {in_features} values a sample stretched (linearly interpolated) to {values:,}"


class OnnxNet(nn.Module):
    """The lab's flat samples in the shape the file declares (:func:`feed`), then the file's network. A sample of
    the same number of values is reshaped; a square grey image is scaled to the file's (channels, height, width);
    for any other shape the sample's values are stretched to the number the file takes, so the lab's data sets,
    digits or synthetic, keep their classes in whatever shape the file declares."""

    def __init__(self, net: nn.Module, info: OnnxModel, in_features: int):
        super().__init__()
        self.net = net
        self.shape = info.sample_shape
        self.values = math.prod(self.shape)
        self.side = int(round(math.sqrt(in_features)))
        self.mode = feed(self.shape, in_features)[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "image":
            x = nn.functional.interpolate(x.view(x.shape[0], 1, self.side, self.side), size=self.shape[1:],
                                          mode="nearest")
            return self.net(x.expand(-1, self.shape[0], -1, -1))
        if self.mode == "stretch":
            x = nn.functional.interpolate(x.view(x.shape[0], 1, -1), size=self.values, mode="linear")
        return self.net(x.reshape(x.shape[0], *self.shape))


def build(name: str, in_features: int, classes: int, data_dir: Path | None = None) -> nn.Module:
    """The kept model ``name`` for samples of ``in_features`` values and ``classes`` classes."""
    model, info = load(name, data_dir)
    if info.classes != classes:
        raise LabError(f"{shown(info.filename, 60)} gives {info.classes} scores a sample; the lab's data sets have "
                       f"{classes} classes", where=WHERE)
    return OnnxNet(convert(model, info), info, in_features)


def is_leaf(module: nn.Module) -> bool:
    """Whether torch.fx keeps ``module`` whole: the converter's operator modules hold Python control flow on
    shapes, and each stands for one ONNX operator."""
    return type(module).__module__.startswith("onnx2torch.")


__all__ = ["MAX_BYTES", "MAX_NODES", "MAX_PARAMS", "OnnxModel", "OnnxNet", "build", "convert", "feed", "is_leaf",
           "keep", "kept", "load", "read"]
