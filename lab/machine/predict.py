"""Predict a training step from the machine profile, and set the prediction beside the measurement.

:func:`predict_step` takes a Scenario and a :class:`lab.machine.calibrate.MachineProfile` and works out,
per worker and step, what :mod:`lab.train.trainer` will record:

* ``fb``: forward + backward of the worker's batch (its model's operators through the calibrated
  per-class costs, plus the step's fixed and per-tensor costs), with the profile measured for as
  many processes as the job runs (they share the cores);
* ``opt``: the optimiser step (lab.optim.optimizers kind; fixed + per tensor + per parameter);
* ``emul_compute``: the emulated device wait, **the worker's own formula**: a worker standing for a
  device ``scale`` times slower than the fastest waits ``(scale - 1) x (fb + opt)``;
* ``compute = fb + opt + emul_compute`` (the run store's ``t_compute``);
* ``compress``: compressing the flat gradient (calibrated compressor cost for its length);
* ``comm``: the collective after the last worker arrives: alpha-beta of the all-reduce
  implementation for N processes on the bytes it sends, or, compressed, the sharing method's
  message pattern (hops and exact wire bytes of :mod:`lab.compression.compressors` payloads); plus the emulated
  link wait with the worker's formulas (:func:`lab.train.emulation.ring_allreduce_time` for gloo,
  the per-message ``topology.transfer_time`` of the lab ring and the sparse methods);
* ``idle``: waiting for the slowest worker, ``max(arrival) - own arrival`` where arrival =
  compute + compress, plus the jitter of equal workers on a shared machine (the profile's idle of
  equal workers in its N-process calibration runs, over the calibration cases' median);
* ``step = max(arrival) + jitter + comm + rest``, ``rest`` being the part of a step outside the
  timed pieces (the loop around the collective, ranks ending at different moments; from the same
  calibration runs), so that the step compares with the wall time between the ends of consecutive
  steps (its mean over the run, :func:`measured_step`).

Parameter-server and state all-reduce runs are predicted with the same pieces but more coarsely
(``Prediction.approximate``).

The measured side (a stored run's step and its parts) and the fidelity statistics live in
:mod:`lab.machine.fidelity`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Sequence

from lab.comm.ring import PIECE_BYTES
from lab.comm.sparse import COUNT_BYTES
from lab.comm.torch_hooks import PowerSGD
from lab.compression.compressors import make_compressor
from lab.errors import LabError
from lab.machine.profile import (
    MachineProfile,
    compute_seconds,
    graph_features,
)
from lab.modelled.opgraph import trace
from lab.scenario.document import Scenario
from lab.scenario.models import build_model, model_of
from lab.train.emulation import ring_allreduce_time
from lab.train.layout import check_scenario
from lab.modelled.collectives.ring import allgather_steps, ring_bytes_per_rank, ring_steps
from lab.scenario.names import TORCH_HOOKS, Sharing, optimiser_implementation

PARTS = ("compute", "compress", "comm", "idle", "step")
PART_LABELS = {"compute": "compute", "compress": "compression", "comm": "communication", "idle": "idle",
               "step": "step time"}
ITEM = 4  # float32 gradient entries


@dataclass(frozen=True)
class WorkerPrediction:
    worker: int
    device: str | None
    batch: int
    fb: float
    opt: float
    emul_compute: float
    compute: float
    compress: float
    comm: float
    emul_comm: float
    idle: float
    step: float
    bytes_sent: float


@dataclass(frozen=True)
class Prediction:
    """Seconds per step; the totals are means over the workers (as the run store's summary)."""

    compute: float
    compress: float
    comm: float
    idle: float
    step: float
    emul_compute: float
    emul_comm: float
    bytes_sent: float  # per worker and step (mean)
    per_worker: tuple[WorkerPrediction, ...]
    procs: int  # processes the job runs (workers, plus the parameter server)
    profile_procs: int  # the calibrated process count used for compute
    approximate: bool = False
    notes: tuple[str, ...] = ()
    rest: float = 0.0  # rest of the step (loop, ranks ending apart), inside ``step``

    def parts(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in PARTS}

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# What the worker will run
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=64)
def _model_facts(model: str, batch: int, in_features: int, classes: int, seed: int, width: float) -> tuple:
    """(graph features, parameter count, parameter tensors) of a preset model at a batch size."""

    m = build_model(model, in_features, classes, seed=seed, width=width)
    params = [p for p in m.parameters() if p.requires_grad]
    g = trace(m, batch_size=batch, in_features=in_features, name=model)
    feat = graph_features(g, len(params))
    return feat, sum(p.numel() for p in params), len(params)


