"""Calibrate the cost model on this machine: a device profile "this machine".

For each operator class the calibration times forward + backward of representative operators at the
sizes the lab's models use (batch 8 to 256 on digits-sized layers) and fits

    time(op) = overhead + flops / throughput        (least squares, both >= 0)

where ``flops`` are the operator's forward FLOPs; the fitted throughput therefore already includes the
backward pass. On a CPU with small layers the fixed per-operator overhead (dispatch, autograd) is
most of the time, which is why a plain FLOPs / peak model would be far off here.

It does this once with one process and once per worker count N with N processes running the same
benchmark at the same moment (they compete for the cores), and measures the optimiser step cost per
parameter and a fixed per-step overhead. The all-reduce alpha and beta come from the all-reduce
measurement (``lab.comm.measure``) when it is available.

The result is a :class:`MachineProfile`, saved as JSON (date and machine description included) and
loaded back by the pages and the predictor.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from lab.errors import LabError
from lab.topology import OP_CLASSES

PROFILE_VERSION = 1


@dataclass(frozen=True)
class ClassCost:
    overhead: float  # seconds per operator (forward + backward)
    throughput: float  # forward FLOPs per second of forward + backward time

    def time(self, flops: float) -> float:
        return self.overhead + flops / self.throughput


@dataclass(frozen=True)
class MachineProfile:
    created: str
    machine: dict
    classes: dict  # {procs (str): {op class: ClassCost}}
    optimizer_per_param: dict  # {procs (str): seconds per parameter per step}
    step_overhead: dict  # {procs (str): seconds per step outside operators (loss, zero_grad, loop)}
    alpha: float | None = None  # seconds per all-reduce message step (gloo, this machine)
    beta: float | None = None  # seconds per byte
    notes: list = field(default_factory=list)

    def cost(self, op_class: str, procs: int = 1) -> ClassCost:
        table = self.classes.get(str(procs)) or self.classes[str(self.nearest_procs(procs))]
        return table.get(op_class) or table["elementwise"]

    def nearest_procs(self, procs: int) -> int:
        have = sorted(int(k) for k in self.classes)
        return min(have, key=lambda p: (abs(p - procs), p))

    def to_json(self) -> str:
        d = asdict(self)
        d["version"] = PROFILE_VERSION
        return json.dumps(d, indent=2)

    @staticmethod
    def from_json(text: str) -> "MachineProfile":
        try:
            d = json.loads(text)
            if d.pop("version", None) != PROFILE_VERSION:
                raise LabError("the saved machine profile is from another version; calibrate again")
            d["classes"] = {p: {k: ClassCost(**v) for k, v in t.items()} for p, t in d["classes"].items()}
            return MachineProfile(**d)
        except LabError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise LabError(f"the saved machine profile is damaged ({exc}); calibrate again") from None

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)
        return path


def data_dir() -> Path:
    if os.environ.get("LAB_DATA"):
        return Path(os.environ["LAB_DATA"])
    if os.environ.get("LAB_DB"):
        return Path(os.environ["LAB_DB"]).resolve().parent
    return Path.cwd() / "data"


def profile_path() -> Path:
    return data_dir() / "machine_profile.json"


def load_profile(path: Path | None = None) -> MachineProfile | None:
    path = path or profile_path()
    if not path.exists():
        return None
    return MachineProfile.from_json(path.read_text())


def machine_description() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"hostname": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "torch_threads_per_worker": 1, "platform": platform.platform()}


# ---- representative operators ------------------------------------------------------------------

def _cases() -> dict[str, list[tuple[Callable[[int], tuple[nn.Module, torch.Tensor]], Callable[[int], float]]]]:
    """Per class: (build(batch) -> (module, input), forward FLOPs(batch))."""

    def lin(i, o):
        return (lambda b: (nn.Linear(i, o), torch.randn(b, i)), lambda b: 2.0 * b * i * o)

    def conv(c_in, c_out, side, k=3):
        return (lambda b: (nn.Conv2d(c_in, c_out, k, padding=k // 2), torch.randn(b, c_in, side, side)),
                lambda b: 2.0 * b * c_out * side * side * c_in * k * k)

    def ew(shape):
        n = int(np.prod(shape))
        return (lambda b: (nn.ReLU(), torch.randn(b, *shape)), lambda b: float(b * n))

    def bn(c, side):
        return (lambda b: (nn.BatchNorm2d(c), torch.randn(b, c, side, side)), lambda b: 4.0 * b * c * side * side)

    def ln(d, t):
        return (lambda b: (nn.LayerNorm(d), torch.randn(b, t, d)), lambda b: 5.0 * b * t * d)

    def pool(c, side):
        return (lambda b: (nn.MaxPool2d(2), torch.randn(b, c, side, side)), lambda b: float(b * c * side * side))

    def other(shape):
        return (lambda b: (nn.Flatten(), torch.randn(b, *shape)), lambda b: 0.0)

    return {
        "matmul": [lin(64, 128), lin(128, 64), lin(64, 10), lin(256, 256)],
        "conv": [conv(1, 8, 8), conv(8, 16, 4), conv(16, 16, 8)],
        "elementwise": [ew((128,)), ew((8, 8, 8)), ew((16, 8, 8))],
        "norm": [bn(16, 8), ln(32, 8)],
        "pool": [pool(8, 8), pool(16, 4)],
        "other": [other((16, 2, 2)), other((8, 8, 8))],
    }


def _time_fwd_bwd(module: nn.Module, x: torch.Tensor, repeat: int) -> float:
    x = x.requires_grad_(True)
    for _ in range(3):
        module(x).sum().backward()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        module(x).sum().backward()
        times.append(time.perf_counter() - t0)
    # The .sum() and its backward are part of every timing; subtract their own cost.
    y = torch.randn_like(module(x)).requires_grad_(True)
    base = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        y.sum().backward()
        base.append(time.perf_counter() - t0)
    return max(1e-9, statistics.median(times) - statistics.median(base))


def fit_cost(flops: list[float], seconds: list[float]) -> ClassCost:
    """Least squares time = overhead + flops / throughput, with both terms kept non-negative."""
    f = np.asarray(flops, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if np.ptp(f) > 0:
        slope, intercept = np.polyfit(f, t, 1)
    else:
        slope, intercept = 0.0, float(t.mean())
    if slope <= 0:
        slope = 1e-15  # no measurable FLOP dependence: effectively all overhead
        intercept = float(t.mean())
    if intercept < 0:
        intercept = 0.0
        slope = float((f * t).sum() / max((f * f).sum(), 1e-30))
    return ClassCost(overhead=float(intercept), throughput=float(1.0 / slope))


def measure_classes(batches: tuple[int, ...] = (8, 32, 128, 256), repeat: int = 15, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    out = {}
    for cls, cases in _cases().items():
        fl, ts = [], []
        for build, flops in cases:
            for b in batches:
                m, x = build(b)
                ts.append(_time_fwd_bwd(m, x, repeat))
                fl.append(flops(b))
        out[cls] = fit_cost(fl, ts)
    return out


def measure_optimizer_and_overhead(repeat: int = 20) -> tuple[float, float]:
    """Seconds per parameter of an Adam-family step, and the fixed per-step loop overhead."""
    torch.set_num_threads(1)
    sizes = [10_000, 100_000, 400_000]
    ts = []
    for n in sizes:
        p = nn.Parameter(torch.randn(n))
        p.grad = torch.randn(n)
        opt = torch.optim.Adam([p], lr=1e-3, foreach=True)
        for _ in range(3):
            opt.step()
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            opt.step()
            samples.append(time.perf_counter() - t0)
        ts.append(statistics.median(samples))
    per_param = max(0.0, float(np.polyfit(sizes, ts, 1)[0]))
    # Fixed cost of one training-loop step around the operators: cross-entropy, zero_grad, bookkeeping.
    logits = torch.randn(32, 10, requires_grad=True)
    target = torch.randint(0, 10, (32,))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        loss = nn.functional.cross_entropy(logits, target)
        loss.backward()
        logits.grad = None
        _ = float(loss.detach())
        samples.append(time.perf_counter() - t0)
    return per_param, statistics.median(samples)


def _worker(args) -> dict:
    barrier, repeat = args
    barrier.wait(timeout=120)
    classes = measure_classes(repeat=repeat)
    opt, overhead = measure_optimizer_and_overhead()
    return {"classes": {k: asdict(v) for k, v in classes.items()}, "opt": opt, "overhead": overhead}


def _concurrent(procs: int, repeat: int) -> dict:
    """Run the class benchmark in ``procs`` processes at once; average their fits."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(procs)
        with ctx.Pool(procs) as pool:
            results = pool.map_async(_worker, [(barrier, repeat)] * procs).get(timeout=600)
    classes = {}
    for cls in OP_CLASSES:
        ov = float(np.mean([r["classes"][cls]["overhead"] for r in results]))
        th = float(len(results) / np.sum([1.0 / r["classes"][cls]["throughput"] for r in results]))
        classes[cls] = ClassCost(ov, th)
    return {"classes": classes, "opt": float(np.mean([r["opt"] for r in results])),
            "overhead": float(np.mean([r["overhead"] for r in results]))}


