"""Fitting the profile to the measurements: one-process costs, the slow-down with N processes, the rest of a step, and the error of each fit."""
from __future__ import annotations

import statistics
from typing import Mapping, Sequence

import numpy as np

from lab.machine.cases import (
    CALIBRATION_NETS,
    CYCLE_KINDS,
    build_calibration_net,
)
from lab.machine.profile import (
    CommFit,
    ComputeFit,
    LinearCost,
    SharingFit,
    compute_seconds,
    fit_linear,
    geomean_error,
    graph_features,
    nnls_relative,
)
from lab.modelled.opgraph import trace
from lab.modelled.collectives.ring import ring_bytes, ring_steps


def fit_local(raw: dict) -> tuple[dict, dict]:
    """Optimiser and compressor fits from raw local measurements."""
    opt = {k: fit_linear(rows) for k, rows in raw["optimizer"].items()}
    cmp = {k: fit_linear(rows) for k, rows in raw["compressor"].items()}
    return opt, cmp


def fit_compute_slowdown(rows: Sequence[dict], base: ComputeFit, optimizer: dict,
                         features: dict) -> tuple[float, float]:
    """(k, d): with N processes, a case's compute per step (wall time of forward + backward + the
    optimiser step, ``fb + opt`` of the rows) is ``k x (its one-process prediction) + d``. A
    non-negative least-squares fit in relative terms over the rows (k alone, d = 0, with fewer than
    two distinct cases). The fixed ``d`` is what a step pays whatever its size (the job loop around
    the step, waking up on a shared core): small networks grow by much more than large ones with N
    processes, which one factor cannot describe. (1.0, 0.0) without rows."""
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
        if method is None:  # dense all-reduce: the ring's alpha-beta time (lab.modelled.collectives.ring)
            beta = betas.get(impl, 0.0)
            steps = float(ring_steps(procs))
            alpha = max(0.0, float(statistics.median(
                [(r["comm"] - ring_bytes(r["numel"] * 4, procs) * beta) / steps for r in sel])))
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
