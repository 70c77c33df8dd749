"""The calibrated machine model's value: the profile (what one machine's measurements fitted to), where it is kept and how it is loaded, and the fits it is made of."""
from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from lab import settings
from lab.errors import LabError
from lab.modelled.collectives.ring import ring_time

PROFILE_VERSION = 4  # 4: compute with N processes is k x t + d (wall time, means per step), pinned ranks


COMPUTE_CLASSES = ("matmul", "conv", "elementwise", "norm", "pool", "other")


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
        """Ring all-reduce time (:func:`lab.modelled.collectives.ring.ring_time`)."""
        return ring_time(procs, nbytes, self.alpha, self.beta)


@dataclass(frozen=True)
class SharingFit:
    per_hop: float  # seconds per message hop (count + payload, decode/merge included)
    per_byte: float  # seconds per byte this rank sends
    fit_error: float

    def time(self, hops: float, nbytes: float) -> float:
        return self.per_hop * hops + self.per_byte * nbytes


@dataclass(frozen=True)
class ExecutorFit:
    """The placement executor's own costs, measured inside it on synthetic plans (:mod:`lab.machine.insitu`):
    the terms of the core model (:mod:`lab.modelled.placement.cores`) in seconds. ``compute`` multiplies the
    one-process operator costs (the executor's calls cost what a training step's do, or more); ``call`` and
    ``backward_call`` are paid once per piece and micro-batch, ``node`` per operator when a piece runs node by
    node; a message costs its sender ``send_fixed + send_per_byte x bytes``, its receiver likewise, and
    ``background_same`` / ``background_other`` of other threads' CPU on each side (both processes on one core,
    or not); it is ``wire_fixed + wire_per_byte x bytes`` on its way; a process waking on a busy core waits
    ``wake``."""

    compute: float = 1.0
    call: float = 0.0
    backward_call: float = 0.0
    node: float = 0.0
    loss: float = 0.0
    send_fixed: float = 0.0
    send_per_byte: float = 0.0
    recv_fixed: float = 0.0
    recv_per_byte: float = 0.0
    background_same: float = 0.0
    background_other: float = 0.0
    wire_fixed: float = 0.0
    wire_per_byte: float = 0.0
    wake: float = 0.0
    fit_error: float = math.nan  # geometric-mean error of the fitted step times on the calibration plans
    cases: int = 0
    procs: tuple = ()  # the process counts it measured
    flags: tuple = ()  # what the fit could not pin down, in words
    largest: float = 0.0  # the most CPU seconds a calibration plan's step took, all processes together
    #: the slow-down after idle time ((idle s, factor), ...) the fit took off the measured CPU, which predictions
    #: with these terms charge back (none in a fit made before the cold starts were modelled: it holds them)
    cold: tuple = ()


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
    #: {procs: CommFit}: one point-to-point message as a placement run sends it (alpha per message, beta per
    #: byte); empty in a profile made before placement runs existed
    messages: dict = field(default_factory=dict)
    #: The placement executor's own costs (None in a profile made before they were measured)
    executor: ExecutorFit | None = None
    #: Plans drawn at random and run after the fit, with the model's error on them (:func:`lab.machine.heldout.check`;
    #: empty when the calibration ran none)
    heldout: dict = field(default_factory=dict)

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

    def message_fit(self, procs: int) -> CommFit | None:
        """One point-to-point message with ``procs`` processes (the nearest calibrated count), or None."""
        return self._nearest(self.messages, procs) if self.messages else None

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
            d["messages"] = {str(p): CommFit(**v) for p, v in d.get("messages", {}).items()}
            ex = d.get("executor")
            d["executor"] = ExecutorFit(**{**ex, "procs": tuple(ex.get("procs", ())), "flags": tuple(ex.get("flags", ())),
                                           "cold": tuple(tuple(float(v) for v in c) for c in ex.get("cold", ()))}) \
                if ex else None
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
        cls, f = op_features(op)
        counts[cls] += 1
        flops[cls] += f
    return {"counts": counts, "flops": flops, "tensors": int(n_tensors)}


def op_features(op: Any) -> tuple[str, float]:
    """(calibrated class, FLOPs the fit charges) of one traced operator: a class the calibration has
    no cost of counts as "other", and the first matrix product or convolution counts 2/3 of its FLOPs
    because its backward pass computes no input gradient."""
    cls = op.op_class if op.op_class in COMPUTE_CLASSES else "other"
    f = float(op.flops)
    if not op.inputs and cls in ("matmul", "conv"):
        f *= 2.0 / 3.0
    return cls, f


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
