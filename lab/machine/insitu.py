"""Calibrating the placement executor in place: synthetic plans over the calibration networks run through the
lab's own executor, and the core model's terms (:class:`lab.machine.profile.ExecutorFit`) fitted to what they
measured.

**What runs.** A few calibration networks (never a preset model), each cut by a handful of layouts over its
operators in topological order: on one device, a chain of 2 and of 4 contiguous parts, A-B-A, A-B-C, and operator
by operator in turns over 2, 3 and 4 devices (many messages). Each plan runs ``steps`` steps of the job's own
:class:`lab.train.placement_run.PlacementTrainer` with its ranks on the cores as jobs put them, and a few in turns on
purpose so that partners share a core; two run their pieces node by node as emulated runs do. Nothing is
emulated: every device is this machine.

**What is measured** per process and step: the main thread's CPU time (``time.thread_time``), the CPU time of
the process's other threads (``time.process_time`` less the main thread's: communication threads), and the
step from the barrier that starts it to the last process's end; beside the run, the machine's other work.

**The fit.** A process's main-thread CPU is linear in the terms: the operators' one-process costs times a
factor, a cost per piece call (forward and backward), the loss, a cost per message and per byte (half on each
side), per operator when node by node, and the optimiser (from the one-process calibration). Its other threads'
CPU is linear in the messages it sends or receives, by whether the partner shares its core. Both are fitted by
non-negative least squares on relative errors. The wire's cost per message and the wake-up delay touch only
wall time: they are fitted to the step times by least squares through the core model itself, with the wire's
cost per byte where the plans' messages differ enough in size to tell (else the point-to-point probe's). A term the
measurements cannot pin down is kept at zero and named in ``flags``.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import minimize, nnls

from lab import settings
from lab.comm.spawn import init_worker, run_local
from lab.errors import LabError
from lab.machine.cases import CALIBRATION_NETS, build_calibration_net
from lab.machine.plans import PlanParts, message_weights, parts_of, simulate_parts
from lab.machine.profile import ExecutorFit, MachineProfile
from lab.modelled.opgraph import trace
from lab.modelled.placement.core_tasks import Send
from lab.modelled.placement.cores import rank_cores
from lab.modelled.placement.executor import Linear, StepCosts
from lab.modelled.placement.executor import tasks as executor_tasks
from lab.processes import LoadMeter
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.scenario.topology import Topology
from lab.train import data as data_mod
from lab.train.placement_run import PlacementTrainer

WHERE = "executor calibration"
#: (calibration network, layout, node by node, rank policy or None for the jobs' own)
PROBE_NETS = (3, 7, 12)  # an MLP, a CNN and an encoder block of lab.machine.cases.CALIBRATION_NETS
LAYOUTS = ("one", "chain2", "aba", "alt2", "abc", "alt3", "chain4", "alt4")
BATCH, MICRO = 32, 4
DEVICES = ("host", "gpu", "fpga", "asic")


@dataclass(frozen=True)
class Case:
    net: int
    layout: str
    node_by_node: bool = False
    policy: str | None = None  # None: as jobs pin their ranks


def probe_cases(nets: Sequence[int] = PROBE_NETS) -> list[Case]:
    """The synthetic plans the calibration runs (about two dozen)."""
    out = [Case(n, lay) for n in nets for lay in LAYOUTS]
    out += [Case(nets[0], "alt3", policy="turns"), Case(nets[-1], "alt3", policy="turns"),
            Case(nets[0], "alt4", policy="turns")]
    out += [Case(nets[0], "one", node_by_node=True), Case(nets[-1], "alt2", node_by_node=True)]
    return out


def layout_procs(name: str) -> int:
    """Processes a layout starts."""
    return {"one": 1, "aba": 2, "abc": 3}.get(name) or int(name[-1])


def calibration_topology() -> Topology:
    """The CXL preset with every device as able as the host (so any layout runs); nothing is emulated."""
    d = preset("cxl").to_dict()
    host = next(x for x in d["devices"] if x["name"] == "host")
    d["devices"] = [dict(x, throughput=dict(host["throughput"])) for x in d["devices"] if x["name"] != "dpu"]
    d["links"] = [x for x in d["links"] if "dpu" not in (x["a"], x["b"])]
    d["name"] = "calibration: four equal devices"
    return Topology.from_dict(d)


def layout(ops: Sequence[str], name: str) -> dict[str, str]:
    """Operator -> device of a synthetic plan."""
    n = len(ops)

    def chunks(k: int, devs: Sequence[str]) -> dict[str, str]:
        return {op: devs[min(len(devs) - 1, i * k // n)] for i, op in enumerate(ops)}

    if name == "one":
        return {op: DEVICES[0] for op in ops}
    if name.startswith("chain"):
        k = int(name[5:])
        return chunks(k, DEVICES[:k])
    if name == "aba":
        return chunks(3, (DEVICES[0], DEVICES[1], DEVICES[0]))
    if name == "abc":
        return chunks(3, DEVICES[:3])
    if name.startswith("alt"):
        k = int(name[3:])
        return {op: DEVICES[i % k] for i, op in enumerate(ops)}
    raise LabError(f"unknown layout {name!r}", where=WHERE)


def case_scenario(case: Case) -> tuple[Scenario, object, int]:
    """The scenario of a case (its plan written out), its network and the input width."""
    cls, kw = CALIBRATION_NETS[case.net]
    net = build_calibration_net(cls, kw)
    og = trace(net, BATCH, 64, name=f"{cls}")
    tr = Training(model="mlp", parallel="placement", strategy="single_fastest", batch_size=BATCH,
                  micro_batches=MICRO, placement=layout(og.names, case.layout), steps=2)
    return Scenario(f"calibration {cls} {case.layout}", calibration_topology(), tr), net, 64


class _ProbeTrainer(PlacementTrainer):
    """The job's executor on a calibration network and the digits data (64 features)."""

    net_index = 0

    def build(self) -> tuple:
        cls, kw = CALIBRATION_NETS[self.net_index]
        return data_mod.load_dataset("digits", 1024, 0), build_calibration_net(cls, kw)


