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
  quantity is the mean over the steps after the warm-up, as :func:`lab.machine.fidelity.measured_step`
  measures a run. From them, per N: compute = ``k x (one-process time) + d`` (a factor and a fixed
  extra per step, :func:`fit_compute_slowdown`: with N processes small networks grew by much more
  than large ones, which one factor could not describe); the collectives in context; the idle of
  equal workers; the rest of the step; and the wait per step those runs had
  (:func:`cycle_wait`), so that the after-wait slow-down counts only beyond it.
* **Ranks pinned as jobs are.** The lab's job manager pins rank k of a job to one core (the
  uniform placement on an idle machine: ranks take the cores in turn), so every calibration process
  is pinned the same way (:func:`pin_rank`; ``LAB_CALIBRATION_PIN=0`` turns it off), because pinned
  and unpinned runs of one job differ by more than the model's error (docs/calibrating.md
  has the measurements).

The result is a :class:`MachineProfile`: saved as JSON (with the date and a machine description),
loaded back by the pages and by :func:`lab.machine.predict.predict_step`. ``python -m lab.machine.calibrate``
runs it from the command line (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from lab import settings
from lab.processes import LOADED_SHARE, LoadMeter, as_background_work
from lab.errors import LabError
from lab.machine.cases import (
    CALIBRATION_BATCHES,
    CALIBRATION_MAX_PROCS,
    CALIBRATION_NETS,
    CALIBRATION_REPEAT,
    CYCLE_REPEAT,
    cycle_cases,
)
from lab.machine.fit import fit_local, fit_process_terms
from lab.machine.heldout import check as heldout_check
from lab.machine.insitu import PROBE_NETS, Case, calibrate_executor, layout_procs, probe_cases
from lab.machine.loop import measure_loop
from lab.machine.probes import (
    CALIBRATION_ALLREDUCE_SIZES,
    measure_allreduce,
    measure_messages,
    measure_procs,
    merge_cycles,
)
from lab.machine.profile import (
    COMPUTE_CLASSES,
    ClassCost,
    CommFit,
    ComputeFit,
    LinearCost,
    MachineProfile,
    SharingFit,
    fit_compute,
    load_profile,
    machine_description,
    profile_path,
)
from lab.scenario.names import PAYLOAD_COMPRESSORS, OPTIMIZERS, SHARING


#: Placement plans drawn at random and run after the fit: the error every prediction quotes is measured on them.
HELDOUT_PLANS = 12

# ---------------------------------------------------------------------------------------------
# The whole calibration
# ---------------------------------------------------------------------------------------------
def calibrate(procs: Sequence[int] = (1, 2, 3, 4), *, quick: bool = False, repeat: int = CALIBRATION_REPEAT,
              allreduce_iters: int = 10, nets: Sequence[int] | None = None,
              allreduce_sizes: Sequence[int] = CALIBRATION_ALLREDUCE_SIZES, measure_command: bool = True,
              cycle_repeat: int = CYCLE_REPEAT, cycle_source: str = "loop", executor_cases: Sequence[Case] | None = None,
              heldout: int = HELDOUT_PLANS, heldout_seed: int | None = None,
              progress: Callable[[str, float], None] | None = None) -> MachineProfile:
    """Measure this machine and return its profile (not saved: call ``.save()``).

    One process runs every calibration network (``nets``: indices into :data:`CALIBRATION_NETS`,
    default all); N processes run ``cycle_repeat`` steps of each case of :data:`CYCLE_CASES` (those
    of ``nets``), as short jobs in the training job's own loop (``cycle_source="loop"``) or as
    training-like cycles in a harness (``"harness"``), pinned as the job manager pins ranks.
    ``quick`` takes fewer repeats everywhere (about half the time). ``measure_command`` also runs the all-reduce measurement command per N (nccl-tests
    style alpha and beta; the collectives take their per-byte cost from it). The placement executor runs
    synthetic plans (``executor_cases``, default :func:`lab.machine.insitu.probe_cases` up to the largest process
    count; none with an empty list) and its own costs are fitted to them (:mod:`lab.machine.insitu`). Then
    ``heldout`` placement plans drawn at random (``heldout_seed``, a new one when None) run for real and the fitted
    model's error on them is kept in the profile (:mod:`lab.machine.heldout`; none when 0 or when the executor was
    not measured)."""
    if quick:
        repeat, allreduce_iters, cycle_repeat = min(repeat, 8), min(allreduce_iters, 5), min(cycle_repeat, 30)
    if cycle_source not in ("loop", "harness"):
        raise LabError(f"cycle_source is 'loop' or 'harness' (got {cycle_source!r})", where="calibration")
    procs = sorted({int(p) for p in procs} | {1})
    if procs[0] < 1 or procs[-1] > CALIBRATION_MAX_PROCS:
        raise LabError(f"process counts must lie in 1..{CALIBRATION_MAX_PROCS} (got {procs})", where="calibration")
    progress = progress or (lambda msg, frac: None)
    all_nets = list(range(len(CALIBRATION_NETS))) if nets is None else list(nets)
    cases = cycle_cases(None if nets is None else all_nets)
    t_start = time.time()
    meter = LoadMeter()  # a profile measured beside other work predicts that work's slowdown for every later run
    multi = [p for p in procs if p > 1]
    stages = 1 + len(multi) * (3 if measure_command else 2) + 1 + (1 if heldout and executor_cases != [] else 0)
    progress("compute, optimisers and compressors, one process", 0.0)
    raw = measure_procs(1, nets=all_nets, repeat=repeat)[0]["local"]
    compute = fit_compute(raw["compute"])
    optimizer, compressor = fit_local(raw)
    measured, cycles, messages = {}, {}, {}
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
        progress(f"point-to-point messages with {p} processes (placement runs)", done / stages)
        messages[str(p)] = measure_messages(p, iters=20 if quick else 50)
        done += 1
    terms = fit_process_terms(cycles, compute, optimizer, measured)
    notes = [f"point-to-point messages with {p} processes: the fitted cost per byte is 0 (as if the bandwidth were "
             "infinite); the sizes measured did not separate it from the cost per message" for p, m in messages.items()
             if m.beta <= 0.0]
    executor = None
    if executor_cases is None:
        executor_cases = [c for c in probe_cases(PROBE_NETS[::2] if quick else PROBE_NETS)
                          if layout_procs(c.layout) <= procs[-1]]
    if executor_cases:
        base = MachineProfile(created="", machine={}, compute=compute, optimizer=optimizer, compressor=compressor,
                              wait_slowdown=raw["wait"], measured_allreduce=measured, messages=messages, **terms)
        progress("the placement executor on synthetic plans", done / stages)
        executor, _ = calibrate_executor(base, cases=executor_cases, steps=12 if quick else 20,
                                         progress=lambda msg, frac: progress(msg, (done + frac) / stages))
        done += 1
        notes += [f"placement executor: {f}" for f in executor.flags]
    settings = {"procs": procs, "repeat": repeat, "allreduce_iters": allreduce_iters,
                "allreduce_sizes": list(allreduce_sizes),
                "calibration_nets": [f"{CALIBRATION_NETS[i][0]} {CALIBRATION_NETS[i][1]}" for i in all_nets],
                "cycle_cases": [[label, f"{CALIBRATION_NETS[i][0]} {CALIBRATION_NETS[i][1]}", b] for label, i, b in cases],
                "cycle_repeat": cycle_repeat, "cycle_source": cycle_source,
                "calibration_batches": list(CALIBRATION_BATCHES), "seconds": round(time.time() - t_start, 1),
                "compute_samples": [{k: v for k, v in s.items() if k != "features"} for s in raw["compute"]],
                "cycles": cycles}
    prof = MachineProfile(created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                          machine={**machine_description(), "load": meter.result()}, compute=compute, optimizer=optimizer,
                          compressor=compressor, wait_slowdown=raw["wait"], measured_allreduce=measured,
                          messages=messages, executor=executor, notes=notes, **terms,
                          settings=settings)
    if heldout and executor is not None:
        prof = replace(prof, heldout=heldout_check(prof, seed=heldout_seed, n=heldout,
                                                   progress=lambda msg, frac: progress(msg, (done + frac) / stages)))
    progress("done", 1.0)
    return prof


def recalibrate_executor(path: Path | None = None, *, quick: bool = False,
                         progress: Callable[[str, float], None] | None = None) -> MachineProfile:
    """The saved profile with the placement executor measured again (:mod:`lab.machine.insitu`)."""
    prof = load_profile(path)
    if prof is None:
        raise LabError("there is no saved machine profile to add the executor's costs to: calibrate first",
                       where="calibration")
    cases = [c for c in probe_cases(PROBE_NETS[::2] if quick else PROBE_NETS) if layout_procs(c.layout) <= max(prof.procs)]
    progress = progress or (lambda msg, frac: None)
    executor, _ = calibrate_executor(prof, cases=cases, steps=12 if quick else 20,
                                     progress=lambda msg, frac: progress(msg, frac / 2))
    notes = [n for n in prof.notes if not n.startswith("placement executor: ")]
    # A new date: what was measured with the old executor terms (bench_plan's score) no longer speaks for these.
    prof = replace(prof, executor=executor, notes=notes + [f"placement executor: {f}" for f in executor.flags],
                   created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    # and so do the old held-out plans: they are drawn and run again with the new terms
    return replace(prof, heldout=heldout_check(prof, n=HELDOUT_PLANS,
                                               progress=lambda msg, frac: progress(msg, 0.5 + frac / 2)))


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
        compressor={k: compress for k in [*PAYLOAD_COMPRESSORS, *(c + "+ef" for c in PAYLOAD_COMPRESSORS if c != "none")]},
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


def progress_line(p: dict, now: float | None = None) -> str:
    """The calibration's progress in words: its step, the time so far and, from the fraction done, the time
    left (the work done so far paces the rest, so a loaded machine's estimate is longer)."""
    now = time.time() if now is None else now
    elapsed = max(0.0, now - float(p.get("started", now)))
    frac = float(p.get("fraction", 0.0))

    def dur(s: float) -> str:
        return f"{int(s // 60)} min {int(s % 60)} s" if s >= 60 else f"{s:.0f} s"

    left = f", about {dur(elapsed * (1 - frac) / frac)} left" if frac >= 0.05 else ""
    if str(p.get("message", "")).startswith("waiting"):
        return f"{p['message']} ({dur(elapsed)} so far)"
    return f"calibrating: {p.get('message', '')} ({frac:.0%} done, {dur(elapsed)} so far{left})"


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
    if "started" not in fields:  # kept from the first write, for the elapsed time and the estimate
        fields["started"] = (read_progress(path) or {}).get("started", time.time())
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "time": time.time(), **fields}))
    os.replace(tmp, p)


