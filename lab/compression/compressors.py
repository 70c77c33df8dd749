"""Gradient compressors, error feedback, and the one-line entry point for the training job.

The shape follows GRACE (sands-lab/grace): three small roles composed in one send step.

* a **Compressor** turns a tensor into a :class:`Payload` (what goes on the wire, with its exact
  size in bytes) and turns a payload back into a dense tensor of the original shape;
* a **Memory**, here :class:`ErrorFeedback`, adds what was not sent last time (the residual) to the
  next gradient before compressing, and keeps what is not sent this time;
* a **Communicator**, here the sharing methods of :mod:`lab.comm.sparse` (dense all-reduce of the
  decompressed tensor, the edge-compression design's sparse ring, sparse all-gather).

Compressors: :class:`NoCompression`, :class:`GroupTopK` (the edge-compression design), global :class:`TopK`,
:class:`RandomK` and :class:`FP16`. :func:`make_compressor` builds one from the Scenario's
``Compression`` settings.

Wire format (little endian, byte for byte what :meth:`Payload.to_bytes` writes)
------------------------------------------------------------------------------
A 24-byte header ``<BBHIQII``: kind (0 dense fp32, 1 dense fp16, 2 sparse fp32), index format
(0 none, 1 int32 global indices, 2 uint16 in-group offsets), 2 reserved bytes, count of values
(uint32), numel of the flat tensor (uint64), group size and entries per full group (uint32 each;
0 unless the index format is 2). Then ``count`` values (fp32, or fp16 for kind 1), then the
indices (int32, or uint16 in-group offsets). So:

* dense fp32 (no compression): 24 + 4 n bytes;  fp16: 24 + 2 n bytes;
* TopK and RandomK: fp32 value + int32 global index = **8 bytes per kept entry** (+ 24);
* GroupTopK: fp32 value + uint16 offset inside its group = **6 bytes per kept entry** (+ 24),
  used whenever ``group_size <= 65536``; larger groups fall back to int32 global indices (8 B).
  The offsets decode without any per-group count because every full group sends exactly ``k``
  entries, in group order (the tail group sends the rest).

The tensor's shape is context both sides already know (the model's structure), as in GRACE; it is
not sent. :attr:`Payload.nbytes` is computed from the same layout and always equals
``len(payload.to_bytes())`` (tested).

Selection rules
---------------
* GroupTopK(ratio, group_size): the flat tensor is cut into groups of ``group_size`` consecutive
  entries; each full group keeps ``k = round(ratio x group_size)`` entries of largest magnitude
  (``k = 0`` is refused with a LabError). When the length is not a multiple of ``group_size`` the
  last, shorter **tail group** of ``r`` entries keeps ``k_tail = min(r, max(1, round(ratio x r)))``:
  the same ratio, but never nothing (else the tail would never be sent). Ties in magnitude are
  broken by ``torch.topk`` (unspecified order); the *magnitudes* kept are always exactly the k
  largest. Offsets are sorted inside each group, so a payload is canonical.
* TopK(ratio): ``k = round(ratio x n)`` largest magnitudes of the whole tensor (k = 0 refused).
* RandomK(ratio, seed): ``k = round(ratio x n)`` positions uniformly without replacement from a
  generator seeded once with ``seed``; workers built with the same seed pick the same positions in
  the same step (as in GRACE). The indices are still sent (8 B per entry), so the byte count is
  honest even where a receiver could have regenerated them.
* FP16: every value rounded to half precision (values beyond +-65504 are clamped to it).

Speed: GroupTopK does ``abs`` and ``topk(k, dim=1)`` on a ``(groups, group_size)`` view, 4 M
entries at a time into a reused 16 MB buffer (no gradient-sized temporary to fault in, and few
parallel regions, which matters when the cores are shared). bench/bench_compress.py measures it
against one global ``torch.topk``.

Error feedback
--------------
``ErrorFeedback(compressor)`` keeps a per-worker residual ``e``. Each call compresses
``c = g + e``, and sets the new residual to ``c - decompress(payload)``. Invariant (bit for bit, in
float32): ``sent + new residual == gradient + old residual``.

For the training job: one line per step
---------------------------------------
::

    gc = GradientCompressor(training.compression, seed=training.seed)   # once per worker
    summed, stats = gc.step(flat_grad)                                   # every step
    flat_grad = summed / world_size                                      # the caller averages

``step`` compresses (with error feedback when the settings ask for it), shares by the settings'
method over the default process group (or ``group=``), and returns the dense **sum** over the
workers of what each sent, as float32 of ``flat_grad``'s shape, with ``stats``: ``bytes_sent`` and
``bytes_recv`` (this worker, this step, counted from the messages really sent), ``t_compress`` and
``t_comm`` (seconds, measured; ``delay`` of it was emulated link time), ``kept`` (entries this
worker sent), ``density`` (kept / numel), ``payload_bytes`` (this worker's serialised payload) and
``nnz_sum`` (non-zero entries of the result). Every worker gets the identical tensor. Options:
``step(flat_grad, group=..., link_delay=...)`` with the link-emulation hook of
:func:`lab.comm.ring.ring_allreduce`; ``gc.reset()`` forgets the residual. RandomK workers share
the seed, so they pick the same positions each step; pass ``seed=seed + rank`` for independent
picks. The summed result of ``sharing="dense"`` is float32 all-reduced by the lab's ring.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lab.errors import LabError
from lab.scenario.names import COMPRESSOR_LABELS, PAYLOAD_COMPRESSORS, TORCH_HOOKS

HEADER = struct.Struct("<BBHIQII")
HEADER_BYTES = HEADER.size  # 24
UINT16_MAX_GROUP = 1 << 16  # offsets 0..65535 fit in uint16

KIND_DENSE32, KIND_DENSE16, KIND_SPARSE32 = 0, 1, 2
INDEX_NONE, INDEX_INT32, INDEX_UINT16_OFFSET = 0, 1, 2
_INDEX_BYTES = {INDEX_NONE: 0, INDEX_INT32: 4, INDEX_UINT16_OFFSET: 2}
_VALUE_BYTES = {KIND_DENSE32: 4, KIND_DENSE16: 2, KIND_SPARSE32: 4}
_INDEX_NAMES = {INDEX_NONE: "none", INDEX_INT32: "int32 global index", INDEX_UINT16_OFFSET: "uint16 in-group offset"}
FP16_MAX = 65504.0
MAX_NUMEL = 2**31 - 1  # int32 indices


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5 + 1e-9))


# ---------------------------------------------------------------------------------------------
# Payload: what goes on the wire
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Payload:
    """A compressed tensor as it travels: values, optional indices, and the wire layout.

    ``indices`` is held as int32 in memory; ``index_format`` says how it is written on the wire
    (int32 global indices, or uint16 offsets inside groups of ``group_size`` with ``k`` entries per
    full group). ``shape`` is receiver-side context, not sent.
    """

    kind: int
    numel: int
    values: torch.Tensor
    indices: torch.Tensor | None = None
    index_format: int = INDEX_NONE
    group_size: int = 0
    k: int = 0
    shape: tuple = field(default=())

    @property
    def count(self) -> int:
        return int(self.values.numel())

    @property
    def bytes_per_entry(self) -> int:
        return _VALUE_BYTES[self.kind] + _INDEX_BYTES[self.index_format]

    @property
    def nbytes(self) -> int:
        """Exact wire size: header + count x (value bytes + index bytes)."""
        return HEADER_BYTES + self.count * self.bytes_per_entry

    @property
    def wire_format(self) -> str:
        vals = "fp16" if self.kind == KIND_DENSE16 else "fp32"
        if self.index_format == INDEX_NONE:
            return f"dense {vals}: {self.bytes_per_entry} B per entry + {HEADER_BYTES} B header"
        return (f"{vals} value + {_INDEX_NAMES[self.index_format]}: {self.bytes_per_entry} B per kept entry "
                f"+ {HEADER_BYTES} B header")

    def global_indices(self) -> torch.Tensor:
        """The kept positions in the flat tensor (int64), whatever the wire format."""
        if self.index_format == INDEX_NONE:
            return torch.arange(self.numel, dtype=torch.int64)
        idx = self.indices.to(torch.int64)
        if self.index_format == INDEX_INT32:
            return idx
        gs, k = self.group_size, self.k
        n_full = self.numel // gs
        head = n_full * k
        out = torch.empty_like(idx)
        if n_full:
            base = torch.arange(n_full, dtype=torch.int64).mul_(gs)[:, None]
            out[:head] = (idx[:head].view(n_full, k) + base).view(-1)
        out[head:] = idx[head:] + n_full * gs
        return out

    def to_pairs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(int64 global indices, float32 values): the sparse form the sharing methods exchange."""
        return self.global_indices(), self.values.to(torch.float32)

    def to_dense(self) -> torch.Tensor:
        """The flat float32 tensor this payload stands for (zeros where nothing was sent)."""
        vals = self.values.to(torch.float32)
        if self.index_format == INDEX_NONE:
            return vals.clone() if vals.dtype == self.values.dtype else vals
        out = torch.zeros(self.numel, dtype=torch.float32)
        out[self.global_indices()] = vals
        return out

    # ----- real serialisation --------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        head = HEADER.pack(self.kind, self.index_format, 0, self.count, self.numel, self.group_size, self.k)
        vdtype = np.float16 if self.kind == KIND_DENSE16 else np.float32
        parts = [head, self.values.numpy().astype(vdtype, copy=False).tobytes()]
        if self.index_format == INDEX_INT32:
            parts.append(self.indices.numpy().astype("<i4", copy=False).tobytes())
        elif self.index_format == INDEX_UINT16_OFFSET:
            parts.append(self.indices.numpy().astype("<u2").tobytes())
        return b"".join(parts)

    @staticmethod
    def from_bytes(data: bytes | bytearray | memoryview, shape: tuple | None = None) -> "Payload":
        data = memoryview(data)
        if len(data) < HEADER_BYTES:
            raise LabError(f"a payload needs at least {HEADER_BYTES} header bytes (got {len(data)})")
        kind, ifmt, _, count, numel, gs, k = HEADER.unpack(data[:HEADER_BYTES])
        if kind not in _VALUE_BYTES or ifmt not in _INDEX_BYTES:
            raise LabError(f"unknown payload kind {kind} or index format {ifmt}")
        want = HEADER_BYTES + count * (_VALUE_BYTES[kind] + _INDEX_BYTES[ifmt])
        if len(data) != want:
            raise LabError(f"payload length {len(data)} does not match its header ({want} bytes expected)")
        vb = count * _VALUE_BYTES[kind]
        vdtype = np.float16 if kind == KIND_DENSE16 else np.float32
        vals = torch.from_numpy(np.frombuffer(data[HEADER_BYTES:HEADER_BYTES + vb], dtype=vdtype).copy())
        idx = None
        if ifmt == INDEX_INT32:
            idx = torch.from_numpy(np.frombuffer(data[HEADER_BYTES + vb:], dtype="<i4").astype(np.int32))
        elif ifmt == INDEX_UINT16_OFFSET:
            idx = torch.from_numpy(np.frombuffer(data[HEADER_BYTES + vb:], dtype="<u2").astype(np.int32))
        return Payload(kind, numel, vals, idx, ifmt, gs, k, tuple(shape) if shape is not None else (numel,))


