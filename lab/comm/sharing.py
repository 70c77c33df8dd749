"""The compressed send step, composed once from GRACE's three roles: a compressor (compress a gradient into a
payload and back; :mod:`lab.compression.compressors`), a memory (error feedback: compensate with the residual,
update it after compressing; :class:`lab.compression.compressors.ErrorFeedback`) and a communicator per sharing
method (how the payloads travel, their hops and their bytes; :func:`lab.comm.sparse.share`). The training job,
the DDP hook, the test workers and the benches all compress through :meth:`GradientCompressor.compress` and
share through :meth:`GradientCompressor.step` (the hook's asynchronous all-gather aside). Compression knows
nothing of processes; this is where it meets them. PyTorch's own compression hooks (:mod:`lab.comm.torch_hooks`) send
by their own rounds of all-reduce rather than one payload, so for them :meth:`GradientCompressor.step` hands the whole
step to the hook's run.""" 
from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from lab.comm.sparse import share
from lab.comm.torch_hooks import HalfPrecision, PowerSGD
from lab.compression.compressors import ErrorFeedback, Payload, make_compressor
from lab.errors import LabError
from lab.scenario.document import Compression
from lab.scenario.names import SHARING, TORCH_HOOKS


class GradientCompressor:
    """Compress (with error feedback), share, and return the dense sum: see the module docstring."""

    def __init__(self, settings: Any = None, *, seed: int = 0, kind: str | None = None, ratio: float | None = None,
                 group_size: int | None = None, error_feedback: bool | None = None, sharing: str | None = None,
                 shapes: Any = None, order: Any = None):
        """``shapes`` (the parameters' shapes, in the flat gradient's order) and ``order`` (the order gradients
        become ready in a backward pass) are what PowerSGD needs to see the flat gradient as matrices."""
        s = settings if settings is not None else Compression()
        self.kind = kind if kind is not None else s.kind
        self.sharing = sharing if sharing is not None else s.sharing
        self.compressor = None
        self.hook: HalfPrecision | PowerSGD | None = None
        if self.kind == "powersgd":
            if shapes is None:
                raise LabError("PowerSGD needs the model's parameter shapes", where="compression.kind")
            self.hook = PowerSGD(shapes, s.rank, s.warmup, seed, order)
            return
        if self.kind in TORCH_HOOKS:
            self.hook = HalfPrecision(self.kind)
            return
        self.compressor = make_compressor(
            self.kind, ratio if ratio is not None else s.ratio, group_size if group_size is not None else s.group_size,
            error_feedback=error_feedback if error_feedback is not None else s.error_feedback, seed=seed)
        if self.sharing not in SHARING:
            raise LabError(f"unknown sharing method {self.sharing!r}; choose one of {list(SHARING)}",
                           where="compression.sharing")

    def reset(self) -> None:
        """Forget the error-feedback residual (e.g. after restoring a checkpoint)."""
        if isinstance(self.compressor, ErrorFeedback):
            self.compressor.reset()
        if isinstance(self.hook, PowerSGD):
            self.hook.reset()

    def compress(self, flat_grad: torch.Tensor, key: int = 0) -> Payload:
        """Compensate, compress, update the memory (of gradient ``key``): the payload this worker sends."""
        if self.hook is not None:
            raise LabError(f"{self.kind} sends by its own all-reduces, not one payload: use step()")
        if isinstance(self.compressor, ErrorFeedback):
            return self.compressor.compress(flat_grad, key)
        return self.compressor.compress(flat_grad)

    def step(self, flat_grad: torch.Tensor, group: Any = None, link_delay: Any = None, *, key: int = 0,
             equal_sizes: bool = False, count_sum: bool = False, mean: bool = False) -> tuple[torch.Tensor, dict]:
        """One step: compress, share over ``group`` (default: the whole world), return (sum, stats); with ``mean``,
        the mean over the workers (torch's hooks average before they send, so their sum is the mean times N).

        ``link_delay(src, dst, nbytes) -> seconds`` is slept before each message (link emulation,
        the same hook as :func:`lab.comm.ring.ring_allreduce`); ``equal_sizes``: every worker's payload has
        the same size (no count travels with a sparse all-gather); ``count_sum``: also count the sum's non-zero
        entries (``nnz_sum``, a pass over the gradient the training job does not pay for).
        """
        if self.hook is not None:
            out, st = self.hook.step(flat_grad, group=group, link_delay=link_delay)
            if not mean:
                out = out * dist.get_world_size(group)
            if count_sum:
                st["nnz_sum"] = int(torch.count_nonzero(out))
            return out, st
        t0 = time.perf_counter()
        payload = self.compress(flat_grad, key)
        t1 = time.perf_counter()
        summed, stats = share(payload, self.sharing, group=group, link_delay=link_delay, equal_sizes=equal_sizes)
        t2 = time.perf_counter()
        out = {"bytes_sent": stats["bytes_sent"], "bytes_recv": stats["bytes_recv"],
               "t_compress": t1 - t0, "t_comm": t2 - t1, "delay": stats.get("delay", 0.0), "kept": payload.count,
               "density": payload.count / payload.numel, "payload_bytes": payload.nbytes}
        if count_sum:
            out["nnz_sum"] = int(torch.count_nonzero(summed))
        if mean:
            summed = summed.div_(dist.get_world_size(group))
        return summed.view(flat_grad.shape), out