#: how long a quiet window must last before a waiting calibration starts, and how long the page's "wait for a quiet
#: machine" waits at most before it calibrates anyway (seconds)
QUIET_WINDOW_S = 5.0
PAGE_WAIT_S = 900.0


def wait_until_quiet(limit_s: float, progress: Callable[[str, float], None] | None = None,
                     window_s: float = QUIET_WINDOW_S, meter: Callable[[], Any] = LoadMeter) -> dict | None:
    """Wait, up to ``limit_s`` seconds, for a window of ``window_s`` in which other work takes at most
    :data:`lab.processes.LOADED_SHARE` of the CPU. Returns that window's load (quiet), or the last window's when the
    time ran out (None when no window was measured)."""
    deadline = time.monotonic() + max(0.0, limit_s)
    last = None
    while True:
        m = meter()
        time.sleep(window_s)
        last = m.result()
        if last["others_share"] <= LOADED_SHARE or time.monotonic() >= deadline:
            return last
        if progress is not None:
            left = max(0.0, deadline - time.monotonic())
            progress(f"waiting for a quiet machine: other work takes {last['others_share'] * 100:.0f} % of the CPU "
                     f"(at most {LOADED_SHARE * 100:.0f} % wanted; {left:.0f} s more at most, then it calibrates "
                     "anyway and marks the profile)", 0.0)