# ---------------------------------------------------------------------------------------------
# Compressors
# ---------------------------------------------------------------------------------------------
def flat32(tensor: torch.Tensor, who: str) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise LabError(f"{who} compresses a torch tensor (got {type(tensor).__name__})")
    if not tensor.is_floating_point():
        raise LabError(f"{who} compresses a floating-point tensor (got {tensor.dtype})")
    if tensor.numel() == 0:
        raise LabError(f"{who}: the tensor is empty")
    if tensor.numel() > MAX_NUMEL:
        raise LabError(f"{who}: at most {MAX_NUMEL:,} entries fit int32 indices (got {tensor.numel():,})")
    return tensor.detach().reshape(-1).to(torch.float32).contiguous()


def _check_ratio(ratio: Any, who: str) -> float:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio):
        raise LabError(f"{who}: ratio must be a number (got {ratio!r})")
    if not 0.0 < ratio <= 1.0:
        raise LabError(f"{who}: ratio must be in (0, 1] (got {ratio})")
    return float(ratio)


class Compressor:
    """compress(tensor) -> Payload; decompress(payload) -> dense tensor of the original shape."""

    name = "compressor"

    def compress(self, tensor: torch.Tensor) -> Payload:  # pragma: no cover - interface
        raise NotImplementedError

    def decompress(self, payload: Payload) -> torch.Tensor:
        return payload.to_dense().view(payload.shape or (payload.numel,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class NoCompression(Compressor):
    name = "none"

    def compress(self, tensor: torch.Tensor) -> Payload:
        flat = flat32(tensor, "NoCompression")
        return Payload(KIND_DENSE32, flat.numel(), flat.clone(), shape=tuple(tensor.shape))


class FP16(Compressor):
    name = "fp16"

    def compress(self, tensor: torch.Tensor) -> Payload:
        flat = flat32(tensor, "FP16")
        half = flat.clamp(-FP16_MAX, FP16_MAX).to(torch.float16)
        return Payload(KIND_DENSE16, flat.numel(), half, shape=tuple(tensor.shape))


class TopK(Compressor):
    """The k = round(ratio x n) largest magnitudes of the whole tensor; int32 indices."""

    name = "topk"

    def __init__(self, ratio: float):
        self.ratio = _check_ratio(ratio, "TopK")

    def k_for(self, n: int) -> int:
        k = _round_half_up(self.ratio * n)
        if k == 0:
            raise LabError(f"TopK: ratio {self.ratio:g} of {n} entries keeps k = 0; raise the ratio to at "
                           f"least {0.5 / n:.3g}")
        return min(k, n)

    def compress(self, tensor: torch.Tensor) -> Payload:
        flat = flat32(tensor, "TopK")
        k = self.k_for(flat.numel())
        idx = torch.topk(flat.abs(), k, sorted=False).indices.sort().values
        return Payload(KIND_SPARSE32, flat.numel(), flat[idx], idx.to(torch.int32), INDEX_INT32,
                       shape=tuple(tensor.shape))

    def __repr__(self) -> str:
        return f"TopK(ratio={self.ratio:g})"


class RandomK(Compressor):
    """k = round(ratio x n) positions uniformly at random without replacement; int32 indices."""

    name = "randomk"

    def __init__(self, ratio: float, seed: int = 0):
        self.ratio = _check_ratio(ratio, "RandomK")
        self.seed = int(seed)
        self.generator = torch.Generator().manual_seed(self.seed)

    def compress(self, tensor: torch.Tensor) -> Payload:
        flat = flat32(tensor, "RandomK")
        n = flat.numel()
        k = _round_half_up(self.ratio * n)
        if k == 0:
            raise LabError(f"RandomK: ratio {self.ratio:g} of {n} entries keeps k = 0; raise the ratio")
        idx = torch.randperm(n, generator=self.generator)[:k].sort().values
        return Payload(KIND_SPARSE32, n, flat[idx], idx.to(torch.int32), INDEX_INT32, shape=tuple(tensor.shape))

    def __repr__(self) -> str:
        return f"RandomK(ratio={self.ratio:g}, seed={self.seed})"


class GroupTopK(Compressor):
    """The edge-compression design's Group-TopK: in each group of ``group_size`` entries keep the k largest magnitudes.

    See the module docstring for k, the tail group, ties and the wire format. ``index_format``:
    "auto" (uint16 offsets when group_size <= 65536, else int32), "uint16" or "int32".
    """

    name = "group_topk"
    CHUNK_ENTRIES = 1 << 22  # groups processed ~16 MB at a time: few parallel regions, no huge temporary

    def __init__(self, ratio: float, group_size: int = 1024, index_format: str = "auto"):
        self.ratio = _check_ratio(ratio, "GroupTopK")
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise LabError(f"GroupTopK: group_size must be a whole number >= 1 (got {group_size!r})")
        self.group_size = group_size
        self.k = _round_half_up(self.ratio * group_size)
        if self.k == 0:
            raise LabError(f"GroupTopK: ratio {self.ratio:g} x group size {group_size} keeps k = 0 entries per "
                           f"group; raise the ratio to at least {0.5 / group_size:.3g} or use larger groups")
        self.k = min(self.k, group_size)
        if index_format not in ("auto", "uint16", "int32"):
            raise LabError(f"GroupTopK: index_format must be auto, uint16 or int32 (got {index_format!r})")
        if index_format == "uint16" and group_size > UINT16_MAX_GROUP:
            raise LabError(f"GroupTopK: uint16 offsets need group_size <= {UINT16_MAX_GROUP} (got {group_size})")
        self.index_format = (INDEX_UINT16_OFFSET if index_format == "uint16" or
                             (index_format == "auto" and group_size <= UINT16_MAX_GROUP) else INDEX_INT32)

    def tail_k(self, r: int) -> int:
        """Entries kept from a tail group of r < group_size entries (0 when there is no tail)."""
        return 0 if r == 0 else min(r, max(1, _round_half_up(self.ratio * r)))

    def kept(self, n: int) -> int:
        return (n // self.group_size) * self.k + self.tail_k(n % self.group_size)

    def select(self, flat: torch.Tensor) -> torch.Tensor:
        """In-group offsets (int64), full groups first (k each, sorted in each group), then the tail's."""
        gs, k = self.group_size, self.k
        n = flat.numel()
        n_full, r = divmod(n, gs)
        parts = []
        if n_full:
            groups = flat[: n_full * gs].view(n_full, gs)
            off = torch.empty(n_full, k, dtype=torch.int64)
            rows = max(1, self.CHUNK_ENTRIES // gs)
            buf = torch.empty(min(rows, n_full), gs, dtype=torch.float32)
            vals = torch.empty(min(rows, n_full), k, dtype=torch.float32)
            for s in range(0, n_full, rows):
                e = min(n_full, s + rows)
                a = torch.abs(groups[s:e], out=buf[: e - s])
                torch.topk(a, k, dim=1, sorted=False, out=(vals[: e - s], off[s:e]))
            if k > 1:
                off = off.sort(dim=1).values
            parts.append(off.view(-1))
        kt = self.tail_k(r)
        if kt:
            tail = flat[n_full * gs:]
            parts.append(torch.topk(tail.abs(), kt, sorted=False).indices.sort().values)
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def compress(self, tensor: torch.Tensor) -> Payload:
        flat = flat32(tensor, "GroupTopK")
        n = flat.numel()
        gs, k = self.group_size, self.k
        off = self.select(flat)
        n_full = n // gs
        head = n_full * k
        gidx = off.clone()
        if n_full:
            gidx[:head] += torch.arange(n_full, dtype=torch.int64).mul_(gs).repeat_interleave(k)
        gidx[head:] += n_full * gs
        values = flat[gidx]
        if self.index_format == INDEX_UINT16_OFFSET:
            return Payload(KIND_SPARSE32, n, values, off.to(torch.int32), INDEX_UINT16_OFFSET, gs, k,
                           shape=tuple(tensor.shape))
        return Payload(KIND_SPARSE32, n, values, gidx.to(torch.int32), INDEX_INT32, shape=tuple(tensor.shape))

    def __repr__(self) -> str:
        return f"GroupTopK(ratio={self.ratio:g}, group_size={self.group_size})"


class ErrorFeedback(Compressor):
    """Memory of what was not sent: compress(g + e), then e <- (g + e) - sent.

    One instance per worker (the residual is that worker's). Works with any compressor.
    sent + new residual = g + old residual holds bit for bit in float32, with one exception: an
    FP16 entry clamped at ±65504 whose |g + e| lies in [2^29 + 2^16, 2^30) and is an odd multiple
    of 64 (half the float32 values there). From |g + e| = 2^29 + 2^16 on, (g + e) − 65504 is an odd
    multiple of 32 at or above 2^29, where float32's spacing is 64 or more, so the residual is that
    difference rounded: 32 off, at most 2^-24 relative to g + e. Added back to 65504 in float32, the
    tie rounds to even: to g + e itself from 2^30 on and for even multiples of 64, one spacing (64)
    away for odd ones below 2^30. Below 2^29 + 2^16 the residual is exact.
    """

    def __init__(self, compressor: Compressor):
        if isinstance(compressor, ErrorFeedback) or not isinstance(compressor, Compressor):
            raise LabError("ErrorFeedback wraps one plain compressor (NoCompression, GroupTopK, TopK, RandomK, FP16)")
        self.compressor = compressor
        self.name = compressor.name + "+ef"
        # key -> residual: one memory per gradient the worker sends (the job's one flat gradient, key 0; a DDP
        # hook's buckets, by their index)
        self.residuals: dict[int, torch.Tensor] = {}

    @property
    def residual(self) -> torch.Tensor | None:
        """The residual of the one flat gradient (key 0), as a checkpoint keeps it."""
        return self.residuals.get(0)

    @residual.setter
    def residual(self, value: torch.Tensor | None) -> None:
        if value is None:
            self.residuals.pop(0, None)
        else:
            self.residuals[0] = value

    def reset(self) -> None:
        self.residuals.clear()

    def compress(self, tensor: torch.Tensor, key: int = 0) -> Payload:
        """GRACE's memory around the compressor: compensate with the residual of ``key``, compress, update it."""
        flat = flat32(tensor, "ErrorFeedback")
        res = self.residuals.get(key)
        if res is not None and res.numel() != flat.numel():
            raise LabError(f"ErrorFeedback: this worker's residual has {res.numel()} entries but the "
                           f"gradient has {flat.numel()}; use one ErrorFeedback per gradient layout")
        corrected = flat if res is None else flat + res
        payload = self.compressor.compress(corrected.view(tensor.shape))
        self.residuals[key] = corrected - payload.to_dense()
        return payload

    def decompress(self, payload: Payload) -> torch.Tensor:
        return self.compressor.decompress(payload)

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.compressor!r})"




def make_compressor(kind: str = "none", ratio: float = 0.01, group_size: int = 1024, *,
                    error_feedback: bool = False, seed: int = 0) -> Compressor:
    """A compressor by name (the Scenario's ``compression.kind``), optionally with error feedback."""
    if kind == "none":
        c: Compressor = NoCompression()
    elif kind == "group_topk":
        c = GroupTopK(ratio, group_size)
    elif kind == "topk":
        c = TopK(ratio)
    elif kind == "randomk":
        c = RandomK(ratio, seed)
    elif kind == "fp16":
        c = FP16()
    elif kind in TORCH_HOOKS:
        raise LabError(f"{COMPRESSOR_LABELS[kind]} sends by its own all-reduces in a training run, not as one payload; "
                       f"this view compares {', '.join(COMPRESSOR_LABELS[k] for k in PAYLOAD_COMPRESSORS)}",
                       where="compression.kind")
    else:
        raise LabError(f"unknown compressor {kind!r}; choose one of {list(COMPRESSOR_LABELS)}",
                       where="compression.kind")
    return ErrorFeedback(c) if error_feedback else c


def from_settings(settings: Any, seed: int = 0) -> Compressor:
    """The compressor for a :class:`lab.scenario.document.Compression`."""
    return make_compressor(settings.kind, settings.ratio, settings.group_size,
                           error_feedback=settings.error_feedback, seed=seed)


__all__ = ["Payload", "Compressor", "NoCompression", "GroupTopK", "TopK", "RandomK", "FP16", "ErrorFeedback",
           "make_compressor", "from_settings", "HEADER_BYTES", "flat32"]
