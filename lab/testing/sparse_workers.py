"""Workers that tests and benches spawn to check the sparse transports, the sharing step and the DDP
hook against dense all-reduce in real processes (spawned processes import them from here)."""
from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist

from lab.comm.spawn import init_worker
from lab.comm.sharing import GradientCompressor
from lab.comm.sparse import (
    simulate_sparse_allgather,
    simulate_sparse_ring,
    sparse_allgather,
    sparse_ring_allreduce,
)
from lab.compression.compressors import GroupTopK
from lab.compression.study import generated_gradients
from lab.scenario.document import Compression
from lab.scenario.names import SHARING, Sharing
from lab.comm.hook import GroupTopKHookState, group_topk_hook


def _gen_worker_gradient(rank: int, n: int, seed: int) -> torch.Tensor:
    """Integer-valued float gradients: any summation order gives the exact sum."""
    g = torch.Generator().manual_seed(seed * 7919 + rank * 104729 + n)
    return torch.randint(-50, 51, (n,), generator=g).to(torch.float32)


def _sharing_checks(rank: int, world: int, sizes: tuple, seed: int) -> list[dict]:
    rows = []
    for N in range(2, world + 1):
        grp = dist.new_group(list(range(N))) if N < world else None  # every rank must take part
        if rank >= N:
            continue
        for n in sizes:
            comp = GroupTopK(0.1, 16)
            payloads = [comp.compress(_gen_worker_gradient(r, n, seed)) for r in range(N)]
            mine = payloads[rank]
            ref = mine.to_dense().to(torch.float64)
            dist.all_reduce(ref, group=grp)
            sim = simulate_sparse_ring(payloads, n)
            _, ag_sent, ag_recv = simulate_sparse_allgather(payloads)
            ring, rst = sparse_ring_allreduce(mine, n, group=grp)
            ag, ast = sparse_allgather(mine, group=grp)
            rows.append({"N": N, "n": n, "rank": rank, "kind": "sharing",
                         "ring_exact": bool(torch.equal(ring.to(torch.float64), ref)),
                         "allgather_exact": bool(torch.equal(ag.to(torch.float64), ref)),
                         "ring_bytes": [rst["bytes_sent"], rst["bytes_recv"]],
                         "sim_ring_bytes": [sim.bytes_sent[rank], sim.bytes_recv[rank]],
                         "allgather_bytes": [ast["bytes_sent"], ast["bytes_recv"]],
                         "sim_allgather_bytes": [ag_sent[rank], ag_recv[rank]],
                         "hops_equal": rst["hops"] == [h for h in sim.hops if h["rank"] == rank]})
            if N == world and n == sizes[-1]:  # link emulation: the hook is called per message
                calls: list[tuple] = []

                def delay(src: int, dst: int, nbytes: int) -> float:
                    calls.append((src, dst, nbytes))
                    return 1e-4

                dring, dst = sparse_ring_allreduce(mine, n, group=grp, link_delay=delay)
                rows.append({"N": N, "n": n, "rank": rank, "kind": "delay",
                             "exact": bool(torch.equal(dring.to(torch.float64), ref)),
                             "calls": len(calls), "delay": dst["delay"],
                             "bytes_match": sum(c[2] for c in calls) == dst["bytes_sent"],
                             "to_right": all(c == (rank, (rank + 1) % N) for c in (c[:2] for c in calls))})
            for method in SHARING:  # the one-line training entry point: two steps with EF
                gc = GradientCompressor(Compression(kind="group_topk", ratio=0.1, group_size=16,
                                                    error_feedback=True, sharing=method), seed=seed)
                ok = True
                for step in range(2):
                    g = _gen_worker_gradient(rank, n, seed + 1 + step)
                    old = gc.compressor.residual
                    summed, st = gc.step(g, group=grp)
                    want = ((g if old is None else g + old) - gc.compressor.residual).to(torch.float64)
                    dist.all_reduce(want, group=grp)
                    ok = ok and bool(torch.equal(summed.to(torch.float64), want))
                rows.append({"N": N, "n": n, "rank": rank, "kind": "step", "method": method, "step_exact": ok,
                             **{k: st[k] for k in ("bytes_sent", "bytes_recv", "kept", "density")}})
    return rows


