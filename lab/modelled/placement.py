"""Which task runs on which device, and when: the generic scheduling core.

A :class:`TaskGraph` is a DAG of tasks with a compute time per (task, device) and a transfer cost
per edge; every strategy turns it into a :class:`Schedule` (``slots = {task: (device, start,
finish)}``, ``makespan``) that :meth:`Schedule.validate` can check.

**Transfers.** ``transfer = {(u, v): value}`` is paid when ``u`` and ``v`` run on different devices
(0 on the same device). Without ``link_time`` the value is in *seconds* and the same for every
device pair. With ``link_time(u_dev, v_dev, nbytes)`` the value is in *bytes* and the seconds
depend on the pair: ``TaskGraph.from_model`` uses this, with ``link_time`` a
:class:`lab.modelled.datasheet.LinkCost` (latency + bytes / bottleneck bandwidth of the route). Each edge is one
message; links have no contention (HEFT's model).

**Strategies** (all return a Schedule):

* :func:`greedy_eft` - greedy earliest finish: tasks in topological order (keeping the given order where
  dependencies allow); each goes to the device where it finishes first, counting the device's
  queue (appended at its end, no insertion) and the arrival of its inputs.
* :func:`heft` - HEFT (Topcuoglu et al. 2002): tasks by decreasing upward rank (mean compute over
  the devices that have a kernel, mean transfer over ordered pairs of distinct devices), each to
  the device of earliest finish, inserted into an idle gap when one is long enough.
* :func:`optimal` - the exact minimum makespan by branch and bound, up to ``max_tasks`` (12).
* baselines: :func:`type_rule` (the CXL design's rule by device type: linear -> GPU, convolution ->
  FPGA, activation -> ASIC or DPU, the rest -> host, else the fastest device with a kernel), :func:`single_fastest`,
  :func:`round_robin`, :func:`even_split` (contiguous equal layer counts), and :func:`chain_dp`
  (the optimal contiguous pipeline partition, :func:`chain_partition`).

Assignment-only strategies are turned into times by :func:`schedule_assignment` (tasks in stable
topological order, appended to their device's queue as soon as inputs have arrived).

**Pins.** :meth:`TaskGraph.with_pins` fixes chosen tasks to one device each ("what if conv1 ran on
the FPGA?"): a pinned task keeps a finite time only on its device, so every strategy, which only
ever places a task where it has a kernel, places it there and the rest around it. The unpinned
times stay in ``free_C``, so :func:`why` can still show what the pin costs.

**Why.** :func:`why` splits an operator's finish time on every candidate device into the time its
inputs were produced, the transfer of its inputs, the wait for the device and its compute, as the
earliest-finish rule weighs them at the moment the plan places it; :func:`reasons` says it in one
line per operator.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np

from lab.modelled.datasheet import LinkCost, compute_table
from lab.errors import LabError

Task = Hashable
Device = str

#: The rule by device type: preferred device types per operator class; the rest go to the host CPU.
TYPE_RULE: dict[str, tuple[str, ...]] = {"matmul": ("gpu",), "conv": ("fpga",), "elementwise": ("asic", "dpu")}
TYPE_RULE_DEFAULT: tuple[str, ...] = ("cpu",)
OPTIMAL_MAX_TASKS = 12
BEST_ORDER_MAX_DEVICES = 6


def _num(x: Any, what: str, where: str, allow_inf: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating, np.integer)):
        raise LabError(f"{what} must be a number (got {x!r})", where=where)
    x = float(x)
    if math.isnan(x) or x < 0 or (math.isinf(x) and not allow_inf):
        raise LabError(f"{what} must be a non-negative {'' if allow_inf else 'finite '}number (got {x})",
                       where=where)
    return x


class TaskGraph:
    """Tasks, their compute time on each device, and the cost of each dependency edge.

    ``compute = {task: {device: seconds}}``: a device missing for a task, or ``inf``, means no
    kernel there. ``transfer = {(u, v): value}``: seconds, or bytes when ``link_time`` is given
    (see the module doc). Optional: ``devices`` (order and extra devices), ``info`` per task
    (``{"class": ..., "flops": ...}``, needed by the type rule), ``device_types``, ``memory`` per task
    and ``capacity`` per device (bytes, used by the chain partition and the memory check).
    """

    def __init__(self, compute: Mapping[Task, Mapping[Device, float]],
                 transfer: Mapping[tuple[Task, Task], float] | None = None,
                 link_time: Callable[[Device, Device, float], float] | None = None, *,
                 devices: Sequence[Device] | None = None, info: Mapping[Task, Mapping] | None = None,
                 device_types: Mapping[Device, str] | None = None,
                 memory: Mapping[Task, float] | None = None, capacity: Mapping[Device, float] | None = None):
        where = "task graph"
        if not isinstance(compute, Mapping) or not compute:
            raise LabError("compute must be a non-empty mapping {task: {device: seconds}}", where=where)
        self.tasks: list[Task] = list(compute)
        self._ti = {t: i for i, t in enumerate(self.tasks)}
        devs: list[Device] = list(devices) if devices is not None else []
        for t, row in compute.items():
            if not isinstance(row, Mapping):
                raise LabError(f"compute[{t!r}] must be a mapping {{device: seconds}}", where=where)
            for d in row:
                if d not in devs:
                    if devices is not None:
                        raise LabError(f"compute[{t!r}] names device {d!r}, which is not in devices {devs}",
                                       where=where)
                    devs.append(d)
        if not devs:
            raise LabError("no devices", where=where)
        self.devices: list[Device] = devs
        self._di = {d: j for j, d in enumerate(devs)}
        n, m = len(self.tasks), len(devs)
        self.C = np.full((n, m), math.inf)
        for t, row in compute.items():
            for d, s in row.items():
                self.C[self._ti[t], self._di[d]] = _num(s, f"compute time of {t!r} on {d!r}", where, allow_inf=True)
            if not np.isfinite(self.C[self._ti[t]]).any():
                raise LabError(f"task {t!r} has no device with a kernel for it (every time is missing or inf)",
                               where=where)
        if link_time is not None and not callable(link_time):
            raise LabError("link_time must be a function (u_device, v_device, nbytes) -> seconds", where=where)
        self.link_time = link_time
        self.transfer: dict[tuple[Task, Task], float] = {}
        self.preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        self.succs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for key, val in (transfer or {}).items():
            if not (isinstance(key, tuple) and len(key) == 2):
                raise LabError(f"transfer keys must be (u, v) pairs (got {key!r})", where=where)
            u, v = key
            for x in (u, v):
                if x not in self._ti:
                    raise LabError(f"edge {key!r} names {x!r}, which is not a task", where=where)
            if u == v:
                raise LabError(f"edge {key!r} joins a task to itself", where=where)
            val = _num(val, f"transfer {'bytes' if link_time else 'seconds'} of edge {key!r}", where)
            self.transfer[(u, v)] = val
            self.preds[self._ti[v]].append((self._ti[u], val))
            self.succs[self._ti[u]].append((self._ti[v], val))
        self.topo = self._stable_topo()
        self.pos = [0] * n
        for k, i in enumerate(self.topo):
            self.pos[i] = k
        self.info = {t: dict(info[t]) for t in self.tasks if info and t in info}
        self.device_types = dict(device_types or {})
        self.memory = np.array([_num((memory or {}).get(t, 0.0), f"memory of {t!r}", where) for t in self.tasks])
        self.capacity = np.array([_num((capacity or {}).get(d, math.inf), f"capacity of {d!r}", where, True)
                                  for d in devs])
        self._lat = self._ibw = None
        if isinstance(link_time, LinkCost):
            self._lat, self._ibw = link_time.matrices(devs)
        self.pins: dict[Task, Device] = {}
        self.free_C = self.C  # compute times before any pin

    # ----- construction -------------------------------------------------------------------------
    @classmethod
    def from_model(cls, graph, topology, speed: Mapping[str, float] | None = None) -> "TaskGraph":
        """Tasks = the operators of an :class:`lab.modelled.opgraph.OpGraph`; times from :mod:`lab.modelled.datasheet`.

        compute = FLOPs / (throughput of the operator's class x ``speed`` factor); transfer = the
        producer's output bytes over the route between the two devices (``LinkCost``);
        memory = parameter + output activation bytes; capacity = device memory.
        """
        comp = compute_table(graph, topology, speed)
        missing = [op for op in graph.ops if not any(math.isfinite(s) for s in comp[op.name].values())]
        if missing:
            op = missing[0]
            raise LabError(f"no device of topology {topology.name!r} has a {op.op_class!r} kernel, which "
                           f"operator {op.name!r} ({op.kind}) needs", where="placement")
        return cls(comp, {(u, v): b for u, v, b in graph.edges}, LinkCost(topology),
                   devices=topology.device_names,
                   info={op.name: {"class": op.op_class, "flops": op.flops, "kind": op.kind,
                                   "param_bytes": op.param_bytes, "out_bytes": op.out_bytes} for op in graph.ops},
                   device_types={d.name: d.type for d in topology.devices},
                   memory={op.name: op.param_bytes + op.out_bytes for op in graph.ops},
                   capacity={d.name: d.memory for d in topology.devices})

    def with_compute(self, compute: Mapping[Task, Mapping[Device, float]]) -> "TaskGraph":
        """The same graph (edges, transfers, memory, pins) with other compute times."""
        g = TaskGraph(compute, self.transfer, self.link_time, devices=self.devices, info=self.info,
                      device_types=self.device_types, memory=dict(zip(self.tasks, self.memory)),
                      capacity=dict(zip(self.devices, self.capacity)))
        return g.with_pins(self.pins) if self.pins else g

    def scaled(self, factor: Callable[[Task, Device], float]) -> "TaskGraph":
        """Compute times multiplied by ``factor(task, device)`` (the pins stay)."""
        C = self.free_C
        return self.with_compute({t: {d: float(C[i, j]) * factor(t, d) for j, d in enumerate(self.devices)
                                      if math.isfinite(C[i, j])} for i, t in enumerate(self.tasks)})

    def with_pins(self, pins: Mapping[Task, Device] | Iterable[tuple[Task, Device]] | None) -> "TaskGraph":
        """A copy where each pinned task can run only on its device (``pins``: task -> device, or
        (task, device) pairs). Raises :class:`LabError` naming the operator, the device and why
        when a pin is impossible: an unknown operator, an unknown device, or no kernel there."""
        pins = dict(pins.items() if isinstance(pins, Mapping) else (pins or ()))
        base = self.free_C
        for t, d in pins.items():
            if t not in self._ti:
                raise LabError(f"operator {t!r} is pinned to {d!r}, but this model has no operator {t!r} "
                               f"(its operators: {', '.join(map(str, self.tasks[:12]))}"
                               f"{', ...' if len(self.tasks) > 12 else ''}); unpin it", where="pins")
            if d not in self._di:
                raise LabError(f"operator {t!r} is pinned to {d!r}, which is not a device of this topology "
                               f"(devices: {', '.join(self.devices)}); unpin it", where="pins")
            if not math.isfinite(base[self._ti[t], self._di[d]]):
                cls = self.task_class(t)
                kernels = [x for j, x in enumerate(self.devices) if math.isfinite(base[self._ti[t], j])]
                raise LabError(f"operator {t!r} cannot be pinned to {d!r}: that device has no kernel for "
                               f"{'its class ' + repr(cls) if cls else 'it'} (devices that can run it: "
                               f"{', '.join(kernels)})", where="pins")
        g = object.__new__(TaskGraph)
        g.__dict__.update(self.__dict__)
        g.free_C = base
        g.pins = pins
        C = base.copy()
        for t, d in pins.items():
            keep = C[self._ti[t], self._di[d]]
            C[self._ti[t]] = math.inf
            C[self._ti[t], self._di[d]] = keep
        g.C = C
        return g

    # ----- queries ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def compute(self) -> dict[Task, dict[Device, float]]:
        return {t: {d: float(self.C[i, j]) for j, d in enumerate(self.devices)} for i, t in enumerate(self.tasks)}

    @property
    def edges(self) -> list[tuple[Task, Task]]:
        return list(self.transfer)

    def compute_time(self, task: Task, device: Device) -> float:
        return float(self.C[self._ti[task], self._di[device]])

    def can_run(self, task: Task, device: Device) -> bool:
        return math.isfinite(self.C[self._ti[task], self._di[device]])

    def transfer_time(self, u: Task, v: Task, u_dev: Device, v_dev: Device) -> float:
        """Seconds for edge u->v when u ran on ``u_dev`` and v runs on ``v_dev``."""
        return self._comm(self.transfer[(u, v)], self._di[u_dev], self._di[v_dev])

    def topological_order(self) -> list[Task]:
        return [self.tasks[i] for i in self.topo]

    def task_class(self, task: Task) -> str | None:
        return self.info.get(task, {}).get("class")

    # ----- internals ----------------------------------------------------------------------------
    def _stable_topo(self) -> list[int]:
        n = len(self.tasks)
        indeg = [len(p) for p in self.preds]
        heap = [i for i in range(n) if indeg[i] == 0]
        heapq.heapify(heap)
        out: list[int] = []
        while heap:
            i = heapq.heappop(heap)
            out.append(i)
            for s, _ in self.succs[i]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, s)
        if len(out) != n:
            left = [self.tasks[i] for i in range(n) if indeg[i] > 0]
            raise LabError(f"the dependencies form a cycle (tasks involved: {left[:8]})", where="task graph")
        return out

    def _comm(self, val: float, dp: int, dq: int) -> float:
        if dp == dq:
            return 0.0
        if self.link_time is None:
            return val
        if self._lat is not None:
            return float(self._lat[dp, dq] + val * self._ibw[dp, dq])
        return float(self.link_time(self.devices[dp], self.devices[dq], val))

    def _comm_row(self, val: float, dp: int) -> np.ndarray:
        """Seconds for one edge from device ``dp`` to every device."""
        if self.link_time is None:
            row = np.full(len(self.devices), val)
            row[dp] = 0.0
            return row
        if self._lat is not None:
            return self._lat[dp] + val * self._ibw[dp]
        return np.array([self._comm(val, dp, q) for q in range(len(self.devices))])

    def _mean_comm(self, val: float) -> float:
        m = len(self.devices)
        if m < 2:
            return 0.0
        if self.link_time is None:
            return val
        if self._lat is not None:
            off = ~np.eye(m, dtype=bool)
            return float(self._lat[off].mean() + val * self._ibw[off].mean())
        return float(np.mean([self._comm(val, a, b) for a in range(m) for b in range(m) if a != b]))


# ----- schedules -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Schedule:
    """Where and when every task runs. Seconds."""

    strategy: str
    slots: Mapping[Task, tuple[Device, float, float]]
    makespan: float
    note: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def assignment(self) -> dict[Task, Device]:
        return {t: s[0] for t, s in self.slots.items()}

    def device_order(self) -> dict[Device, list[Task]]:
        out: dict[Device, list[Task]] = {}
        for t, (d, s, f) in sorted(self.slots.items(), key=lambda kv: (kv[1][1], kv[1][2])):
            out.setdefault(d, []).append(t)
        return out

    def busy(self) -> dict[Device, float]:
        out: dict[Device, float] = {}
        for d, s, f in self.slots.values():
            out[d] = out.get(d, 0.0) + (f - s)
        return out

    def validate(self, g: TaskGraph, rel_tol: float = 1e-9) -> "Schedule":
        """Raise :class:`LabError` naming the first broken rule; return self if the schedule is valid."""
        where = f"schedule {self.strategy!r}"
        missing = [t for t in g.tasks if t not in self.slots]
        extra = [t for t in self.slots if t not in g._ti]
        if missing or extra:
            raise LabError(f"tasks without a slot: {missing[:5]}; slots for unknown tasks: {extra[:5]}", where=where)
        scale = max([abs(self.makespan)] + [abs(f) for _, _, f in self.slots.values()] + [1e-300])
        tol = rel_tol * scale
        for t, (d, s, f) in self.slots.items():
            if d not in g._di:
                raise LabError(f"task {t!r} is on {d!r}, which is not a device", where=where)
            c = g.compute_time(t, d)
            if not math.isfinite(c):
                raise LabError(f"task {t!r} is on {d!r}, which has no kernel for it", where=where)
            if s < -tol:
                raise LabError(f"task {t!r} starts before time 0 ({s:g} s)", where=where)
            if abs((f - s) - c) > tol:
                raise LabError(f"task {t!r} on {d!r} lasts {f - s:g} s but its compute time there is {c:g} s",
                               where=where)
        for (u, v) in g.transfer:
            du, _, fu = self.slots[u]
            dv, sv, _ = self.slots[v]
            arrive = fu + g.transfer_time(u, v, du, dv)
            if sv < arrive - tol:
                raise LabError(f"task {v!r} starts at {sv:g} s on {dv!r} before its input from {u!r} "
                               f"(on {du!r}) arrives at {arrive:g} s", where=where)
        for d, tasks in self.device_order().items():
            for a, b in zip(tasks, tasks[1:]):
                if self.slots[b][1] < self.slots[a][2] - tol:
                    raise LabError(f"tasks {a!r} and {b!r} overlap on {d!r}", where=where)
        span = max(f for _, _, f in self.slots.values())
        if abs(span - self.makespan) > tol:
            raise LabError(f"makespan {self.makespan:g} s differs from the last finish {span:g} s", where=where)
        return self


def _to_schedule(g: TaskGraph, name: str, dev: Sequence[int], start: Sequence[float], fin: Sequence[float],
                 note: str = "", extra: Mapping | None = None) -> Schedule:
    slots = {g.tasks[i]: (g.devices[dev[i]], float(start[i]), float(fin[i])) for i in range(len(g.tasks))}
    return Schedule(name, slots, float(max(fin)), note, dict(extra or {}))


def _ready_row(g: TaskGraph, i: int, dev: list[int], fin: list[float]) -> np.ndarray:
    row = np.zeros(len(g.devices))
    for p, val in g.preds[i]:
        np.maximum(row, fin[p] + g._comm_row(val, dev[p]), out=row)
    return row


def greedy_eft(g: TaskGraph) -> Schedule:
    """Greedy earliest finish: stable topological order, earliest finish time, append to the device queue."""
    n = len(g.tasks)
    avail = np.zeros(len(g.devices))
    dev, start, fin = [0] * n, [0.0] * n, [0.0] * n
    for i in g.topo:
        st = np.maximum(avail, _ready_row(g, i, dev, fin))
        eft = st + g.C[i]
        d = int(np.argmin(eft))
        dev[i], start[i], fin[i] = d, float(st[d]), float(eft[d])
        avail[d] = fin[i]
    return _to_schedule(g, "greedy_eft", dev, start, fin)


def upward_ranks(g: TaskGraph) -> list[float]:
    """HEFT's upward rank per task (index order): mean compute + max over successors of mean transfer + rank."""
    n = len(g.tasks)
    mean_c = [float(g.C[i][np.isfinite(g.C[i])].mean()) for i in range(n)]
    rank = [0.0] * n
    for i in reversed(g.topo):
        best = 0.0
        for s, val in g.succs[i]:
            best = max(best, g._mean_comm(val) + rank[s])
        rank[i] = mean_c[i] + best
    return rank


def _find_gap(starts: list[float], fins: list[float], ready: float, dur: float) -> tuple[float, int]:
    """Earliest start >= ready in an idle gap of at least ``dur``; returns (start, insert index)."""
    k = bisect_right(fins, ready)
    t = ready
    while k < len(starts):
        if t + dur <= starts[k]:
            return t, k
        t = max(ready, fins[k])
        k += 1
    return t, k


def heft(g: TaskGraph) -> Schedule:
    """HEFT: decreasing upward rank, earliest finish time with insertion into idle gaps."""
    n, m = len(g.tasks), len(g.devices)
    rank = upward_ranks(g)
    order = sorted(range(n), key=lambda i: (-rank[i], g.pos[i]))
    starts: list[list[float]] = [[] for _ in range(m)]
    fins: list[list[float]] = [[] for _ in range(m)]
    dev, start, fin = [0] * n, [0.0] * n, [0.0] * n
    for i in order:
        ready = _ready_row(g, i, dev, fin)
        best = (math.inf, 0, 0.0, 0)
        for d in range(m):
            c = g.C[i, d]
            if not math.isfinite(c):
                continue
            s, k = _find_gap(starts[d], fins[d], float(ready[d]), float(c))
            if s + c < best[0]:
                best = (s + c, d, s, k)
        f, d, s, k = best
        starts[d].insert(k, s)
        fins[d].insert(k, f)
        dev[i], start[i], fin[i] = d, s, f
    return _to_schedule(g, "heft", dev, start, fin)


def schedule_assignment(g: TaskGraph, assignment: Mapping[Task, Device], strategy: str = "assigned",
                        order: Sequence[Task] | None = None, note: str = "", extra: Mapping | None = None) -> Schedule:
    """Times for a fixed assignment: tasks in ``order`` (default: stable topological order), each
    appended to its device's queue as soon as its inputs have arrived."""
    n = len(g.tasks)
    idx_order = g.topo if order is None else [g._ti[t] for t in order]
    if sorted(idx_order) != list(range(n)):
        raise LabError("the order must list every task exactly once", where=strategy)
    dev = [0] * n
    for t in g.tasks:
        if t not in assignment:
            raise LabError(f"task {t!r} has no device", where=strategy)
        d = assignment[t]
        if d not in g._di:
            raise LabError(f"task {t!r} is assigned to {d!r}, which is not a device", where=strategy)
        if t in g.pins and g.pins[t] != d:
            raise LabError(f"task {t!r} is assigned to {d!r}, but it is pinned to {g.pins[t]!r}", where=strategy)
        if not g.can_run(t, d):
            raise LabError(f"task {t!r} is assigned to {d!r}, which has no kernel for it", where=strategy)
        dev[g._ti[t]] = g._di[d]
    avail = [0.0] * len(g.devices)
    start, fin = [0.0] * n, [0.0] * n
    done = [False] * n
    for i in idx_order:
        d = dev[i]
        r = 0.0
        for p, val in g.preds[i]:
            if not done[p]:
                raise LabError(f"the order puts {g.tasks[i]!r} before its input {g.tasks[p]!r}", where=strategy)
            r = max(r, fin[p] + g._comm(val, dev[p], d))
        start[i] = max(avail[d], r)
        fin[i] = start[i] + float(g.C[i, d])
        avail[d] = fin[i]
        done[i] = True
    return _to_schedule(g, strategy, dev, start, fin, note, extra)


def replay(g: TaskGraph, plan: Schedule, strategy: str | None = None) -> Schedule:
    """Run ``plan``'s assignment and per-device order with ``g``'s times (e.g. the true speeds)."""
    order = sorted(g.tasks, key=lambda t: (plan.slots[t][1], plan.slots[t][2], g.pos[g._ti[t]]))
    return schedule_assignment(g, plan.assignment, strategy or plan.strategy, order=order)


# ----- baselines ------------------------------------------------------------------------------------

def type_rule(g: TaskGraph) -> Schedule:
    """The rule by device type; fallback: the fastest device that has a kernel (a pinned task: its pin)."""
    if not g.device_types or len(g.info) < len(g.tasks):
        raise LabError("the type rule needs each task's operator class and each device's type; build the "
                       "graph with TaskGraph.from_model", where="type_rule")
    assignment = {}
    for i, t in enumerate(g.tasks):
        prefer = TYPE_RULE.get(g.task_class(t), TYPE_RULE_DEFAULT)
        cands = [j for j, d in enumerate(g.devices) if g.device_types.get(d) in prefer and math.isfinite(g.C[i, j])]
        if not cands:
            cands = [j for j in range(len(g.devices)) if math.isfinite(g.C[i, j])]
        assignment[t] = g.devices[min(cands, key=lambda j: (g.C[i, j], j))]
    return schedule_assignment(g, assignment, "type_rule")


def single_fastest(g: TaskGraph) -> Schedule:
    """Everything on the one device that runs the whole graph fastest (no transfers); pinned tasks
    stay on their pins and the device is chosen for the rest."""
    free = [i for i, t in enumerate(g.tasks) if t not in g.pins]
    totals = g.C[free].sum(axis=0)
    if not np.isfinite(totals).any():
        raise LabError("no single device has a kernel for every task"
                       + (" that is not pinned" if g.pins else ""), where="single_fastest")
    d = g.devices[int(np.argmin(totals))]
    return schedule_assignment(g, {t: g.pins.get(t, d) for t in g.tasks}, "single_fastest")


def round_robin(g: TaskGraph) -> Schedule:
    """Tasks in topological order dealt to the devices in turn, skipping devices without a kernel."""
    m = len(g.devices)
    ptr, assignment = 0, {}
    for i in g.topo:
        for k in range(m):
            j = (ptr + k) % m
            if math.isfinite(g.C[i, j]):
                assignment[g.tasks[i]] = g.devices[j]
                ptr = j + 1
                break
    return schedule_assignment(g, assignment, "round_robin")


def even_split(g: TaskGraph) -> Schedule:
    """The coarse layer-by-layer baseline: the topological order cut into contiguous blocks of equal
    task count, one per device that has a kernel for every task (in device order). Pinned tasks
    stay on their pins; the blocks cut the other tasks."""
    free = [i for i in g.topo if g.tasks[i] not in g.pins]
    general = [j for j in range(len(g.devices)) if np.isfinite(g.C[free, j]).all()]
    if not general:
        raise LabError("no device has a kernel for every task" + (" that is not pinned" if g.pins else "")
                       + ", so an even layer split is impossible", where="even_split")
    assignment = dict(g.pins)
    n, k = len(free), min(len(general), len(free))
    sizes = [n // k + (1 if b < n % k else 0) for b in range(k)] if k else []
    pos = 0
    for b, size in enumerate(sizes):
        for i in free[pos:pos + size]:
            assignment[g.tasks[i]] = g.devices[general[b]]
        pos += size
    return schedule_assignment(g, assignment, "even_split")


# ----- contiguous pipeline partition ---------------------------------------------------------------

def partition_chain(times: np.ndarray, cut: np.ndarray | None = None, mem: np.ndarray | None = None,
                    capacity: np.ndarray | None = None) -> tuple[float, list[tuple[int, int, int]]]:
    """Optimal min-max split of a chain of L layers into contiguous stages on M devices in order.

    ``times[l, j]``: seconds of layer ``l`` on device ``j`` (inf: no kernel). ``cut[k, a, b]``:
    seconds to send what crosses the cut after layer ``k`` from device ``a`` to device ``b``
    (shape (L-1, M, M); None: free). ``mem[l]``: bytes layer ``l`` needs; ``capacity[j]``: bytes
    device ``j`` has. Devices may be skipped (an empty stage), never reordered.

    The bottleneck is the largest of every stage's compute and every cut's transfer (PipeDream's
    planner: the transfer between two stages is its own pipeline step, overlapping with compute).
    Returns ``(bottleneck, [(device index, first layer, end layer exclusive), ...])``. Dynamic
    programming in O(M^2 L + M L^2).
    """
    times = np.asarray(times, dtype=float)
    L, M = times.shape
    if L == 0 or M == 0:
        raise LabError("the chain needs at least one layer and one device", where="chain partition")
    cut = np.zeros((max(L - 1, 0), M, M)) if cut is None else np.asarray(cut, dtype=float)
    mem = np.zeros(L) if mem is None else np.asarray(mem, dtype=float)
    capacity = np.full(M, math.inf) if capacity is None else np.asarray(capacity, dtype=float)
    finite = np.isfinite(times)
    P = np.vstack([np.zeros(M), np.cumsum(np.where(finite, times, 0.0), axis=0)])
    bad = np.vstack([np.zeros(M), np.cumsum(~finite, axis=0)])
    memP = np.concatenate([[0.0], np.cumsum(mem)])
    ii = np.arange(L + 1)
    upper = ii[:, None] < ii[None, :]
    mem_need = memP[None, :] - memP[:, None]
    f = np.full((M, L + 1), math.inf)
    arg_i = np.zeros((M, L + 1), dtype=int)
    prev_j = np.full((M, L + 1), -1, dtype=int)
    for j in range(M):
        h = np.full(L + 1, math.inf)
        h[0] = 0.0
        hj = np.full(L + 1, -1, dtype=int)
        for jp in range(j):
            if L > 1:
                cand = np.maximum(f[jp, 1:L], cut[:, jp, j])
                better = cand < h[1:L]
                h[1:L] = np.where(better, cand, h[1:L])
                hj[1:L] = np.where(better, jp, hj[1:L])
        S = P[None, :, j] - P[:, None, j]
        valid = upper & ((bad[None, :, j] - bad[:, None, j]) == 0) & (mem_need <= capacity[j])
        V = np.where(valid, np.maximum(S, h[:, None]), math.inf)
        f[j] = V.min(axis=0)
        arg_i[j] = V.argmin(axis=0)
        prev_j[j] = hj
    j = int(np.argmin(f[:, L]))
    best = float(f[j, L])
    if not math.isfinite(best):
        raise LabError("no contiguous split fits: some layer has no device with a kernel and enough memory "
                       "in this device order", where="chain partition")
    stages, i = [], L
    while True:
        ip = int(arg_i[j, i])
        stages.append((j, ip, i))
        if ip == 0:
            break
        j, i = int(prev_j[j, ip]), ip
    return best, stages[::-1]


@dataclass(frozen=True)
class ChainPlan:
    bottleneck: float  # seconds per batch in steady pipeline flow
    stages: tuple[tuple[Device, tuple[Task, ...]], ...]
    order: tuple[Device, ...]  # the device order the stages follow
    searched_orders: int = 1

    @property
    def assignment(self) -> dict[Task, Device]:
        return {t: d for d, ts in self.stages for t in ts}


def _chain_arrays(g: TaskGraph) -> tuple[np.ndarray, np.ndarray]:
    """Layer times in topological order and the cut cost array over all devices."""
    L, M = len(g.tasks), len(g.devices)
    times = g.C[g.topo]
    cnt, val = np.zeros(L + 1), np.zeros(L + 1)
    crossing: list[list[float]] = [[] for _ in range(L)]
    for (u, v), x in g.transfer.items():
        a, b = g.pos[g._ti[u]], g.pos[g._ti[v]]  # cuts a+1 .. b carry this edge
        cnt[a + 1] += 1
        cnt[b + 1] -= 1
        val[a + 1] += x
        val[b + 1] -= x
        if g.link_time is not None and g._lat is None:
            for k in range(a + 1, b + 1):
                crossing[k].append(x)
    cnt, val = np.cumsum(cnt)[1:L], np.cumsum(val)[1:L]  # cut k sits after layer k-1: index k-1
    if g.link_time is None:
        cut = np.broadcast_to(val[:, None, None], (L - 1, M, M)).copy()
    elif g._lat is not None:
        lat = np.where(np.isfinite(g._lat), g._lat, 0.0)
        cut = cnt[:, None, None] * lat[None] + val[:, None, None] * g._ibw[None]
    else:
        cut = np.zeros((L - 1, M, M))
        for k in range(1, L):
            for a in range(M):
                for b in range(M):
                    cut[k - 1, a, b] = sum(g._comm(x, a, b) for x in crossing[k])
    return times, cut


def chain_partition(g: TaskGraph, devices: Sequence[Device] | None = None, best_order: bool = False) -> ChainPlan:
    """The optimal contiguous split of ``g``'s stable topological order over ``devices`` (in that
    order; default all devices in graph order), counting transfers at each cut (every edge that
    crosses a cut is forwarded through it) and device memory. ``best_order=True`` also tries every
    order of the devices (at most :data:`BEST_ORDER_MAX_DEVICES`)."""
    devs = list(devices) if devices is not None else list(g.devices)
    for d in devs:
        if d not in g._di:
            raise LabError(f"{d!r} is not a device; devices: {g.devices}", where="chain partition")
    if best_order and len(devs) > BEST_ORDER_MAX_DEVICES:
        raise LabError(f"trying every device order is limited to {BEST_ORDER_MAX_DEVICES} devices "
                       f"(got {len(devs)}); fix an order instead", where="chain partition")
    times, cut = _chain_arrays(g)
    mem = g.memory[g.topo]
    best: tuple[float, list, tuple] | None = None
    orders = itertools.permutations(devs) if best_order else [tuple(devs)]
    count = 0
    for order in orders:
        count += 1
        idx = [g._di[d] for d in order]
        try:
            bn, stages = partition_chain(times[:, idx], cut[:, idx][:, :, idx], mem, g.capacity[idx])
        except LabError:
            continue
        if best is None or bn < best[0]:
            best = (bn, stages, order)
    if best is None:
        raise LabError("no contiguous split fits: some layer has no device with a kernel and enough memory"
                       + (f" (with the pins {', '.join(f'{t} -> {d}' for t, d in g.pins.items())}, each device "
                          "must hold one unbroken run of layers)" if g.pins else ""), where="chain partition")
    bn, stages, order = best
    topo = [g.tasks[i] for i in g.topo]
    return ChainPlan(bn, tuple((order[j], tuple(topo[a:b])) for j, a, b in stages), tuple(order), count)


def chain_dp(g: TaskGraph, best_order: bool | None = None) -> Schedule:
    """The optimal contiguous pipeline partition (:func:`chain_partition`), scheduled for one batch.
    Tries every device order when there are at most :data:`BEST_ORDER_MAX_DEVICES` devices."""
    if best_order is None:
        best_order = len(g.devices) <= BEST_ORDER_MAX_DEVICES
    plan = chain_partition(g, best_order=best_order)
    note = (f"pipeline bottleneck {plan.bottleneck:.3g} s over {len(plan.stages)} stage(s); "
            f"{'best of ' + str(plan.searched_orders) + ' device orders' if best_order else 'device order fixed'}")
    return schedule_assignment(g, plan.assignment, "chain_dp", note=note,
                               extra={"bottleneck": plan.bottleneck, "stages": plan.stages})


# ----- exact optimum ----------------------------------------------------------------------------------

class _Abort(Exception):
    pass


def _device_classes(g: TaskGraph, pair_comm: list[list[list[float]]]) -> list[int]:
    """For each device, the lowest-index device interchangeable with it (same compute column and
    the same transfer times to and from every other device, on every edge)."""
    m = len(g.devices)
    rep = list(range(m))
    for b in range(m):
        for a in range(b):
            if rep[a] != a or not np.array_equal(g.C[:, a], g.C[:, b]):
                continue
            perm = list(range(m))
            perm[a], perm[b] = b, a
            if all(M[perm[x]][perm[y]] == M[x][y] for M in pair_comm for x in range(m) for y in range(m)):
                rep[b] = a
                break
    return rep


def optimal(g: TaskGraph, max_tasks: int = OPTIMAL_MAX_TASKS, node_limit: int = 500_000) -> Schedule:
    """The minimum makespan, by depth-first branch and bound.

    The search builds the schedule task by task in order of start time (ties by topological
    position), each task appended to its device's queue as early as its inputs allow. Some
    optimal schedule is always found this way (shifting every task of an optimal schedule as early
    as possible in its own start order never makes it worse, and the result is a fixed point of
    that shift). Pruning: the best of HEFT and greedy as the first incumbent; for every
    unscheduled task, its earliest possible finish on any device plus its shortest remaining
    chain; the remaining work spread over all devices; and interchangeable devices (same times
    everywhere) that are still empty are tried only once. Raises :class:`LabError` above
    ``max_tasks`` tasks, or if ``node_limit`` search nodes do not finish the proof.
    """
    n, m = len(g.tasks), len(g.devices)
    if n > max_tasks:
        raise LabError(f"exact search is limited to {max_tasks} tasks and this graph has {n}; coarsen it "
                       "(coarsen(graph, 12)) or use heft / greedy_eft", where="optimal")
    incumbent = min((heft(g), greedy_eft(g)), key=lambda s: s.makespan)
    ub = [incumbent.makespan]
    best_slots: list[Any] = [None]
    C = g.C.tolist()
    capable = [[d for d in range(m) if math.isfinite(C[i][d])] for i in range(n)]
    minc = [min(C[i][d] for d in capable[i]) for i in range(n)]
    bl = [0.0] * n
    for i in reversed(g.topo):
        bl[i] = minc[i] + max((bl[s] for s, _ in g.succs[i]), default=0.0)
    tail = [max((bl[s] for s, _ in g.succs[i]), default=0.0) for i in range(n)]
    # preds[i] = [(p, seconds[from device][to device])]
    preds = [[(p, [[g._comm(val, a, b) for b in range(m)] for a in range(m)]) for p, val in g.preds[i]]
             for i in range(n)]
    rep = _device_classes(g, [M for ps in preds for _, M in ps])
    succ_idx = [[s for s, _ in g.succs[i]] for i in range(n)]
    pos = g.pos
    dev = [-1] * n
    start = [0.0] * n
    fin = [0.0] * n
    avail = [0.0] * m
    used = [0] * m  # tasks on each device
    left = [len(g.preds[i]) for i in range(n)]
    unscheduled = set(range(n))
    nodes = [0]
    rem_work = [sum(minc)]

    def earliest_finish(u: int, s: float) -> float:
        best = math.inf
        for d in capable[u]:
            e = avail[d] if avail[d] > s else s
            for p, cm in preds[u]:
                if dev[p] >= 0:
                    x = fin[p] + cm[dev[p]][d]
                    if x > e:
                        e = x
            e += C[u][d]
            if e < best:
                best = e
        return best

    def dfs(k: int, last_s: float, last_pos: int, cur_max: float) -> None:
        nodes[0] += 1
        if nodes[0] > node_limit:
            raise _Abort
        if k == n:
            if cur_max < ub[0]:
                ub[0] = cur_max
                best_slots[0] = (list(dev), list(start), list(fin))
            return
        cands = []
        first_free: dict[int, int] = {}
        for q in range(m):
            if not used[q] and rep[q] not in first_free:
                first_free[rep[q]] = q
        for t in unscheduled:
            if left[t]:
                continue
            for d in capable[t]:
                if not used[d] and first_free[rep[d]] != d:
                    continue  # an interchangeable empty device with a lower index is tried instead
                r = 0.0
                for p, cm in preds[t]:
                    x = fin[p] + cm[dev[p]][d]
                    if x > r:
                        r = x
                s = avail[d] if avail[d] > r else r
                if s < last_s or (s == last_s and pos[t] < last_pos):
                    continue
                cands.append((s + C[t][d], s, t, d))
        cands.sort()
        for f, s, t, d in cands:
            if f >= ub[0]:
                break
            lb = max(cur_max, f + tail[t])
            if lb >= ub[0]:
                continue
            work = rem_work[0] - minc[t]
            tot = 0.0
            for q in range(m):
                a = f if q == d else avail[q]
                tot += a if a > s else s
            if (tot + work) / m >= ub[0]:
                continue
            old_avail = avail[d]
            dev[t], start[t], fin[t], avail[d] = d, s, f, f
            used[d] += 1
            unscheduled.discard(t)
            rem_work[0] -= minc[t]
            for v in succ_idx[t]:
                left[v] -= 1
            ok = True
            for u in unscheduled:
                if earliest_finish(u, s) + tail[u] >= ub[0]:
                    ok = False
                    break
            if ok:
                dfs(k + 1, s, pos[t], max(cur_max, f))
            for v in succ_idx[t]:
                left[v] += 1
            rem_work[0] += minc[t]
            unscheduled.add(t)
            used[d] -= 1
            dev[t], avail[d] = -1, old_avail

    try:
        dfs(0, -math.inf, -1, 0.0)
    except _Abort:
        raise LabError(f"the exact search did not finish within {node_limit:,} search nodes; coarsen the "
                       "graph further", where="optimal") from None
    extra = {"search_nodes": nodes[0]}
    if best_slots[0] is None:
        s = incumbent
        return Schedule("optimal", dict(s.slots), s.makespan, f"proven optimal ({nodes[0]:,} search nodes; "
                        f"{s.strategy} was already optimal)", extra)
    d_, s_, f_ = best_slots[0]
    return _to_schedule(g, "optimal", d_, s_, f_, f"proven optimal ({nodes[0]:,} search nodes)", extra)


# ----- coarsening ---------------------------------------------------------------------------------------

def coarsen(g: TaskGraph, max_tasks: int = OPTIMAL_MAX_TASKS) -> tuple[TaskGraph, dict[Task, list[Task]]]:
    """Merge tasks along edges until at most ``max_tasks`` remain.

    Each step merges the two ends of one edge whose merge keeps the graph acyclic and leaves some
    device able to run the whole group; edges inside a chain (one successor, one predecessor) go
    first, then the pair with the least work. A group's time on a device is the sum of its
    members' (inf if any member has no kernel there); edges between two groups become one message
    (seconds, or bytes, summed). A placement of the coarse graph keeps each group on one device,
    so its optimum is an upper bound on the optimum of the fine graph.
    Returns the coarse graph and ``{group: [member tasks in topological order]}``.
    """
    import networkx as nx

    if len(g.tasks) <= max_tasks:
        return g, {t: [t] for t in g.tasks}
    if max_tasks < 1:
        raise LabError("max_tasks must be at least 1", where="coarsen")
    group_of = {i: i for i in range(len(g.tasks))}
    members = {i: [i] for i in range(len(g.tasks))}
    vec = {i: g.C[i].copy() for i in range(len(g.tasks))}
    G = nx.DiGraph()
    G.add_nodes_from(members)
    for (u, v) in g.transfer:
        G.add_edge(g._ti[u], g._ti[v])
    while G.number_of_nodes() > max_tasks:
        best = None
        for a, b in G.edges:
            merged = vec[a] + vec[b]
            if not np.isfinite(merged).any():
                continue
            chain = G.out_degree(a) == 1 and G.in_degree(b) == 1
            if not chain and any(s != b and nx.has_path(G, s, b) for s in G.successors(a)):
                continue
            key = (not chain, float(np.min(merged)))
            if best is None or key < best[0]:
                best = (key, a, b)
        if best is None:
            raise LabError(f"cannot coarsen below {G.number_of_nodes()} tasks without creating a cycle or "
                           "a group no device can run", where="coarsen")
        _, a, b = best
        for s in list(G.successors(b)):
            if s != a:
                G.add_edge(a, s)
        for p in list(G.predecessors(b)):
            if p != a:
                G.add_edge(p, a)
        G.remove_node(b)
        members[a] += members.pop(b)
        vec[a] = vec[a] + vec.pop(b)
        for i in members[a]:
            group_of[i] = a
    order = sorted(members, key=lambda k: min(g.pos[i] for i in members[k]))
    names: dict[int, Any] = {}
    for k in order:
        mem = sorted(members[k], key=lambda i: g.pos[i])
        members[k] = mem
        names[k] = g.tasks[mem[0]] if len(mem) == 1 else f"{g.tasks[mem[0]]}..{g.tasks[mem[-1]]}"
    compute = {names[k]: {d: float(vec[k][j]) for j, d in enumerate(g.devices) if math.isfinite(vec[k][j])}
               for k in order}
    transfer: dict[tuple, float] = {}
    for (u, v), x in g.transfer.items():
        a, b = group_of[g._ti[u]], group_of[g._ti[v]]
        if a != b:
            transfer[(names[a], names[b])] = transfer.get((names[a], names[b]), 0.0) + x
    info = {}
    for k in order:
        ts = [g.tasks[i] for i in members[k]]
        infos = [g.info.get(t, {}) for t in ts]
        main = max(infos, key=lambda d: d.get("flops", 0.0)) if infos else {}
        info[names[k]] = {"class": main.get("class"), "flops": sum(d.get("flops", 0.0) for d in infos),
                          "kind": "+".join(str(d.get("kind", "?")) for d in infos) if len(ts) > 1 else main.get("kind"),
                          "members": ts}
    coarse = TaskGraph(compute, transfer, g.link_time, devices=g.devices, info=info, device_types=g.device_types,
                       memory={names[k]: float(sum(g.memory[i] for i in members[k])) for k in order},
                       capacity=dict(zip(g.devices, g.capacity)))
    if g.pins:  # a group holding a pinned task stays on that pin; its free times are its members' sums
        coarse.free_C = np.array([g.free_C[members[k]].sum(axis=0) for k in order])
        coarse.pins = {names[k]: g.pins[g.tasks[i]] for k in order for i in members[k] if g.tasks[i] in g.pins}
    return coarse, {names[k]: [g.tasks[i] for i in members[k]] for k in order}


# ----- comparison and tables ------------------------------------------------------------------------

STRATEGIES: dict[str, Callable[[TaskGraph], Schedule]] = {
    "greedy_eft": greedy_eft,
    "heft": heft,
    "optimal": optimal,
    "type_rule": type_rule,
    "single_fastest": single_fastest,
    "round_robin": round_robin,
    "even_split": even_split,
    "chain_dp": chain_dp,
}
STRATEGY_LABELS: dict[str, str] = {
    "greedy_eft": "greedy earliest finish",
    "heft": "HEFT (rank order, gap insertion)",
    "optimal": "exact optimum (branch and bound)",
    "type_rule": "rule by device type (linear->GPU, conv->FPGA, activation->ASIC/DPU)",
    "single_fastest": "single fastest device",
    "round_robin": "round robin",
    "even_split": "even contiguous layer split",
    "chain_dp": "optimal contiguous pipeline split (DP)",
}


def run_strategy(name: str, g: TaskGraph) -> Schedule:
    if name not in STRATEGIES:
        raise LabError(f"unknown strategy {name!r}; choose one of {list(STRATEGIES)}", where="placement")
    return STRATEGIES[name](g)


def compare_strategies(g: TaskGraph, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Every strategy's makespan on ``g`` and its gap to the optimum (when it could be computed).

    Rows: strategy, label, makespan (s, None if it failed), gap (fraction above the optimum or
    None), note (the failure message when it failed)."""
    rows, opt = [], None
    for name in names or STRATEGIES:
        try:
            s = run_strategy(name, g)
            rows.append({"strategy": name, "label": STRATEGY_LABELS[name], "makespan": s.makespan, "note": s.note})
            if name == "optimal":
                opt = s.makespan
        except LabError as exc:
            rows.append({"strategy": name, "label": STRATEGY_LABELS[name], "makespan": None, "note": str(exc)})
    for r in rows:
        r["gap"] = (r["makespan"] / opt - 1.0) if (opt and r["makespan"] is not None) else None
    return rows


def schedule_table(g: TaskGraph, s: Schedule) -> list[dict[str, Any]]:
    """One row per task in start order: task, class, flops, device, start, finish (s), and its
    compute time on every device (s, inf: no kernel)."""
    rows = []
    for t in sorted(g.tasks, key=lambda t: (s.slots[t][1], g.pos[g._ti[t]])):
        d, a, b = s.slots[t]
        row = {"task": t, "class": g.task_class(t), "flops": g.info.get(t, {}).get("flops"),
               "device": d, "start": a, "finish": b}
        row["times"] = {dv: g.compute_time(t, dv) for dv in g.devices}
        rows.append(row)
    return rows


def device_usage(g: TaskGraph, s: Schedule) -> list[dict[str, Any]]:
    """Per device: busy and idle seconds within the makespan, memory used (sum of its tasks'
    memory), capacity, and whether it is over-full."""
    busy = s.busy()
    used: dict[Device, float] = {}
    for t, (d, _, _) in s.slots.items():
        used[d] = used.get(d, 0.0) + float(g.memory[g._ti[t]])
    out = []
    for j, d in enumerate(g.devices):
        b = busy.get(d, 0.0)
        cap = float(g.capacity[j])
        out.append({"device": d, "busy": b, "idle": max(s.makespan - b, 0.0), "memory": used.get(d, 0.0),
                    "capacity": cap, "over": used.get(d, 0.0) > cap})
    return out


# ----- why an operator went where it went --------------------------------------------------------------

def decision_order(g: TaskGraph, s: Schedule) -> list[int]:
    """The order in which the plan placed its tasks: greedy earliest finish follows the stable
    topological order; every other plan is read in start order (each of its tasks starts as soon
    as its inputs and its device allow, so that order rebuilds its state)."""
    if s.strategy == "greedy_eft":
        return list(g.topo)
    return sorted(range(len(g.tasks)), key=lambda i: (s.slots[g.tasks[i]][1], s.slots[g.tasks[i]][2], g.pos[i]))


def _why_all(g: TaskGraph, s: Schedule) -> dict[Task, list[dict[str, Any]]]:
    n, m = len(g.tasks), len(g.devices)
    dev = [g._di[s.slots[t][0]] for t in g.tasks]
    fin = [float(s.slots[t][2]) for t in g.tasks]
    avail = np.zeros(m)
    out: dict[Task, list[dict[str, Any]]] = {}
    for i in decision_order(g, s):
        t = g.tasks[i]
        inputs_at = max((fin[p] for p, _ in g.preds[i]), default=0.0)
        ready = _ready_row(g, i, dev, fin)
        rows = []
        for j, d in enumerate(g.devices):
            c = float(g.free_C[i, j])
            row = {"task": t, "device": d, "type": g.device_types.get(d), "kernel": math.isfinite(c),
                   "allowed": math.isfinite(g.C[i, j]), "chosen": j == dev[i], "inputs_at": inputs_at,
                   "transfer": None, "wait": None, "compute": None, "finish": None}
            if row["kernel"]:
                st = max(float(avail[j]), float(ready[j]))
                row.update(transfer=float(ready[j]) - inputs_at, wait=st - float(ready[j]), compute=c, finish=st + c)
            rows.append(row)
        out[t] = rows
        avail[dev[i]] = max(avail[dev[i]], fin[i])
    return out


def why(g: TaskGraph, s: Schedule, task: Task) -> list[dict[str, Any]]:
    """One row per device for ``task``: as the earliest-finish rule weighs it at the moment the plan
    places ``task`` (see :func:`decision_order`; the devices hold the tasks placed before it).

    Row: device, type, kernel (has one), allowed (not excluded by a pin), chosen (the plan's
    device), inputs_at (s, when its last input was produced; 0 without inputs), transfer (s, how
    much later the inputs arrive on that device), wait (s, for the device to finish its queue),
    compute (s), finish (s). ``inputs_at + transfer + wait + compute == finish``; for the chosen
    device ``finish`` is the plan's finish (and with greedy earliest finish it is the smallest of
    the allowed devices). Devices without a kernel have None times."""
    if task not in g._ti:
        raise LabError(f"{task!r} is not an operator of this graph", where="why")
    return _why_all(g, s)[task]


def _reason(g: TaskGraph, s: Schedule, rows: list[dict[str, Any]]) -> str:
    cands = sorted((r for r in rows if r["kernel"]), key=lambda r: r["finish"])
    chosen = next(r for r in rows if r["chosen"])
    t0 = chosen["inputs_at"]

    def pct(r: dict) -> str:  # time from the inputs to the finish, against the chosen device's
        span = chosen["finish"] - t0
        if span <= 0:
            return "same finish" if r["finish"] == chosen["finish"] else f"+{r['finish'] - chosen['finish']:.3g} s"
        ratio = (r["finish"] - t0) / span
        return f"{100 * (ratio - 1):+.0f} %" if ratio < 3 else f"{ratio:.3g}x as long"

    cls = g.task_class(chosen["task"])
    if len(cands) == 1:
        return f"the only device with a kernel for {cls or 'it'}"
    others = [r for r in cands if not r["chosen"]]
    if chosen["task"] in g.pins:
        best = cands[0]
        if best["chosen"]:
            return f"pinned (also the earliest finish; next best {others[0]['device']} {pct(others[0])})"
        return f"pinned; the free choice {best['device']}: {pct(best)}"
    if chosen is cands[0] or chosen["finish"] <= cands[0]["finish"]:
        return f"earliest finish of {len(cands)} candidates; next best {others[0]['device']} {pct(others[0])}"
    best = next(r for r in cands if r["allowed"])
    return f"placed by {s.strategy}, not by earliest finish; {best['device']} would finish it {pct(best)}"


def reasons(g: TaskGraph, s: Schedule) -> dict[Task, str]:
    """One line per task saying why it is on its device (earliest finish and the next best device,
    or its pin and what the free choice would have been)."""
    return {t: _reason(g, s, rows) for t, rows in _why_all(g, s).items()}


def transfer_rows(g: TaskGraph, s: Schedule) -> list[dict[str, Any]]:
    """Every transfer between two devices: producer, consumer, src, dst, start (the producer's
    finish), finish (its arrival), bytes (None when the graph's transfers are in seconds)."""
    out = []
    for (u, v), val in g.transfer.items():
        du, _, fu = s.slots[u]
        dv = s.slots[v][0]
        if du != dv:
            out.append({"producer": u, "consumer": v, "src": du, "dst": dv, "start": fu,
                        "finish": fu + g.transfer_time(u, v, du, dv),
                        "bytes": val if g.link_time is not None else None})
    return out


def plan_record(model: str, batch: int, strategy: str, pins: Mapping[Task, Device], s: Schedule) -> dict[str, Any]:
    """What a plan is kept as for a later comparison: its settings, makespan and busy time per device."""
    return {"model": model, "batch": int(batch), "strategy": strategy, "pins": dict(pins),
            "makespan": float(s.makespan), "busy": {d: float(b) for d, b in s.busy().items()}}


def compare_plans(base: Mapping[str, Any], now: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """A one-line summary of what changed between two :func:`plan_record`s and what it did to the
    makespan (e.g. "conv1 pinned to fpga: makespan +12.0 %"), and rows per device: busy time (s) in
    the baseline and now, and the change (s)."""
    changes = []
    if base["model"] != now["model"] or base["batch"] != now["batch"]:
        changes.append(f"model {base['model']} (batch {base['batch']}) -> {now['model']} (batch {now['batch']})")
    if base["strategy"] != now["strategy"]:
        changes.append(f"strategy {base['strategy']} -> {now['strategy']}")
    bp, np_ = base["pins"], now["pins"]
    changes += [f"{t} pinned to {d}" for t, d in np_.items() if bp.get(t) != d]
    changes += [f"{t} unpinned" for t in bp if t not in np_]
    rel = now["makespan"] / base["makespan"] - 1.0 if base["makespan"] > 0 else 0.0
    summary = f"{'; '.join(changes) or 'same settings'}: makespan {100 * rel:+.1f} %"
    devs = list(dict.fromkeys([*base["busy"], *now["busy"]]))
    rows = [{"device": d, "baseline": base["busy"].get(d, 0.0), "now": now["busy"].get(d, 0.0),
             "change": now["busy"].get(d, 0.0) - base["busy"].get(d, 0.0)} for d in devs]
    rows.append({"device": "makespan", "baseline": base["makespan"], "now": now["makespan"],
                 "change": now["makespan"] - base["makespan"]})
    return summary, rows


def model_task_graph(model: str, topology, batch_size: int = 32, speed: Mapping[str, float] | None = None,
                     merge_data_ops: bool = True) -> TaskGraph:
    """Trace a preset model at ``batch_size`` and cost it on ``topology``."""
    from lab.modelled.opgraph import trace

    return TaskGraph.from_model(trace(model, batch_size, merge_data_ops=merge_data_ops), topology, speed)


__all__ = ["TaskGraph", "Schedule", "greedy_eft", "heft", "optimal", "type_rule", "single_fastest",
           "round_robin", "even_split", "chain_dp", "chain_partition", "partition_chain", "ChainPlan",
           "schedule_assignment", "replay", "coarsen", "compare_strategies", "schedule_table", "device_usage",
           "upward_ranks", "STRATEGIES", "STRATEGY_LABELS", "run_strategy", "model_task_graph", "OPTIMAL_MAX_TASKS",
           "why", "reasons", "decision_order", "transfer_rows", "plan_record", "compare_plans"]
