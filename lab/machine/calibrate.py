"""Calibrate the cost model on this machine: the device profile "this machine".

What is measured (all medians of repeated timings, one torch thread per process as the training
workers use):

* **Compute, per operator class, in context.** A family of *calibration networks* (the lab's
  model classes at widths, depths and batch sizes that the presets do not use, see
  :data:`CALIBRATION_NETS`) runs the training step exactly as :mod:`lab.train.worker` does: a batch
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
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from lab import settings
from lab.errors import LabError

PROFILE_VERSION = 4  # 4: compute with N processes is k x t + d (wall time, means per step), pinned ranks
COMPUTE_CLASSES = ("matmul", "conv", "elementwise", "norm", "pool", "other")
OPTIMIZER_KINDS = ("adam", "adabelief", "maxadabelief", "maxadabelief-corrected")
COMPRESSOR_KEYS = ("none", "group_topk", "topk", "randomk", "fp16")
SHARING_METHODS = ("dense", "sparse_ring", "sparse_allgather")
MAX_PROCS = 4

#: Calibration networks: (model class name in lab.scenario.models, constructor keyword arguments). None of
#: them is a preset (MLP 128-64, CNN 8/16 channels, ResNet 16 channels x 3 blocks, encoder 32/64).
CALIBRATION_NETS: tuple[tuple[str, dict], ...] = (
    ("MLP", {"hidden": (32,)}),
    ("MLP", {"hidden": (96,)}),
    ("MLP", {"hidden": (256,)}),
    ("MLP", {"hidden": (96, 48)}),
    ("MLP", {"hidden": (192, 96, 48)}),
    ("MLP", {"hidden": (48, 48, 48, 48)}),
    ("CNN", {"channels": (4, 8)}),
    ("CNN", {"channels": (12, 24)}),
    ("CNN", {"channels": (16, 32)}),
    ("SmallResNet", {"channels": 8, "blocks": 1}),
    ("SmallResNet", {"channels": 12, "blocks": 2}),
    ("EncoderBlock", {"d_model": 16, "d_ff": 32}),
    ("EncoderBlock", {"d_model": 48, "d_ff": 96}),
)
CALIBRATION_BATCHES = (16, 64)


# ---------------------------------------------------------------------------------------------
# The profile
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClassCost:
    overhead: float  # seconds per operator (forward + backward)
    throughput: float  # forward FLOPs per second of forward + backward time (inf: no FLOP dependence)

    def time(self, flops: float) -> float:
        return self.overhead + (flops / self.throughput if self.throughput and math.isfinite(self.throughput) else 0.0)


@dataclass(frozen=True)
class LinearCost:
    """``fixed + per_tensor x tensors + per_unit x units`` (units: parameters, elements or bytes)."""

    fixed: float = 0.0
    per_tensor: float = 0.0
    per_unit: float = 0.0

    def time(self, units: float, tensors: float = 0.0) -> float:
        return self.fixed + self.per_tensor * tensors + self.per_unit * units


@dataclass(frozen=True)
class ComputeFit:
    classes: dict  # {op class: ClassCost}
    fixed: float  # seconds per step outside the operators
    per_tensor: float  # seconds per parameter tensor (gradient accumulation)
    fit_error: float  # geometric-mean error of the fit on the calibration networks (fraction)
    samples: int  # calibration (network, batch) pairs

    def cost(self, op_class: str) -> ClassCost:
        return self.classes.get(op_class) or self.classes["elementwise"]

    def scaled(self, k: float) -> "ComputeFit":
        """The same fit on a machine ``k`` times slower."""
        return ComputeFit({c: ClassCost(v.overhead * k, v.throughput / k) for c, v in self.classes.items()},
                          self.fixed * k, self.per_tensor * k, self.fit_error, self.samples)


@dataclass(frozen=True)
class CommFit:
    alpha: float  # seconds per ring step
    beta: float  # seconds per byte
    fit_error: float  # geometric-mean error over the measured cases (fraction)

    def time(self, procs: int, nbytes: float) -> float:
        """Ring all-reduce time: 2(N-1) alpha + 2(N-1)/N S beta."""
        return 2 * (procs - 1) * self.alpha + 2 * (procs - 1) / procs * nbytes * self.beta


@dataclass(frozen=True)
class SharingFit:
    per_hop: float  # seconds per message hop (count + payload, decode/merge included)
    per_byte: float  # seconds per byte this rank sends
    fit_error: float

    def time(self, hops: float, nbytes: float) -> float:
        return self.per_hop * hops + self.per_byte * nbytes


@dataclass(frozen=True)
class MachineProfile:
    """"This machine": what :func:`calibrate` measured. One-process costs, a slow-down factor per
    process count N, and per N the in-context costs of the collectives and the idle jitter."""

    created: str
    machine: dict
    compute: ComputeFit  # one process
    optimizer: dict  # {kind: LinearCost (per_unit: per parameter)}, one process
    compressor: dict  # {"kind" or "kind+ef": LinearCost (per_unit: per element)}, one process
    contention: dict  # {procs (str): factor on compute with N processes at once (plus step_extra)}
    allreduce: dict  # {procs: {"gloo" | "ring": CommFit}} measured in context (job loop or cycles)
    sharing: dict  # {procs: {method: SharingFit}} measured in context (job loop or cycles)
    jitter: dict  # {procs: LinearCost: mean idle of equal workers (fixed, seconds)}
    remainder: dict  # {procs: LinearCost: rest of the step: loop, ranks ending apart (fixed, seconds)}
    measured_allreduce: dict  # {procs: {"gloo" | "ring": CommFit}} from lab.comm.measure (barrier first)
    wait_slowdown: list = field(default_factory=lambda: [[0.0, 1.0]])  # [[wait s, compute factor], ...]
    settings: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    #: {procs: seconds added to every step's compute with N processes}: compute with N processes is
    #: ``slowdown(N) x (one-process time) + step_extra[N]`` (empty: no fixed extra)
    step_extra: dict = field(default_factory=dict)
    #: {procs: mean wait per step (collective, idle, rest) in the N-process calibration runs}: the
    #: wait whose after-effect the N-process compute terms already hold
    cycle_wait: dict = field(default_factory=dict)

    # ----- lookups (nearest calibrated process count when N itself was not calibrated) ---------
    @staticmethod
    def _nearest(table: dict, procs: int) -> Any:
        if not table:
            raise LabError("the machine profile has no entry for this quantity; calibrate again", where="profile")
        if str(procs) in table:
            return table[str(procs)]
        have = sorted(int(k) for k in table)
        return table[str(min(have, key=lambda p: (abs(p - procs), -p)))]

    def slowdown(self, procs: int) -> float:
        """Factor on compute with ``procs`` processes at once (shared cores, caches, memory, the job
        loop); with :meth:`extra_per_step` added once per step."""
        if procs <= 1:  # 1.0, or the job loop's own cost over the harness's (cycle_source="loop")
            return float(self.contention.get("1", 1.0))
        return float(self._nearest(self.contention, procs))

    def extra_per_step(self, procs: int) -> float:
        """Seconds added to every step's compute with ``procs`` processes (see :attr:`step_extra`)."""
        if not self.step_extra or (procs <= 1 and "1" not in self.step_extra):
            return 0.0
        return float(self._nearest(self.step_extra, max(1, procs)))

    def compute_fit(self, procs: int = 1) -> ComputeFit:
        """Per-class costs with ``procs`` processes sharing the cores: every cost times
        :meth:`slowdown`, plus :meth:`extra_per_step` once per step."""
        fit = self.compute.scaled(self.slowdown(procs))
        extra = self.extra_per_step(procs)
        return replace(fit, fixed=fit.fixed + extra) if extra else fit

    def optimizer_cost(self, kind: str, procs: int = 1) -> LinearCost:
        c = self.optimizer.get(kind) or self.optimizer["adam"]
        k = self.slowdown(procs)
        return LinearCost(c.fixed * k, c.per_tensor * k, c.per_unit * k)

    def compressor_cost(self, kind: str, error_feedback: bool, procs: int = 1) -> LinearCost:
        key = kind + ("+ef" if error_feedback else "")
        c = self.compressor.get(key) or self.compressor.get(kind) or LinearCost()
        k = self.slowdown(procs)
        return LinearCost(c.fixed * k, c.per_tensor * k, c.per_unit * k)

    def allreduce_fit(self, impl: str, procs: int) -> CommFit:
        t = self._nearest(self.allreduce, procs)
        return t.get(impl) or t["gloo"]

    def sharing_fit(self, method: str, procs: int) -> SharingFit:
        t = self._nearest(self.sharing, procs)
        if method not in t:
            raise LabError(f"the machine profile has no timing of sharing method {method!r}; calibrate again",
                           where="profile")
        return t[method]

    def wait_factor(self, wait: float) -> float:
        """Compute slow-down after waiting ``wait`` seconds before the step (interpolated, flat beyond)."""
        pts = sorted(self.wait_slowdown or [[0.0, 1.0]])
        return float(np.interp(max(0.0, wait), [p[0] for p in pts], [p[1] for p in pts]))

    def extra_wait_factor(self, wait: float, procs: int) -> float:
        """Compute slow-down after waiting ``wait`` seconds *beyond* what the N-process terms already
        hold: their calibration runs waited :attr:`cycle_wait` [N] per step, so the factor is
        ``wait_factor(wait) / wait_factor(cycle_wait[N])``, at least 1."""
        base = float(self._nearest(self.cycle_wait, procs)) if self.cycle_wait and procs > 1 else 0.0
        return max(1.0, self.wait_factor(wait) / self.wait_factor(base))

    def jitter_cost(self, procs: int) -> LinearCost:
        return self._nearest(self.jitter, procs) if procs > 1 and self.jitter else LinearCost()

    def remainder_cost(self, procs: int) -> LinearCost:
        """The rest of the step outside the timed parts with ``procs`` processes (one process: only
        when the job's loop was calibrated with one process, ``cycle_source="loop"``)."""
        if procs <= 1:
            return self.remainder.get("1", LinearCost())
        multi = {k: v for k, v in self.remainder.items() if k != "1"}
        return self._nearest(multi, procs) if multi else LinearCost()

    @property
    def procs(self) -> list[int]:
        return sorted(int(k) for k in self.contention)

    def describe(self) -> str:
        m = self.machine
        return (f"{m.get('cpu') or 'unknown CPU'}, {m.get('cores')} cores, host {m.get('hostname')}, "
                f"torch {m.get('torch')}; calibrated {self.created}")

    # ----- JSON -----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        d["version"] = PROFILE_VERSION
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, default=_json_default)

    @staticmethod
    def from_dict(d: Any) -> "MachineProfile":
        try:
            d = dict(d)
            if d.pop("version", None) != PROFILE_VERSION:
                raise LabError("the saved machine profile is from another version of the lab; calibrate again",
                               where="profile")
            c = d["compute"]
            d["compute"] = ComputeFit(**{**c, "classes": {k: ClassCost(**v) for k, v in c["classes"].items()}})
            d["optimizer"] = {k: LinearCost(**v) for k, v in d["optimizer"].items()}
            d["compressor"] = {k: LinearCost(**v) for k, v in d["compressor"].items()}
            d["contention"] = {str(k): float(v) for k, v in d["contention"].items()}
            d["step_extra"] = {str(k): float(v) for k, v in d.get("step_extra", {}).items()}
            d["cycle_wait"] = {str(k): float(v) for k, v in d.get("cycle_wait", {}).items()}
            d["allreduce"] = {p: {k: CommFit(**v) for k, v in t.items()} for p, t in d["allreduce"].items()}
            d["measured_allreduce"] = {p: {k: CommFit(**v) for k, v in t.items()}
                                       for p, t in d["measured_allreduce"].items()}
            d["sharing"] = {p: {k: SharingFit(**v) for k, v in t.items()} for p, t in d["sharing"].items()}
            d["jitter"] = {p: LinearCost(**v) for p, v in d["jitter"].items()}
            d["remainder"] = {p: LinearCost(**v) for p, v in d["remainder"].items()}
            prof = MachineProfile(**d)
        except LabError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise LabError(f"the saved machine profile is damaged ({type(exc).__name__}: {exc}); calibrate again",
                           where="profile") from None
        if "adam" not in prof.optimizer or "elementwise" not in prof.compute.classes:
            raise LabError("the saved machine profile is incomplete; calibrate again", where="profile")
        return prof

    @staticmethod
    def from_json(text: str | bytes) -> "MachineProfile":
        try:
            d = json.loads(text)
        except ValueError as exc:
            raise LabError(f"the saved machine profile is not JSON ({exc}); calibrate again", where="profile") from None
        return MachineProfile.from_dict(d)

    def save(self, path: Path | str | None = None) -> Path:
        path = Path(path) if path is not None else profile_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)
        return path


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"cannot serialise {type(o).__name__}")