@lru_cache(maxsize=64)
def _payload_bytes(kind: str, ratio: float, group_size: int, n: int, seed: int) -> tuple[int, int]:
    """(serialised payload bytes, entries kept) of one worker's compressed gradient of n entries."""
    import torch

    c = make_compressor(kind, ratio, group_size, error_feedback=False, seed=seed)
    p = c.compress(torch.randn(n, generator=torch.Generator().manual_seed(seed)))
    return int(p.nbytes), int(p.count)


def _ring_message_delays(sc: Scenario, devices: Sequence[str], nbytes_per_message: float) -> list[float]:
    """Emulated seconds of one message from each rank to its right neighbour (0 on the same device)."""
    n = len(devices)
    out = []
    for r in range(n):
        a, b = devices[r], devices[(r + 1) % n]
        out.append(0.0 if a == b else sc.topology.transfer_time(a, b, nbytes_per_message))
    return out


def _sparse_ring_bytes(n: int, world: int, kept: int) -> float:
    """Bytes one rank sends in the edge-compression design's sparse ring, estimated: every worker's kept entries spread
    evenly over the N blocks, supports independent (the fill-in grows as 1 - (1 - density)^k)."""
    block = n / world
    dens = min(1.0, kept / max(n, 1))
    total = 0.0
    for s in range(world - 1):  # reduce-scatter: the block sent at hop s holds s + 1 workers' entries
        total += COUNT_BYTES + 8 * block * (1 - (1 - dens) ** (s + 1))
    full = block * (1 - (1 - dens) ** world)
    total += (world - 1) * (COUNT_BYTES + 8 * full)
    return total


def _dense_ring_bytes(n: int, world: int) -> float:
    """Bytes the rank that sends most sends in the lab's ring over ``n`` entries."""
    return float(max(ring_bytes_per_rank(n, world, ITEM)))


