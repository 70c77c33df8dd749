"""A placement run: every operator of a model runs on the device a placement plan puts it on, one
process per device, and a batch is pipelined through them in micro-batches.

**The plan.** The scenario's ``training.placement`` names every operator's device (the Placement page
fills it with its plan); when it is empty, :func:`resolve` makes the plan with the scenario's strategy,
its pins and the datasheet cost model (:mod:`lab.modelled.placement`). One process per device the plan
uses, ranked in the order of each device's first operator.

**Pieces.** The model is traced with torch.fx (the same trace as the operator graph) and cut by
``torch.fx.passes.split_module`` into pieces: maximal runs of consecutive nodes, in the graph's
topological order, on one device. A plan that goes A -> B -> A becomes three pieces A, B, A. Pieces
numbered in topological order cannot form a cycle between processes, which is what keeps a run free
of deadlock: every process runs its own pieces in that order, sends never block (``isend``), and a
receive only ever waits for a piece with a smaller number (forward) or a larger one (backward). Nodes
the operator graph does not count (shape arithmetic, a reshape of the model input) go with the node
that uses them. Every process has the data: the loader puts each batch wherever its first operators
run, and the labels where the loss is.

**One step (GPipe).** The batch is cut into ``micro_batches`` parts. Forward: each process runs its
pieces in order, each for every micro-batch, sending each output that a piece on another device reads
as soon as it exists. The piece that makes the model's output adds the loss (cross-entropy summed over
the micro-batch, divided by the whole batch, so the micro-batches add up to the batch's mean loss).
Backward: each process runs its pieces in reverse order, each for every micro-batch, and sends the
gradient of every input that came from another device back to it. Then each process's optimiser
steps its own pieces' parameters. A one-process run with the same micro-batches computes the same
numbers (BatchNorm, as in GPipe, sees one micro-batch at a time).

**Emulated devices and links.** With ``training.emulate`` an operator on a device that the topology
says is ``s`` times slower than its fastest device for the operator's class waits ``(s - 1)`` times
its own measured time (the rule of the data-parallel emulation, per operator class); a backward
pass waits by the same rule, with its piece's operators weighted by their forward times. A tensor
between two devices arrives no sooner than the topology's link time for its bytes after it was sent
(the receiver waits the rest). Both are recorded as emulated.

**One clock.** Every process stamps with ``time.perf_counter``, which on Linux reads the machine-wide
monotonic clock; the offset of each process from rank 0 is still estimated at the start (the
round trip with the least delay, NTP's rule) and subtracted, so a run whose processes read different
clocks is drawn on one axis too. The offsets and their uncertainty (half the round trip) are kept with
the run; an estimate smaller than its uncertainty (as between processes of one machine, which share
the clock) is not applied.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.fx as fx
import torch.nn.functional as F
from torch.fx.passes.split_module import split_module

from lab.comm.peers import waits_for_peers
from lab.errors import LabError
from lab.modelled.balance import MAX_ROUNDS, PLANNERS, device_work, model_loop, weighted_plan
from lab.modelled.costmodel import DATASHEET, catalogue_slowdown
from lab.modelled.opgraph import OpGraph, trace
from lab.modelled.placement import TaskGraph, plan_assignment, schedule_assignment
from lab.modelled.placement.cores import rank_cores
from lab.modelled.placement.executor import Stage
from lab.modelled.placement.executor import messages as executor_messages
from lab.optim.optimizers import from_training as optim_from_training
from lab.scenario.document import Scenario
from lab.scenario.models import build_model
from lab.store.runs import JOB_WORKER
from lab.train import data as data_mod
from lab.train import resilience as rz
from lab.train.trainer import Trainer

MAX_STAGES = 8  # processes of one placement run
INPUT = ("input",)  # a piece input that is the model input
FWD, BWD = 0, 1


# ----- the plan -----------------------------------------------------------------------------------

@dataclass
class StagePlan:
    """What every process works out, identically, before the first step."""

    assignment: dict[str, str]  # operator -> device
    devices: list[str]  # rank -> device
    graph: OpGraph
    tasks: TaskGraph
    schedule: object  # the strategy's modelled schedule of one pass (lab.modelled.placement.PlacementSchedule)
    note: str | None = None
    op_class: dict[str, str] = field(default_factory=dict)


def model_for(sc: Scenario):
    """The data set and the scenario's model (same seed as a data-parallel run)."""
    tr = sc.training
    ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
    model = build_model(tr.model, ds.in_features, ds.classes, seed=tr.seed)
    return ds, model