data_dir = settings.data_dir


def profile_path() -> Path:
    """Where "this machine"'s profile lives: LAB_DATA (or the run store's folder)/machine_profile.json."""
    return data_dir() / "machine_profile.json"


def load_profile(path: Path | str | None = None) -> MachineProfile | None:
    """The saved profile, or None when there is none yet (a damaged file raises LabError)."""
    path = Path(path) if path is not None else profile_path()
    if not path.exists():
        return None
    return MachineProfile.from_json(path.read_text())


def machine_description() -> dict:
    import torch

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"hostname": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "torch_threads_per_process": 1, "platform": platform.platform(),
            "load_average_1min": load}


# ---------------------------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------------------------
def nnls_relative(features: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Non-negative least squares of ``features @ x = seconds`` in relative terms (each row divided
    by its measured time, so small and large cases count alike). Columns are scaled first."""
    from scipy.optimize import nnls

    a = np.asarray(features, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if a.ndim != 2 or a.shape[0] != t.shape[0] or a.shape[0] == 0:
        raise LabError("fitting needs one row of features per measured time", where="calibration")
    if np.any(t <= 0) or not np.all(np.isfinite(t)):
        raise LabError("measured times must be positive and finite", where="calibration")
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    x, _ = nnls(a / scale / t[:, None], np.ones(len(t)), maxiter=50 * a.shape[1])
    return x / scale


def geomean_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """exp(mean |ln(predicted / measured)|) - 1 over the positive pairs (NaN when there are none)."""
    logs = [abs(math.log(p / m)) for p, m in zip(predicted, measured)
            if p and m and p > 0 and m > 0 and math.isfinite(p) and math.isfinite(m)]
    return math.exp(sum(logs) / len(logs)) - 1 if logs else math.nan


def graph_features(graph: Any, n_tensors: int) -> dict:
    """Counts and FLOPs per operator class of a traced model (lab.modelled.opgraph.OpGraph), the first
    matrix product / convolution counting 2/3 (no input gradient), and its parameter tensors."""
    counts = {c: 0 for c in COMPUTE_CLASSES}
    flops = {c: 0.0 for c in COMPUTE_CLASSES}
    for op in graph.ops:
        cls = op.op_class if op.op_class in counts else "other"
        f = float(op.flops)
        if not op.inputs and cls in ("matmul", "conv"):
            f *= 2.0 / 3.0
        counts[cls] += 1
        flops[cls] += f
    return {"counts": counts, "flops": flops, "tensors": int(n_tensors)}


def _feature_row(feat: dict, classes: Sequence[str]) -> list[float]:
    row = [1.0, float(feat["tensors"])]
    for c in classes:
        row += [float(feat["counts"][c]), float(feat["flops"][c])]
    return row


def fit_compute(samples: Sequence[dict]) -> ComputeFit:
    """Fit the compute model to ``samples`` ({"features": graph_features(...), "seconds": t_fb})."""
    if not samples:
        raise LabError("no calibration samples to fit", where="calibration")
    present = [c for c in COMPUTE_CLASSES if any(s["features"]["counts"][c] for s in samples)]
    a = np.array([_feature_row(s["features"], present) for s in samples])
    t = np.array([s["seconds"] for s in samples])
    x = nnls_relative(a, t)
    classes = {}
    for i, c in enumerate(present):
        ov, inv = x[2 + 2 * i], x[3 + 2 * i]
        classes[c] = ClassCost(float(ov), float(1.0 / inv) if inv > 0 else math.inf)
    for c in COMPUTE_CLASSES:  # classes no calibration network has: cost as element-wise
        classes.setdefault(c, classes.get("elementwise", ClassCost(0.0, math.inf)))
    fit = ComputeFit(classes, float(x[0]), float(x[1]), 0.0, len(samples))
    pred = [compute_seconds(fit, s["features"]) for s in samples]
    return ComputeFit(classes, float(x[0]), float(x[1]), geomean_error(pred, t), len(samples))


def compute_seconds(fit: ComputeFit, feat: dict) -> float:
    """Forward + backward seconds of one training step for graph features ``feat``."""
    t = fit.fixed + fit.per_tensor * feat["tensors"]
    for c in COMPUTE_CLASSES:
        n = feat["counts"].get(c, 0)
        if n:
            cc = fit.cost(c)
            t += n * cc.overhead + (feat["flops"][c] / cc.throughput if math.isfinite(cc.throughput) else 0.0)
    return t


def fit_linear(rows: Sequence[tuple[float, float, float]]) -> LinearCost:
    """Non-negative fit of t = fixed + per_tensor x tensors + per_unit x units; rows (tensors, units, t)."""
    a = np.array([[1.0, r[0], r[1]] for r in rows])
    t = np.array([r[2] for r in rows])
    x = nnls_relative(a, t)
    return LinearCost(float(x[0]), float(x[1]), float(x[2]))


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


def build_calibration_net(cls_name: str, kwargs: dict, seed: int = 0):
    import torch

    from lab.scenario import models

    gen = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return getattr(models, cls_name)(in_features=64, classes=10, **kwargs)
    finally:
        torch.random.set_rng_state(gen)


class StepHarness:
    """The training step of :class:`lab.train.worker.Trainer` (``forward_backward``) for any model:
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

    from lab.modelled.opgraph import trace

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


def measure_optimizers(kinds: Sequence[str] = OPTIMIZER_KINDS, repeat: int = 15,
                       shapes: Sequence[tuple[int, int]] = OPT_SHAPES) -> dict[str, list[tuple[float, float, float]]]:
    """Seconds of one optimiser step (lab.optim.optimizers) for each kind on synthetic parameter lists."""
    import torch

    from lab.optim.optimizers import make_optimizer

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


def measure_compressors(keys: Sequence[str] = COMPRESSOR_KEYS, sizes: Sequence[int] = COMPRESS_SIZES,
                        repeat: int = 10, ratio: float = 0.01, group_size: int = 1024,
                        seed: int = 0) -> dict[str, list[tuple[float, float, float]]]:
    """Seconds of one compress call per compressor (with and without error feedback) and size."""
    import torch

    from lab.compression.compressors import make_compressor

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

    from lab.optim.optimizers import make_optimizer

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
#: Collectives timed in the cycles: (label, sharing method or None for a dense all-reduce, impl).
CYCLE_KINDS = (("gloo", None, "gloo"), ("ring", None, "ring"), ("sparse_allgather", "sparse_allgather", None),
               ("sparse_ring", "sparse_ring", None), ("dense", "dense", None))
CYCLE_RATIO = 0.01  # Group-TopK ratio of the compressed cycles


def _cycle_case(rank: int, world: int, net: int, batch: int, kind: tuple, repeat: int, seed: int = 0) -> dict:
    """``repeat`` training-like cycles of one calibration network on every rank at once: forward +
    backward, then the collective, then the optimiser step, timed as lab.train.worker times them
    (idle = latest 'ready' stamp among the ranks minus one's own, capped at the collective)."""
    import torch
    import torch.distributed as dist

    from lab.comm.ring import ring_allreduce
    from lab.compression.compressors import GroupTopK

    try:  # the training job's own transport for compressed gradients (receives posted ahead)
        from lab.train.compressed import share
    except ImportError:  # pragma: no cover - an older lab.train
        from lab.comm.sparse import share
    from lab.optim.optimizers import make_optimizer

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


#: Training-like cycles with N processes: collective label -> (calibration network, batch) cases.
CYCLE_CASES: dict[str, tuple[tuple[int, int], ...]] = {
    "gloo": ((0, 16), (3, 16), (7, 16), (12, 16)),
    "ring": ((3, 16),),
    "sparse_allgather": ((3, 16), (7, 16)),
    "sparse_ring": ((3, 16),),
    "dense": ((3, 16),),
}
CYCLE_REPEAT = 150  # cycles (or job steps) per case: a steady state, as in a run (short bursts after a barrier run slow);
# 150 rather than 50: on this shared 2-core VM, two calibrations with 50 predicted the same 13 runs with
# geometric-mean errors of 41.6 and 24.2 %, two with 150 (and 30 repeats) 20.6 and 21.9 %
CALIBRATION_REPEAT = 30


def cycle_cases(nets: Sequence[int] | None = None) -> list[tuple[str, int, int]]:
    """(collective label, network, batch) of the cycles; with ``nets``, only cases of those networks
    (each collective keeps at least one case, on the first of ``nets``)."""
    out = []
    for label, cases in CYCLE_CASES.items():
        sel = [c for c in cases if nets is None or c[0] in nets] or ([(nets[0], 16)] if nets else list(cases[:1]))
        out += [(label, n, b) for n, b in sel]
    return out


def rank_cpu(rank: int) -> int | None:
    """The core the lab's job manager gives a job's rank ``rank`` on an idle machine (the uniform
    placement policy: ranks take this process's allowed cores in turn; :mod:`lab.jobs.manager`)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return None
    return cpus[rank % len(cpus)] if cpus else None


def pin_rank(rank: int) -> None:
    """Pin this process to :func:`rank_cpu` (as the job manager pins a job's ranks), when
    ``LAB_CALIBRATION_PIN`` is not "0"."""
    if settings.raw("LAB_CALIBRATION_PIN") == "0":
        return
    cpu = rank_cpu(rank)
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:  # pragma: no cover - not allowed here
            pass


def _procs_worker(rank: int, world: int, port: int, out_dir: str, nets: list | None, repeat: int,
                  cases: list | None = None) -> None:
    """One of N calibration processes (spawned by :func:`measure_procs`). One process: the compute,
    optimiser and compressor benchmarks. Several: training-like cycles of each collective."""
    import torch.distributed as dist

    from lab.comm.sparse import init_worker

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
    from lab.comm.sparse import run_local

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
    from lab.comm.measure import fit_rows, measure

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
        from lab.machine.loop import measure_loop

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
    from lab.modelled.opgraph import trace

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
        optimizer={k: opt for k in OPTIMIZER_KINDS},
        compressor={k: compress for k in [*COMPRESSOR_KEYS, *(c + "+ef" for c in COMPRESSOR_KEYS if c != "none")]},
        contention={"1": 1.0, **{p: contention for p in multi}},
        allreduce={p: {"gloo": CommFit(alpha, beta, 0.0), "ring": CommFit(alpha, beta, 0.0)} for p in multi},
        sharing={p: {m: SharingFit(per_hop, per_byte, 0.0) for m in SHARING_METHODS} for p in multi},
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
