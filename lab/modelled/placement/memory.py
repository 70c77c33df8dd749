"""Activation memory of a pipeline step: the bytes each process holds for a later backward, modelled from the
operator graph and the schedule.

What is counted, in the model and in the run alike: the tensors autograd saves for the backward (the
``pack`` hook of :func:`torch.autograd.graph.saved_tensors_hooks` sees each one), each storage once per
piece and micro-batch, the model's parameters and buffers left out (they are held whatever the schedule).
Each storage counts the largest tensor saved of it (a micro-batch sliced from the batch
holds its own rows). A piece's forward of micro-batch ``m`` adds its saved bytes; its backward of ``m`` frees them. So a process's
peak follows from its list of actions alone (:mod:`.order`): GPipe holds all ``M`` micro-batches of every piece
before the first backward, 1F1B at most ``S - k`` on stage ``k`` of ``S``.

**Saved bytes per operator** (:func:`saved_by_op`) come from running the traced model once forward, with
autograd on, at two small batches, with the hook naming which node saved which storage; each storage is keyed
by the node whose output it is (or, for a tensor an operator keeps of its own, such as a dropout mask or a
norm's statistics, by that operator and its order), so a piece's bytes are the union over its operators, as
in the run. Every count is the straight line through the two batches, drawn out to the micro-batch: exact for
operators that treat samples alike.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import torch
import torch.fx as fx
import torch.nn as nn

from lab.errors import LabError
from lab.modelled.placement.order import BACKWARD, BACKWARD_WEIGHT, FORWARD, Action
from lab.modelled.placement.order import schedule as order_of
from lab.scenario.models import graph_of

#: The two batches the saved bytes are measured at (two, not one: a batch norm in training needs two samples).
BATCHES = (2, 4)


def model_state(module: nn.Module) -> set[int]:
    """The storages of ``module``'s parameters and buffers (held whatever the schedule: not activations)."""
    return {t.untyped_storage().data_ptr() for t in (*module.parameters(), *module.buffers())}


class SavedCounter:
    """A ``saved_tensors_hooks`` pack hook that counts the bytes autograd saves: per storage, the largest tensor saved
    of it (a micro-batch that is a slice of the batch counts its own rows, not the batch's), leaving out ``state``
    (the model's parameter and buffer storages)."""

    def __init__(self, state: set[int]):
        self.state, self.seen = state, {}

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in self.state:
            self.seen[ptr] = max(self.seen.get(ptr, 0), tensor_bytes(t))
        return t

    @property
    def bytes(self) -> int:
        return sum(self.seen.values())

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self, _unpacked)


def tensor_bytes(t: torch.Tensor) -> int:
    """The bytes of ``t``'s own elements (a view counts what it shows, at most its storage)."""
    return min(t.numel() * t.element_size(), t.untyped_storage().nbytes())


def _unpacked(t: torch.Tensor) -> torch.Tensor:
    return t


class _Saving(fx.Interpreter):
    """Runs the traced model and books each saved storage to the node that saved it, keyed by the node whose
    output the storage is (or the saving node and the order of its own tensors)."""

    def __init__(self, gm: fx.GraphModule, state: set[int]):
        super().__init__(gm, garbage_collect_values=False)  # outputs stay alive: a storage's address is not reused
        self.state = state
        self.maker: dict[int, str] = {}  # storage address -> the node that produced it
        self.saved: dict[str, dict[str, int]] = {}  # saving node -> {key: bytes}
        self.node: str | None = None
        self.own: dict[str, int] = {}  # saving node -> tensors of its own so far
        self.kept: list[torch.Tensor] = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr in self.state or self.node is None:
            return t
        self.kept.append(t)
        mine = self.saved.setdefault(self.node, {})
        key = self.maker.get(ptr)
        if key is None:  # the node's own tensor, named by its order: the same at every batch
            n = self.own.get(self.node, 0)
            key = self.maker[ptr] = f"{self.node}#{n}"
            self.own[self.node] = n + 1
        mine[key] = max(mine.get(key, 0), tensor_bytes(t))
        return t

    def run_node(self, n: fx.Node):
        self.node = n.name
        out = super().run_node(n)
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.maker.setdefault(t.untyped_storage().data_ptr(), n.name)
        self.node = None
        return out