def resolve(sc: Scenario, model: torch.nn.Module, in_features: int) -> StagePlan:
    """The plan of a placement run: the scenario's own (``training.placement``), else the scenario's
    strategy with its pins on the datasheet model, for the whole batch."""
    tr = sc.training
    og = trace(model, tr.batch_size, in_features, name=tr.model)
    g = TaskGraph.from_model(og, sc.topology, model=DATASHEET).with_pins(dict(tr.pins))
    note = None
    if tr.placement:
        assignment = dict(tr.placement)
        unknown = sorted(set(assignment) - set(og.names))
        missing = [op for op in og.names if op not in assignment]
        if unknown or missing:
            raise LabError(f"the plan does not fit model {tr.model!r}: " + "; ".join(
                part for part in (f"it names operators the model does not have ({', '.join(unknown[:5])})" if unknown
                                  else "", f"it places no device for {', '.join(missing[:5])}" if missing else "")
                if part), where="training.placement")
        for op, dev in assignment.items():
            if dev not in g.devices:
                raise LabError(f"the plan puts {op!r} on {dev!r}, which is not a device of the topology",
                               where="training.placement")
            if not g.can_run(op, dev):
                raise LabError(f"the plan puts {op!r} ({g.task_class(op)}) on {dev!r}, which has no kernel for it"
                               + (" or the operator is pinned elsewhere" if op in g.pins else ""),
                               where="training.placement")
        schedule = schedule_assignment(g, assignment, strategy=tr.strategy)
    else:
        assignment, schedule, _, note = plan_assignment(g, tr.strategy)
    devices: list[str] = []
    if tr.balance != "off":  # the plan moves between rounds: every device of the topology has its process
        devices = list(g.devices)
        if len(devices) > MAX_STAGES:
            raise LabError(f"the topology has {len(devices)} devices; a balancing run starts one process per device "
                           f"(its plan may use any of them) and runs at most {MAX_STAGES}", where="training.balance")
    for op in og.names:
        if assignment[op] not in devices:
            devices.append(assignment[op])
    if len(devices) > MAX_STAGES:
        raise LabError(f"the plan uses {len(devices)} devices; a placement run starts one process per device and "
                       f"runs at most {MAX_STAGES}", where="training.placement")
    return StagePlan(assignment, devices, og, g, schedule, note, {op.name: op.op_class for op in og.ops})


def replanned(plan: StagePlan, assignment: dict[str, str], schedule) -> StagePlan:
    """The same run's plan with every operator on the device ``assignment`` names (a balancing round's)."""
    return StagePlan(dict(assignment), plan.devices, plan.graph, plan.tasks, schedule, plan.note, plan.op_class)


def resolved(sc: Scenario) -> Scenario:
    """The scenario with its plan written out (``training.placement``), as every process will run it."""
    tr = sc.training
    if tr.parallel != "placement" or tr.placement:
        return sc
    ds, model = model_for(sc)
    plan = resolve(sc, model, ds.in_features)
    return sc.replace(training=tr.replace(placement=plan.assignment))


def stage_devices(sc: Scenario) -> list[str]:
    """The devices of a placement run by rank (the order of each device's first operator in the model)."""
    ds, model = model_for(sc)
    return resolve(resolved(sc), model, ds.in_features).devices


def stage_count(sc: Scenario) -> int:
    """Processes a placement run starts: one per device of its plan (the plan written out first), or with the
    balancing loop one per device of the topology."""
    if sc.training.balance != "off":
        return len(sc.topology.devices)
    return len(set(dict(sc.training.placement).values())) if sc.training.placement else \
        len(set(dict(resolved(sc).training.placement).values()))


def check_placement(sc: Scenario) -> StagePlan:
    """Everything a placement run would refuse, checked before any process starts."""
    tr = sc.training
    if tr.compression.kind != "none":
        raise LabError("a placement run sends activations and gradients between its devices, not a gradient "
                       "all-reduce, so compression does not apply; set compression to none",
                       where="training.compression")
    if tr.sync != "allreduce":
        raise LabError("a placement run has no replicas to synchronise; keep sync at its default",
                       where="training.sync")
    if tr.fault_policy != "fail":
        raise LabError("a placement run cannot continue without one of its devices (each holds different operators); "
                       "use the fault policy 'fail'", where="training.fault_policy")
    if tr.micro_batches > tr.batch_size:
        raise LabError(f"{tr.micro_batches} micro-batches need a batch of at least as many samples "
                       f"(the batch is {tr.batch_size})", where="training.micro_batches")
    if tr.balance != "off":
        if tr.strategy not in PLANNERS:
            raise LabError("the balancing loop re-plans every round with greedy earliest finish or HEFT; choose one "
                           f"of them as the strategy (got {tr.strategy})", where="training.strategy")
        if tr.round_steps > tr.steps:
            raise LabError(f"a balancing round is {tr.round_steps} steps but the run has {tr.steps}; give it at least "
                           "one round", where="training.round_steps")
    ds, model = model_for(sc)
    plan = resolve(sc, model, ds.in_features)
    pieces(model, plan)
    return plan


# ----- pieces -------------------------------------------------------------------------------------

@dataclass
class Piece:
    index: int
    device: str
    module: fx.GraphModule
    ops: list[str]
    inputs: list = field(default_factory=list)  # INPUT or (source piece, output index)
    outputs: int = 1
    single: bool = True  # the module returns one value, not a tuple
    readers: dict = field(default_factory=dict)  # output index -> [(piece, input position)]


def node_devices(gm: fx.GraphModule, plan: StagePlan) -> dict[str, str]:
    """Device of every computing fx node: its operator's, or (not an operator: shape arithmetic, a reshape
    of the input, an attribute) the device of the first node that uses it."""
    owner = {}
    for op in plan.graph.ops:
        owner[op.name] = op.name
        for a in op.absorbed:
            owner[a] = op.name
    out: dict[str, str] = {}
    for n in reversed(list(gm.graph.nodes)):
        if n.op in ("placeholder", "output"):
            continue
        if n.name in owner:
            out[n.name] = plan.assignment[owner[n.name]]
        else:
            users = [u for u in n.users if u.op != "output"]
            out[n.name] = out[users[0].name] if users else plan.devices[-1]
    return out