def probe_worker(rank: int, world: int, port: int, plans_json: str, steps: int, out_dir: str) -> None:
    """One process of a group of calibration plans with the same number of processes, run one after another in
    the same processes (each started once: a calibration of a few minutes). ``plans_json``: per plan its
    scenario, network, node-by-node flag and the core of each rank. Writes per plan and step [start, end,
    main-thread CPU, other threads' CPU]."""
    import torch.distributed as dist

    init_worker(rank, world, port, timeout_s=120.0)
    out = []
    try:
        for plan in json.loads(plans_json):
            cpu = plan["cpus"][rank]
            os.sched_setaffinity(0, {int(cpu)} if cpu is not None else set(settings.job_cpus()))
            t = _ProbeTrainer(Scenario.from_json(plan["scenario"]), rank, world, None, None, launched=False)
            t.net_index = plan["net"]
            t.setup()
            t.rec.timeline_steps = list(range(1, steps + 1)) if plan["node_by_node"] else []
            recs = []
            dist.barrier()
            for s in range(1, steps + 1):
                r = t.train_step(s)
                recs.append([r.start, r.end, r.main_cpu, r.other_cpu])
                t.rec.timelines.clear()
            out.append(recs)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"probe{rank}.json"), "w") as f:
        json.dump(out, f)


@dataclass
class Measured:
    """One calibration plan as measured: the step, and per process its main-thread and other CPU (medians)."""

    case: Case
    parts: PlanParts
    pinned: list
    step: float
    main: list[float]
    background: list[float]
    external: float  # cores' worth of other work during the run


def case_parts(case: Case, profile: MachineProfile) -> PlanParts:
    sc, net, width = case_scenario(case)
    return parts_of(sc, net, width, profile, emulate=False)


def case_pinning(case: Case, parts: PlanParts, cores: int) -> list:
    n = len(parts.devices)
    if case.policy is None:
        return rank_cores(n, cores, message_weights(parts))
    return rank_cores(n, cores, message_weights(parts), case.policy)


