"""Measure all-reduce on this machine, in the style of nccl-tests.

    python -m lab.comm.measure --procs 4 --min-bytes 4K --max-bytes 32M --iters 20 --out allreduce.csv

starts N local worker processes (gloo over loopback), and for every size from ``--min-bytes`` to
``--max-bytes`` (doubling) times the lab's ring all-reduce (:func:`lab.comm.ring_allreduce`) and
gloo's own ``all_reduce`` on a float32 buffer: ``--warmup`` untimed calls, then ``--iters`` timed
calls, each started after a barrier, the implementations taking turns. An iteration's time is the
slowest rank's (max over ranks); the reported time is the median over iterations. Bandwidths as
nccl-tests defines them for all-reduce: algbw = S / t, busbw = algbw x 2(N-1)/N. Every result is
checked (a buffer of ones must sum to N everywhere).

The coordinating process holds the rendezvous store on a port the OS picks (port 0), so no port
is guessed; it reaps its workers and stops with a clear message if one dies or the run overruns
its time limit. :func:`measure` is the same as a function (the All-reduce page calls it).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

from lab import processes
from lab.comm import ring
from lab.comm.ring import BYTES, ring_allreduce
from lab.errors import LabError
from lab.modelled.collectives import algbw, build_schedule, busbw, fit_alpha_beta
from lab.settings import ROOT, THREAD_VARIABLES, child_env

IMPLS = ("ring", "gloo")
IMPL_LABELS = {"ring": "lab ring (isend/irecv)", "gloo": "gloo all_reduce"}
MAX_PROCS = 16
KILL_GRACE_S = 10.0  # seconds the killed workers get to be reaped
MAX_BYTES = 1 << 30
ITEMSIZE = 4  # float32
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}
_RESULT = "RESULT "


def parse_size(text: str | int) -> int:
    """'4K' -> 4096, '32M' -> 33554432, '1000' -> 1000 (binary units, as nccl-tests)."""
    if isinstance(text, int):
        return text
    s = str(text).strip().upper()
    num = s.rstrip("KMGIB")
    unit = s[len(num):]
    try:
        value = float(num)
    except ValueError:
        raise LabError(f"cannot read the size {text!r}; write a number with an optional K, M or G (e.g. 4K, 32M)",
                       where="size") from None
    if unit not in _UNITS or not math.isfinite(value) or value <= 0:
        raise LabError(f"cannot read the size {text!r}; write a positive number with an optional K, M or G",
                       where="size")
    return int(value * _UNITS[unit])


def sizes_between(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """Sizes from ``min_bytes`` to ``max_bytes`` multiplying by ``factor``, whole float32 elements."""
    if min_bytes < ITEMSIZE or max_bytes < min_bytes:
        raise LabError(f"need {ITEMSIZE} <= min-bytes <= max-bytes (got {min_bytes} and {max_bytes})", where="sizes")
    if max_bytes > MAX_BYTES:
        raise LabError(f"max-bytes may be at most {MAX_BYTES} (1 GiB), got {max_bytes}", where="sizes")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(max(ITEMSIZE, s // ITEMSIZE * ITEMSIZE))
        s *= factor
    return sorted(set(out))


def human_bytes(n: float) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:g} {unit}"
    return f"{int(n)} B"


# ---------------------------------------------------------------------------------------------
# worker side (runs in each spawned process)
# ---------------------------------------------------------------------------------------------
def _emit(row: dict) -> None:
    sys.stdout.write(_RESULT + json.dumps(row) + "\n")
    sys.stdout.flush()


def _worker(cfg: dict) -> None:
    import torch
    import torch.distributed as dist

    rank, world = cfg["rank"], cfg["procs"]
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=cfg["op_timeout"])
    rendezvous = dist.TCPStore("127.0.0.1", cfg["port"], world_size=world, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=dist.PrefixStore("lab-comm", rendezvous), rank=rank, world_size=world,
                            timeout=timeout)
    if cfg.get("die_rank") == rank:
        sys.stderr.write(f"rank {rank}: dying on purpose (die_rank, for tests)\n")
        sys.stderr.flush()
        os._exit(3)
    if cfg["task"] == "check":
        _check_worker(cfg)
    else:
        _measure_worker(cfg)
    dist.barrier()
    dist.destroy_process_group()


def _check_worker(cfg: dict) -> None:
    import torch
    import torch.distributed as dist

    rank, world = cfg["rank"], cfg["procs"]
    if cfg.get("piece_bytes"):
        ring.PIECE_BYTES = int(cfg["piece_bytes"])

    def report(case: str, count: int, dtype, got, ref, st, nbytes: int) -> None:
        diff = torch.tensor([float((got.double() - ref.double()).abs().max()) if got.numel() else 0.0])
        dist.all_reduce(diff, op=dist.ReduceOp.MAX)
        info = torch.tensor([[st.sent, st.received]], dtype=torch.int64)
        every = [torch.zeros_like(info) for _ in range(world)]
        dist.all_gather(every, info)
        if rank == 0:
            item = got.element_size()
            model = build_schedule("ring", world, nbytes, itemsize=item) if world > 1 and nbytes else None
            _emit({"case": case, "count": count, "dtype": str(dtype).replace("torch.", ""), "max_diff": diff.item(),
                   "sent": [int(e[0, 0]) for e in every], "received": [int(e[0, 1]) for e in every],
                   "model_sent": model.sent_bytes() if model else [0] * world,
                   "model_received": model.received_bytes() if model else [0] * world})

    for count in cfg["counts"]:
        g = torch.Generator().manual_seed(cfg["seed"] * 1000 + rank * 7 + count)
        for dtype, op in ((torch.float32, "sum"), (torch.float32, "mean"), (torch.float64, "mean")):
            x = torch.randn(count, generator=g, dtype=dtype)
            ref = x.clone()
            dist.all_reduce(ref)
            if op == "mean":
                ref /= world
            before = BYTES.snapshot()["sent"]
            st = ring_allreduce(x, op)
            assert BYTES.snapshot()["sent"] - before == st.sent
            report(f"{op}", count, dtype, x, ref, st, count * x.element_size())
        x = torch.randint(-1000, 1000, (count,), generator=g, dtype=torch.int64)
        ref = x.clone()
        dist.all_reduce(ref)
        st = ring_allreduce(x, "sum")
        report("sum", count, torch.int64, x, ref, st, count * 8)
        base = torch.randn(3, count, generator=g)
        x = base.t()  # non-contiguous view: reduced and written back in place
        ref = x.contiguous()
        dist.all_reduce(ref)
        st = ring_allreduce(x, "sum")
        report("sum non-contiguous", count, torch.float32, x, ref, st, 3 * count * 4)
    # link emulation: every message waits its modelled time before it leaves
    calls = []
    x = torch.ones(max(world * 3, 1))
    st = ring_allreduce(x, "sum", link_delay=lambda src, dst, nb: calls.append((src, dst, nb)) or 0.01)
    ok = bool(x.eq(world).all()) and all(s == rank and d == (rank + 1) % world for s, d, _ in calls)
    flag = torch.tensor([1 if ok else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    if rank == 0:
        _emit({"case": "link_delay", "count": x.numel(), "dtype": "float32", "ok": bool(flag.item()),
               "messages": st.messages_sent, "delay": st.delay_seconds, "seconds": st.seconds})


def _measure_worker(cfg: dict) -> None:
    import torch
    import torch.distributed as dist

    rank, world = cfg["rank"], cfg["procs"]
    fns = {"ring": lambda x: ring_allreduce(x, "sum"), "gloo": lambda x: dist.all_reduce(x)}
    for size in cfg["sizes"]:
        x = torch.ones(size // ITEMSIZE, dtype=torch.float32)
        for impl in cfg["impls"]:
            for _ in range(cfg["warmup"]):
                x.fill_(1.0)
                fns[impl](x)
        times = {impl: [] for impl in cfg["impls"]}
        ok = {impl: True for impl in cfg["impls"]}
        for it in range(cfg["iters"]):
            # take turns, first one then the other first, so drifting machine load hits both alike
            for impl in (cfg["impls"] if it % 2 == 0 else cfg["impls"][::-1]):
                x.fill_(1.0)
                dist.barrier()
                t0 = time.perf_counter()
                fns[impl](x)
                times[impl].append(time.perf_counter() - t0)
                ok[impl] = ok[impl] and bool(x.eq(world).all())
        for impl in cfg["impls"]:
            t = torch.tensor(times[impl], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # an iteration lasts until its slowest rank is done
            good = torch.tensor([1 if ok[impl] else 0])
            dist.all_reduce(good, op=dist.ReduceOp.MIN)
            if rank == 0:
                _emit({"impl": impl, "size": size, "times": t.tolist(), "correct": bool(good.item())})


# ---------------------------------------------------------------------------------------------
# coordinator
# ---------------------------------------------------------------------------------------------
def _row(procs: int, raw: dict) -> dict:
    times = raw["times"]
    t = statistics.median(times)
    return {"procs": procs, "size": raw["size"], "count": raw["size"] // ITEMSIZE, "impl": raw["impl"],
            "time": t, "time_min": min(times), "time_max": max(times), "iters": len(times),
            "algbw": algbw(raw["size"], t), "busbw": busbw(raw["size"], t, procs) if procs > 1 else 0.0,
            "correct": raw["correct"], "source": "measured", "times": list(times)}


def _run_workers(procs: int, cfg: dict, total: int, on_result: Callable[[dict], None], *,
                 timeout: float, op_timeout: float, what: str) -> None:
    """Start ``procs`` workers running ``cfg["task"]``; feed rank 0's results to ``on_result``.

    Stops with a LabError (after killing and reaping every worker) if a worker dies, or the
    whole run takes longer than ``timeout`` seconds."""
    import torch.distributed as dist

    rendezvous = dist.TCPStore("127.0.0.1", 0, world_size=procs, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=op_timeout))
    cfg = {**cfg, "procs": procs, "port": rendezvous.port, "op_timeout": op_timeout}
    env = child_env(**THREAD_VARIABLES)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    workers: list[subprocess.Popen] = []
    lines: queue.Queue = queue.Queue()
    got = 0
    with tempfile.TemporaryDirectory(prefix="lab-comm-") as tmp:
        errs = [os.path.join(tmp, f"rank{r}.err") for r in range(procs)]
        try:
            for r in range(procs):
                with open(errs[r], "wb") as ef:
                    workers.append(subprocess.Popen(
                        [sys.executable, "-m", "lab.comm.measure", "--worker", json.dumps({**cfg, "rank": r})],
                        stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL, stderr=ef, env=env,
                        cwd=str(ROOT), text=True))

            def pump(stream):
                for line in stream:
                    lines.put(line)
                lines.put(None)

            threading.Thread(target=pump, args=(workers[0].stdout,), daemon=True).start()
            deadline = time.monotonic() + timeout
            eof = False
            while True:
                try:
                    line = lines.get(timeout=0.05)
                except queue.Empty:
                    line = ""
                if line is None:
                    eof = True
                elif line.startswith(_RESULT):
                    got += 1
                    on_result(json.loads(line[len(_RESULT):]))
                for r, p in enumerate(workers):
                    rc = p.poll()
                    if rc is not None and rc != 0:
                        processes.kill_and_reap(workers, KILL_GRACE_S)
                        detail = "\n".join(processes.last_lines(errs[r], 6))
                        raise LabError(f"worker rank {r} of {procs} died (exit code {rc}) after {got} of "
                                       f"{total} results; the run was stopped and every worker reaped."
                                       + (f" Its last words: {detail}" if detail else ""), where=what)
                if eof and all(p.poll() == 0 for p in workers):
                    break
                if time.monotonic() > deadline:
                    processes.kill_and_reap(workers, KILL_GRACE_S)
                    raise LabError(f"the run took longer than {timeout:g} s and was stopped ({got} of {total} "
                                   "results); try fewer sizes or iterations", where=what)
        finally:
            processes.kill_and_reap(workers, KILL_GRACE_S)
            for p in workers:
                if p.stdout:
                    p.stdout.close()
    if got != total:
        raise LabError(f"the workers finished with {got} of {total} results", where=what)


def measure(procs: int, sizes: Sequence[int], iters: int = 20, impls: Sequence[str] = IMPLS, *,
            warmup: int = 3, progress: Callable[[int, int, dict], None] | None = None,
            timeout: float = 300.0, op_timeout: float = 60.0, die_rank: int | None = None) -> list[dict]:
    """Time all-reduce with ``procs`` local processes; one row per (size, impl), in order.

    Each row: procs, size (bytes), count (float32 elements), impl, time (s, median over
    iterations of the slowest rank), time_min, time_max, iters, algbw, busbw (bytes/s),
    correct, source="measured", times (every iteration's time, in order; implementations take
    turns within an iteration). ``progress(done, total, row)`` is called as rows arrive.
    The whole run stops with a LabError after ``timeout`` seconds; ``die_rank`` makes that
    worker exit at start (to test the error path).
    """
    if isinstance(procs, bool) or not isinstance(procs, int) or not 1 <= procs <= MAX_PROCS:
        raise LabError(f"procs must be a whole number from 1 to {MAX_PROCS} (got {procs!r})", where="measure")
    if not isinstance(iters, int) or not 1 <= iters <= 10_000:
        raise LabError(f"iters must be a whole number from 1 to 10000 (got {iters!r})", where="measure")
    if not isinstance(warmup, int) or not 0 <= warmup <= 1000:
        raise LabError(f"warmup must be a whole number from 0 to 1000 (got {warmup!r})", where="measure")
    impls = list(impls)
    bad = [i for i in impls if i not in IMPLS]
    if bad or not impls:
        raise LabError(f"unknown implementation(s) {bad}; allowed: {list(IMPLS)}", where="measure")
    sizes = [int(s) for s in sizes]
    if not sizes or any(s < ITEMSIZE or s % ITEMSIZE or s > MAX_BYTES for s in sizes):
        raise LabError(f"sizes must be whole float32 buffers: multiples of 4 bytes from 4 B to 1 GiB (got {sizes})",
                       where="measure")
    total = len(sizes) * len(impls)
    rows: list[dict] = []

    def on_result(raw: dict) -> None:
        rows.append(_row(procs, raw))
        if progress is not None:
            progress(len(rows), total, rows[-1])

    cfg = {"task": "measure", "sizes": sizes, "impls": impls, "iters": iters, "warmup": warmup,
           "die_rank": die_rank}
    _run_workers(procs, cfg, total, on_result, timeout=timeout, op_timeout=op_timeout, what="measure")
    wrong = sorted({(r["impl"], r["size"]) for r in rows if not r["correct"]})
    if wrong:
        raise LabError(f"wrong all-reduce results for {wrong}", where="measure")
    return rows


def check_ring(procs: int, counts: Sequence[int], *, seed: int = 0, piece_bytes: int | None = None,
               timeout: float = 120.0) -> list[dict]:
    """Run the lab's ring beside gloo's all_reduce on ``procs`` processes (one process group)
    for tensors of each element count in ``counts``: float32 and float64 sum and mean, int64
    sum, a non-contiguous 2-D tensor, and the link-delay hook. One row per case, with the
    largest difference from gloo and the bytes the ring counted on every rank (for tests and
    for checking an installation). ``piece_bytes`` overrides the ring's piece size, so small
    tensors also run the multi-piece pipeline."""
    rows: list[dict] = []
    cases = len(counts) * 5 + 1
    _run_workers(procs, {"task": "check", "counts": [int(c) for c in counts], "seed": seed,
                                 "piece_bytes": piece_bytes}, cases,
                 rows.append, timeout=timeout, op_timeout=60.0, what="ring check")
    return rows


def fit_rows(rows: Sequence[dict], impl: str):
    """alpha-beta fit (ring features) to the measured rows of ``impl``: lab.modelled.collectives.AlphaBetaFit."""
    sel = [r for r in rows if r["impl"] == impl]
    if not sel:
        raise LabError(f"no measured rows for {impl!r}", where="alpha-beta fit")
    return fit_alpha_beta(sel[0]["procs"], [r["size"] for r in sel], [r["time"] for r in sel])


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------
COLUMNS = ("procs", "size", "count", "impl", "time", "time_min", "time_max", "iters", "algbw", "busbw",
           "correct", "source")


def format_table(rows: Sequence[dict]) -> str:
    head = f"{'size':>10} {'count':>10} {'impl':>5} {'time (us)':>11} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}"
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(f"{human_bytes(r['size']):>10} {r['count']:>10} {r['impl']:>5} {r['time'] * 1e6:>11.1f} "
                   f"{r['algbw'] / 1e9:>13.3f} {r['busbw'] / 1e9:>13.3f}")
    return "\n".join(out)


def format_fit(rows: Sequence[dict], impl: str) -> str:
    fit = fit_rows(rows, impl)
    out = [f"{impl}: alpha = {fit.alpha * 1e6:.2f} us per step, beta = {fit.beta * 1e9:.4f} ns/B "
           f"({fit.bandwidth / 1e9:.2f} GB/s); t = 2(N-1) alpha + 2(N-1)/N S beta",
           f"{'size':>10} {'measured (us)':>14} {'model (us)':>11} {'error':>8}"]
    for s, m, p, e in zip(fit.sizes, fit.measured, fit.predicted, fit.errors):
        out.append(f"{human_bytes(s):>10} {m * 1e6:>14.1f} {p * 1e6:>11.1f} {e * 100:>7.1f}%")
    out.append(f"geometric-mean error {fit.geomean_error * 100:.1f}% (exp(mean |ln(model/measured)|) - 1)")
    return "\n".join(out)


def write_rows(rows: Sequence[dict], path: str | Path) -> Path:
    path = Path(path)
    if path.suffix.lower() == ".json":
        path.write_text(json.dumps({"format": "hetlab-allreduce/1", "columns": {
            "size": "bytes", "time": "seconds (median over iterations of the slowest rank)",
            "algbw": "bytes/s = size / time", "busbw": "bytes/s = algbw x 2(N-1)/N"}, "rows": list(rows)}, indent=2))
    elif path.suffix.lower() == ".csv":
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    else:
        raise LabError(f"cannot write {path.name!r}: the output must end in .csv or .json", where="--out")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        _worker(json.loads(argv[1]))
        return 0
    ap = argparse.ArgumentParser(prog="python -m lab.comm.measure", description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=4, help="local worker processes (default 4)")
    ap.add_argument("--min-bytes", default="4K", help="smallest buffer, e.g. 4K (default 4K)")
    ap.add_argument("--max-bytes", default="32M", help="largest buffer, e.g. 32M (default 32M)")
    ap.add_argument("--factor", type=int, default=2, help="size multiplier between rows (default 2)")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations per size and impl (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed iterations first (default 3)")
    ap.add_argument("--impls", default="ring,gloo", help="comma list of ring,gloo (default both)")
    ap.add_argument("--timeout", type=float, default=600.0, help="stop the whole run after this many seconds")
    ap.add_argument("--out", default=None, help="write the rows to FILE.csv or FILE.json")
    ap.add_argument("--die-rank", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        if args.factor < 2:
            raise LabError("factor must be at least 2", where="--factor")
        sizes = sizes_between(parse_size(args.min_bytes), parse_size(args.max_bytes), args.factor)
        if args.out and Path(args.out).suffix.lower() not in (".csv", ".json"):
            raise LabError(f"the output must end in .csv or .json (got {args.out!r})", where="--out")
        impls = [s.strip() for s in args.impls.split(",") if s.strip()]
        print(f"# all-reduce, {args.procs} processes, float32, gloo over loopback; {args.warmup} warm-up + "
              f"{args.iters} timed iterations per size (median of the slowest rank)", flush=True)
        rows = measure(args.procs, sizes, args.iters, impls, warmup=args.warmup, timeout=args.timeout,
                       die_rank=args.die_rank)
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_table(rows))
    print("# algbw = S / t; busbw = algbw x 2(N-1)/N (nccl-tests definitions)")
    if args.procs > 1 and len(sizes) >= 2:
        for impl in impls:
            print()
            print(format_fit(rows, impl))
    if args.out:
        print(f"# wrote {write_rows(rows, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