def pieces(model: torch.nn.Module, plan: StagePlan) -> tuple[list[Piece], tuple[int, int]]:
    """The model cut into pieces per device in topological order, and where its output comes from
    (piece, output index)."""
    gm = fx.symbolic_trace(model)
    dev = node_devices(gm, plan)
    index: dict[str, int] = {}
    devs: list[str] = []
    for n in gm.graph.nodes:
        if n.name in dev:
            if not devs or dev[n.name] != devs[-1]:
                devs.append(dev[n.name])
            index[n.name] = len(devs) - 1
    split = split_module(gm, model, lambda n: index[n.name])
    ops_of = {op.name: op for op in plan.graph.ops}
    out = [Piece(k, d, getattr(split, f"submod_{k}"), []) for k, d in enumerate(devs)]
    for n in gm.graph.nodes:
        if n.name in ops_of:
            out[index[n.name]].ops.append(n.name)
    ref: dict[fx.Node, tuple] = {}
    final = None
    for n in split.graph.nodes:
        if n.op == "placeholder":
            ref[n] = INPUT
        elif n.op == "call_module":
            k = int(str(n.target).rsplit("_", 1)[1])
            out[k].inputs = [ref[a] for a in n.args]
            ref[n] = (k, None)
        elif n.op == "call_function" and n.target.__name__ == "getitem":
            k, _ = ref[n.args[0]]
            out[k].single = False
            ref[n] = (k, int(n.args[1]))
        elif n.op == "output":
            final = ref[n.args[0]]
        else:
            raise LabError(f"the cut model has a step the executor does not know: {n.format_node()}", where="placement")
    for p in out:
        p.inputs = [r if r is INPUT else (r[0], r[1] or 0) for r in p.inputs]
        for pos, r in enumerate(p.inputs):
            if r is not INPUT:
                src = out[r[0]]
                src.outputs = max(src.outputs, r[1] + 1)
                src.readers.setdefault(r[1], []).append((p.index, pos))
    return out, (final[0], final[1] or 0)


def step_stages(cut: list[Piece], final: tuple[int, int], nbytes: dict | None = None) -> list[Stage]:
    """The pieces as the executor model takes them (:class:`lab.modelled.placement.executor.Stage`), with no
    costs yet: their operators, what each reads (with ``nbytes[(piece, output)]`` bytes, 0 without) and the
    loss piece."""
    return [Stage(p.index, p.device, tuple((op, 0.0, 1.0) for op in p.ops), 0.0,
                  tuple((r[0], r[1], float((nbytes or {}).get((r[0], r[1]), 0.0))) for r in p.inputs if r is not INPUT),
                  loss=p.index == final[0]) for p in cut]


def placed_cpus(sc: Scenario, cpus: list[int]) -> list[int | None]:
    """The core of each rank of a placement run given the job's cores ``cpus`` (the job manager's turns), or None
    for a rank left to the kernel, by :data:`lab.modelled.placement.cores.DEFAULT_RANK_POLICY`
    (:func:`lab.modelled.placement.cores.rank_cores`; bench_pinning.py measured the policies side by side)."""
    distinct = list(dict.fromkeys(cpus))
    ds, model = model_for(sc)
    plan = resolve(sc, model, ds.in_features)
    cut, final = pieces(model, plan)
    weights = executor_messages(step_stages(cut, final), plan.devices, sc.training.micro_batches)
    return [None if c is None else distinct[c] for c in rank_cores(len(plan.devices), len(distinct), weights)]


# ----- emulation ----------------------------------------------------------------------------------

def op_scales(sc: Scenario, plan: StagePlan) -> dict[str, float]:
    """How many times slower than the topology's fastest device for its class each operator's device is, times
    the scenario's extra slowdown of that device."""
    topo, slow = sc.topology, dict(sc.training.slowdown)
    return {op: catalogue_slowdown(topo, topo.device(plan.assignment[op]), cls) * slow.get(plan.assignment[op], 1.0)
            for op, cls in plan.op_class.items()}


def link_wait(sc: Scenario, src: str, dst: str, nbytes: float) -> float:
    """The topology's time for ``nbytes`` from device ``src`` to ``dst`` (the emulated link)."""
    return 0.0 if src == dst else float(sc.topology.transfer_time(src, dst, nbytes))


# ----- the clock ----------------------------------------------------------------------------------

def clock_offsets(rank: int, world: int, rounds: int = 8) -> tuple[float, float]:
    """This process's clock minus rank 0's, and its uncertainty (half the least round trip), NTP's way."""
    if world == 1:
        return 0.0, 0.0
    best = (math.inf, 0.0)
    buf = torch.zeros(2, dtype=torch.float64)
    for r in range(1, world):
        for _ in range(rounds):
            if rank == 0:
                buf[0] = time.perf_counter()
                dist.send(buf, r)
                dist.recv(buf, r)
            elif rank == r:
                dist.recv(buf, 0)
                t1 = time.perf_counter()
                t0 = float(buf[0])
                buf[0], buf[1] = t1, time.perf_counter()
                dist.send(buf, 0)
                dist.recv(buf, 0)
                t3 = float(buf[0])
                rtt = (t3 - t0) - (float(buf[1]) - t1)
                if rtt < best[0]:
                    best = (rtt, ((t1 - t0) + (float(buf[1]) - t3)) / 2)
            if rank == 0:
                buf[0] = time.perf_counter()
                dist.send(buf, r)
    if rank == 0:
        return 0.0, 0.0
    # One machine's processes share its clock: an estimate within its own uncertainty is noise, not an offset.
    return (best[1] if abs(best[1]) > best[0] / 2 else 0.0), best[0] / 2


