"""Measuring this machine for its profile: one process (compute per network and batch, optimiser and compressor steps, how waiting slows compute) and N processes at once (training-like cycles on the calibration networks, the all-reduce), each a table of raw timings for the fit."""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from lab.comm.measure import fit_rows, measure
from lab.comm.spawn import init_worker, run_local
from lab.comm.ring import ring_allreduce
from lab.comm.sharing import GradientCompressor
from lab.compression.compressors import make_compressor
from lab.errors import LabError
from lab.machine.cases import (
    CALIBRATION_BATCHES,
    CALIBRATION_MAX_PROCS,
    CALIBRATION_NETS,
    CYCLE_KINDS,
    CYCLE_RATIO,
    build_calibration_net,
    cycle_cases,
    pin_rank,
)
from lab.machine.profile import (
    CommFit,
    graph_features,
)
from lab.modelled.opgraph import trace
from lab.optim.flat import flatten_parameters
from lab.optim.optimizers import make_optimizer
from lab.scenario.names import PAYLOAD_COMPRESSORS, OPTIMIZERS, Sharing
from lab.modelled.collectives.ring import allgather_steps, ring_bytes_per_rank, ring_steps


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
        self.params, self.pflat, self.gflat = flatten_parameters(model)
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


def measure_compressors(keys: Sequence[str] = PAYLOAD_COMPRESSORS, sizes: Sequence[int] = COMPRESS_SIZES,
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
    gc = GradientCompressor(kind="group_topk", ratio=CYCLE_RATIO, group_size=1024, error_feedback=False,
                            sharing=method or "dense")
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
                sent = float(max(ring_bytes_per_rank(h.gflat.numel(), world)))  # what the lab's ring would send
                hops = float(ring_steps(world))
            t2 = time.perf_counter()
        else:  # as lab.train.compressed does it: the one send step on the gradient (not the loss slot)
            grad = h.gflat[:-1]
            summed, st = gc.step(grad)
            tz = st["t_compress"]
            ready = time.time() - st["t_comm"]
            grad.copy_(summed.view(grad.shape)).div_(world)
            t2 = time.perf_counter()
            sent = float(st["bytes_sent"])
            hops = float(allgather_steps(world) if method == Sharing.SPARSE_ALLGATHER else ring_steps(world))
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
    med = lambda x: float(x.mean()) if x.numel() else math.nan  # noqa: E731 - per step, as lab.machine.fidelity.measured_step
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

    if not 1 <= procs <= CALIBRATION_MAX_PROCS:
        raise LabError(f"calibrate 1 to {CALIBRATION_MAX_PROCS} processes (got {procs})", where="calibration")
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


CALIBRATION_ALLREDUCE_SIZES = (4_096, 16_384, 65_536, 262_144)


def measure_allreduce(procs: int, iters: int = 10, sizes: Sequence[int] = CALIBRATION_ALLREDUCE_SIZES) -> dict[str, CommFit]:
    """alpha and beta of gloo's all_reduce and the lab ring with ``procs`` processes, by the
    all-reduce measurement command (lab.comm.measure, nccl-tests style: every call after a barrier)."""

    rows = measure(procs, list(sizes), iters=iters, impls=("gloo", "ring"), warmup=2)
    out = {}
    for impl in ("gloo", "ring"):
        fit = fit_rows(rows, impl)
        out[impl] = CommFit(float(fit.alpha), float(fit.beta), float(fit.geomean_error))
    return out


MESSAGE_SIZES = (256, 16 << 10, 256 << 10)  # bytes of one point-to-point message


def _messages_worker(rank: int, world: int, port: int, out_dir: str, sizes: list, iters: int) -> None:
    """One of N processes passing a tensor around a ring, one message per hop, sent as a placement run sends
    (asynchronous isend of one flat tensor, blocking receive). Rank 0 writes seconds per hop for each size."""
    import torch
    import torch.distributed as dist

    pin_rank(rank)
    init_worker(rank, world, port, timeout_s=120.0)
    out = {}
    try:
        for size in sizes:
            t = torch.zeros(max(1, size // 4))
            for rep in range(2):  # the first pass warms the connections up
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    if rank == 0:
                        h = dist.isend(t, 1 % world)
                        dist.recv(t, world - 1)
                    else:
                        dist.recv(t, rank - 1)
                        h = dist.isend(t, (rank + 1) % world)
                    h.wait()
                if rep:
                    out[str(size)] = (time.perf_counter() - t0) / (iters * world)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        with open(os.path.join(out_dir, "messages.json"), "w") as f:
            json.dump(out, f)


def measure_messages(procs: int, iters: int = 50, sizes: Sequence[int] = MESSAGE_SIZES) -> CommFit:
    """Seconds of one point-to-point message with ``procs`` processes: alpha (per message) and beta (per byte),
    fitted to a ring of messages of each size."""
    with tempfile.TemporaryDirectory(prefix="lab-calib-") as tmp:
        try:
            run_local(_messages_worker, procs, (tmp, list(sizes), iters), timeout_s=300)
        except RuntimeError as exc:
            raise LabError(f"the message measurement with {procs} processes failed: {exc}", where="calibration") from None
        got = json.loads((Path(tmp) / "messages.json").read_text())
    x = np.array([float(s) for s in got])
    y = np.array(list(got.values()))
    beta, alpha = np.polyfit(x, y, 1)
    alpha, beta = max(float(alpha), 0.0), max(float(beta), 0.0)
    pred = alpha + beta * x
    err = float(np.exp(np.mean(np.abs(np.log(np.maximum(pred, 1e-12) / y)))) - 1)
    return CommFit(alpha, beta, err)