def _ddp_hook_check(rank: int, world: int, sharing: str, seed: int) -> dict:
    """DDP with :func:`group_topk_hook` against the hand-computed average of Group-TopK'd gradients."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def make_model() -> torch.nn.Module:
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(20, 40), torch.nn.ReLU(), torch.nn.Linear(40, 7))

    def batch(r: int):
        g = torch.Generator().manual_seed(seed * 31 + r)
        return torch.randn(16, 20, generator=g), torch.randint(0, 7, (16,), generator=g)

    ratio, gsz = 0.1, 20
    state = GroupTopKHookState(ratio, gsz, error_feedback=False, sharing=sharing)
    model = DDP(make_model())
    position = {id(p): i for i, p in enumerate(model.module.parameters())}
    layouts: list[list[int]] = []

    def recording_hook(st, bucket):  # no annotations: DDP would compare them with the classes
        layouts.append([position[id(p)] for p in bucket.parameters()])
        return group_topk_hook(st, bucket)

    model.register_comm_hook(state, recording_hook)
    x, y = batch(rank)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    got = [p.grad.detach().clone() for p in model.module.parameters()]
    ref_model = make_model()
    local = []
    for r in range(world):
        ref_model.zero_grad()
        xr, yr = batch(r)
        torch.nn.functional.cross_entropy(ref_model(xr), yr).backward()
        local.append([p.grad.detach().clone() for p in ref_model.parameters()])
    params = list(ref_model.parameters())
    comp = GroupTopK(ratio, gsz)
    ref = {}
    for order in layouts:  # each bucket: flattened in the bucket's order, Group-TopK per worker, mean
        total = sum(comp.compress(torch.cat([local[r][i].reshape(-1) for i in order])).to_dense()
                    for r in range(world))
        mean, off = total / world, 0
        for i in order:
            k = params[i].numel()
            ref[i] = mean[off:off + k].view_as(params[i])
            off += k
    # two more steps with error feedback: runs through DDP's bucket rebuild, must stay finite
    ef_state = GroupTopKHookState(ratio, gsz, error_feedback=True, sharing=sharing)
    ef_model = DDP(make_model())
    ef_model.register_comm_hook(ef_state, group_topk_hook)
    for step in range(2):
        ef_model.zero_grad()
        xr, yr = batch(rank + 10 * (step + 1))
        torch.nn.functional.cross_entropy(ef_model(xr), yr).backward()
    ef_finite = all(bool(torch.isfinite(p.grad).all()) for p in ef_model.module.parameters())
    return {"rank": rank, "kind": "ddp", "sharing": sharing, "layouts": layouts, "calls": state.calls,
            "max_abs_diff": max(float((got[i] - ref[i]).abs().max()) for i in range(len(params))),
            "max_abs_ref": max(float(ref[i].abs().max()) for i in range(len(params))),
            "ef_calls": ef_state.calls, "ef_residuals": len(ef_state.residuals), "ef_finite": ef_finite}


def check_worker(rank: int, world: int, port: int, out_dir: str, sizes: tuple, seed: int = 0) -> None:
    """Test worker (tests/comm/test_sparse_comm.py): sharing methods and the DDP hook on real processes.

    For every ring size N = 2..world (one process group per N, ranks 0..N-1) and every length in
    ``sizes``: Group-TopK of an integer-valued gradient shared by the sparse ring and by sparse
    all-gather, compared with ``dist.all_reduce`` (float64) of the decompressed tensors and with
    the one-process simulation; :class:`lab.comm.sharing.GradientCompressor` for every method; then DDP
    with :func:`group_topk_hook` (both sharings) on the whole world. Writes ``rank<r>.json``.
    """
    init_worker(rank, world, port)
    rows: list[dict] = []
    try:
        rows += _sharing_checks(rank, world, sizes, seed)
        for sharing in (Sharing.SPARSE_ALLGATHER, Sharing.SPARSE_RING):
            rows.append(_ddp_hook_check(rank, world, sharing, seed))
        dist.barrier()
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with the message
        rows.append({"rank": rank, "kind": "error", "error": f"{type(exc).__name__}: {exc}"})
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(rows, f)


def bench_worker(rank: int, world: int, port: int, out_dir: str, n: int, ratio: float, group_size: int,
                 seed: int = 0) -> None:
    """Benchmark worker (bench/bench_compress.py): one step of each sharing method on a generated
    gradient of ``n`` entries, with the byte counts, times and the ring's hop table of this rank.

    The uncompressed dense ring is the baseline; the sparse methods share Group-TopK payloads. Each
    result is also checked against a float64 gloo all-reduce of the decompressed tensors.
    """
    init_worker(rank, world, port, timeout_s=300.0)
    rows = []
    try:
        g = generated_gradients(n, world, seed)[rank]
        for kind, method in (("none", Sharing.DENSE), ("group_topk", Sharing.SPARSE_RING), ("group_topk", Sharing.SPARSE_ALLGATHER),
                             ("topk", Sharing.SPARSE_RING), ("topk", Sharing.SPARSE_ALLGATHER)):
            gc = GradientCompressor(Compression(kind=kind, ratio=ratio, group_size=group_size, sharing=method))
            dist.barrier()
            summed, st = gc.step(g, count_sum=True)
            sent = gc.compressor.compress(g).to_dense().to(torch.float64)
            dist.all_reduce(sent)
            err = float((summed.double() - sent).abs().max() / sent.abs().max().clamp_min(1e-30))
            hops = []
            if method == Sharing.SPARSE_RING:
                _, rst = sparse_ring_allreduce(gc.compressor.compress(g), n)
                hops = rst["hops"]
            rows.append({"rank": rank, "kind": kind, "method": method, "bytes_sent": st["bytes_sent"],
                         "bytes_recv": st["bytes_recv"], "t_compress": st["t_compress"], "t_comm": st["t_comm"],
                         "kept": st["kept"], "nnz_sum": st["nnz_sum"], "max_rel_diff": err, "hops": hops})
        dist.barrier()
    except Exception as exc:  # noqa: BLE001 - reported to the bench
        rows.append({"rank": rank, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"bench{rank}.json"), "w") as f:
        json.dump(rows, f)
