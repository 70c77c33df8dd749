"""PyTorch's own DDP compression hooks, run on the lab's ring so their bytes are counted like the lab's compressors.

Anyone compressing gradients in PyTorch first tries the hooks torch ships
(``torch.distributed.algorithms.ddp_comm_hooks``): ``fp16_compress_hook``, ``bf16_compress_hook`` and
``powerSGD_hook``. A hook is handed DDP's ``GradBucket`` (which has no Python constructor) and all-reduces through
gloo, where nothing counts the bytes or emulates a link. So the lab runs the same arithmetic on its flat gradient,
step for step, with every all-reduce through :func:`lab.comm.ring.ring_allreduce` (bytes counted from the real
messages, the link-emulation hook honoured). The tests hold each one to DDP with torch's hook on the same seed and
data: the same parameters after training.

* :class:`HalfPrecision`: cast to fp16 or bf16, divide by the world size in that precision, all-reduce (the sum
  accumulates in half precision on the wire), cast back: 2 bytes per entry.
* :class:`PowerSGD` (Vogels et al., 2019): each gradient matrix M (a parameter's gradient viewed as
  ``shape[0] x rest``) is sent as two thin matrices, P = M Q (all-reduced, then orthonormalised) and Q = Mᵀ P
  (all-reduced, averaged); the receiver uses P Qᵀ. Q starts random (one seed per run, shared by the workers) and is
  reused next step (warm start); the first ``start_iter`` steps are plain all-reduces (warm-up). Parameters whose
  low-rank form would not save at least ``min_compression_rate`` times (biases, small matrices) are all-reduced as
  they are. Error feedback keeps what the low-rank form missed and adds it to the next gradient. The random Qs are
  drawn in the order DDP's rebuilt bucket holds the gradients (the order they became ready in a backward pass), so
  the lab's run draws the same Qs as DDP's.
"""
from __future__ import annotations

import copy
import time
from collections import defaultdict
from typing import Any, Sequence

import numpy as np
import torch
import torch.distributed as dist
# torch's own orthonormalisation and "is it worth compressing" rule, so the arithmetic is the hook's
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize, _should_compress

from lab.comm.ring import LinkDelay, ring_allreduce
from lab.errors import LabError

HALF_DTYPES = {"fp16_hook": torch.float16, "bf16_hook": torch.bfloat16}
#: torch refuses a warm-up under 2 steps when error feedback or warm start is on (both always are here)
MIN_START_ITER = 2


class _Counted:
    """Byte and time counts of one step's all-reduces."""

    def __init__(self, group: Any, link_delay: LinkDelay | None):
        self.group, self.link_delay = group, link_delay
        self.sent = self.recv = 0
        self.t_comm = self.delay = 0.0

    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        st = ring_allreduce(tensor, "sum", group=self.group, link_delay=self.link_delay)
        self.t_comm += time.perf_counter() - t0
        self.sent += st.sent
        self.recv += st.received
        self.delay += st.delay_seconds
        return tensor

    def stats(self, t_total: float, kept: int, numel: int, item: int) -> dict:
        return {"bytes_sent": self.sent, "bytes_recv": self.recv, "t_compress": max(0.0, t_total - self.t_comm),
                "t_comm": self.t_comm, "delay": self.delay, "kept": kept, "density": kept / max(1, numel),
                "payload_bytes": kept * item}


def _world(group: Any) -> int:
    if not dist.is_available() or not dist.is_initialized():
        raise LabError("no process group: call torch.distributed.init_process_group first")
    return dist.get_world_size(group)


class HalfPrecision:
    """torch's fp16/bf16 compress hook on one flat gradient: returns the mean over the workers, in float32."""

    def __init__(self, kind: str):
        if kind not in HALF_DTYPES:
            raise LabError(f"unknown half-precision hook {kind!r}; choose one of {list(HALF_DTYPES)}")
        self.kind, self.dtype = kind, HALF_DTYPES[kind]

    def step(self, flat_grad: torch.Tensor, group: Any = None, link_delay: LinkDelay | None = None
             ) -> tuple[torch.Tensor, dict]:
        t0 = time.perf_counter()
        io = _Counted(group, link_delay)
        half = flat_grad.reshape(-1).to(self.dtype).div_(_world(group))
        io.allreduce(half)
        out = half.to(torch.float32)
        return out.view(flat_grad.shape), io.stats(time.perf_counter() - t0, half.numel(), half.numel(), 2)


