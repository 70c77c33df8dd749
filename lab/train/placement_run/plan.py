"""The plan of a placement run: every operator's device (the scenario's own, else its strategy's plan with its pins
on the datasheet model), one process per device, and everything a run would refuse, checked before any process
starts."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lab.errors import LabError
from lab.modelled.costmodel import DATASHEET
from lab.modelled.opgraph import OpGraph, trace
from lab.modelled.placement import TaskGraph, plan_assignment, schedule_assignment
from lab.scenario.document import Scenario
from lab.scenario.models import model_of
from lab.train import data as data_mod

MAX_STAGES = 8  # processes of one placement run


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
    model = model_of(tr, ds.in_features, ds.classes)
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
