"""Compressed gradient all-reduce in the training job (issue 7), its one-process reference, and the
Compression page's preset grid of training runs.

In the job
----------
With ``training.compression.kind != "none"`` and ``sync = "allreduce"``, each worker's step is::

    forward/backward -> [emulated compute wait]
      -> compress the flat gradient (lab.compress, with error feedback when it is on)   t_compress
      -> share it by compression.sharing (lab.comm.sparse: seed D's sparse ring,          t_comm
         sparse all-gather, or the lab's dense ring of the decompressed fp32 tensor)
      -> mean = sum / N -> the optimiser's ordinary local step (identical on every worker)

``bytes_sent`` / ``bytes_recv`` are the bytes of the messages this worker really sent and received
(lab.comm.sparse counts them; no modelled values), and with emulation on the link delay of
:func:`lab.train.emulation.ring_link_delay` is slept before every message, the hook the lab's ring
uses. ``kind = "none"`` keeps the ordinary path (gloo or the lab's ring, loss riding in the buffer).

The loss does not travel with the compressed gradient (it is not a gradient entry to compress):
every worker keeps its own, the records carry it to rank 0 anyway, and rank 0 stores the job's loss
as the batch-weighted mean of the workers' losses (what the dense path's all-reduce computes). A
NaN or inf loss or gradient on any worker is turned into an all-NaN gradient before compressing:
every compressor keeps NaN entries (top-k ranks NaN first; FP16 keeps NaN), so the summed gradient
is non-finite on every worker, every optimiser skips that step together, and the run is marked
diverged at the same step everywhere.

Compression time is measured on this machine and is not scaled by the emulated device speed.
Refused (LabError at check time): compression with ``sync`` other than "allreduce" (the parameter
server and the optimiser-state all-reduce exchange other tensors than one gradient), and settings
that keep no entry of this model's gradient.
"""

from __future__ import annotations

import math
import time
from typing import Any, Iterable

import numpy as np
import torch

from lab.errors import LabError
from lab.scenario import Compression, Scenario, Training

SUPPORTED_SYNC = ("allreduce",)


def enabled(tr: Training) -> bool:
    return tr.compression.kind != "none"


def check(tr: Training, numel: int) -> None:
    """Refuse compression settings the job cannot run, before any worker starts."""
    if not enabled(tr):
        return
    c = tr.compression
    if tr.sync not in SUPPORTED_SYNC:
        raise LabError(f"compression ({c.kind}) works with sync = 'allreduce' (gradient all-reduce) only; got "
                       f"sync = {tr.sync!r}. Set compression.kind = 'none' or sync = 'allreduce'",
                       where="training.compression")
    from lab.compress import make_compressor

    make_compressor(c.kind, c.ratio, c.group_size, seed=tr.seed)  # GroupTopK refuses k = 0 here
    if c.kind in ("topk", "randomk") and int(math.floor(c.ratio * numel + 0.5)) == 0:
        raise LabError(f"{c.kind}: ratio {c.ratio:g} of the model's {numel:,} gradient entries keeps none; raise "
                       f"the ratio to at least {0.5 / numel:.3g}", where="training.compression.ratio")


class CompressedAllReduce:
    """One worker's compressed gradient sync (built by :func:`attach`)."""

    def __init__(self, tr: Training, world: int, batch_sizes: list[int], link_delay: Any = None):
        from lab.compress import GradientCompressor

        self.gc = GradientCompressor(tr.compression, seed=tr.seed)
        self.world = world
        self.batch_sizes = np.asarray(batch_sizes, dtype=np.float64)
        self.link_delay = link_delay

    def sync(self, gflat: torch.Tensor, local_loss: float) -> tuple[float, int, int, float, float]:
        """Compress ``gflat[:-1]`` (the gradient; the last slot is the loss), share it, and leave the
        mean over the workers in place. Returns (ready wall-clock stamp, bytes sent, bytes received,
        emulated link seconds, compression seconds)."""
        from lab.comm.sparse import share

        grad = gflat[:-1]
        if not (math.isfinite(local_loss) and bool(torch.isfinite(grad).all())):
            grad.fill_(math.nan)  # reaches every worker through the sum (see the module docstring)
        t0 = time.perf_counter()
        payload = self.gc.compressor.compress(grad)
        t_compress = time.perf_counter() - t0
        ready = time.time()
        summed, st = share(payload, self.gc.sharing, link_delay=self.link_delay)
        grad.copy_(summed.view(grad.shape)).div_(self.world)
        return ready, int(st["bytes_sent"]), int(st["bytes_recv"]), float(st.get("delay", 0.0)), t_compress

    def job_loss(self, losses: np.ndarray) -> np.ndarray:
        """(workers, steps) local losses -> the loss over the combined batch, per step."""
        w = self.batch_sizes[: losses.shape[0], None]
        return (losses * w).sum(0) / w.sum()


def attach(trainer: Any) -> CompressedAllReduce | None:
    """Called by the Trainer's setup: the compressed sync when the scenario asks for it, else None."""
    trainer.t_compress = 0.0
    tr = trainer.tr
    if not enabled(tr) or trainer.plan.server is not None:
        return None
    trainer.bytes_kind = "measured"
    return CompressedAllReduce(tr, trainer.world, trainer.plan.batch_sizes, trainer.link_delay)