class PowerSGD:
    """torch's ``powerSGD_hook`` (warm start and error feedback on, as its defaults) on one flat gradient.

    ``shapes``: the parameters' shapes in the order the flat gradient holds them; ``order``: the indices of those
    parameters in the order DDP's bucket holds them (default: reversed, the usual order gradients become ready).
    ``step`` returns the mean over the workers, as float32 of the flat gradient's shape.
    """

    def __init__(self, shapes: Sequence[Sequence[int]], rank: int = 1, start_iter: int = 10, seed: int = 0,
                 order: Sequence[int] | None = None, min_compression_rate: float = 2.0):
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise LabError(f"PowerSGD's rank must be a whole number >= 1 (got {rank!r})", where="compression.rank")
        if isinstance(start_iter, bool) or not isinstance(start_iter, int) or start_iter < MIN_START_ITER:
            raise LabError(f"PowerSGD's warm-up must be at least {MIN_START_ITER} plain all-reduce steps (torch's rule "
                           f"with error feedback and warm start; got {start_iter!r})", where="compression.warmup")
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        if not self.shapes:
            raise LabError("PowerSGD needs the model's parameter shapes")
        sizes = [int(np.prod(s)) if s else 1 for s in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        self.numel = self.offsets[-1]
        order = list(range(len(self.shapes)))[::-1] if order is None else [int(i) for i in order]
        if sorted(order) != list(range(len(self.shapes))):
            raise LabError("PowerSGD's parameter order must name every parameter once")
        self.order = order
        self.rank, self.start_iter, self.min_rate = rank, start_iter, float(min_compression_rate)
        self.seed = int(seed)
        self.rng = np.random.RandomState(self.seed)  # torch's PowerSGDState(random_seed=seed)
        self.iter = 0
        self.error: torch.Tensor | None = None
        self.p_memory: torch.Tensor | None = None
        self.q_memory: torch.Tensor | None = None

    def reset(self) -> None:
        """Forget the residual and the warm-start matrices (a recovery on other workers starts afresh)."""
        self.error = self.p_memory = self.q_memory = None

    def state_dict(self) -> dict:
        """Tensors and numbers only, so a checkpoint holding it loads with ``weights_only=True``."""
        name, keys, pos, has_gauss, gauss = self.rng.get_state()
        return {"iter": self.iter, "error": self.error, "p": self.p_memory, "q": self.q_memory,
                "rng_keys": torch.from_numpy(keys.astype(np.int64)), "rng_pos": int(pos),
                "rng_gauss": (int(has_gauss), float(gauss))}

    def load_state_dict(self, d: dict) -> None:
        self.iter, self.error, self.p_memory, self.q_memory = int(d["iter"]), d["error"], d["p"], d["q"]
        has_gauss, gauss = d["rng_gauss"]
        self.rng.set_state(("MT19937", d["rng_keys"].numpy().astype(np.uint32), d["rng_pos"], has_gauss, gauss))

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """The parameters' gradients as views of ``flat``, in DDP's bucket order."""
        return [flat[self.offsets[i]:self.offsets[i + 1]].view(self.shapes[i]) for i in self.order]

    def sizes(self) -> tuple[int, int, int]:
        """Entries of the three all-reduces of a step once PowerSGD runs: the uncompressed parameters, the Ps, the
        Qs."""
        plain = p_size = q_size = 0
        for s in self.shapes:
            n = s[0] if s else 1
            m = int(np.prod(s[1:])) if len(s) > 1 else 1
            r = min(n, m, self.rank)
            if _should_compress(n, m, r, self.min_rate)[0]:
                p_size, q_size = p_size + n * r, q_size + m * r
            else:
                plain += n * m
        return plain, p_size, q_size

    def compressed_numel(self) -> int:
        """Entries sent per step once PowerSGD runs."""
        return sum(self.sizes())

    def step(self, flat_grad: torch.Tensor, group: Any = None, link_delay: LinkDelay | None = None
             ) -> tuple[torch.Tensor, dict]:
        if flat_grad.numel() != self.numel:
            raise LabError(f"PowerSGD was built for {self.numel:,} gradient entries, got {flat_grad.numel():,}")
        t0 = time.perf_counter()
        world = _world(group)
        io = _Counted(group, link_delay)
        buf = flat_grad.detach().reshape(-1).to(torch.float32, copy=True)
        if self.iter < self.start_iter:  # warm-up: torch's plain all-reduce hook (divide, then sum)
            self.iter += 1
            io.allreduce(buf.div_(world))
            return buf.view(flat_grad.shape), io.stats(time.perf_counter() - t0, buf.numel(), buf.numel(), 4)

        if self.error is None:
            self.error = torch.zeros_like(buf)
        else:
            buf.add_(self.error)
        before = buf.clone()

        compress, plain = [], []
        p_size = q_size = 0
        for t in self._views(buf):
            mat = t.view(t.shape[0], -1) if t.dim() else t.view(1, 1)
            n, m = mat.shape
            r = min(n, m, self.rank)
            if _should_compress(n, m, r, self.min_rate)[0]:
                compress.append(mat)
                p_size, q_size = p_size + n * r, q_size + m * r
            else:
                plain.append(t)
        plain_mem = torch.cat([t.reshape(-1) for t in plain]) if plain else torch.zeros(0)

        fresh = self.p_memory is None
        if fresh:
            self.p_memory, self.q_memory = torch.empty(p_size), torch.empty(q_size)
        by_shape: dict[tuple, list[torch.Tensor]] = defaultdict(list)  # torch's hook walks them grouped by shape
        for mat in compress:
            by_shape[tuple(mat.shape)].append(mat)
        mats, ps, qs = [], [], []
        pi = qi = 0
        for group_of in by_shape.values():
            for mat in group_of:
                n, m = mat.shape
                r = min(n, m, self.rank)
                mats.append(mat.unsqueeze(0))
                ps.append(self.p_memory[pi:pi + n * r].view(1, n, r))
                qs.append(self.q_memory[qi:qi + m * r].view(1, m, r))
                pi, qi = pi + n * r, qi + m * r
        if fresh:
            gen = torch.Generator().manual_seed(int(self.rng.randint(1_000_000_000)))
            for q in qs:
                q.copy_(torch.randn(*q.shape, generator=gen))
                _orthogonalize(q, 0)
        else:
            for q in qs:
                _orthogonalize(q, 0)
        for mat, q, p in zip(mats, qs, ps):
            torch.bmm(mat, q, out=p)

        io.allreduce(plain_mem).div_(world)
        at = 0
        for t in plain:
            t.copy_(plain_mem[at:at + t.numel()].view_as(t))
            at += t.numel()
        io.allreduce(self.p_memory)  # no division: P is orthonormalised next
        for p in ps:
            _orthogonalize(p, 0)
        for mat, p, q in zip(mats, ps, qs):
            torch.bmm(mat.transpose(1, 2), p, out=q)
        io.allreduce(self.q_memory).div_(world)
        for p, q, mat in zip(ps, qs, mats):
            torch.bmm(p, q.transpose(1, 2), out=mat)

        self.error = before - buf
        self.iter += 1
        kept = plain_mem.numel() + p_size + q_size
        return buf.view(flat_grad.shape), io.stats(time.perf_counter() - t0, kept, buf.numel(), 4)


def ready_order(model: torch.nn.Module, loss_fn: Any) -> list[int]:
    """The order a backward pass makes the parameters' gradients ready (the order DDP rebuilds its bucket in).

    ``loss_fn(model)`` returns a loss to differentiate; the backward runs on a copy, so ``model`` and its gradients
    (a training job's views of one flat buffer) are left as they were."""
    twin = copy.deepcopy(model)
    params = [p for p in twin.parameters() if p.requires_grad]
    seen: list[int] = []
    handles = [p.register_post_accumulate_grad_hook(lambda _p, i=i: seen.append(i)) for i, p in enumerate(params)]
    try:
        loss_fn(twin).backward()
    finally:
        for h in handles:
            h.remove()
    return list(dict.fromkeys(seen)) + [i for i in range(len(params)) if i not in seen]


__all__ = ["HalfPrecision", "PowerSGD", "ready_order", "HALF_DTYPES", "MIN_START_ITER"]