# ---------------------------------------------------------------------------------------------
# The prediction
# ---------------------------------------------------------------------------------------------
def predict_step(scenario: Scenario, profile: MachineProfile, *, layout: Any = None) -> Prediction:
    """Predicted seconds per step of ``scenario`` on the machine described by ``profile``.

    ``layout``: the job's layout (:func:`lab.train.layout.check_scenario`), when already made."""
    if not isinstance(profile, MachineProfile):
        raise LabError("predicting needs a machine profile: calibrate this machine first", where="prediction")
    sc = scenario
    layout = layout if layout is not None else check_scenario(sc)
    tr = layout.training
    n_workers = layout.workers
    procs = layout.world
    in_features, classes = 64, 10
    notes: list[str] = []
    approximate = tr.sync != "allreduce"
    fit = profile.compute_fit(procs)
    if procs > 1 and str(procs) not in profile.contention:
        notes.append(f"the slow-down for {procs} processes is taken from the nearest calibrated count "
                     f"(calibrated: {profile.procs})")
    opt_cost = profile.optimizer_cost(tr.optimizer, procs)
    if optimiser_implementation(tr.fused, tr.sync) == "fused":
        notes.append("the fused optimiser's step is predicted at the multi-tensor path's calibrated cost (the "
                     "calibration does not time the compiled kernels, nor their compilation at the first step)")
    numel = _model_facts(tr.model, 1, in_features, classes, tr.seed, tr.model_width)[1]
    tensors = _model_facts(tr.model, 1, in_features, classes, tr.seed, tr.model_width)[2]
    flat_bytes = (numel + 1) * ITEM  # the flat gradient buffer carries the loss in one extra slot
    scales = list(layout.emulation.scales) if layout.emulation is not None else [1.0] * n_workers
    devices = list(layout.emulation.devices) if layout.emulation is not None else [None] * n_workers

    fb, opt = [], []
    for w in range(n_workers):
        feat = _model_facts(tr.model, int(layout.batch_sizes[w]), in_features, classes, tr.seed,
                            tr.model_width)[0]
        fb.append(compute_seconds(fit, feat))
        opt.append(opt_cost.time(numel, tensors) if layout.server is None else 0.0)
    emul_c = [(s - 1.0) * (f + o) if s > 1.0 else 0.0 for s, f, o in zip(scales, fb, opt)]

    comp = tr.compression
    compressed = comp.kind != "none" and tr.sync == "allreduce" and n_workers > 1
    compress = [0.0] * n_workers
    comm_base, emul_comm, sent = 0.0, [0.0] * n_workers, [0.0] * n_workers
    if n_workers > 1 or layout.server is not None:
        if tr.sync == "allreduce" and not compressed:
            impl = tr.allreduce_impl
            comm_base = profile.allreduce_fit(impl, procs).time(procs, flat_bytes)
            sent = [_dense_ring_bytes(numel + 1, procs)] * n_workers
            if layout.emulation is not None:
                if impl == "gloo":

                    e = ring_allreduce_time(sc.topology, tuple(devices), flat_bytes)
                    emul_comm = [e] * n_workers
                else:
                    emul_comm = _ring_emulation(sc, devices, flat_bytes)
        elif compressed:  # the gradient without the loss slot is compressed (lab.train.compressed)
            comm_base, emul_comm, sent, compress = _compressed(sc, profile, tr, devices, numel, procs,
                                                               layout.emulation is not None, notes)
        elif tr.sync == "state_allreduce":
            ab = profile.allreduce_fit(tr.allreduce_impl, procs)
            calls = [(ITEM, 1), (8, 1), (numel * ITEM, 2)]  # loss, non-finite flag, two state tensors
            comm_base = sum(k * ab.time(procs, b) for b, k in calls)
            sent = [sum(k * _dense_ring_bytes(max(1, b // ITEM), procs) for b, k in calls)] * n_workers
            if layout.emulation is not None:

                emul_comm = [sum(k * ring_allreduce_time(sc.topology, tuple(devices), b) for b, k in calls)] * n_workers
            notes.append("state all-reduce: four all-reduces per step (loss, flag, two optimiser states)")
        else:  # parameter server
            hop = profile.sharing_fit(Sharing.SPARSE_ALLGATHER, procs)
            one = hop.per_hop + hop.per_byte * flat_bytes
            server_opt = opt_cost.time(numel, tensors)
            comm_base = 2 * one + n_workers * flat_bytes * hop.per_byte + server_opt
            sent = [float(flat_bytes)] * n_workers
            if layout.emulation is not None and layout.server_device is not None:
                up = [0.0 if d == layout.server_device else sc.topology.transfer_time(d, layout.server_device, flat_bytes)
                      for d in devices]
                down = max(0.0 if d == layout.server_device else sc.topology.transfer_time(layout.server_device, d, flat_bytes)
                           for d in devices)
                emul_comm = [u + down for u in up]
            notes.append("parameter server: gradients up, parameters down, the server's optimiser step in between")

    shared_emul = max(emul_comm) if tr.sync != "param_server" else 0.0
    comm = comm_base + shared_emul
    # jitter: on a shared machine the workers never arrive together even when equal; and the rest of
    # the step (the loop around the collective, the ranks ending at different moments): from the
    # profile's N-process calibration runs
    jitter = profile.jitter_cost(procs).fixed if procs > 1 else 0.0
    rest = profile.remainder_cost(procs).fixed
    # A worker that waited (in the collective, or sleeping for its emulated device) computes slower
    # on a shared machine (the profile's wait sweep), beyond what the N-process terms already hold
    # for the wait of their own calibration runs; its wait depends on the step, and the step on its
    # compute: a few rounds of fixed-point iteration settle it.
    c0 = [f + o for f, o in zip(fb, opt)]
    slow = [1.0] * n_workers
    for _ in range(8):
        c = [x * k for x, k in zip(c0, slow)]
        emul_c = [(s_ - 1.0) * x if s_ > 1.0 else 0.0 for s_, x in zip(scales, c)]  # the worker's own formula
        compute = [x + e for x, e in zip(c, emul_c)]
        arrival = [x + z + (e if tr.sync == "param_server" else 0.0) for x, z, e in zip(compute, compress, emul_comm)]
        last = max(arrival)
        step = last + jitter + comm + rest
        new = [profile.extra_wait_factor(step - x - z, procs) for x, z in zip(c, compress)]
        if max(abs(a - b) for a, b in zip(new, slow)) < 1e-6:
            break
        slow = new
    fb = [f * k for f, k in zip(fb, slow)]
    opt = [o * k for o, k in zip(opt, slow)]
    if max(slow) > 1.0:
        notes.append(f"compute after waiting: x{min(slow):.2f} to x{max(slow):.2f} (the profile's wait sweep)")
    idle = [last - a + jitter for a in arrival]
    per = tuple(WorkerPrediction(w, devices[w], int(layout.batch_sizes[w]), fb[w], opt[w], emul_c[w], compute[w],
                                 compress[w], comm, emul_comm[w], idle[w], step, sent[w]) for w in range(n_workers))

    def mean(xs):
        return sum(xs) / len(xs)

    return Prediction(compute=mean(compute), compress=mean(compress), comm=comm, idle=mean(idle), step=step,
                      emul_compute=mean(emul_c), emul_comm=mean(emul_comm), bytes_sent=mean(sent), per_worker=per,
                      procs=procs, profile_procs=int(min(profile.procs, key=lambda p: abs(p - procs))),
                      approximate=approximate, notes=tuple(notes), rest=rest)


def _ring_emulation(sc: Scenario, devices: Sequence[str], nbytes: float) -> list[float]:
    """The lab ring's emulated wait: 2(N-1) messages per rank (pieces of at most 1 MiB), each slept
    before it is sent; the lock-step ring lasts as long as its slowest sender's messages."""

    n = len(devices)
    chunk = math.ceil(nbytes / ITEM / n) * ITEM
    pieces = max(1, math.ceil(chunk / PIECE_BYTES))
    d = _ring_message_delays(sc, devices, chunk / pieces)
    per_rank = [ring_steps(n) * pieces * x for x in d]
    return [max(per_rank)] * n


def _compressed(sc: Scenario, profile: MachineProfile, tr, devices, n: int, procs: int, emulate: bool,
                notes: list[str]):
    """(comm seconds, emulated link seconds per worker, bytes sent per worker, compress seconds per worker)."""
    comp = tr.compression
    if comp.kind in TORCH_HOOKS:
        return _hook_allreduces(sc, profile, tr, devices, n, procs, emulate, notes)
    method = comp.sharing
    t_compress = profile.compressor_cost(comp.kind, comp.error_feedback, procs).time(n)
    payload, kept = _payload_bytes(comp.kind, float(comp.ratio), int(comp.group_size), n, tr.seed)
    fit = profile.sharing_fit(method, procs)
    if method == Sharing.SPARSE_ALLGATHER:  # equal-size payloads: no count travels (lab.train.compressed)
        hops = allgather_steps(procs)
        sent = hops * payload
        per_msg = [payload] * hops
    elif method == Sharing.SPARSE_RING:
        hops = ring_steps(procs)
        sent = _sparse_ring_bytes(n, procs, kept)
        per_msg = [sent / hops] * hops
        notes.append("sparse ring bytes estimated: fill-in of independent supports (real gradients overlap "
                     "more, so fewer bytes)")
    else:  # dense ring of the decompressed tensor
        hops = ring_steps(procs)
        sent = _dense_ring_bytes(n, procs)
        per_msg = [sent / hops] * hops
    comm = fit.time(hops, sent)
    emul = [0.0] * procs
    if emulate:
        per_rank = [sum(_ring_message_delays(sc, devices, m)[r] for m in per_msg) for r in range(procs)]
        emul = [max(per_rank)] * procs
    return comm, emul, [float(sent)] * procs, [t_compress] * procs


def _hook_allreduces(sc: Scenario, profile: MachineProfile, tr, devices, n: int, procs: int, emulate: bool,
                     notes: list[str]):
    """torch's hooks on the lab's ring: one ring all-reduce per tensor they send (lab.comm.torch_hooks)."""
    comp = tr.compression
    if comp.kind == "powersgd":
        shapes = [tuple(p.shape) for p in model_of(tr).parameters() if p.requires_grad]
        sends = [(k, ITEM) for k in PowerSGD(shapes, comp.rank, comp.warmup).sizes() if k]
        t_compress = 0.0
        notes.append(f"PowerSGD after its warm-up ({comp.warmup} steps of a plain fp32 all-reduce): three ring "
                     "all-reduces per step; its matrix products are not in the calibrated profile (counted as 0)")
    else:  # a cast to half precision, timed like the lab's FP16 compressor
        sends = [(n, 2)]
        t_compress = profile.compressor_cost("fp16", False, procs).time(n)
    ring = profile.allreduce_fit("ring", procs)
    comm = sum(ring.time(procs, k * item) for k, item in sends)
    sent = sum(max(ring_bytes_per_rank(k, procs, item)) for k, item in sends)
    emul = [0.0] * procs
    if emulate:
        emul = [sum(_ring_emulation(sc, devices, k * item)[0] for k, item in sends)] * procs
    return comm, emul, [float(sent)] * procs, [t_compress] * procs


def job_procs(sc: Scenario) -> int:
    tr = sc.training
    return tr.workers + (1 if tr.sync == "param_server" else 0)


__all__ = ["Prediction", "WorkerPrediction", "predict_step", "job_procs", "PARTS", "PART_LABELS"]
