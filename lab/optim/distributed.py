"""Optimiser state across processes: all-reducing lists of tensors (mean, max, sum) through any all-reduce function, torch.distributed's, or a local stand-in that runs N workers in one process for tests and the playground."""
from __future__ import annotations

import threading
from typing import Callable, Sequence

import torch
from torch import Tensor

from lab.errors import LabError

#: all-reduces one tensor in place with the given op ("mean", "max", "sum") over the workers.
AllReduceFn = Callable[[Tensor, str], None]


ALLREDUCE_OPS = ("mean", "max", "sum")


def allreduce_tensors(tensors: Sequence[Tensor], op: str, allreduce_fn: AllReduceFn) -> None:
    """All-reduce ``tensors`` in place with one ``allreduce_fn`` call per (device, dtype) bucket."""
    if op not in ALLREDUCE_OPS:
        raise LabError(f"all-reduce op must be one of {', '.join(ALLREDUCE_OPS)}; got {op!r}",
                       where="allreduce_tensors")
    buckets: dict[tuple, list[Tensor]] = {}
    for t in tensors:
        buckets.setdefault((t.device, t.dtype), []).append(t)
    for ts in buckets.values():
        if len(ts) == 1 and ts[0].is_contiguous():
            allreduce_fn(ts[0].view(-1), op)
            continue
        flat = torch.cat([t.reshape(-1) for t in ts])
        allreduce_fn(flat, op)
        parts = flat.split([t.numel() for t in ts])
        torch._foreach_copy_(list(ts), [part.view_as(t) for part, t in zip(parts, ts)])


def torch_allreduce_fn(group=None) -> AllReduceFn:
    """An ``allreduce_fn`` over an initialised ``torch.distributed`` process group.

    "mean" is a SUM followed by a division by the group size (gloo has no AVG). gloo's all-reduce
    returns the same reduced values to every rank, so every rank takes the same step.
    """
    import torch.distributed as dist

    def allreduce(tensor: Tensor, op: str) -> None:
        if op == "mean":
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
            tensor.div_(dist.get_world_size(group))
        elif op == "sum":
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
        elif op == "max":
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)
        else:
            raise LabError(f"all-reduce op must be one of {', '.join(ALLREDUCE_OPS)}; got {op!r}",
                           where="torch_allreduce_fn")

    return allreduce


class LocalAllReduce:
    """An all-reduce among ``world_size`` threads of this process: a stand-in for torch.distributed.

    Each simulated worker (a thread) uses ``group.fn(rank)`` as its ``allreduce_fn``; a call blocks
    until every worker has made the matching call, then every worker's tensor holds the reduction
    (mean, max or sum over workers, summed in rank order). ``run(worker)`` starts ``worker(rank, fn)``
    in one thread per rank and returns their results in rank order, re-raising the first error.
    ``calls`` records (op, numel) for every collective.
    """

    def __init__(self, world_size: int, timeout: float = 60.0):
        if not isinstance(world_size, int) or world_size < 1:
            raise LabError(f"world_size must be an integer >= 1, got {world_size!r}", where="LocalAllReduce")
        self.world_size = world_size
        self.timeout = timeout
        self.calls: list[tuple[str, int]] = []
        self._barrier = threading.Barrier(world_size, timeout=timeout)
        self._slots: list[tuple[Tensor, str] | None] = [None] * world_size
        self._result: Tensor | None = None
        self._error: Exception | None = None

    def fn(self, rank: int) -> AllReduceFn:
        if not 0 <= rank < self.world_size:
            raise LabError(f"rank must be in [0, {self.world_size}), got {rank}", where="LocalAllReduce")

        def allreduce(tensor: Tensor, op: str) -> None:
            self._slots[rank] = (tensor, op)
            if self._barrier.wait() == 0:                   # one thread combines
                self._combine()
            self._barrier.wait()
            if self._error is not None:
                raise self._error
            tensor.copy_(self._result)
            self._barrier.wait()                            # nobody reuses the slots too early

        return allreduce

    def _combine(self) -> None:
        slots = list(self._slots)
        self._error = None
        ops = {op for _, op in slots}
        shapes = {(tuple(t.shape), t.dtype) for t, _ in slots}
        if len(ops) != 1 or len(shapes) != 1:
            self._error = LabError(f"workers made mismatched all-reduce calls: ops {sorted(ops)}, "
                                   f"shapes/dtypes {sorted(map(str, shapes))}", where="LocalAllReduce")
            return
        op = ops.pop()
        tensors = [t for t, _ in slots]
        if op not in ALLREDUCE_OPS:
            self._error = LabError(f"all-reduce op must be one of {', '.join(ALLREDUCE_OPS)}; got {op!r}",
                                   where="LocalAllReduce")
            return
        if op == "max":
            result = tensors[0].clone()
            for t in tensors[1:]:
                torch.maximum(result, t, out=result)
        else:
            result = tensors[0].clone()
            for t in tensors[1:]:
                result.add_(t)
            if op == "mean":
                result.div_(self.world_size)
        self._result = result
        self.calls.append((op, tensors[0].numel()))

    def run(self, worker: Callable[[int, AllReduceFn], object]) -> list:
        results: list = [None] * self.world_size
        errors: list[BaseException | None] = [None] * self.world_size

        def body(rank: int) -> None:
            try:
                results[rank] = worker(rank, self.fn(rank))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors[rank] = exc
                self._barrier.abort()

        threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(self.world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.timeout)
        if any(t.is_alive() for t in threads):
            self._barrier.abort()
            raise LabError(f"simulated workers did not finish within {self.timeout} s", where="LocalAllReduce")
        real = [e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)]
        if real or any(errors):
            self._barrier.reset()
            raise (real or [e for e in errors if e is not None])[0]
        return results
