"""Time per step of the lab's optimisers against torch's Adam in its three CPU forms and against
adabelief-pytorch, on a 10-million-parameter stack of layers and on the lab's four models.

    .venv/bin/python bench/bench_optim.py [--rounds 7] [--threads N] [--only stack] [--smoke]

Every optimiser gets its own copy of the workload's parameters with the same fixed random
gradients. The optimisers take turns (one step each per round, round-robin, after one warm-up step)
so a noisy neighbour on a shared machine slows them alike; each table shows the median ms/step and
the ratio to torch.optim.Adam (foreach) measured in the same run. The last line compares, on the
stack (with ``--only`` a model: on that model, named in each label): the lab's AdaBelief and Max-AdaBelief with
torch's foreach Adam, torch's fused Adam with its foreach Adam, and the slowest of the lab's three fused (compiled)
optimisers with torch's fused Adam (not in a smoke run, which compiles nothing). The fused ones compile at their
warm-up step (not timed; the compile time is printed).
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import bench_parser, score, SMOKE_NOTE, table  # noqa: E402

from adabelief_pytorch import AdaBelief as PackageAdaBelief  # noqa: E402

from lab.errors import LabError  # noqa: E402
from lab.optim.optimizers import AdaBelief, Adam, MaxAdaBelief, MaxAdaBeliefCorrected  # noqa: E402
from lab.scenario.models import build_model  # noqa: E402
from lab.scenario.names import MODELS  # noqa: E402

PEER = "torch Adam (foreach)"
NO_CHECK = "lab Max-AdaBelief (fused, no NaN check)"
# a training job's parameters and gradients are views of two flat buffers: the fused path steps them in one call
FLAT = "lab Max-AdaBelief (fused, flat buffers)"
FUSED = "torch Adam (fused)"


def candidates():
    yield PEER, lambda ps: torch.optim.Adam(ps, lr=1e-3, foreach=True)
    yield "torch Adam (for-loop, CPU default)", lambda ps: torch.optim.Adam(ps, lr=1e-3, foreach=False)
    yield FUSED, lambda ps: torch.optim.Adam(ps, lr=1e-3, fused=True)
    yield "adabelief-pytorch AdaBelief", lambda ps: PackageAdaBelief(ps, lr=1e-3, rectify=False, print_change_log=False)
    yield "adabelief-pytorch AdaBelief (amsgrad)", lambda ps: PackageAdaBelief(
        ps, lr=1e-3, rectify=False, amsgrad=True, print_change_log=False)
    yield "lab Adam", lambda ps: Adam(ps, lr=1e-3)
    yield "lab AdaBelief", lambda ps: AdaBelief(ps, lr=1e-3)
    yield "lab Max-AdaBelief", lambda ps: MaxAdaBelief(ps, lr=1e-3)
    yield "lab Max-AdaBelief (corrected)", lambda ps: MaxAdaBeliefCorrected(ps, lr=1e-3)
    yield "lab Adam (fused)", lambda ps: Adam(ps, lr=1e-3, fused=True)
    yield "lab AdaBelief (fused)", lambda ps: AdaBelief(ps, lr=1e-3, fused=True)
    yield "lab Max-AdaBelief (fused)", lambda ps: MaxAdaBelief(ps, lr=1e-3, fused=True)
    # torch's fused Adam checks nothing; the lab's optimisers read every gradient once more to skip a NaN step
    yield NO_CHECK, lambda ps: MaxAdaBelief(ps, lr=1e-3, fused=True, check_finite=False)
    yield FLAT, lambda ps: MaxAdaBelief(ps, lr=1e-3, fused=True)


LAB_FUSED = ("lab Adam (fused)", "lab AdaBelief (fused)", "lab Max-AdaBelief (fused)")
# compiled at their first step: the first compile in a process takes tens of seconds on a cold cache
COMPILED = (*LAB_FUSED, NO_CHECK, FLAT)


def stack_shapes(width: int = 1000, layers: int = 10) -> list[tuple[int, ...]]:
    """``layers`` square layers of ``width`` with their biases; by default ten 1000x1000 layers: 10.01 million
    parameters in 20 tensors."""
    return [s for _ in range(layers) for s in ((width, width), (width,))]


def model_shapes(name: str) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in build_model(name).parameters()]


def measure(shapes: list[tuple[int, ...]], rounds: int, smoke: bool = False) -> tuple[dict[str, float], list[str]]:
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(s, generator=gen) for s in shapes]
    runs, skipped = [], []
    for name, make in candidates():
        if smoke and name in COMPILED:
            continue  # a smoke run takes seconds; a failed compile is only reported as skipped anyway
        if name == FLAT:
            pbuf, gbuf = torch.cat([g.reshape(-1) * 0.1 for g in grads]), torch.cat([g.reshape(-1) for g in grads])
            params, at = [], 0
            for g in grads:
                params.append(torch.nn.Parameter(pbuf[at:at + g.numel()].view(g.shape)))
                params[-1].grad = gbuf[at:at + g.numel()].view(g.shape)
                at += g.numel()
        else:
            params = [torch.nn.Parameter(g * 0.1) for g in grads]
            for p, g in zip(params, grads):
                p.grad = g
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # adabelief-pytorch prints its settings
                opt = make(params)
            t0 = time.perf_counter()
            opt.step()  # warm-up: creates the state (and compiles a fused lab optimiser)
            if "fused)" in name and name.startswith("lab") and time.perf_counter() - t0 > 0.5:
                print(f"  {name}: first step (compiling) {time.perf_counter() - t0:.1f} s")
        except (RuntimeError, ValueError, LabError) as exc:  # e.g. fused not available on this build
            skipped.append(f"{name}: {exc}")
            continue
        runs.append((name, opt, []))
    for _ in range(rounds):
        for name, opt, times in runs:
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
    return {name: statistics.median(times) for name, _, times in runs}, skipped


def main(argv=None) -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--only", choices=["stack", *MODELS], help="one workload")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rounds = 1
    if args.threads:
        torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"load average {load:.2f} at the start, {args.rounds} timed steps each (median)")
    if args.smoke:  # the stack alone: the last line compares on it
        print(SMOKE_NOTE)
        workloads = {"stack": stack_shapes(width=64, layers=2)}
    else:
        workloads = {"stack": stack_shapes()} | {m: model_shapes(m) for m in MODELS}
        if args.only:
            workloads = {args.only: workloads[args.only]}
    compared = None  # what the last line compares on: the stack, or with --only the one workload run
    for wname, shapes in workloads.items():
        numel = sum(torch.Size(s).numel() for s in shapes)
        med, skipped = measure(shapes, args.rounds, args.smoke)
        peer = med[PEER]
        print(f"\n{wname}: {numel / 1e6:.3g}M parameters in {len(shapes)} tensors")
        print(table(["optimiser", "ms/step", "x " + PEER],
                    [[name, f"{t * 1e3:.2f}", f"{t / peer:.2f}"] for name, t in med.items()]))
        for s in skipped:
            print(f"skipped {s}")
        if wname == "stack" or compared is None:
            compared, compared_on, compared_skipped = med, wname, skipped
    c = compared
    lab_fused = [c[n] for n in LAB_FUSED if n in c]
    if NO_CHECK in c and FUSED in c:
        print(f"\nlab Max-AdaBelief (fused) without its NaN check: {c[NO_CHECK] / c[FUSED]:.2f}x torch's "
              "fused Adam, which checks nothing")
    print()

    def why(*names: str) -> str:  # a ratio is missing when one of its optimisers could not run on this build
        return "; ".join(s for s in compared_skipped if s.startswith(tuple(f"{n}: " for n in names))) or "not measured"

    at = "" if compared_on == "stack" else f"{compared_on} "
    score("optim", [(f"{at}adabelief/adam_foreach", c["lab AdaBelief"] / c[PEER], "x"),
                    (f"{at}maxadabelief/adam_foreach", c["lab Max-AdaBelief"] / c[PEER], "x"),
                    (f"{at}adam_fused/adam_foreach", c[FUSED] / c[PEER] if FUSED in c else None, "x"),
                    # a smoke run leaves the compiled optimisers out: that ratio is not measured there, not missing
                    *([] if args.smoke else
                      [(f"{at}lab_fused/adam_fused", max(lab_fused) / c[FUSED]
                        if FUSED in c and len(lab_fused) == len(LAB_FUSED) else None, "x")])],
          why_not={f"{at}adam_fused/adam_foreach": why(FUSED), f"{at}lab_fused/adam_fused": why(FUSED, *LAB_FUSED)})

if __name__ == "__main__":
    main()
