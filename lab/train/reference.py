"""Reference implementations the training job is checked and timed against.

* :func:`single_process` -- one process training on the combined batch (every worker's batch of a
  step concatenated), the same model, seed and optimiser: what gradient all-reduce must equal.
* :func:`ddp_worker` -- one rank of the same training loop written with
  ``torch.nn.parallel.DistributedDataParallel``, for bench/bench_train.py.
"""

from __future__ import annotations

import datetime
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab.models import build_model
from lab.scenario import Training
from lab.train import data as data_mod
from lab.train.worker import make_optimizer


def single_process(tr: Training, steps: int | None = None) -> dict[str, torch.Tensor]:
    """The model's state after ``steps`` steps on the combined batches (even split, no exchange)."""
    torch.set_num_threads(1)
    steps = tr.steps if steps is None else steps
    ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
    model = build_model(tr.model, ds.in_features, ds.classes, seed=tr.seed)
    lr = tr.lr * (tr.workers if tr.lr_scaling else 1)
    opt = make_optimizer(tr, [p for p in model.parameters() if p.requires_grad], lr)
    for x, y in data_mod.combined_batches(ds, tr.workers, tr.split, tr.batch_size, steps,
                                          alpha=tr.dirichlet_alpha, seed=tr.seed):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def ddp_worker(rank: int, world: int, port: int, training: dict, steps: int, warmup: int, out_file: str) -> None:
    """One DDP rank: the same data, model, batch and optimiser as the lab's allreduce mode; rank 0
    writes the samples/s measured between step ``warmup`` and the last step to ``out_file``."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    tr = Training.from_dict(training)
    ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
    model = build_model(tr.model, ds.in_features, ds.classes, seed=tr.seed)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = make_optimizer(tr, list(ddp.parameters()), tr.lr)
    sampler = data_mod.worker_data(ds, rank, world, tr.split, tr.batch_size, seed=tr.seed)
    dist.barrier()
    t_warm = None
    for step in range(1, steps + 1):
        x, y = sampler.next_batch()
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        if step == warmup:
            t_warm = time.time()
    t_end = time.time()
    if rank == 0:
        with open(out_file, "w") as f:
            json.dump({"samples_per_s": (steps - warmup) * tr.batch_size * world / (t_end - t_warm),
                       "seconds": t_end - t_warm}, f)
    dist.barrier()
    dist.destroy_process_group()
