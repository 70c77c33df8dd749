"""Reference implementations the training job is checked and timed against.

* :func:`single_process` -- one process training on the combined batch (every worker's batch of a
  step concatenated), the same model, seed and optimiser: what gradient all-reduce must equal.
* :func:`compressed_single_process` -- the compressed training run in one process: what each
  worker must compute and send, step by step.
* :func:`placement_single_process` -- a placement run in one process: the same micro-batches, their
  gradients accumulated, what the pipelined processes must compute step by step.
* :func:`paired_worker` -- one rank of bench/bench_train.py: the lab's loop and the same training
  written with ``torch.nn.parallel.DistributedDataParallel``, taking turns in the same processes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab.comm.sparse import simulate_sparse_ring, sum_payloads
from lab.modelled.collectives.ring import ring_bytes_per_rank
from lab.compression.compressors import make_compressor
from lab.optim.optimizers import from_training as optim_from_training
from lab.scenario.document import Training, default_scenario
from lab.scenario.models import model_of
from lab.store.runs import JOB_WORKER, RunStore
from lab.train import compressed
from lab.train import data as data_mod
from lab.comm.spawn import init_worker, run_local
from lab.train.trainer import Trainer
from lab.scenario.names import Sharing


def single_process(tr: Training, steps: int | None = None) -> dict[str, torch.Tensor]:
    """The model's state after ``steps`` steps on the combined batches (even split, no exchange)."""
    torch.set_num_threads(1)
    steps = tr.steps if steps is None else steps
    ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
    model = model_of(tr, ds.in_features, ds.classes)
    lr = tr.lr * (tr.workers if tr.lr_scaling else 1)
    opt = optim_from_training(tr, [p for p in model.parameters() if p.requires_grad], lr)
    for x, y in data_mod.combined_batches(ds, tr.workers, tr.split, tr.batch_size, steps,
                                          alpha=tr.dirichlet_alpha, seed=tr.seed):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def paired_worker(rank: int, world: int, port: int, training: dict, steps: int, warmup: int, rounds: int,
                  db: str, out_file: str) -> None:
    """One rank of the paired benchmark: in the same processes and process group, each round runs
    the lab's training loop (:class:`lab.train.trainer.Trainer`, the job's own code, writing to the
    run store at ``db``) and then the DDP loop, back to back, so both see the same machine load.
    Rank 0 appends one JSON line per round to ``out_file``: samples/s of each between step
    ``warmup`` and the last step."""

    init_worker(rank, world, port, timeout_s=60.0)
    tr = Training.from_dict(training)
    sc = default_scenario()
    sc = sc.replace(training=tr)
    store = RunStore(db)
    ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
    samples = (steps - warmup) * tr.batch_size * world
    for _ in range(rounds):
        rid = [store.create_run(sc, status="running") if rank == 0 else None]
        dist.broadcast_object_list(rid, src=0)  # every rank names the run (checkpoints, logs)
        rid = rid[0]
        trainer = Trainer(sc, rank, world, rid, store, launched=True)
        trainer.setup()
        trainer.run()
        lab = None
        if rank == 0:
            job = store.metrics(rid, worker=JOB_WORKER).set_index("step")
            lab = samples / (job.wall[steps] - job.wall[warmup])
        model = model_of(tr, ds.in_features, ds.classes)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = optim_from_training(tr, list(ddp.parameters()), tr.lr)
        sampler = data_mod.worker_data(ds, rank, world, tr.split, tr.batch_size, seed=tr.seed)
        dist.barrier()
        t_warm = time.time()
        for step in range(1, steps + 1):
            x, y = sampler.next_batch()
            opt.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            opt.step()
            if step == warmup:
                t_warm = time.time()
        ddp_sps = samples / (time.time() - t_warm)
        if rank == 0:
            with open(out_file, "a") as f:
                f.write(json.dumps({"lab": lab, "ddp": ddp_sps}) + "\n")
        dist.barrier()
    dist.destroy_process_group()


def paired_throughput(folder: str | os.PathLike, workers: int, steps: int, warmup: int, batch: int = 32,
                      model: str = "mlp", rounds: int = 1, timeout_s: float = 1800.0) -> list[dict]:
    """Run :func:`paired_worker` in ``workers`` spawned processes (files in ``folder``); one
    {"lab": samples/s, "ddp": samples/s} per round (bench/bench_train.py)."""
    folder = Path(folder)
    out = folder / "paired.jsonl"
    tr = Training(workers=workers, steps=steps, batch_size=batch, model=model, eval_every=steps).to_dict()
    run_local(paired_worker, workers, (tr, steps, warmup, rounds, str(folder / "paired.db"), str(out)),
              timeout_s=timeout_s)
    return [json.loads(line) for line in out.read_text().splitlines()]