# ----- the process --------------------------------------------------------------------------------

class _Timed(fx.Interpreter):
    """Runs a piece node by node and stamps each operator from its first node (nodes it does not own but
    that come before it, such as shape arithmetic, included) to its last, then adds its emulated wait."""

    def __init__(self, run: "PlacementTrainer", piece: Piece, micro: int):
        super().__init__(piece.module)
        self.run_, self.piece, self.micro = run, piece, micro
        self.last = {}
        for n in piece.module.graph.nodes:
            if run.owner.get(n.name) is not None:
                self.last[run.owner[n.name]] = n.name
        self.opened: float | None = None

    def run_node(self, n: fx.Node):
        if n.op in ("placeholder", "output", "get_attr"):
            return super().run_node(n)
        if self.opened is None:
            self.opened = time.perf_counter()
        out = super().run_node(n)
        op = self.run_.owner.get(n.name)
        if op is not None and self.last.get(op) == n.name:
            self.run_.op_done(self.piece, self.micro, op, self.opened, time.perf_counter())
            self.opened = None
        return out

    def run(self, *args):
        out = super().run(*args)
        if self.opened is not None:  # nodes after the piece's last operator
            self.run_.op_done(self.piece, self.micro, None, self.opened, time.perf_counter())
            self.opened = None
        return out