def _saved_at(gm: fx.GraphModule, state: set[int], rows: int, in_features: int,
              dtype: torch.dtype) -> dict[str, dict[str, int]]:
    run = _Saving(gm, state)
    torch.manual_seed(0)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(run.pack, _unpacked):
        run.run(torch.zeros(rows, in_features, dtype=dtype))
    return run.saved


@dataclass(frozen=True)
class SavedBytes:
    """Per operator of the graph, the storages it saves for the backward: ``{op: {key: (bytes at BATCHES[0],
    bytes at BATCHES[1])}}``; :meth:`piece` draws a piece's union out to a micro-batch."""

    by_op: Mapping[str, Mapping[str, tuple[int, int]]]

    def piece(self, ops: Iterable[str], rows: int) -> float:
        """Bytes a piece of ``ops`` saves for one micro-batch of ``rows`` samples (each storage once)."""
        (b0, b1) = BATCHES
        keys: dict[str, float] = {}  # as the run counts: each storage at the largest tensor saved of it
        for op in ops:
            for key, (a, b) in self.by_op.get(op, {}).items():
                keys[key] = max(keys.get(key, 0.0), a + (rows - b0) * (b - a) / (b1 - b0))
        return float(sum(max(0.0, v) for v in keys.values()))


def saved_by_op(model: nn.Module, in_features: int, owner: Mapping[str, str] | None = None,
                dtype: torch.dtype = torch.float32) -> SavedBytes:
    """What each operator of ``model`` saves for its backward in ``dtype`` (see the module's text); ``owner`` maps a
    node to the operator of the lab's graph that absorbs it (:attr:`lab.modelled.opgraph.Op.absorbed`), else each
    node is its own. A copy of the model runs, in training mode: the model itself is not touched."""
    gm = graph_of(copy.deepcopy(model)).to(dtype).train()
    state = model_state(gm)
    try:
        runs = [_saved_at(gm, state, b, in_features, dtype) for b in BATCHES]
    except Exception as exc:  # noqa: BLE001 - any error of the model's own forward
        raise LabError(f"the model fails on a batch of {BATCHES[0]} samples: {type(exc).__name__}: {exc}",
                       where="activation memory") from None
    owner = owner or {}
    by_op: dict[str, dict[str, tuple[int, int]]] = {}
    for node in set(runs[0]) | set(runs[1]):
        a, b = runs[0].get(node, {}), runs[1].get(node, {})
        mine = by_op.setdefault(owner.get(node, node), {})
        for key in set(a) | set(b):
            mine[owner.get(key, key)] = (a.get(key, 0), b.get(key, 0))
    return SavedBytes(by_op)


def micro_rows(batch: int, micro_batches: int) -> list[int]:
    """Samples in each micro-batch, as ``Tensor.tensor_split`` cuts the batch (the executor's cut)."""
    q, r = divmod(int(batch), int(micro_batches))
    return [q + 1 if m < r else q for m in range(int(micro_batches))]


def held_peak(actions: Sequence[Action], saved: Mapping[tuple[int, int], float]) -> float:
    """The most bytes a process holds at once running ``actions``, given ``saved[(piece, micro)]``: a forward adds
    its piece's bytes for the micro-batch, the backward of the same pair frees them (a split backward, at its weight
    gradient: the weights' gradient still reads what the forward saved)."""
    held = peak = 0.0
    for a in actions:
        if a.kind == FORWARD:
            held += saved.get((a.piece, a.micro), 0.0)
            peak = max(peak, held)
        elif a.kind in (BACKWARD, BACKWARD_WEIGHT):
            held -= saved.get((a.piece, a.micro), 0.0)
    return peak


def peaks(schedule: str, devices: Sequence[str], piece_devices: Sequence[str], piece_bytes: Sequence[Sequence[float]],
          micro_batches: int) -> dict[str, float]:
    """Each device's modelled peak under ``schedule``: ``piece_devices[k]`` holds piece ``k``, which saves
    ``piece_bytes[k][m]`` for micro-batch ``m``."""
    saved = {(k, m): float(b) for k, per in enumerate(piece_bytes) for m, b in enumerate(per)}
    out = {}
    for d in devices:
        mine = [k for k, pd in enumerate(piece_devices) if pd == d]
        out[d] = held_peak(order_of(schedule, mine, len(piece_devices), micro_batches), saved) if mine else 0.0
    return out