def compressed_single_process(tr: Training, steps: int | None = None) -> dict:
    """The compressed training run of ``tr`` (even split, no exchange, no emulation) in one process.

    Each worker's batch, gradient and compressor (error-feedback residual included) are its own;
    the sharing is lab.comm.sparse's one-process simulation of the same schedule (dense: the lab
    ring's byte count, the sum in rank order). Returns {"state": the model's state_dict at the
    end, "bytes_sent": [[per worker] per step], "bytes_recv": ..., "kept": ...}.
    """
    import torch.nn.functional as F

    torch.set_num_threads(1)
    steps = tr.steps if steps is None else steps
    n_w, c = tr.workers, tr.compression
    ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
    model = model_of(tr, ds.in_features, ds.classes)
    params = [p for p in model.parameters() if p.requires_grad]
    numel = sum(p.numel() for p in params)
    compressed.check(tr, numel)
    opt = optim_from_training(tr, params, tr.lr * (n_w if tr.lr_scaling else 1))
    samplers = [data_mod.worker_data(ds, r, n_w, tr.split, tr.batch_size, alpha=tr.dirichlet_alpha, seed=tr.seed)
                for r in range(n_w)]
    sizes = data_mod.batch_sizes(tr.batch_size, n_w, tr.split)
    comps = [make_compressor(c.kind, c.ratio, c.group_size, error_feedback=c.error_feedback, seed=tr.seed)
             for _ in range(n_w)]
    out: dict = {"bytes_sent": [], "bytes_recv": [], "kept": []}
    for _ in range(steps):
        payloads = []
        for r in range(n_w):
            x, y = samplers[r].next_batch()
            model.zero_grad()
            weight = sizes[r] * n_w / sum(sizes)
            loss = F.cross_entropy(model(x), y)
            (loss if weight == 1.0 else loss * weight).backward()
            payloads.append(comps[r].compress(torch.cat([p.grad.reshape(-1) for p in params])))
        if c.sharing == Sharing.SPARSE_RING:
            sim = simulate_sparse_ring(payloads, numel)
            total, sent, recv = sim.total, sim.bytes_sent, sim.bytes_recv
        elif c.sharing == Sharing.SPARSE_ALLGATHER:  # equal-size payloads, no counts (lab.comm.sparse, equal_sizes)
            total = sum_payloads(payloads)
            sent = recv = [(n_w - 1) * p.nbytes for p in payloads]
        else:
            total = payloads[0].to_dense()
            for p in payloads[1:]:
                total = total + p.to_dense()
            sent = recv = ring_bytes_per_rank(numel, n_w) if n_w > 1 else [0]
        mean = total / n_w
        off = 0
        for p in params:
            p.grad = mean[off:off + p.numel()].view_as(p).clone()
            off += p.numel()
        opt.step()
        out["bytes_sent"].append(list(sent))
        out["bytes_recv"].append(list(recv))
        out["kept"].append([p.count for p in payloads])
    out["state"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return out


def placement_single_process(sc, steps: int, dtype: torch.dtype = torch.float64) -> dict:
    """A placement run's reference: one process, the same model, batches, micro-batches (their gradients
    accumulated), loss scaling and optimiser. Returns the loss per step and the parameters at the end."""
    torch.set_num_threads(1)
    tr = sc.training
    ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
    model = model_of(tr, ds.in_features, ds.classes).to(dtype)
    opt = optim_from_training(tr, [p for p in model.parameters() if p.requires_grad], tr.lr)
    sampler = data_mod.worker_data(ds, 0, 1, "even", tr.batch_size, seed=tr.seed)
    losses = []
    for _ in range(steps):
        x, y = sampler.next_batch()
        x = x.to(dtype)
        total = 0.0
        for xm, ym in zip(x.tensor_split(tr.micro_batches), y.tensor_split(tr.micro_batches)):
            loss = F.cross_entropy(model(xm), ym, reduction="sum") / x.shape[0]
            loss.backward()
            total += float(loss.detach())
        opt.step()
        opt.zero_grad(set_to_none=False)
        losses.append(total)
    return {"losses": losses, "params": {n: p.detach().double().reshape(-1) for n, p in model.named_parameters()}}