class PlacementTrainer(Trainer):
    """One process of a placement run; the rank entry (:func:`lab.train.rank.run_rank`), the heartbeat,
    the injected faults and the store are the data-parallel job's."""

    dtype = torch.float32

    def setup(self) -> None:
        sc = self.sc
        self.tr = tr = sc.training
        if tr.micro_batches > tr.batch_size:
            raise LabError(f"{tr.micro_batches} micro-batches need a batch of at least as many samples",
                           where="training.micro_batches")
        self.ds, self.model = self.build()
        self.plan = plan = resolve(sc, self.model, self.ds.in_features)  # traced in float32, as the Placement page
        self.model.to(self.dtype)
        if len(plan.devices) != self.world:
            raise LabError(f"the plan uses {len(plan.devices)} devices ({', '.join(plan.devices)}) but "
                           f"{self.world} processes were started; start one per device", where="placement")
        self.device = plan.devices[self.rank]
        self.rank_of = {d: r for r, d in enumerate(plan.devices)}
        self.owner = {}
        for op in plan.graph.ops:
            self.owner[op.name] = op.name
            for a in op.absorbed:
                self.owner[a] = op.name
        self.cut(plan)
        self.sampler = data_mod.worker_data(self.ds, 0, 1, "even", tr.batch_size, seed=tr.seed)
        self.n = 1
        self.records: list[list[float]] = []
        self.history = {}
        self._writer, self._pending = None, []
        self.timeline_steps = sorted({min(2, tr.steps), max(1, tr.steps // 2), tr.steps})
        self.balancing = tr.balance != "off"
        self.loop, self.round_recs = None, []
        if self.balancing:  # each round's last step is drawn; rank 0 keeps the loop's book
            rounds = max(1, min(MAX_ROUNDS, tr.steps // tr.round_steps))
            self.timeline_steps = sorted({tr.round_steps * k for k in range(1, rounds + 1)} | {tr.steps})
            if self.rank == 0:
                self.loop = model_loop(plan.tasks, tr.balance, tolerance=tr.balance_tolerance,
                                       patience=tr.balance_patience, max_rounds=rounds)
        self.compressed = None
        self._overslept = 0.0

    def build(self) -> tuple:
        """The data set and the model this process runs (the calibration runs its own networks here)."""
        return model_for(self.sc)

    def cut(self, plan: StagePlan) -> None:
        """Hold the pieces ``plan`` puts on this process's device, and an optimiser for their parameters."""
        self.plan = plan
        self.pieces, self.final = pieces(self.model, plan)
        self.mine = [p for p in self.pieces if p.device == self.device]
        params, seen = [], set()
        for p in self.mine:
            for q in p.module.parameters():
                if id(q) not in seen:
                    seen.add(id(q))
                    params.append(q)
        self.params = params
        self.opt = optim_from_training(self.tr, params, self.tr.lr) if params else None
        self.scales = op_scales(self.sc, plan) if self.tr.emulate else {}
        self._shapes = {}

    def replan(self, assignment: dict[str, str], schedule) -> None:
        """Move to a balancing round's new plan: every process sends what it held (parameters, buffers, the
        optimiser's state of its pieces) to every other, so each holds the whole model as it stands and the new
        owner of an operator continues its optimiser exactly where the old one stopped."""
        held = {id(q) for p in self.mine for q in p.module.parameters()}
        held_buffers = {id(b) for p in self.mine for b in p.module.buffers()}
        mine: dict = {"params": {}, "buffers": {}, "state": {}}
        for name, q in self.model.named_parameters():
            if id(q) in held:
                mine["params"][name] = q.detach().clone()
                if self.opt is not None and self.opt.state.get(q):
                    mine["state"][name] = {k: v.clone() if torch.is_tensor(v) else v
                                           for k, v in self.opt.state[q].items()}
        for name, b in self.model.named_buffers():
            if id(b) in held_buffers:
                mine["buffers"][name] = b.detach().clone()
        everyone: list = [None] * self.world
        if self.world > 1:
            dist.all_gather_object(everyone, mine)
        else:
            everyone = [mine]
        state: dict = {}
        with torch.no_grad():
            named_params, named_buffers = dict(self.model.named_parameters()), dict(self.model.named_buffers())
            for part in everyone:
                for name, v in part["params"].items():
                    named_params[name].copy_(v)
                for name, v in part["buffers"].items():
                    named_buffers[name].copy_(v)
                state.update(part["state"])
        self.cut(replanned(self.plan, assignment, schedule))
        if self.opt is not None:
            by_id = {id(q): name for name, q in self.model.named_parameters()}
            for q in self.params:
                if by_id[id(q)] in state:
                    self.opt.state[q] = state[by_id[id(q)]]

    def end_round(self, step: int) -> bool:
        """A balancing round ends at ``step``: every device's busy time and the step time, measured over the
        round's steps after its first (the warm-up of a new plan), go into rank 0's loop, which re-plans with the
        new weights; every process takes that plan. True when the loop is done (the run ends)."""
        recs = self.gather(self.round_recs)
        self.round_recs = []
        n = len(recs[0])
        use = range(1, n) if n > 1 else range(n)
        span = sum(max(r[j][7] for r in recs) - min(r[j][6] for r in recs) for j in use) / len(use)
        busy = [sum(r[j][2] + r[j][4] for j in use) / len(use) for r in recs]  # compute + emulated compute
        decision: list = [None]
        if self.rank == 0:
            g, loop = self.plan.tasks, self.loop
            before = tuple(self.plan.assignment[t] for t in g.tasks)
            rnd = loop.observe(before, busy, device_work(g, before), span)
            new = None
            if not loop.done:
                sched = weighted_plan(g, loop.weights, self.tr.strategy)
                new = ({t: sched.slots[t][0] for t in g.tasks}, sched)
            decision = [{"done": loop.done, "new": new}]
            self.rounds_info.append({
                "round": rnd.round, "step": step, "weights": list(rnd.weights), "busy": list(rnd.busy),
                "waits": list(rnd.waits), "round_time": rnd.round_time, "imbalance": rnd.imbalance,
                "good_enough": rnd.good_enough, "changes": rnd.changes, "unchanged": rnd.unchanged,
                "plan": list(before)})
            if self.store is not None:
                self._write(self.store.merge_info, self.run_id, {"balance": {
                    "rule": self.tr.balance, "nodes": list(self.plan.devices), "tasks": list(g.tasks),
                    "rounds": self.rounds_info, "done": loop.done, "converged": loop.converged,
                    "reason": loop.reason}, "placement": dict(new[0]) if new else dict(self.plan.assignment)})
        if self.world > 1:
            dist.broadcast_object_list(decision, src=0)
        d = decision[0]
        if d["new"] is not None and d["new"][0] != self.plan.assignment:
            self.replan(*d["new"])
        return d["done"]

    # ----- sending and receiving ------------------------------------------------------------------
    def _tag(self, piece: int, out: int, micro: int, way: int) -> int:
        return ((piece * 16 + out) * 2 + way) * 256 + micro

    def _stamp(self) -> torch.Tensor:
        """The send time, in the payload's own dtype: float32 holds it as two parts (high and the rest)."""
        now = time.perf_counter()
        if self.dtype == torch.float64:
            return torch.tensor([now], dtype=torch.float64)
        hi = torch.tensor([now], dtype=torch.float32)
        return torch.cat([hi, torch.tensor([now - float(hi)], dtype=torch.float32)])

    def _send(self, t: torch.Tensor, dst_rank: int, tag: int) -> None:
        """One message: the tensor, then its send time (the receiver knows the shape)."""
        flat = torch.cat([t.detach().reshape(-1).to(self.dtype), self._stamp()])
        self.handles.append(dist.isend(flat, dst_rank, tag=tag))
        self.keep.append(flat)
        self.stats["sent"] += t.numel() * t.element_size()

    def shape_of(self, piece: int, out: int, rows: int) -> torch.Size:
        """Shape of a piece's output for a micro-batch of ``rows`` samples: the pieces run once on zeros."""
        key = (piece, out, rows)
        if key not in self._shapes:
            vals: dict = {}
            x = torch.zeros(rows, self.ds.in_features, dtype=self.dtype)
            was = self.model.training
            self.model.eval()  # no BatchNorm statistics move
            try:
                with torch.no_grad():
                    for p in self.pieces:
                        res = p.module(*[x if r is INPUT else vals[r[0]][r[1]] for r in p.inputs])
                        vals[p.index] = (res,) if p.single else tuple(res)
                        for o, v in enumerate(vals[p.index]):
                            self._shapes[(p.index, o, rows)] = v.shape
            finally:
                self.model.train(was)
        return self._shapes[key]

    @waits_for_peers
    def _recv(self, src_piece: Piece, out: int, micro: int, way: int, dst_piece: int, shape) -> torch.Tensor:
        src_rank = self.rank_of[src_piece.device] if way == FWD else self.rank_of[self.pieces[dst_piece].device]
        tag = self._tag(src_piece.index, out, micro, way)
        t0 = time.perf_counter()
        extra = 1 if self.dtype == torch.float64 else 2
        flat = torch.empty(math.prod(shape) + extra, dtype=self.dtype)
        dist.recv(flat, src_rank, tag=tag)
        t1 = time.perf_counter()
        t = flat[:-extra].view(shape)
        sent = float(flat[-1]) if extra == 1 else float(flat[-2]) + float(flat[-1])
        nbytes = t.numel() * t.element_size()
        wait = link = 0.0
        src_dev = src_piece.device if way == FWD else self.pieces[dst_piece].device
        if self.tr.emulate:
            link = link_wait(self.sc, src_dev, self.device, nbytes)
            due = sent + link
            wait = max(0.0, due - t1)
            if wait > 0:
                self.emulated_wait(wait)
        t2 = time.perf_counter()
        self.stats["comm"] += t1 - t0
        self.stats["emul_comm"] += t2 - t1
        self.stats["recv"] += nbytes
        self.event(kind="activation" if way == FWD else "gradient", src=src_dev, dst=self.device,
                   piece=(dst_piece if way == FWD else src_piece.index), micro=micro, start=sent, end=t2,
                   bytes=nbytes, wait=wait, link=link, op=None, called=t0)
        return t

    # ----- timing ---------------------------------------------------------------------------------
    def event(self, **row) -> None:
        if self.timing:
            row.setdefault("device", self.device)
            row["rank"] = self.rank
            self.events.append(row)

    def op_done(self, piece: Piece, micro: int, op: str | None, t0: float, t1: float) -> None:
        """An operator (or a node it absorbs) ran from t0 to t1: record it and wait its emulated extra time."""
        self.fwd_time[(piece.index, micro)][op] = self.fwd_time[(piece.index, micro)].get(op, 0.0) + (t1 - t0)
        self.event(kind="forward", op=op, piece=piece.index, micro=micro, start=t0, end=t1)
        s = self.scales.get(op, 1.0)
        if s > 1.0:
            wait = (s - 1.0) * (t1 - t0)
            self.stats["emul_compute"] += wait
            self.emulated_wait(wait)
            self.event(kind="emulated", op=op, piece=piece.index, micro=micro, start=t1, end=time.perf_counter(),
                       wait=wait)

    def emulated_wait(self, wait: float) -> None:
        """Wait ``wait`` seconds of emulated time. A sleep overshoots by tens of microseconds, many times the
        wait of a small operator, so what it overshot is owed back: the next waits are shorter by it, and over a
        step the emulated time adds up to the topology's numbers."""
        target = wait - self._overslept
        if target <= 0:
            self._overslept = -target
            return
        t0 = time.perf_counter()
        time.sleep(target)
        self._overslept = time.perf_counter() - t0 - target

    def backward_scale(self, piece: Piece, micro: int) -> float:
        """The emulated slowdown of a piece's backward pass: its operators' scales weighted by their forward times."""
        times = self.fwd_time.get((piece.index, micro), {})
        total = sum(times.values())
        if not self.scales or total <= 0:
            return 1.0
        return sum(self.scales.get(op, 1.0) * t for op, t in times.items()) / total

    # ----- one step ---------------------------------------------------------------------------------
    def run_piece(self, piece: Piece, micro: int, ins: list) -> tuple:
        self.fwd_time[(piece.index, micro)] = {}
        if self.timing or self.scales:
            out = _Timed(self, piece, micro).run(*ins)
        else:
            t0 = time.perf_counter()
            out = piece.module(*ins)
            self.fwd_time[(piece.index, micro)][None] = time.perf_counter() - t0
        return (out,) if piece.single else tuple(out)

    def step_placement(self, x: torch.Tensor, y: torch.Tensor, *, train: bool = True) -> dict:
        """Forward (and with ``train``, backward and the optimiser) of one batch through the pipeline."""
        tr = self.tr
        M = tr.micro_batches if train else 1
        xs, ys = x.tensor_split(M), y.tensor_split(M)
        B = x.shape[0]
        acts: dict = {}
        leaves: dict = {}
        received: dict = {}
        loss_total, correct = 0.0, 0
        losses = {}
        self.handles, self.keep = [], []
        self.fwd_time = {}
        clock = time.perf_counter
        compute = 0.0
        with torch.set_grad_enabled(train):
            for p in self.mine:
                for m in range(M):
                    ins = []
                    for r in p.inputs:
                        if r is INPUT:
                            ins.append(xs[m])
                            continue
                        src = self.pieces[r[0]]
                        if src.device == self.device:
                            v = acts[(src.index, m)][r[1]]
                        else:
                            key = (src.index, r[1], m)
                            if key not in received:
                                received[key] = self._recv(src, r[1], m, FWD, p.index,
                                                           self.shape_of(src.index, r[1], xs[m].shape[0]))
                            v = received[key]
                        v = v.detach()
                        if train and v.is_floating_point():
                            v.requires_grad_(True)
                        ins.append(v)
                    t0 = clock()
                    out = self.run_piece(p, m, ins)
                    compute += clock() - t0
                    acts[(p.index, m)], leaves[(p.index, m)] = out, ins
                    for o, readers in p.readers.items():
                        for dev in dict.fromkeys(self.pieces[k].device for k, _ in readers):
                            if dev != self.device:
                                self._send(out[o], self.rank_of[dev], self._tag(p.index, o, m, FWD))
                    if p.index == self.final[0]:
                        t0 = clock()
                        logits = out[self.final[1]]
                        loss = F.cross_entropy(logits, ys[m], reduction="sum") / B
                        losses[m] = loss
                        loss_total += float(loss.detach())
                        correct += int((logits.argmax(1) == ys[m]).sum())
                        t1 = clock()
                        compute += t1 - t0
                        self.event(kind="loss", op=None, piece=p.index, micro=m, start=t0, end=t1)
        if train:
            compute += self.backward(M, acts, leaves, losses)
            t0 = clock()
            if self.opt is not None:
                self.opt.step()
                self.opt.zero_grad(set_to_none=False)
            t1 = clock()
            compute += t1 - t0
            self.event(kind="optimizer", op=None, piece=-1, micro=-1, start=t0, end=t1)
        for h in self.handles:
            h.wait()
        self.handles, self.keep = [], []
        return {"loss": loss_total, "correct": correct, "compute": compute}

    def backward(self, M: int, acts: dict, leaves: dict, losses: dict) -> float:
        clock = time.perf_counter
        grad: dict = {}  # (piece, output, micro) -> gradient summed over its readers on this device
        remote: dict = {}  # (piece, output, micro) -> gradient for a tensor received from another device
        last_reader: dict = {}  # (piece, output) from another device -> the smallest local piece reading it
        for p in self.mine:
            for r in p.inputs:
                if r is not INPUT and self.pieces[r[0]].device != self.device:
                    last_reader[tuple(r)] = min(last_reader.get(tuple(r), p.index), p.index)
        compute = 0.0
        for p in reversed(self.mine):
            for m in range(M):
                outs, grads = [], []
                for o in range(p.outputs):
                    g = grad.pop((p.index, o, m), None)
                    for dev in dict.fromkeys(self.pieces[k].device for k, _ in p.readers.get(o, [])):
                        if dev != self.device:
                            k0 = min(k for k, _ in p.readers[o] if self.pieces[k].device == dev)
                            got = self._recv(p, o, m, BWD, k0, acts[(p.index, m)][o].shape)
                            g = got if g is None else g + got
                    if g is not None and acts[(p.index, m)][o].requires_grad:
                        outs.append(acts[(p.index, m)][o])
                        grads.append(g)
                if p.index == self.final[0]:
                    outs.append(losses[m])
                    grads.append(None)
                t0 = clock()
                if outs:
                    torch.autograd.backward(outs, grads)
                t1 = clock()
                compute += t1 - t0
                self.event(kind="backward", op=None, piece=p.index, micro=m, start=t0, end=t1)
                s = self.backward_scale(p, m)
                if s > 1.0:
                    wait = (s - 1.0) * (t1 - t0)
                    self.stats["emul_compute"] += wait
                    self.emulated_wait(wait)
                    self.event(kind="emulated", op=None, piece=p.index, micro=m, start=t1, end=clock(), wait=wait)
                for r, leaf in zip(p.inputs, leaves[(p.index, m)]):
                    if r is INPUT:
                        continue
                    g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
                    key = (r[0], r[1], m)
                    if self.pieces[r[0]].device == self.device:
                        grad[key] = g if key not in grad else grad[key] + g
                    else:
                        remote[key] = g if key not in remote else remote[key] + g
                        if last_reader[tuple(r)] == p.index:
                            src = self.pieces[r[0]]
                            self._send(remote.pop(key), self.rank_of[src.device], self._tag(src.index, r[1], m, BWD))
        return compute

    # ----- the loop -------------------------------------------------------------------------------
    def evaluate(self) -> float:
        """Test accuracy through the pipeline (every process takes part; the loss process knows it)."""
        self.model.eval()
        self.timing = False
        try:
            r = self.step_placement(self.ds.x_test.to(self.dtype), self.ds.y_test, train=False)
        finally:
            self.model.train()
        acc = torch.tensor([r["correct"] / len(self.ds.y_test) if self.device == self.pieces[self.final[0]].device
                            else -1.0], dtype=torch.float64)
        if self.world > 1:
            dist.all_reduce(acc, op=dist.ReduceOp.MAX)
        return float(acc)

    def checksum(self) -> float:
        return float(sum(float(p.detach().double().sum()) for p in self.params))

    def checkpoint(self, step: int, final: bool) -> None:
        """A placement run does not checkpoint: each process holds different operators and a lost one cannot be
        replaced by the others (the run fails with its stage named)."""

    def train_step(self, step: int) -> list[float]:
        """One step; the record [step, loss, compute, comm, emulated compute, emulated comm, start, end, sent,
        received, main-thread CPU, CPU of the process's other threads] on the run's clock."""
        self.timing = step in self.timeline_steps or bool(self.scales)
        self.events = []
        self.stats = {"sent": 0, "recv": 0, "comm": 0.0, "emul_comm": 0.0, "emul_compute": 0.0}
        self._overslept = 0.0
        x, y = self.sampler.next_batch()
        if self.world > 1:
            dist.barrier()
        c0, p0 = time.thread_time(), time.process_time()
        t0 = time.perf_counter()
        r = self.step_placement(x.to(self.dtype), y)
        t1 = time.perf_counter()
        c1, p1 = time.thread_time(), time.process_time()
        self.last_cpu = [c1 - c0, (p1 - p0) - (c1 - c0)]
        loss = r["loss"] if self.device == self.pieces[self.final[0]].device else math.nan
        self.losses.append(loss)
        if step in self.timeline_steps:
            self.timelines[step] = [dict(e, start=e["start"] - self.offset, end=e["end"] - self.offset,
                                         **({"called": e["called"] - self.offset} if "called" in e else {}))
                                    for e in self.events]
        return [step, loss, r["compute"] - self.stats["emul_compute"], self.stats["comm"], self.stats["emul_compute"],
                self.stats["emul_comm"], t0 - self.offset, t1 - self.offset, self.stats["sent"], self.stats["recv"],
                *self.last_cpu]

    def gather(self, rows: list[list[float]]) -> list[list[list[float]]]:
        t = torch.tensor(rows, dtype=torch.float64)
        if self.world == 1:
            return [t.tolist()]
        out = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(out, t)
        return [o.tolist() for o in out]

    def store_step_rows(self, recs: list[list[list[float]]], accs: dict) -> None:
        rows = []
        for j in range(len(recs[0])):
            step = int(recs[0][j][0])
            start = min(r[j][6] for r in recs)
            end = max(r[j][7] for r in recs)
            span = max(end - start, 1e-9)
            loss = next((r[j][1] for r in recs if math.isfinite(r[j][1])), math.nan)
            for rank, r in enumerate(recs):
                _, _, comp, comm, ecp, ecm, s0, s1, sent, recv = r[j][:10]
                idle = max(0.0, span - comp - comm - ecp - ecm)
                rows.append((step, rank, loss if rank == self.rank_of[self.pieces[self.final[0]].device] else math.nan,
                             math.nan, sent, recv, comp, comm, 0.0, idle, ecp, ecm, self.tr.batch_size / span,
                             s1 - self.wall0))
            rows.append((step, JOB_WORKER, loss, accs.get(step, math.nan), sum(r[j][8] for r in recs),
                         sum(r[j][9] for r in recs), *([math.nan] * 6), self.tr.batch_size / span, end - self.wall0))
        self._write(self.store.add_metric_rows, self.run_id, rows)

    def run(self) -> dict:
        tr, plan = self.tr, self.plan
        self.offset, self.offset_err = clock_offsets(self.rank, self.world)
        offsets = self.gather([[self.offset, self.offset_err]])
        if self.rank == 0 and self.store is not None:
            self.store.merge_info(self.run_id, {
                "world": self.world, "parallel": "placement", "strategy": tr.strategy, "devices": plan.devices,
                "placement": plan.assignment, "pieces": [{"index": p.index, "device": p.device, "ops": p.ops}
                                                         for p in self.pieces],
                "micro_batches": tr.micro_batches, "emulated": bool(tr.emulate), "plan_note": plan.note,
                "modelled_makespan": plan.schedule.makespan, "modelled_pass": DATASHEET.pass_,
                "clock_offsets": [o[0][0] for o in offsets], "clock_uncertainty": [o[0][1] for o in offsets],
                "timeline_steps": self.timeline_steps, "launcher": "lab" if self.launched else "torchrun",
                "attempt": rz.attempt(), "torch_threads": torch.get_num_threads()})
            self.store.add_stage(self.run_id, "running", attempt=rz.attempt(), step=0,
                                 detail={"world": self.world, "devices": plan.devices})
        self.losses, self.timelines = [], {}
        self.rounds_info: list[dict] = []
        if self.world > 1:
            dist.barrier()
        self.wall0 = time.perf_counter() - self.offset
        pending: list[list[float]] = []
        accs: dict = {}
        diverged, last_acc, step = None, math.nan, 0
        for step in range(1, tr.steps + 1):
            self.step_no = step
            self.fault(step)
            pending.append(self.train_step(step))
            loss = self.gather([[pending[-1][1]]])
            glob = next((v[0][0] for v in loss if math.isfinite(v[0][0])), math.nan) if self.world > 1 else loss[0][0][0]
            finite = math.isfinite(glob)
            settled = False
            if self.balancing and finite:
                self.round_recs.append(pending[-1])
                if step % tr.round_steps == 0:
                    settled = self.end_round(step)
            last = step == tr.steps or not finite or settled
            if finite and (step % tr.eval_every == 0 or last):
                last_acc = accs[step] = self.evaluate()
            if last or len(pending) >= self.flush_every:
                recs = self.gather(pending)
                pending = []
                if self.rank == 0 and self.store is not None:
                    self.store_step_rows(recs, accs)
                self.log(f"step {step}: loss {glob:.4f}")
            if not finite:
                diverged = (step, glob)
                break
            if settled:  # the balancing loop is done: the plan has settled (or its rounds are used up)
                break
        self.store_timelines()
        self.drain()
        return {"steps": step, "diverged": diverged, "test_acc": last_acc}

    def store_timelines(self) -> None:
        """Rank 0 stores every process's recorded steps, one clock."""
        if self.world > 1:
            everyone: list = [None] * self.world
            dist.all_gather_object(everyone, self.timelines)
        else:
            everyone = [self.timelines]
        if self.rank != 0 or self.store is None:
            return
        for step in self.timeline_steps:
            rows = [e for t in everyone for e in t.get(step, [])]
            if rows:
                t0 = min(e["start"] for e in rows if e["kind"] not in ("activation", "gradient"))
                self._write(self.store.add_plan_events, self.run_id, step,
                            [dict(e, start=e["start"] - t0, end=e["end"] - t0,
                                  **({"called": e["called"] - t0} if "called" in e else {})) for e in rows])
