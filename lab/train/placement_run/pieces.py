"""A placement run's pieces: the traced model cut where the plan changes device, what each step's stages are for
the modelled executor, which cores its processes get, and the emulated operators' and links' waits."""
from __future__ import annotations

import operator

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch
import torch.fx as fx
from torch import nn
from torch.fx.passes.split_module import split_module

from lab.errors import LabError
from lab.modelled.balance import PLANNERS
from lab.modelled.costmodel import catalogue_slowdown
from lab.modelled.placement.executor import messages as executor_messages
from lab.modelled.placement.order import Piece
from lab.modelled.placement.order import schedule as order_of
from lab.scenario.document import Scenario
from lab.scenario.models import graph_of
from lab.train.placed import PlacedRanks
from lab.train.placement_run.plan import StagePlan, model_for, resolve

INPUT = ("input",)  # a piece input that is the model input


@dataclass(frozen=True, eq=False, kw_only=True)
class CutPiece(Piece):
    """A piece of the model as the executor runs it: the models' piece (its operators, what it reads, whether it
    makes the loss; no costs, and no bytes until :func:`with_bytes`) and the module torch.fx cut for it."""

    module: fx.GraphModule
    reads: tuple = ()  # the module's arguments in order: INPUT or (source piece, output index)
    outputs: int = 1
    single: bool = True  # the module returns one value, not a tuple
    readers: Mapping[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)  # output -> (piece, position)s
    # An operator of the piece writes a tensor in place (ReLU(inplace=True), ``out += identity``): its inputs,
    # leaves of autograd and views of another piece's output, are given to it as copies.
    writes_in_place: bool = False


@dataclass
class _Draft:
    """A piece while the cut model is read, before it is a :class:`CutPiece`."""

    index: int
    device: str
    module: fx.GraphModule
    ops: list[str]
    reads: list = field(default_factory=list)
    outputs: int = 1
    single: bool = True
    readers: dict = field(default_factory=dict)


_IN_PLACE_FUNCTIONS = {operator.iadd, operator.isub, operator.imul, operator.itruediv}


#: The meta key under which each node of a piece keeps its name in the whole model's graph.
NODE_NAME = "lab_model_node"


def writes_in_place(gm: fx.GraphModule) -> bool:
    """Whether a node of ``gm`` changes a tensor in place."""
    for n in gm.graph.nodes:
        if n.op == "call_module" and getattr(gm.get_submodule(str(n.target)), "inplace", False):
            return True
        if n.op == "call_function" and (n.target in _IN_PLACE_FUNCTIONS or n.kwargs.get("inplace")):
            return True
        if n.op == "call_method" and str(n.target).endswith("_") and not str(n.target).startswith("_"):
            return True
    return False


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


_ATTR = "attribute"


def _hold_attributes(model: torch.nn.Module, cut: list[_Draft]) -> None:
    """A parameter or buffer read outside any module (a class token, a position embedding) reaches its piece as
    an input from the cut model; it is moved into the piece that reads it, under its own name, so that piece
    trains it and a reader on another device does not wait for it."""
    readers: dict[str, list[int]] = {}
    for p in cut:
        for r in p.reads:
            if r is not INPUT and r[0] == _ATTR:
                readers.setdefault(r[1], []).append(p.index)
    for target, who in readers.items():
        if len(set(who)) > 1:
            raise LabError(f"the parameter {target} is read by operators on different devices; the lab's executor "
                           "needs each parameter on one device: pin its readers together", where="placement")
    for p in cut:
        if not any(r is not INPUT and r[0] == _ATTR for r in p.reads):
            continue
        holders = [n for n in p.module.graph.nodes if n.op == "placeholder"]
        kept = []
        for r, ph in zip(p.reads, holders):
            if r is INPUT or r[0] != _ATTR:
                kept.append(r)
                continue
            parent, _, leaf = r[1].rpartition(".")
            owner = p.module
            for part in parent.split(".") if parent else ():
                if not hasattr(owner, part):
                    owner.add_module(part, torch.nn.Module())
                owner = getattr(owner, part)
            value = model.get_parameter(r[1]) if r[1] in dict(model.named_parameters()) else model.get_buffer(r[1])
            if isinstance(value, torch.nn.Parameter):
                owner.register_parameter(leaf, value)
            else:
                owner.register_buffer(leaf, value)
            with p.module.graph.inserting_before(ph):
                node = p.module.graph.get_attr(r[1])
            ph.replace_all_uses_with(node)
            p.module.graph.erase_node(ph)
        p.reads = kept
        p.module.recompile()