# ---------------------------------------------------------------------------------------------
# One-process reference: what the job must compute and send, step by step
# ---------------------------------------------------------------------------------------------
def simulate(tr: Training, steps: int | None = None) -> dict:
    """The compressed training run of ``tr`` (even split, no exchange, no emulation) in one process.

    Each worker's batch, gradient and compressor (error-feedback residual included) are its own;
    the sharing is lab.comm.sparse's one-process simulation of the same schedule (dense: the lab
    ring's byte count, the sum in rank order). Returns {"state": the model's state_dict at the
    end, "bytes_sent": [[per worker] per step], "bytes_recv": ..., "kept": ...}.
    """
    import torch.nn.functional as F

    from lab.comm.sparse import dense_ring_bytes_per_rank, simulate_sparse_allgather, simulate_sparse_ring
    from lab.compress import make_compressor
    from lab.models import build_model
    from lab.train import data as data_mod
    from lab.train.worker import make_optimizer

    torch.set_num_threads(1)
    steps = tr.steps if steps is None else steps
    n_w, c = tr.workers, tr.compression
    ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
    model = build_model(tr.model, ds.in_features, ds.classes, seed=tr.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    numel = sum(p.numel() for p in params)
    check(tr, numel)
    opt = make_optimizer(tr, params, tr.lr * (n_w if tr.lr_scaling else 1))
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
        if c.sharing == "sparse_ring":
            sim = simulate_sparse_ring(payloads, numel)
            total, sent, recv = sim.total, sim.bytes_sent, sim.bytes_recv
        elif c.sharing == "sparse_allgather":
            total, sent, recv = simulate_sparse_allgather(payloads)
        else:
            total = payloads[0].to_dense()
            for p in payloads[1:]:
                total = total + p.to_dense()
            sent = recv = dense_ring_bytes_per_rank(numel, n_w) if n_w > 1 else [0]
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


# ---------------------------------------------------------------------------------------------
# The Compression page's preset grid: three optimisers x (dense, Group-TopK 1 %, + error feedback)
# ---------------------------------------------------------------------------------------------
GRID_OPTIMISERS = ("adam", "adabelief", "maxadabelief")
GRID_VARIANTS = ("dense", "gtk", "gtk_ef")
GRID_RATIO = 0.01


def variant_label(variant: str, ratio: float = GRID_RATIO) -> str:
    return {"dense": "dense (fp32 ring)", "gtk": f"Group-TopK {ratio:.0%}",
            "gtk_ef": f"Group-TopK {ratio:.0%} + error feedback"}[variant]


def grid_scenarios(sc: Scenario, ratio: float = GRID_RATIO, sharing: str | None = None) -> list[tuple[Scenario, str]]:
    """The 9 runs of the grid: the scenario's training settings with gradient all-reduce over the
    lab's ring (so dense bytes are counted too), each optimiser x each variant. Group-TopK uses the
    scenario's group size and sharing method (``sharing`` overrides; "dense" falls back to
    sparse all-gather, else the sparse variants would send as much as dense)."""
    base = sc.training.compression
    sharing = sharing or (base.sharing if base.sharing != "dense" else "sparse_allgather")
    out = []
    for opt in GRID_OPTIMISERS:
        for v in GRID_VARIANTS:
            comp = Compression() if v == "dense" else Compression(
                kind="group_topk", ratio=ratio, group_size=base.group_size, error_feedback=v == "gtk_ef",
                sharing=sharing)
            tr = sc.training.replace(optimizer=opt, sync="allreduce", allreduce_impl="ring", compression=comp)
            out.append((sc.replace(training=tr), f"{sc.name} · grid · {opt} · {variant_label(v, ratio)}"))
    return out


def variant_of(tr: dict) -> str:
    """The grid variant of a stored run's training settings (a dict)."""
    c = tr.get("compression", {})
    if c.get("kind", "none") == "none":
        return "dense"
    return "gtk_ef" if c.get("error_feedback") else "gtk"


def grid_results(store: Any, run_ids: Iterable[str]) -> list[dict]:
    """One row per run of the grid, from the run store (units in the keys' names: SI)."""
    ids = list(run_ids)
    if not ids:
        return []
    s = store.summary(ids).set_index("id")
    rows = []
    for rid in ids:
        run = store.get_run(rid)
        tr = run["scenario"]["training"]
        r = s.loc[rid]
        steps = int(r.steps) or 1
        workers = int(tr.get("workers", 1))
        c = tr.get("compression", {})
        rows.append({"id": rid, "optimizer": tr["optimizer"], "variant": variant_of(tr),
                     "label": variant_label(variant_of(tr), c.get("ratio", GRID_RATIO)),
                     "sharing": "ring" if c.get("kind", "none") == "none" else c.get("sharing"),
                     "status": run["status"], "steps": int(r.steps), "final_test_acc": float(r.final_test_acc),
                     "wall_s": float(r.wall_s), "s_per_step": float(r.wall_s) / steps,
                     "bytes_per_worker_step": float(r.bytes_sent) / (workers * steps),
                     "t_compress_per_step": float(r.t_compress) / steps, "t_comm_per_step": float(r.t_comm) / steps})
    return rows


__all__ = ["enabled", "check", "attach", "CompressedAllReduce", "simulate", "grid_scenarios", "grid_results",
           "GRID_OPTIMISERS", "GRID_VARIANTS", "variant_label", "variant_of"]