def calibrate(procs: tuple[int, ...] = (1, 2, 4), repeat: int = 15, alpha_beta: tuple[float, float] | None = None,
              progress: Callable[[str, float], None] | None = None) -> MachineProfile:
    """Measure this machine and return its profile (not saved; call ``.save(profile_path())``)."""
    progress = progress or (lambda msg, frac: None)
    classes, opt, overhead = {}, {}, {}
    for i, p in enumerate(procs):
        progress(f"operator classes with {p} process(es)", i / (len(procs) + 1))
        if p == 1:
            threads = torch.get_num_threads()
            try:
                c = measure_classes(repeat=repeat)
                o, ov = measure_optimizer_and_overhead()
            finally:
                torch.set_num_threads(threads)
            r = {"classes": c, "opt": o, "overhead": ov}
        else:
            r = _concurrent(p, repeat)
        classes[str(p)] = r["classes"]
        opt[str(p)] = r["opt"]
        overhead[str(p)] = r["overhead"]
    notes = []
    if alpha_beta is None:
        progress("all-reduce alpha and beta", len(procs) / (len(procs) + 1))
        alpha_beta = _measure_alpha_beta()
        if alpha_beta is None:
            notes.append("all-reduce alpha/beta not measured (lab.comm.measure unavailable)")
    progress("done", 1.0)
    return MachineProfile(created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                          machine=machine_description(), classes=classes, optimizer_per_param=opt,
                          step_overhead=overhead, alpha=alpha_beta[0] if alpha_beta else None,
                          beta=alpha_beta[1] if alpha_beta else None, notes=notes)


def _measure_alpha_beta() -> tuple[float, float] | None:
    try:
        from lab.comm import measure as m
    except ImportError:
        return None
    fit = getattr(m, "fit_alpha_beta", None)
    run = getattr(m, "measure", None)
    if fit is None or run is None:
        return None
    rows = run(procs=2, sizes=[4096, 65536, 1 << 20, 4 << 20], iters=5, impls=("gloo",))
    result = fit(rows)
    if isinstance(result, dict):
        return float(result["alpha"]), float(result["beta"])
    return float(result[0]), float(result[1])
