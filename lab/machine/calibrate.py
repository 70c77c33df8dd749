"""Calibrate the cost model on this machine: the device profile "this machine".

What is measured (all medians of repeated timings, one torch thread per process as the training
workers use):

* **Compute, per operator class, in context.** A family of *calibration networks* (the lab's
  model classes at widths, depths and batch sizes that the presets do not use, see
  :data:`CALIBRATION_NETS`) runs the training step exactly as :mod:`lab.train.trainer` does: a batch
  taken from a shard, the flat gradient buffer zeroed, forward, cross-entropy, backward into the
  flat buffer, the loss read back. Each network's operators come from :func:`lab.modelled.opgraph.trace`.
  A non-negative least-squares fit (relative errors) then gives

      t_fb = fixed + per_tensor x (parameter tensors) + sum over operators (overhead[class] + flops / throughput[class])

  ``throughput`` is achieved forward FLOP/s of forward + backward time, so it already includes the
  backward pass; ``fixed`` is the step's own cost outside the operators (batch, zeroing, loss,
  autograd start, reading the loss); ``per_tensor`` is the gradient accumulation of each parameter.
  The first matrix product or convolution of a network needs no input gradient: it counts 2/3 of
  its FLOPs (the backward pass of a product is two products, one of them for the input).
* **Optimiser step** of each lab optimiser (:mod:`lab.optim.optimizers`) on synthetic parameter lists:
  ``t_opt = fixed + per_tensor x tensors + per_param x parameters``.
* **Compressors** (:mod:`lab.compression.compressors`, with and without error feedback): ``t = fixed + per_element x n``.
* All of the above **once with one process and once per worker count N = 2..4 with N processes
  running it at the same moment** (they compete for the cores exactly as N training workers do).
* **All-reduce alpha and beta** per N and implementation (gloo, lab ring) from the all-reduce
  measurement command, :func:`lab.comm.measure.measure` (nccl-tests style), fitted by
  :func:`lab.modelled.collectives.fit_alpha_beta`.
* **Compressed sharing** (sparse all-gather, sparse ring, dense ring of the decompressed tensor) on
  N real processes: ``t = per_hop x hops + per_byte x bytes sent``.
* **The N-process terms** come from short jobs of the calibration networks run by the training
  job's own loop (the default, ``cycle_source="loop"``, :mod:`lab.machine.loop`; one process
  too) or from training-like cycles in a harness (``cycle_source="harness"``). Every per-step
  quantity is the mean over the steps after the warm-up, as :func:`lab.machine.predict.measured_step`
  measures a run. From them, per N: compute = ``k x (one-process time) + d`` (a factor and a fixed
  extra per step, :func:`fit_compute_slowdown`: with N processes small networks grew by much more
  than large ones, which one factor could not describe); the collectives in context; the idle of
  equal workers; the rest of the step; and the wait per step those runs had
  (:func:`cycle_wait`), so that the after-wait slow-down counts only beyond it.
* **Ranks pinned as jobs are.** The lab's job manager pins rank k of a job to one core (the
  uniform placement on an idle machine: ranks take the cores in turn), so every calibration process
  is pinned the same way (:func:`pin_rank`; ``LAB_CALIBRATION_PIN=0`` turns it off). Pinned and
  unpinned runs differ by up to 2x on this 2-core VM (4 workers: faster pinned; 2 workers: every
  other step waits 3-5 ms for a scheduler slice on the pinned core).
* Measured on this 2-core VM (bench_fidelity and stored batches of the 13 preset runs): unpinned
  calibration predicting pinned runs 62-68 % off; pinned, medians, one factor: 31-41 %; pinned,
  means, ``k x t + d``, the after-wait factor beyond the calibration wait, loop: 8.3 % on the
  bench's own two batches and 11-13 % on three batches measured up to an hour earlier.

The result is a :class:`MachineProfile`: saved as JSON (with the date and a machine description),
loaded back by the pages and by :func:`lab.machine.predict.predict_step`. ``python -m lab.machine.calibrate``
runs it from the command line (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from lab import settings
from lab.comm.measure import fit_rows, measure
from lab.comm.processes import init_worker, run_local
from lab.comm.ring import ring_allreduce
from lab.compression.compressors import GroupTopK, make_compressor
from lab.errors import LabError
from lab.machine.cases import (
    CALIBRATION_BATCHES,
    CALIBRATION_NETS,
    CALIBRATION_REPEAT,
    CYCLE_KINDS,
    CYCLE_RATIO,
    CYCLE_REPEAT,
    MAX_PROCS,
    build_calibration_net,
    cycle_cases,
    pin_rank,
)
from lab.machine.loop import measure_loop
from lab.machine.profile import (
    COMPUTE_CLASSES,
    ClassCost,
    CommFit,
    ComputeFit,
    LinearCost,
    MachineProfile,
    SharingFit,
    compute_seconds,
    fit_compute,
    fit_linear,
    geomean_error,
    graph_features,
    machine_description,
    nnls_relative,
    profile_path,
)
from lab.modelled.opgraph import trace
from lab.optim.optimizers import make_optimizer
from lab.scenario.names import COMPRESSORS, OPTIMIZERS, SHARING
from lab.train.compressed import share  # the training job's own transport for compressed gradients

# ---------------------------------------------------------------------------------------------
# The profile
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Measurements (run inside one process; the N-process case runs them in N processes at once)
# ---------------------------------------------------------------------------------------------
def _median_time(fn: Callable[[], Any], repeat: int, warmup: int = 2, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds of ``fn`` by ``clock`` (wall by default; ``time.process_time``: CPU time of
    this process, which a process waiting for a core does not accumulate)."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return statistics.median(ts)


CPU = time.process_time


class StepHarness:
    """The training step of :class:`lab.train.trainer.Trainer` (``forward_backward``) for any model:
    parameters and gradients as views of flat buffers, a shard to draw batches from."""

    def __init__(self, model, batch: int, seed: int = 0, shard: int = 1347):
        import torch

        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        numel = sum(p.numel() for p in self.params)
        self.pflat, self.gflat = torch.zeros(numel + 1), torch.zeros(numel + 1)
        off = 0
        with torch.no_grad():
            for p in self.params:
                k = p.numel()
                self.pflat[off:off + k].copy_(p.reshape(-1))
                p.data = self.pflat[off:off + k].view_as(p)
                p.grad = self.gflat[off:off + k].view_as(p)
                off += k
        g = torch.Generator().manual_seed(seed)
        self.x = torch.rand(shard, 64, generator=g)
        self.y = torch.randint(0, 10, (shard,), generator=g)
        self.perm = torch.randperm(shard, generator=g)
        self.batch, self.pos, self.weight = batch, 0, 1.0

    def forward_backward(self) -> float:
        import torch.nn.functional as F

        if self.pos + self.batch > len(self.perm):
            self.pos = 0
        idx = self.perm[self.pos:self.pos + self.batch]
        self.pos += self.batch
        x, y = self.x[idx], self.y[idx]
        self.gflat.zero_()
        loss = F.cross_entropy(self.model(x), y)
        (loss * self.weight).backward()
        lv = float(loss.detach())
        self.gflat[-1] = lv * self.weight
        return lv


def measure_compute(nets: Sequence[int] | None = None, batches: Sequence[int] = CALIBRATION_BATCHES,
                    repeat: int = 15, seed: int = 0, passes: int = 3,
                    sync: Callable[[], None] | None = None) -> list[dict]:
    """Forward + backward seconds of the calibration networks, as the training worker runs a step.

    The cases take turns in ``passes`` rounds of ``repeat / passes`` timed steps each, and each
    case's time is the median of its round medians, so a burst of load from other processes on
    the machine spoils one round of a few cases rather than all the rounds of one case. ``sync``
    (a barrier, with several processes) is called before every timed round, so that concurrent
    processes run the same case at the same moment, as training workers do."""
    import torch

    torch.set_num_threads(1)
    cases = []
    for i in (range(len(CALIBRATION_NETS)) if nets is None else nets):
        cls_name, kwargs = CALIBRATION_NETS[i]
        for b in batches:
            model = build_calibration_net(cls_name, kwargs, seed)
            feat = graph_features(trace(build_calibration_net(cls_name, kwargs, seed), batch_size=b,
                                        name=f"{cls_name}{kwargs}"), sum(1 for p in model.parameters()))
            cases.append(({"net": i, "name": f"{cls_name} {kwargs}", "batch": b, "features": feat},
                          StepHarness(model, b, seed), []))
    per = max(3, repeat // max(1, passes))
    for k in range(max(1, passes)):
        for _, h, meds in cases:
            h.forward_backward()
            if sync is not None:
                sync()
            meds.append(_median_time(h.forward_backward, per, warmup=2 if k == 0 else 0, clock=CPU))
    return [{**info, "seconds": statistics.median(meds)} for info, _, meds in cases]


#: Synthetic parameter lists for the optimiser benchmark: (tensors, total parameters).
OPT_SHAPES = ((2, 2_000), (6, 17_000), (8, 60_000), (24, 15_000), (24, 120_000))


def measure_optimizers(kinds: Sequence[str] = OPTIMIZERS, repeat: int = 15,
                       shapes: Sequence[tuple[int, int]] = OPT_SHAPES) -> dict[str, list[tuple[float, float, float]]]:
    """Seconds of one optimiser step (lab.optim.optimizers) for each kind on synthetic parameter lists."""
    import torch

    torch.set_num_threads(1)
    out: dict[str, list] = {}
    for kind in kinds:
        rows = []
        for tensors, total in shapes:
            each = max(1, total // tensors)
            params = [torch.nn.Parameter(torch.randn(each)) for _ in range(tensors)]
            for p in params:
                p.grad = torch.randn(each) * 1e-3
            opt = make_optimizer(kind, params, lr=1e-3)
            rows.append((float(tensors), float(each * tensors), _median_time(opt.step, repeat, warmup=3, clock=CPU)))
        out[kind] = rows
    return out


COMPRESS_SIZES = (4_096, 32_768, 131_072)


def measure_compressors(keys: Sequence[str] = COMPRESSORS, sizes: Sequence[int] = COMPRESS_SIZES,
                        repeat: int = 10, ratio: float = 0.01, group_size: int = 1024,
                        seed: int = 0) -> dict[str, list[tuple[float, float, float]]]:
    """Seconds of one compress call per compressor (with and without error feedback) and size."""
    import torch

    torch.set_num_threads(1)
    out: dict[str, list] = {}
    g = torch.Generator().manual_seed(seed)
    for kind in keys:
        for ef in (False, True):
            if kind == "none" and ef:
                continue
            rows = []
            for n in sizes:
                x = torch.randn(n, generator=g)
                c = make_compressor(kind, ratio, group_size, error_feedback=ef, seed=seed)
                rows.append((0.0, float(n), _median_time(lambda: c.compress(x), repeat, warmup=2, clock=CPU)))
            out[kind + ("+ef" if ef else "")] = rows
    return out


#: Waits before a step for the wait sweep (seconds) and its cases (calibration network, batch).
WAITS = (0.0, 0.001, 0.003, 0.01, 0.03)
WAIT_CASES = ((1, 16), (7, 16))


def measure_wait_slowdown(cases: Sequence[tuple[int, int]] = WAIT_CASES, waits: Sequence[float] = WAITS,
                          repeat: int = 15) -> list[list[float]]:
    """How much slower a step computes after the process waited (slept) ``w`` seconds: on a shared
    machine other processes run meanwhile and push its data out of the caches. Per wait, the median
    over the cases of (median forward + backward + optimiser wall time after the wait) / (the same
    with no wait). Returns [[wait s, factor], ...], factor 1 at wait 0."""
    import torch

    torch.set_num_threads(1)
    ratios: dict[float, list[float]] = {w: [] for w in waits}
    for net, b in cases:
        cls_name, kwargs = CALIBRATION_NETS[net]
        h = StepHarness(build_calibration_net(cls_name, kwargs), b)
        opt = make_optimizer("adam", h.params, lr=1e-3)
        times: dict[float, list[float]] = {w: [] for w in waits}
        for _ in range(3):
            h.forward_backward()
            opt.step()
        for _ in range(repeat):
            for w in waits:  # take turns, so drifting load hits every wait alike
                if w > 0:
                    time.sleep(w)
                t0 = time.perf_counter()
                h.forward_backward()
                opt.step()
                times[w].append(time.perf_counter() - t0)
        base = statistics.median(times[waits[0]])
        for w in waits:
            ratios[w].append(statistics.median(times[w]) / base)
    out, last = [], 1.0
    for w in waits:
        last = max(last, float(statistics.median(ratios[w]))) if w > 0 else 1.0
        out.append([float(w), last])  # non-decreasing in the wait
    return out


def measure_all_local(nets: Sequence[int] | None = None, repeat: int = 15) -> dict:
    """Every single-process measurement (compute, optimisers, compressors, the wait sweep), raw."""
    return {"compute": measure_compute(nets=nets, repeat=repeat), "wait": measure_wait_slowdown(repeat=repeat),
            "optimizer": measure_optimizers(repeat=repeat),
            "compressor": measure_compressors(repeat=max(3, repeat // 2))}


def fit_local(raw: dict) -> tuple[dict, dict]:
    """Optimiser and compressor fits from raw local measurements."""
    opt = {k: fit_linear(rows) for k, rows in raw["optimizer"].items()}
    cmp = {k: fit_linear(rows) for k, rows in raw["compressor"].items()}
    return opt, cmp


# ---------------------------------------------------------------------------------------------
# N processes at once: training-like cycles on the calibration networks
# ---------------------------------------------------------------------------------------------


def _cycle_case(rank: int, world: int, net: int, batch: int, kind: tuple, repeat: int, seed: int = 0) -> dict:
    """``repeat`` training-like cycles of one calibration network on every rank at once: forward +
    backward, then the collective, then the optimiser step, timed as lab.train.trainer times them
    (idle = latest 'ready' stamp among the ranks minus one's own, capped at the collective)."""
    import torch
    import torch.distributed as dist

    label, method, impl = kind
    cls_name, kwargs = CALIBRATION_NETS[net]
    model = build_calibration_net(cls_name, kwargs, seed)
    h = StepHarness(model, batch, seed + rank)
    opt = make_optimizer("adam", h.params, lr=1e-3)
    comp = GroupTopK(CYCLE_RATIO, 1024)
    recs = []
    dist.barrier()
    for i in range(repeat + 2):
        c0 = CPU()
        t0 = time.perf_counter()
        h.forward_backward()
        t1 = time.perf_counter()
        c1 = CPU()
        ready = time.time()
        tz = 0.0
        sent = 0.0
        hops = 0.0
        if method is None:
            if impl == "ring":
                st = ring_allreduce(h.gflat, "mean")
                sent, hops = float(st.sent), float(st.messages_sent)
            else:
                dist.all_reduce(h.gflat)
                h.gflat.div_(world)
                sent = 2.0 * (world - 1) * math.ceil(h.gflat.numel() / world) * 4
                hops = 2.0 * (world - 1)
            t2 = time.perf_counter()
        else:  # as lab.train.compressed does it: compress the gradient (not the loss slot), then share
            grad = h.gflat[:-1]
            payload = comp.compress(grad)
            tz = time.perf_counter() - t1
            ready = time.time()
            summed, st = share(payload, method)
            grad.copy_(summed.view(grad.shape)).div_(world)
            t2 = time.perf_counter()
            sent = float(st["bytes_sent"])
            hops = float(world - 1 if method == "sparse_allgather" else 2 * (world - 1))
        c2 = CPU()
        opt.step()
        t3 = time.perf_counter()
        c3 = CPU()
        if i >= 2:
            recs.append([t1 - t0, t3 - t2, tz, t2 - t1 - tz, ready, sent, hops, time.time(), (c1 - c0) + (c3 - c2)])
    local = torch.tensor(recs, dtype=torch.float64)
    every = [torch.zeros_like(local) for _ in range(world)]
    dist.all_gather(every, local)
    r = every[rank]
    latest = torch.stack([e[:, 4] for e in every]).max(dim=0).values
    coll = r[:, 3]
    idle = torch.minimum((latest - r[:, 4]).clamp_min(0.0), coll)
    ends = torch.stack([e[:, 7] for e in every]).max(dim=0).values
    cycle = ends.diff()
    med = lambda x: float(x.mean()) if x.numel() else math.nan  # noqa: E731 - per step, as lab.machine.predict.measured_step
    return {"net": net, "batch": batch, "kind": label, "fb": med(r[:, 0]), "opt": med(r[:, 1]),
            "compress": med(r[:, 2]), "comm": med(coll - idle), "idle": med(idle), "cycle": med(cycle),
            "bytes_sent": med(r[:, 5]), "hops": med(r[:, 6]), "numel": int(h.gflat.numel()), "cpu": med(r[:, 8])}


def _procs_worker(rank: int, world: int, port: int, out_dir: str, nets: list | None, repeat: int,
                  cases: list | None = None) -> None:
    """One of N calibration processes (spawned by :func:`measure_procs`). One process: the compute,
    optimiser and compressor benchmarks. Several: training-like cycles of each collective."""
    import torch.distributed as dist

    pin_rank(rank)

    init_worker(rank, world, port, timeout_s=300.0)
    result: dict = {"rank": rank}
    try:
        dist.barrier()
        if world == 1:
            result["local"] = measure_all_local(nets=nets, repeat=repeat)
        else:
            kinds = {k[0]: k for k in CYCLE_KINDS}
            result["cycles"] = [_cycle_case(rank, world, net, b, kinds[label], repeat) for label, net, b in cases]
        dist.barrier()
    except Exception as exc:  # noqa: BLE001 - reported to the coordinator
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        dist.destroy_process_group()
    tmp = os.path.join(out_dir, f"rank{rank}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, os.path.join(out_dir, f"rank{rank}.json"))


def measure_procs(procs: int, nets: Sequence[int] | None = None, repeat: int = 15,
                  timeout: float = 600.0, cases: Sequence[tuple[str, int, int]] | None = None) -> list[dict]:
    """Run the calibration in ``procs`` spawned processes at once; every rank's raw result. One
    process: the compute benchmarks of ``nets``; several: the training-like ``cases``
    (:func:`cycle_cases`), ``repeat`` cycles each."""

    if not 1 <= procs <= MAX_PROCS:
        raise LabError(f"calibrate 1 to {MAX_PROCS} processes (got {procs})", where="calibration")
    nets = list(range(len(CALIBRATION_NETS))) if nets is None else list(nets)
    with tempfile.TemporaryDirectory(prefix="lab-calib-") as tmp:
        try:
            run_local(_procs_worker, procs, (tmp, nets, repeat, list(cases or cycle_cases(nets))), timeout_s=timeout)
        except RuntimeError as exc:
            raise LabError(f"the calibration with {procs} processes failed: {exc}", where="calibration") from None
        results = []
        for r in range(procs):
            path = Path(tmp) / f"rank{r}.json"
            if not path.exists():
                raise LabError(f"calibration process {r} of {procs} left no result", where="calibration")
            results.append(json.loads(path.read_text()))
    errors = [f"rank {r['rank']}: {r['error']}" for r in results if "error" in r]
    if errors:
        raise LabError("the calibration failed: " + "; ".join(errors), where="calibration")
    return results


def merge_cycles(results: list[dict]) -> list[dict]:
    """Per cycle case, the mean over the ranks of each median."""
    out = []
    for j, case in enumerate(results[0]["cycles"]):
        row = dict(case)
        for k in ("fb", "opt", "compress", "comm", "idle", "bytes_sent", "hops", "cpu"):
            row[k] = float(np.mean([r["cycles"][j][k] for r in results]))
        row["cycle"] = case["cycle"]
        out.append(row)
    return out


def fit_compute_slowdown(rows: Sequence[dict], base: ComputeFit, optimizer: dict,
                         features: dict) -> tuple[float, float]:
    """(k, d): with N processes, a case's compute per step (wall time of forward + backward + the
    optimiser step, ``fb + opt`` of the rows) is ``k x (its one-process prediction) + d``. A
    non-negative least-squares fit in relative terms over the rows (k alone, d = 0, with fewer than
    two distinct cases). The fixed ``d`` is what a step pays whatever its size (the job loop around
    the step, waking up on a shared core); measured here the small networks grow by much more than
    the large ones with N processes, which one factor cannot describe. (1.0, 0.0) without rows."""
    t1, y = [], []
    for r in rows:
        feat = features[(r["net"], r["batch"])]
        t1.append(compute_seconds(base, feat) + optimizer["adam"].time(r["numel"] - 1, feat["tensors"]))
        y.append(r["fb"] + r["opt"])
    t1a, ya = np.array(t1), np.array(y)
    ok = (t1a > 0) & (ya > 0) & np.isfinite(ya)
    t1a, ya = t1a[ok], ya[ok]
    if len(t1a) == 0:
        return 1.0, 0.0
    if len(np.unique(np.round(t1a, 12))) < 2:
        return float(np.median(ya / t1a)), 0.0
    k, d = nnls_relative(np.stack([t1a, np.ones_like(t1a)], axis=1), ya)
    return float(k), float(d)


def cycle_wait(rows: Sequence[dict]) -> float:
    """Median over the dense all-reduce cases of the wait per step (the step minus forward,
    backward and the optimiser: the collective, idle and the rest); 0 without such rows."""
    w = [r["cycle"] - r["fb"] - r["opt"] for r in rows if r["kind"] == "gloo"]
    return max(0.0, float(statistics.median(w))) if w else 0.0


def fit_cycles(procs: int, rows: Sequence[dict], base: ComputeFit, optimizer: dict, features: dict,
               betas: Mapping[str, float] | None = None) -> dict:
    """From the N-process cycles: the compute slow-down and fixed extra per step
    (:func:`fit_compute_slowdown`), the wait per step (:func:`cycle_wait`), the collectives' in-context costs, the idle
    jitter of equal workers and the rest of the step (the loop around the collective, the ranks
    ending at different moments), as medians over the cases (steadier than least squares when single
    cases on a shared machine are far off). Per byte the collectives take beta from the all-reduce
    measurement command (``betas``: impl -> seconds per byte; the calibration gradients are too small
    to separate bandwidth from latency); what remains is the per-step (per-hop) cost in context.
    ``features``: {(net, batch): graph features} (to predict the one-process compute of each case)."""
    betas = dict(betas or {})
    dense = [r for r in rows if r["kind"] == "gloo"]
    k, extra = fit_compute_slowdown(rows, base, optimizer, features)
    comm: dict = {}
    for label, method, impl in CYCLE_KINDS:
        sel = [r for r in rows if r["kind"] == label and r["comm"] > 0]
        if not sel:
            continue
        if method is None:  # dense all-reduce: 2(N-1) alpha + 2(N-1)/N S beta
            beta = betas.get(impl, 0.0)
            steps = 2.0 * (procs - 1)
            alpha = max(0.0, float(statistics.median(
                [(r["comm"] - 2.0 * (procs - 1) / procs * r["numel"] * 4 * beta) / steps for r in sel])))
            f = CommFit(alpha, beta, 0.0)
            err = geomean_error([f.time(procs, r["numel"] * 4) for r in sel], [r["comm"] for r in sel])
            comm[label] = CommFit(alpha, beta, err)
        else:  # hops x per_hop + bytes x per_byte (beta of the lab ring: the same point-to-point sends)
            beta = betas.get("ring", 0.0)
            hop = max(0.0, float(statistics.median([(r["comm"] - r["bytes_sent"] * beta) / max(r["hops"], 1.0)
                                                    for r in sel])))
            f = SharingFit(hop, beta, 0.0)
            err = geomean_error([f.time(r["hops"], r["bytes_sent"]) for r in sel], [r["comm"] for r in sel])
            comm[label] = SharingFit(hop, beta, err)
    idle = [r["idle"] for r in dense]
    return {"contention": k, "step_extra": extra, "wait": cycle_wait(rows), "comm": comm,
            "jitter": LinearCost(max(0.0, float(statistics.median(idle))) if idle else 0.0),
            "remainder": step_rest(dense)}


def step_rest(rows: Sequence[dict]) -> LinearCost:
    """The rest of the step outside the timed parts (the loop around them, ranks ending at
    different moments): the median over ``rows`` of step - compute - collective - idle (fixed, s)."""
    rest = [r["cycle"] - r["fb"] - r["opt"] - r["comm"] - r["idle"] - r.get("compress", 0.0) for r in rows]
    return LinearCost(max(0.0, float(statistics.median(rest))) if rest else 0.0)


def profile_errors(fits: Mapping[str, CommFit], rows: Sequence[dict]) -> dict[str, float]:
    """Geometric-mean error of a profile's alpha-beta (impl -> CommFit) against measurement rows of
    lab.comm.measure (procs, size, impl, time)."""
    out = {}
    for impl, f in fits.items():
        sel = [r for r in rows if r["impl"] == impl]
        if sel:
            out[impl] = geomean_error([f.time(r["procs"], r["size"]) for r in sel], [r["time"] for r in sel])
    return out


ALLREDUCE_SIZES = (4_096, 16_384, 65_536, 262_144)


def measure_allreduce(procs: int, iters: int = 10, sizes: Sequence[int] = ALLREDUCE_SIZES) -> dict[str, CommFit]:
    """alpha and beta of gloo's all_reduce and the lab ring with ``procs`` processes, by the
    all-reduce measurement command (lab.comm.measure, nccl-tests style: every call after a barrier)."""

    rows = measure(procs, list(sizes), iters=iters, impls=("gloo", "ring"), warmup=2)
    out = {}
    for impl in ("gloo", "ring"):
        fit = fit_rows(rows, impl)
        out[impl] = CommFit(float(fit.alpha), float(fit.beta), float(fit.geomean_error))
    return out


# ---------------------------------------------------------------------------------------------
# The whole calibration
# ---------------------------------------------------------------------------------------------
def calibrate(procs: Sequence[int] = (1, 2, 3, 4), *, quick: bool = False, repeat: int = CALIBRATION_REPEAT,
              allreduce_iters: int = 10, nets: Sequence[int] | None = None,
              allreduce_sizes: Sequence[int] = ALLREDUCE_SIZES, measure_command: bool = True,
              cycle_repeat: int = CYCLE_REPEAT, cycle_source: str = "loop",
              progress: Callable[[str, float], None] | None = None) -> MachineProfile:
    """Measure this machine and return its profile (not saved: call ``.save()``).

    One process runs every calibration network (``nets``: indices into :data:`CALIBRATION_NETS`,
    default all); N processes run ``cycle_repeat`` steps of each case of :data:`CYCLE_CASES` (those
    of ``nets``), as short jobs in the training job's own loop (``cycle_source="loop"``) or as
    training-like cycles in a harness (``"harness"``), pinned as the job manager pins ranks.
    ``quick`` takes fewer repeats everywhere (about half the time). ``measure_command`` also runs the all-reduce measurement command per N (nccl-tests
    style alpha and beta; the collectives take their per-byte cost from it)."""

    if quick:
        repeat, allreduce_iters, cycle_repeat = min(repeat, 8), min(allreduce_iters, 5), min(cycle_repeat, 30)
    if cycle_source not in ("loop", "harness"):
        raise LabError(f"cycle_source is 'loop' or 'harness' (got {cycle_source!r})", where="calibration")
    procs = sorted({int(p) for p in procs} | {1})
    if procs[0] < 1 or procs[-1] > MAX_PROCS:
        raise LabError(f"process counts must lie in 1..{MAX_PROCS} (got {procs})", where="calibration")
    progress = progress or (lambda msg, frac: None)
    all_nets = list(range(len(CALIBRATION_NETS))) if nets is None else list(nets)
    cases = cycle_cases(None if nets is None else all_nets)
    t_start = time.time()
    multi = [p for p in procs if p > 1]
    stages = 1 + len(multi) * (2 if measure_command else 1)
    progress("compute, optimisers and compressors, one process", 0.0)
    raw = measure_procs(1, nets=all_nets, repeat=repeat)[0]["local"]
    compute = fit_compute(raw["compute"])
    optimizer, compressor = fit_local(raw)
    measured, cycles = {}, {}
    done = 1
    if cycle_source == "loop":  # one process in the job's own loop: what the loop costs beyond the harness

        what = "short jobs of the calibration networks with {} process(es)"
        progress(what.format(1), done / stages)
        rows1 = measure_loop(1, [(label, i) for label, i, _ in cases if label == "gloo"], steps=cycle_repeat)
        cycles["1"] = rows1
    for p in multi:
        if measure_command:
            progress(f"all-reduce alpha and beta with {p} processes (lab.comm.measure)", done / stages)
            measured[str(p)] = measure_allreduce(p, iters=allreduce_iters, sizes=allreduce_sizes)
            done += 1
        if cycle_source == "loop":  # the training job's own loop on the calibration networks
            progress(what.format(p), done / stages)
            rows = measure_loop(p, [(label, i) for label, i, _ in cases], steps=cycle_repeat)
        else:  # the training-like harness
            progress(f"training-like cycles with {p} processes at once (compute, all-reduce, compressed sharing)",
                     done / stages)
            rows = merge_cycles(measure_procs(p, repeat=cycle_repeat, cases=cases))
        cycles[str(p)] = rows
        done += 1
    terms = fit_process_terms(cycles, compute, optimizer, measured)
    progress("done", 1.0)
    settings = {"procs": procs, "repeat": repeat, "allreduce_iters": allreduce_iters,
                "allreduce_sizes": list(allreduce_sizes),
                "calibration_nets": [f"{CALIBRATION_NETS[i][0]} {CALIBRATION_NETS[i][1]}" for i in all_nets],
                "cycle_cases": [[label, f"{CALIBRATION_NETS[i][0]} {CALIBRATION_NETS[i][1]}", b] for label, i, b in cases],
                "cycle_repeat": cycle_repeat, "cycle_source": cycle_source,
                "calibration_batches": list(CALIBRATION_BATCHES), "seconds": round(time.time() - t_start, 1),
                "compute_samples": [{k: v for k, v in s.items() if k != "features"} for s in raw["compute"]],
                "cycles": cycles}
    return MachineProfile(created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                          machine=machine_description(), compute=compute, optimizer=optimizer,
                          compressor=compressor, wait_slowdown=raw["wait"], measured_allreduce=measured,
                          **terms,
                          settings=settings)


def case_features(keys) -> dict:
    """{(calibration network, batch): graph features} for the given (network, batch) pairs."""

    features = {}
    for net, batch in keys:
        if (net, batch) not in features:
            cls_name, kwargs = CALIBRATION_NETS[net]
            m = build_calibration_net(cls_name, kwargs)
            features[(net, batch)] = graph_features(trace(m, batch_size=batch), sum(1 for _ in m.parameters()))
    return features


def fit_process_terms(cycles: Mapping[str, Sequence[dict]], compute: ComputeFit, optimizer: dict,
                      measured: Mapping[str, dict]) -> dict:
    """The profile's N-process terms from the raw calibration rows ``cycles`` ({procs: rows}; "1":
    one process in the job's loop, when measured) and the measure command's fits ``measured`` (the
    collectives' per-byte cost): keyword arguments of :class:`MachineProfile`."""
    features = case_features((r["net"], r["batch"]) for rows in cycles.values() for r in rows)
    t: dict = {"contention": {"1": 1.0}, "step_extra": {}, "cycle_wait": {}, "allreduce": {}, "sharing": {},
               "jitter": {}, "remainder": {}}
    for p, rows in cycles.items():
        if int(p) == 1:
            t["contention"]["1"], t["step_extra"]["1"] = fit_compute_slowdown(rows, compute, optimizer, features)
            t["remainder"]["1"] = step_rest(rows)
            continue
        betas = {impl: f.beta for impl, f in measured.get(p, {}).items()}
        fit = fit_cycles(int(p), rows, compute, optimizer, features, betas)
        t["contention"][p], t["step_extra"][p], t["cycle_wait"][p] = fit["contention"], fit["step_extra"], fit["wait"]
        t["allreduce"][p] = {k: v for k, v in fit["comm"].items() if isinstance(v, CommFit)}
        t["sharing"][p] = {k: v for k, v in fit["comm"].items() if isinstance(v, SharingFit)}
        t["jitter"][p], t["remainder"][p] = fit["jitter"], fit["remainder"]
    return t


def refit(prof: MachineProfile) -> MachineProfile:
    """The profile's N-process terms fitted again from the raw calibration rows it keeps
    (``settings["cycles"]``), with this version's :func:`fit_cycles`: no new measurement."""
    cycles = (prof.settings or {}).get("cycles") or {}
    if not cycles:
        raise LabError("the profile keeps no calibration rows to fit again; calibrate again", where="calibration")
    return replace(prof, **fit_process_terms(cycles, prof.compute, prof.optimizer, prof.measured_allreduce))


def synthetic_profile(*, overhead: float = 10e-6, throughput: float = 1e9, fixed: float = 100e-6,
                      per_tensor: float = 0.0, opt: LinearCost = LinearCost(50e-6, 0.0, 0.0),
                      compress: LinearCost = LinearCost(20e-6, 0.0, 1e-9), contention: float = 1.0,
                      alpha: float = 100e-6, beta: float = 1e-9, per_hop: float = 200e-6, per_byte: float = 2e-9,
                      jitter: LinearCost = LinearCost(), remainder: LinearCost = LinearCost(),
                      procs: Sequence[int] = (1, 2, 3, 4)) -> MachineProfile:
    """A made-up profile with round numbers (not a measurement): for tests, examples and hand
    calculations. Every operator class costs ``overhead + flops / throughput``."""
    classes = {c: ClassCost(overhead, throughput) for c in COMPUTE_CLASSES}
    multi = [str(p) for p in procs if p > 1]
    return MachineProfile(
        created="2000-01-01T00:00:00+00:00", machine={"hostname": "synthetic", "cpu": "made-up numbers", "cores": 2},
        compute=ComputeFit(classes, fixed, per_tensor, 0.0, 0),
        optimizer={k: opt for k in OPTIMIZERS},
        compressor={k: compress for k in [*COMPRESSORS, *(c + "+ef" for c in COMPRESSORS if c != "none")]},
        contention={"1": 1.0, **{p: contention for p in multi}},
        allreduce={p: {"gloo": CommFit(alpha, beta, 0.0), "ring": CommFit(alpha, beta, 0.0)} for p in multi},
        sharing={p: {m: SharingFit(per_hop, per_byte, 0.0) for m in SHARING} for p in multi},
        jitter={p: jitter for p in multi}, remainder={p: remainder for p in multi}, measured_allreduce={},
        settings={"synthetic": True}, notes=["synthetic"])


# ---------------------------------------------------------------------------------------------
# Running it in the background (the Fidelity page) and from the command line
# ---------------------------------------------------------------------------------------------
def progress_path(path: Path | None = None) -> Path:
    path = Path(path) if path is not None else profile_path()
    return path.with_name(path.stem + ".progress.json")


def read_progress(path: Path | None = None) -> dict | None:
    """The progress of a background calibration: {"message", "fraction", "pid", "error", "done"}."""
    p = progress_path(path)
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def calibration_running(path: Path | None = None) -> bool:
    """A background calibration is under way: its progress file says not done and its process lives."""
    p = read_progress(path)
    if not p or p.get("done"):
        return False
    try:
        os.kill(int(p.get("pid", 0)), 0)
    except (OSError, ValueError, TypeError):
        return False
    return True


def _write_progress(path: Path, **fields: Any) -> None:
    p = progress_path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "time": time.time(), **fields}))
    os.replace(tmp, p)


