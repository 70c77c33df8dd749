"""Which task runs on which device, and when: the generic scheduling core.

A :class:`TaskGraph` is a DAG of tasks with a compute time per (task, device) and a transfer cost
per edge; every strategy turns it into a :class:`PlacementSchedule` (``slots = {task: (device, start,
finish)}``, ``makespan``) that :meth:`PlacementSchedule.validate` can check.

**Transfers.** ``transfer = {(u, v): value}`` is paid when ``u`` and ``v`` run on different devices
(0 on the same device). Without ``link_time`` the value is in *seconds* and the same for every
device pair. With ``link_time(u_dev, v_dev, nbytes)`` the value is in *bytes* and the seconds
depend on the pair: ``TaskGraph.from_model`` uses this, with ``link_time`` a
:class:`lab.modelled.datasheet.LinkCost` (latency + bytes / bottleneck bandwidth of the route). Each edge is one
message; links have no contention (HEFT's model).

**Strategies** (all return a PlacementSchedule):

* :func:`greedy_eft` - greedy earliest finish: tasks in topological order (keeping the given order where
  dependencies allow); each goes to the device where it finishes first, counting the device's
  queue (appended at its end, no insertion) and the arrival of its inputs.
* :func:`heft` - HEFT (Topcuoglu et al. 2002): tasks by decreasing upward rank (mean compute over
  the devices that have a kernel, mean transfer over ordered pairs of distinct devices), each to
  the device of earliest finish, inserted into an idle gap when one is long enough.
* :func:`optimal` - the exact minimum makespan by branch and bound, up to ``max_tasks`` (12).
* baselines: :func:`type_rule` (the CXL design's rule by device type: linear -> GPU, convolution ->
  FPGA, activation -> ASIC or DPU, the rest -> host, else the fastest device with a kernel), :func:`single_fastest`,
  :func:`round_robin`, :func:`even_split` (contiguous equal layer counts, or with ``rounds`` several stretches per
  device going round the devices: :func:`even_rounds`, the plan interleaved 1F1B runs), and :func:`chain_dp`
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

import hashlib
import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np

from lab.errors import LabError
from lab.modelled.costmodel import DATASHEET, CostModel
from lab.modelled.datasheet import LinkCost

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
    def from_model(cls, graph, topology, speed: Mapping[str, float] | None = None,
                   model: CostModel | None = None) -> "TaskGraph":
        """Tasks = the operators of an :class:`lab.modelled.opgraph.OpGraph`; times from ``model``
        (:mod:`lab.modelled.costmodel`; the datasheet model when none is given).

        compute = the model's seconds of the operator on the device / its ``speed`` factor; transfer =
        the producer's output bytes over the route between the two devices (``LinkCost``);
        memory = parameter + output activation bytes; capacity = device memory.
        """
        model = model or DATASHEET
        comp = model.compute_table(graph, topology, speed)
        missing = [op for op in graph.ops if not any(math.isfinite(s) for s in comp[op.name].values())]
        if missing:
            op = missing[0]
            raise LabError(f"no device of topology {topology.name!r} has a {op.op_class!r} kernel, which "
                           f"operator {op.name!r} ({op.kind}) needs", where="placement")
        return cls(comp, {(u, v): b for u, v, b in graph.edges}, model.link_cost(topology),
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

    def fingerprint(self) -> str | None:
        """A digest of everything a strategy reads from this graph (tasks, devices, compute times with and without
        the pins, transfers, the link matrices, task information, memory and capacities), so that two sessions'
        graphs built from equal inputs share one strategy comparison; None when the link cost is a function whose
        numbers the digest cannot see."""
        lt = self.link_time
        if lt is not None and not isinstance(lt, LinkCost):
            return None
        h = hashlib.sha256()
        for part in (self.tasks, self.devices, list(self.transfer.items()), self.info, self.device_types,
                     list(self.pins.items()), type(lt).__name__, getattr(lt, "names", None)):
            h.update(repr(part).encode())
            h.update(b"\0")
        for arr in (self.C, self.free_C, self.memory, self.capacity,
                    *((lt.latency, lt.inv_bandwidth) if lt is not None else ())):
            h.update(repr(arr.shape).encode())
            h.update(np.ascontiguousarray(arr, dtype=float).tobytes())
        return h.hexdigest()

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
class PlacementSchedule:
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

    def validate(self, g: TaskGraph, rel_tol: float = 1e-9) -> "PlacementSchedule":
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
                 note: str = "", extra: Mapping | None = None) -> PlacementSchedule:
    slots = {g.tasks[i]: (g.devices[dev[i]], float(start[i]), float(fin[i])) for i in range(len(g.tasks))}
    return PlacementSchedule(name, slots, float(max(fin)), note, dict(extra or {}))