def pieces(model: torch.nn.Module, plan: StagePlan) -> tuple[list[CutPiece], tuple[int, int]]:
    """The model cut into pieces per device in topological order, and where its output comes from
    (piece, output index)."""
    gm = graph_of(model)
    # Shape checks (torchvision's torch._assert) held when the model was traced; cut, they would send shapes
    # between devices for nothing.
    for n in list(gm.graph.nodes):
        if n.op == "call_function" and n.target is torch._assert:
            gm.graph.erase_node(n)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    dev = node_devices(gm, plan)
    for n in gm.graph.nodes:  # split_module names a piece's nodes afresh (matmul_1 may come out as matmul)
        n.meta[NODE_NAME] = n.name
    index: dict[str, int] = {}
    devs: list[str] = []
    for n in gm.graph.nodes:
        # split_module gives a stored tensor (get_attr) no part of its own: it reaches its readers' pieces, so
        # it must not open a piece here either (an uploaded network reads each weight this way)
        if n.name in dev and n.op != "get_attr":
            if not devs or dev[n.name] != devs[-1]:
                devs.append(dev[n.name])
            index[n.name] = len(devs) - 1
    split = split_module(gm, model, lambda n: index[n.name])
    ops_of = {op.name: op for op in plan.graph.ops}
    out = [_Draft(k, d, getattr(split, f"submod_{k}"), []) for k, d in enumerate(devs)]
    for n in gm.graph.nodes:
        if n.name in ops_of:
            out[index[n.name]].ops.append(n.name)
    ref: dict[fx.Node, tuple] = {}
    final = None
    for n in split.graph.nodes:
        if n.op == "placeholder":
            ref[n] = INPUT
        elif n.op == "get_attr":  # a parameter the model reads directly (a class token): its reader holds it
            ref[n] = (_ATTR, str(n.target))
        elif n.op == "call_module":
            k = int(str(n.target).rsplit("_", 1)[1])
            out[k].reads = [ref[a] for a in n.args]
            ref[n] = (k, None)
        elif n.op == "call_function" and n.target.__name__ == "getitem":
            k, _ = ref[n.args[0]]
            out[k].single = False
            ref[n] = (k, int(n.args[1]))
        elif n.op == "output":
            final = ref[n.args[0]]
        else:
            raise LabError(f"the cut model has a step the executor does not know: {n.format_node()}", where="placement")
    _hold_attributes(model, out)
    for p in out:
        p.reads = [r if r is INPUT else (r[0], r[1] or 0) for r in p.reads]
        for pos, r in enumerate(p.reads):
            if r is not INPUT:
                src = out[r[0]]
                src.outputs = max(src.outputs, r[1] + 1)
                src.readers.setdefault(r[1], []).append((p.index, pos))
    final = (final[0], final[1] or 0)
    return [CutPiece(p.index, p.device, tuple((op, 0.0, 1.0) for op in p.ops),
                     inputs=tuple((r[0], r[1], 0.0) for r in p.reads if r is not INPUT), loss=p.index == final[0],
                     module=p.module, reads=tuple(p.reads), outputs=p.outputs, single=p.single,
                     readers={o: tuple(rs) for o, rs in p.readers.items()},
                     writes_in_place=writes_in_place(p.module)) for p in out], final


def with_bytes(cut: list[CutPiece], nbytes: Mapping[tuple[int, int], float]) -> list[Piece]:
    """The cut's pieces as the models take them, each input with ``nbytes[(piece, output)]`` bytes (0 when missing)."""
    return [Piece(p.index, p.device, p.forward, p.backward,
                  tuple((s, o, float(nbytes.get((s, o), 0.0))) for s, o, _ in p.inputs), p.loss, p.backward_scale)
            for p in cut]


def outputs_on(model: nn.Module, cut: Sequence[CutPiece], x: torch.Tensor) -> dict:
    """Every piece's outputs (piece -> tuple) on the samples ``x``, without gradients and with no BatchNorm
    statistics moved."""
    vals: dict = {}
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            for p in cut:
                res = p.module(*[x if r is INPUT else vals[r[0]][r[1]] for r in p.reads])
                vals[p.index] = (res,) if p.single else tuple(res)
    finally:
        model.train(was)
    return vals


def op_scales(sc: Scenario, plan: StagePlan) -> dict[str, float]:
    """How many times slower than the topology's fastest device for its class each operator's device is, times
    the scenario's extra slowdown of that device."""
    topo, slow = sc.topology, dict(sc.training.slowdown)
    return {op: catalogue_slowdown(topo, topo.device(plan.assignment[op]), cls) * slow.get(plan.assignment[op], 1.0)
            for op, cls in plan.op_class.items()}


def link_wait(sc: Scenario, src: str, dst: str, nbytes: float) -> float:
    """The topology's time for ``nbytes`` from device ``src`` to ``dst`` (the emulated link)."""
    return 0.0 if src == dst else float(sc.topology.transfer_time(src, dst, nbytes))


def check_placement(sc: Scenario) -> StagePlan:
    """Everything a placement run would refuse, checked before any process starts; the plan."""
    return _checked(sc)[0]


def placed_ranks(sc: Scenario) -> PlacedRanks:
    """Everything :func:`check_placement` checks, and the run's ranks as its plan decides them (the scenario with its
    plan written out, :func:`lab.train.placement_run.resolved`): each rank's device and the messages between them."""
    plan, cut, final = _checked(sc)
    tr = sc.training
    weights = executor_messages(cut, plan.devices, tr.micro_batches, tr.schedule)
    return PlacedRanks(tuple(plan.devices), tuple((a, b, n) for (a, b), n in sorted(weights.items())))


def _checked(sc: Scenario) -> tuple:
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
    cut, final = pieces(model, plan)
    for d in plan.devices:  # a schedule the plan cannot follow says so before any process starts
        order_of(tr.schedule, [p.index for p in cut if p.device == d], len(cut), tr.micro_batches)
    return plan, cut, final