def start_background(path: Path | None = None, quick: bool = False):
    """Start ``python -m lab.machine.calibrate`` in its own session, at the training jobs' niceness (it writes
    the profile and a progress file next to it). Returns the Popen."""
    import subprocess

    path = Path(path) if path is not None else profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    env = settings.child_env(OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "lab.machine.calibrate", "--out", str(path)] + (["--quick"] if quick else [])
    _write_progress(path, message="starting", fraction=0.0, done=False, error=None)
    nice = settings.job_nice()  # as nice as the training jobs the profile will predict
    log = open(path.with_name(path.stem + ".log"), "wb")
    try:
        return subprocess.Popen(cmd, cwd=str(settings.ROOT), env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=(lambda: os.nice(nice)) if nice else None)
    finally:
        log.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="profile file (default: LAB_DATA/machine_profile.json)")
    ap.add_argument("--quick", action="store_true", help="fewer repeats (about half the time)")
    ap.add_argument("--procs", default="1,2,3,4", help="process counts to calibrate (default 1,2,3,4)")
    ap.add_argument("--cycles", choices=("harness", "loop"), default="loop",
                    help="N-process terms from the job's own loop (default) or training-like cycles")
    ap.add_argument("--repeat", type=int, default=CALIBRATION_REPEAT,
                    help=f"timed repeats per measurement (default {CALIBRATION_REPEAT})")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else profile_path()

    def progress(msg: str, frac: float) -> None:
        print(f"[{frac * 100:5.1f}%] {msg}", flush=True)
        _write_progress(out, message=msg, fraction=frac, done=False, error=None)

    try:
        procs = [int(p) for p in args.procs.split(",") if p.strip()]
        prof = calibrate(procs, repeat=args.repeat, quick=args.quick, cycle_source=args.cycles, progress=progress)
        prof.save(out)
    except (LabError, ValueError) as exc:
        _write_progress(out, message="failed", fraction=1.0, done=True, error=str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _write_progress(out, message="done", fraction=1.0, done=True, error=None)
    print(format_profile(prof))
    print(f"# wrote {out}")
    return 0


def format_profile(prof: MachineProfile) -> str:
    c = prof.compute
    lines = [f"# machine profile: {prof.describe()}",
             f"one process: fixed {c.fixed * 1e6:.0f} us/step, {c.per_tensor * 1e6:.1f} us/parameter tensor, "
             f"fit error {c.fit_error * 100:.1f}% over {c.samples} calibration cases"]
    for cls, cc in c.classes.items():
        thr = f"{cc.throughput / 1e9:.2f} GFLOP/s" if math.isfinite(cc.throughput) else "no FLOP term"
        lines.append(f"    {cls:12s} overhead {cc.overhead * 1e6:7.1f} us/op  {thr}")
    o = prof.optimizer_cost("adam")
    lines.append(f"    adam step: {o.fixed * 1e6:.0f} us + {o.per_tensor * 1e6:.1f} us/tensor + {o.per_unit * 1e9:.2f} ns/param")
    lines.append("    compute after a wait: " + ", ".join(f"{w * 1e3:g} ms x{f:.2f}" for w, f in prof.wait_slowdown))
    if prof.slowdown(1) != 1.0 or prof.extra_per_step(1):
        lines.append(f"1 process in the job's loop: compute x{prof.slowdown(1):.2f} + "
                     f"{prof.extra_per_step(1) * 1e6:.0f} us/step")
    for p in prof.procs:
        if p < 2:
            continue
        j = prof.jitter_cost(p)
        rm = prof.remainder_cost(p)
        lines.append(f"{p} processes: compute x{prof.slowdown(p):.2f} + {prof.extra_per_step(p) * 1e6:.0f} us/step; "
                     f"idle of equal workers {j.fixed * 1e6:.0f} us; "
                     f"rest of the step {rm.fixed * 1e6:.0f} us")
        for impl, f in prof.allreduce.get(str(p), {}).items():
            m = prof.measured_allreduce.get(str(p), {}).get(impl)
            extra = (f"; measure command: alpha {m.alpha * 1e6:.1f} us, beta {m.beta * 1e9:.3f} ns/B" if m else "")
            lines.append(f"    all-reduce {impl:5s} in training: alpha {f.alpha * 1e6:.1f} us, beta {f.beta * 1e9:.3f} ns/B "
                         f"(fit error {f.fit_error * 100:.0f}%){extra}")
        for meth, f in prof.sharing.get(str(p), {}).items():
            lines.append(f"    {meth:16s} {f.per_hop * 1e6:.1f} us/hop + {f.per_byte * 1e9:.3f} ns/B "
                         f"(fit error {f.fit_error * 100:.0f}%)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