def start_background(path: Path | None = None, quick: bool = False, wait_quiet_s: float = 0.0):
    """Start ``python -m lab.machine.calibrate`` in its own session, at the training jobs' niceness (it writes
    the profile and a progress file next to it); with ``wait_quiet_s`` it first waits for a quiet machine, that
    long at most. Returns the Popen."""
    path = Path(path) if path is not None else profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    env = settings.child_env(OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "lab.machine.calibrate", "--out", str(path)] + (["--quick"] if quick else [])
    if wait_quiet_s > 0:
        cmd += ["--wait-quiet", f"{float(wait_quiet_s):g}"]
    _write_progress(path, message="starting", fraction=0.0, done=False, error=None, started=time.time())
    nice = settings.job_nice()  # as nice as the training jobs the profile will predict
    log = open(path.with_name(path.stem + ".log"), "wb")
    try:
        proc = subprocess.Popen(cmd, cwd=str(settings.ROOT), env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=lambda: as_background_work(nice, settings.job_idle()))
    finally:
        log.close()
    # Reaped when it ends: the page that started it does not wait, and an unreaped child stays a zombie.
    threading.Thread(target=proc.wait, name="lab-calibration-reaper", daemon=True).start()
    return proc


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="profile file (default: LAB_DATA/machine_profile.json)")
    ap.add_argument("--quick", action="store_true", help="fewer repeats (about half the time)")
    ap.add_argument("--procs", default="1,2,3,4", help="process counts to calibrate (default 1,2,3,4)")
    ap.add_argument("--cycles", choices=("harness", "loop"), default="loop",
                    help="N-process terms from the job's own loop (default) or training-like cycles")
    ap.add_argument("--repeat", type=int, default=CALIBRATION_REPEAT,
                    help=f"timed repeats per measurement (default {CALIBRATION_REPEAT})")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                    help="first wait, this long at most, for other work to take at most "
                         f"{LOADED_SHARE * 100:.0f} %% of the CPU")
    ap.add_argument("--heldout", type=int, default=HELDOUT_PLANS, metavar="N",
                    help=f"placement plans drawn at random and run after the fit, the model's error on them kept in "
                         f"the profile (default {HELDOUT_PLANS}; 0: none, and no error can be quoted)")
    ap.add_argument("--seed", type=int, default=None, help="the held-out plans' seed (default: a new one, recorded)")
    ap.add_argument("--executor", action="store_true",
                    help="measure the placement executor again on synthetic plans, keeping the rest of the saved profile")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else profile_path()

    def progress(msg: str, frac: float) -> None:
        print(f"[{frac * 100:5.1f}%] {msg}", flush=True)
        _write_progress(out, message=msg, fraction=frac, done=False, error=None)

    try:
        procs = [int(p) for p in args.procs.split(",") if p.strip()]
        if args.wait_quiet > 0:
            wait_until_quiet(args.wait_quiet, progress)
            # the time spent waiting is no part of the calibration's: its estimate of the time left starts now
            _write_progress(out, message="starting", fraction=0.0, done=False, error=None, started=time.time())
        if args.executor:
            prof = recalibrate_executor(out, quick=args.quick, progress=progress)
        else:
            prof = calibrate(procs, repeat=args.repeat, quick=args.quick, cycle_source=args.cycles, progress=progress,
                             heldout=args.heldout, heldout_seed=args.seed)
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
    ex = prof.executor
    if ex is not None:
        lines.append(f"placement executor ({ex.cases} synthetic plans, {', '.join(map(str, ex.procs))} processes; step "
                     f"fit error {ex.fit_error * 100:.0f}%): operators x{ex.compute:.2f}, {(ex.call + ex.backward_call) * 1e6:.0f} "
                     f"us per piece call (forward + backward), {ex.node * 1e6:.1f} us per operator node by node, loss "
                     f"{ex.loss * 1e6:.0f} us")
        lines.append(f"    a message: {(ex.send_fixed + ex.recv_fixed) * 1e6:.0f} us + "
                     f"{(ex.send_per_byte + ex.recv_per_byte) * 1e9:.2f} ns/B of main-thread CPU, communication threads "
                     f"{ex.background_other * 1e6:.0f} us each side ({ex.background_same * 1e6:.0f} us on one core), wire "
                     f"{ex.wire_fixed * 1e6:.0f} us + {ex.wire_per_byte * 1e9:.2f} ns/B; wake-up on a busy core "
                     f"{ex.wake * 1e6:.0f} us")
    held = prof.heldout
    if held:
        lines.append(f"held-out: {held['plans']} plans drawn at random (seed {held['seed']}; {held['loaded']} more run "
                     f"under load, not scored): geometric-mean error {held['geomean_error'] * 100:.1f}%, worst "
                     f"{held['worst'] * 100:.0f}%, Kendall tau {held['tau']:.2f}")
    for note in prof.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
