"""Workers that tests spawn to hold the lab's runs of torch's compression hooks to DDP with the hooks themselves
(spawned processes import them from here)."""
from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from lab.comm.spawn import init_worker
from lab.comm.torch_hooks import HALF_DTYPES, HalfPrecision, PowerSGD, ready_order
from lab.optim.optimizers import from_training as optim_from_training
from lab.scenario.document import Training
from lab.scenario.models import build_model, model_of
from lab.train import data as data_mod


def _batches(rank: int, steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    return [(torch.randn(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(steps)]


def register(ddp: DistributedDataParallel, kind: str, rank_r: int, start_iter: int, seed: int) -> None:
    """Give ``ddp`` torch's own hook for ``kind`` (the lab's names), with PowerSGD's rank, warm-up and seed."""
    if kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank_r,
                                            start_powerSGD_iter=start_iter, random_seed=seed)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return

    # torch's bf16 hook refuses to start without CUDA and NCCL; the arithmetic it wraps runs on gloo
    def half_hook(state, bucket, dtype=HALF_DTYPES[kind]):
        return default_hooks._compress_hook(dtype, state, bucket)
    ddp.register_comm_hook(None, half_hook)


def _ddp_run(model_name: str, kind: str, rank_r: int, start_iter: int, steps: int, seed: int, rank: int) -> dict:
    model = build_model(model_name, seed=seed)
    ddp = DistributedDataParallel(model)
    register(ddp, kind, rank_r, start_iter, seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in _batches(rank, steps, seed):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _lab_run(model_name: str, kind: str, rank_r: int, start_iter: int, steps: int, seed: int, rank: int
             ) -> tuple[dict, list[dict]]:
    model = build_model(model_name, seed=seed)
    params = list(model.parameters())
    batches = _batches(rank, steps, seed)
    if kind == "powersgd":
        x0, y0 = batches[0]
        order = ready_order(model, lambda m: torch.nn.functional.cross_entropy(m(x0), y0))
        ex = PowerSGD([p.shape for p in params], rank_r, start_iter, seed, order)
    else:
        ex = HalfPrecision(kind)
    opt = torch.optim.SGD(params, lr=0.1)
    stats = []
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        mean, st = ex.step(flat)
        at = 0
        for p in params:
            p.grad.copy_(mean[at:at + p.numel()].view_as(p))
            at += p.numel()
        opt.step()
        stats.append({k: st[k] for k in ("bytes_sent", "bytes_recv", "kept")})
    return {n: p.detach().clone() for n, p in model.named_parameters()}, stats


def hook_worker(rank: int, world: int, port: int, out_dir: str, cases: list, steps: int = 6, seed: int = 3) -> None:
    """For each (model, kind, rank, warm-up) case: train ``steps`` SGD steps through DDP with torch's hook and
    through the lab's run of it, from the same weights on the same batches; write the largest parameter
    difference and the lab's byte counts to ``rank<r>.json``."""
    init_worker(rank, world, port)
    rows = []
    try:
        for model_name, kind, rank_r, start_iter in cases:
            want = _ddp_run(model_name, kind, rank_r, start_iter, steps, seed, rank)
            got, stats = _lab_run(model_name, kind, rank_r, start_iter, steps, seed, rank)
            diff = max(float((want[n] - got[n]).abs().max()) for n in want)
            moved = max(float((want[n] - build_model(model_name, seed=seed).state_dict()[n]).abs().max()) for n in want)
            rows.append({"model": model_name, "kind": kind, "rank_r": rank_r, "start": start_iter, "max_diff": diff,
                         "moved": moved, "stats": stats,
                         "numel": sum(p.numel() for p in build_model(model_name, seed=seed).parameters())})
        dist.barrier()
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with the message
        rows.append({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(rows, f)


def ddp_job_worker(rank: int, world: int, port: int, training: dict, out_file: str) -> None:
    """A training job's scenario (even split) trained by DDP with torch's own hook for its compressor, on the
    job's batches with the job's optimiser; rank 0 saves the final state_dict to ``out_file``."""
    init_worker(rank, world, port)
    try:
        tr = Training.from_dict(training)
        c = tr.compression
        ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
        model = model_of(tr, ds.in_features, ds.classes)
        ddp = DistributedDataParallel(model)
        register(ddp, c.kind, c.rank, c.warmup, tr.seed)
        opt = optim_from_training(tr, list(ddp.parameters()), tr.lr)
        sampler = data_mod.worker_data(ds, rank, world, tr.split, tr.batch_size, seed=tr.seed)
        for _ in range(tr.steps):
            x, y = sampler.next_batch()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
        if rank == 0:
            torch.save(model.state_dict(), out_file)
    finally:
        dist.destroy_process_group()