def measure_cases(cases: Sequence[Case], profile: MachineProfile, steps: int = 20, warmup: int = 3,
                  progress: Callable[[str, float], None] | None = None) -> list[Measured]:
    """Run the calibration plans for real, those with the same number of processes in one group of processes,
    and take each plan's medians after ``warmup`` steps."""
    progress = progress or (lambda msg, frac: None)
    cpus = settings.job_cpus()
    prepared = []
    for case in cases:
        sc, _, _ = case_scenario(case)
        parts = case_parts(case, profile)
        prepared.append((case, sc, parts, case_pinning(case, parts, len(cpus))))
    groups: dict[int, list] = {}
    for item in prepared:
        groups.setdefault(len(item[2].devices), []).append(item)
    out: dict[Case, Measured] = {}
    for k, (world, items) in enumerate(sorted(groups.items())):
        progress(f"the placement executor on {len(items)} synthetic plans with {world} process(es)",
                 k / len(groups))
        plans = [{"scenario": sc.to_json(), "net": case.net, "node_by_node": case.node_by_node,
                  "cpus": [None if c is None else cpus[c] for c in pinned]} for case, sc, _, pinned in items]
        meter = LoadMeter()
        with tempfile.TemporaryDirectory(prefix="lab-insitu-") as tmp:
            try:
                run_local(probe_worker, world, (json.dumps(plans), steps, tmp), timeout_s=600)
            except RuntimeError as exc:
                raise LabError(f"the calibration plans with {world} processes failed: {exc}", where=WHERE) from None
            recs = [json.loads(Path(tmp, f"probe{r}.json").read_text()) for r in range(world)]
        load = meter.result()
        external = float(load["others_share"]) * load["cpus"]
        use = range(warmup, steps)
        for j, (case, _, parts, pinned) in enumerate(items):
            per = [recs[r][j] for r in range(world)]
            step = statistics.median(max(p[i][1] for p in per) - min(p[i][0] for p in per) for i in use)
            out[case] = Measured(case, parts, pinned, step, [statistics.median(p[i][2] for i in use) for p in per],
                                 [statistics.median(p[i][3] for i in use) for p in per], external)
    return [out[c] for c in cases]


def measure_case(case: Case, profile: MachineProfile, steps: int = 20, warmup: int = 3) -> Measured:
    """One calibration plan run for real."""
    return measure_cases([case], profile, steps, warmup)[0]


# ----- the fit ----------------------------------------------------------------------------------------------

LINEAR = ("compute", "call", "loss", "message", "message_per_byte", "node")
#: The most a byte may cost on the wire: a copy between two processes of one machine moves 200 MB/s and more,
#: so a fit that wants more has found something else that grows with a message's size, and says so.
MAX_WIRE_PER_BYTE = 5e-9


def _fit_of(theta: Sequence[float], bg: Sequence[float], wire: Sequence[float], wake: float) -> ExecutorFit:
    k, call, loss, msg, per_byte, node = (float(v) for v in theta)
    bg, wire, wake = tuple(float(v) for v in bg), tuple(float(v) for v in wire), float(wake)
    return ExecutorFit(compute=k, call=call / 2, backward_call=call / 2, node=node, loss=loss,
                       send_fixed=msg / 2, send_per_byte=per_byte / 2, recv_fixed=msg / 2, recv_per_byte=per_byte / 2,
                       background_same=bg[0], background_other=bg[1], wire_fixed=wire[0], wire_per_byte=wire[1],
                       wake=wake)


def _main_cpu(parts: PlanParts, ex: ExecutorFit, node_by_node: bool) -> list[float]:
    from lab.modelled.placement.core_tasks import Cpu, Recv

    k = ex.compute
    st = [replace(s, forward=tuple((op, t * k, sc) for op, t, sc in s.forward), backward=s.backward * k)
          for s in parts.pieces]
    costs = StepCosts(call=ex.call, node=ex.node, backward_call=ex.backward_call, loss=ex.loss,
                      send=Linear(ex.send_fixed, ex.send_per_byte), recv=Linear(ex.recv_fixed, ex.recv_per_byte))
    lists = executor_tasks(st, parts.devices, parts.micro_batches, costs, parts.optimizer, None,
                           node_by_node=node_by_node, schedule=parts.schedule)
    return [sum(t.seconds if isinstance(t, Cpu) else t.cpu for t in lst if isinstance(t, (Cpu, Send, Recv)))
            for lst in lists]


def features(m: Measured) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per process: the main-thread CPU's features (one column per :data:`LINEAR` term), its known part (the
    optimiser), and the background features (messages with a partner on the same core, on another)."""
    zero = _main_cpu(m.parts, ExecutorFit(compute=0.0), m.case.node_by_node)
    cols = []
    for j in range(len(LINEAR)):
        theta = [0.0] * len(LINEAR)
        theta[j] = 1.0
        got = _main_cpu(m.parts, _fit_of(theta, (0, 0), (0, 0), 0.0), m.case.node_by_node)
        cols.append([g - z for g, z in zip(got, zero)])
    lists = executor_tasks(m.parts.pieces, m.parts.devices, m.parts.micro_batches, StepCosts(), m.parts.optimizer,
                           schedule=m.parts.schedule)
    bgf = np.zeros((len(lists), 2))
    for r, lst in enumerate(lists):
        for t in lst:
            if isinstance(t, Send):
                same = m.pinned[r] is not None and m.pinned[r] == m.pinned[t.to]
                bgf[r, 0 if same else 1] += 1
                bgf[t.to, 0 if same else 1] += 1
    return np.array(cols).T, np.array(zero), bgf


def simulated_step(m: Measured, ex: ExecutorFit, cores: int, cold: Sequence = ()) -> float:
    return simulate_parts(m.parts, ex, cores=cores, pinned=m.pinned, external=m.external,
                          node_by_node=m.case.node_by_node, cold=cold).makespan


#: Rounds of taking the cold starts off the measured CPU and fitting again: on a simulated machine with a planted
#: slow-down, two bring the terms back within 0.1 % (one leaves them 3 % off, a fit blind to it up to 33 %)
COLD_ROUNDS = 2


def fit_executor(measured: Sequence[Measured], cores: int, wire_per_byte: float, cold: Sequence = ()) -> ExecutorFit:
    """The executor's terms fitted to calibration plans (see the module doc). ``wire_per_byte``: the
    point-to-point probe's cost per byte, used where the plans' messages are too alike in size to separate it
    from the cost per message; ``cold``: the machine's slow-down after idle time, which the simulations that fit
    the wall-time terms take as the predictions do."""
    if not measured:
        raise LabError("no calibration plan was measured", where=WHERE)
    cold = tuple((float(w), float(f)) for w, f in cold if w > 0 and f > 1.0)  # only a real slow-down
    ex = _fit(measured, cores, wire_per_byte, cold, None)
    # What the plans' cold starts cost their main threads is the measured slow-down's, not a share of the linear
    # terms: taken off the measured CPU as the last fit's simulation puts it, and the terms fitted again (the cold
    # starts depend on the tasks' lengths and idle times, which the terms set: a few rounds settle them).
    for _ in range(COLD_ROUNDS if cold else 0):
        offsets = [simulate_parts(m.parts, ex, cores=cores, pinned=m.pinned, external=m.external,
                                  node_by_node=m.case.node_by_node, cold=cold).cold for m in measured]
        ex = _fit(measured, cores, wire_per_byte, cold, offsets)
    return replace(ex, cold=cold)


def _fit(measured: Sequence[Measured], cores: int, wire_per_byte: float, cold: Sequence,
         offsets: Sequence[Sequence[float]] | None) -> ExecutorFit:
    """One fit: the CPU terms by least squares (less ``offsets``, each process's cold starts), then the wall-time
    terms through the model."""
    A, b, B, c = [], [], [], []
    for i, m in enumerate(measured):
        X, known, bgf = features(m)
        for r in range(len(m.main)):
            w = 1.0 / max(m.main[r], 1e-6)  # relative error
            A.append(X[r] * w)
            b.append((m.main[r] - known[r] - (offsets[i][r] if offsets else 0.0)) * w)
            if bgf[r].sum() > 0:
                wb = 1.0 / max(m.background[r], 1e-5)
                B.append(bgf[r] * wb)
                c.append(m.background[r] * wb)
    A, b = np.array(A), np.array(b)
    flags = []
    # A term whose column is empty or not independent of the others is not measurable here.
    live = [j for j in range(A.shape[1]) if np.any(A[:, j] > 0)]
    scale = np.linalg.norm(A[:, live], axis=0)
    if np.linalg.matrix_rank(A[:, live] / scale, tol=1e-8) < len(live):
        flags.append("the per-call, loss and message terms are not independent in these plans")
    theta = np.zeros(A.shape[1])
    sol, _ = nnls(A[:, live] / scale, b)
    theta[live] = sol / scale
    for j, name in enumerate(LINEAR):
        if j not in live:
            flags.append(f"{name}: not measured (no calibration plan exercises it)")
    bg = (0.0, 0.0)
    if B:
        B, c = np.array(B), np.array(c)
        have = [j for j in range(2) if np.any(B[:, j] > 0)]
        sol_b, _ = nnls(B[:, have], c)
        bgv = [0.0, 0.0]
        for j, v in zip(have, sol_b):
            bgv[j] = float(v)
        bg = tuple(bgv)
        if 0 not in have:
            flags.append("background CPU with both processes on one core: not measured")
    base = _fit_of(theta, bg, (0.0, 0.0), 0.0)
    multi = [m for m in measured if len(m.parts.devices) > 1]
    sizes = {n for m in multi for s in m.parts.pieces for _, _, n in s.inputs}
    # The wire's cost per byte is fitted where the plans' messages differ enough in size to tell it from the
    # cost per message; else it is the point-to-point probe's.
    fit_bytes = len(sizes) > 1 and max(sizes) >= 4 * min(sizes)
    top = MAX_WIRE_PER_BYTE / 1e-8

    def resid(x: Sequence[float]) -> np.ndarray:
        ex = replace(base, wire_fixed=x[0] * 1e-4, wake=x[1] * 1e-4,
                     wire_per_byte=x[2] * 1e-8 if fit_bytes else wire_per_byte)
        return np.array([math.log(max(simulated_step(m, ex, cores, cold), 1e-9) / m.step) for m in multi])

    wire, wake = (0.0, wire_per_byte), 0.0
    if multi:
        # The step is not smooth in these terms (a message on the critical path or not, a core busy at a
        # wake-up or not): the best points of a coarse grid, each polished by Nelder-Mead.
        def bounded(x: Sequence[float]) -> np.ndarray:
            return np.minimum(np.maximum(x, 0.0), [math.inf, math.inf, top])

        def cost(x: Sequence[float]) -> float:
            return float(np.sum(resid(bounded(x)) ** 2))

        grid = sorted(((a_, w_, b_) for a_ in (0.0, 1.0, 5.0, 10.0, 20.0) for w_ in (0.0, 1.0, 3.0, 10.0)
                       for b_ in ((0.0, 0.1, 0.25, top) if fit_bytes else (0.0,))), key=cost)
        best = None
        for x0 in grid[:2]:  # two starts: the grid's best two cells
            simplex = [x0, (x0[0] + 0.5, x0[1], x0[2]), (x0[0], x0[1] + 0.3, x0[2]), (x0[0], x0[1], x0[2] + 0.05)]
            sol = minimize(cost, np.array(x0, dtype=float), method="Nelder-Mead",
                           options={"xatol": 1e-4, "fatol": 1e-14, "maxfev": 90, "initial_simplex": np.array(simplex)})
            if best is None or sol.fun < best.fun:
                best = sol
        x = bounded(best.x)
        wire, wake = (x[0] * 1e-4, x[2] * 1e-8 if fit_bytes else wire_per_byte), x[1] * 1e-4
        if fit_bytes and wire[1] <= 0.0:
            flags.append("the wire's cost per byte came out 0 although the plans' messages differ in size")
        if fit_bytes and x[2] >= top * (1 - 1e-6):
            flags.append(f"the wire's cost per byte stopped at its bound, {MAX_WIRE_PER_BYTE * 1e9:.0f} ns/B (a copy "
                         "between two processes of one machine is faster): the step times grow with the messages' "
                         "size for another reason")
    ex = replace(base, wire_fixed=float(wire[0]), wire_per_byte=float(wire[1]), wake=float(wake))
    errs = [abs(math.log(max(simulated_step(m, ex, cores, cold), 1e-12) / m.step)) for m in measured]
    return replace(ex, fit_error=float(math.exp(statistics.mean(errs)) - 1.0), cases=len(measured),
                   largest=float(max(sum(m.main) + sum(m.background) for m in measured)),
                   procs=tuple(sorted({len(m.parts.devices) for m in measured})), flags=tuple(flags))


def calibrate_executor(profile: MachineProfile, *, cases: Sequence[Case] | None = None, steps: int = 20,
                       progress: Callable[[str, float], None] | None = None) -> tuple[ExecutorFit, list[Measured]]:
    """Run the calibration plans and fit the executor's terms (a few minutes)."""
    cases = list(cases or probe_cases())
    progress = progress or (lambda msg, frac: None)
    t0 = time.time()
    out = measure_cases(cases, profile, steps=steps, progress=progress)
    msg = profile.message_fit(2) or profile.allreduce_fit("gloo", 2)
    fit = fit_executor(out, len(settings.job_cpus()), msg.beta, profile.wait_slowdown)
    progress(f"the placement executor: {len(cases)} plans in {time.time() - t0:.0f} s", 1.0)
    return fit, out


__all__ = ["Case", "probe_cases", "calibration_topology", "layout", "case_scenario", "case_parts", "Measured",
           "measure_case", "features", "fit_executor", "calibrate_executor", "LINEAR", "probe_worker", "layout_procs",
           "case_pinning", "simulated_step", "PROBE_NETS", "LAYOUTS"]
