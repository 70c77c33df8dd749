"""The calibrated machine model behind the cost-model interface (:mod:`lab.modelled.costmodel`).

An operator's seconds on a device are this machine's fitted forward + backward cost of its class
(the same per-class costs :func:`lab.machine.predict.predict_step` adds up for a training step),
times how much slower than the topology's fastest device the catalogue says the device is: the
factor the lab's emulated workers sleep. So a placement made with this model and a Training-page
prediction read the same numbers. Where the profile has measured the placement executor itself, an operator
costs what it costs there, and a tensor between two devices costs the executor's messages on this machine
(:class:`MachineLinkCost`): the planners then plan on what runs, where a crossing costs milliseconds of CPU
rather than the catalogue link's microseconds.
"""

from __future__ import annotations

import math

from lab.errors import LabError
import numpy as np

from lab.machine.profile import ExecutorFit, MachineProfile, op_features
from lab.modelled.costmodel import DATASHEET, CostModel, catalogue_slowdown
from lab.modelled.datasheet import LinkCost
from lab.scenario.document import Training
from lab.scenario.names import COST_MODEL_LABELS
from lab.scenario.topology import Device, Topology


MICRO_BATCHES = Training().micro_batches  # a placement run's parts per batch unless the scenario says otherwise


class MachineLinkCost(LinkCost):
    """A tensor between two devices as the lab's placement executor pays for it on this machine, for one
    forward + backward pass of the batch in ``micro_batches`` parts: every part crosses twice (its activation
    forward, its gradient back), and each message costs the sender's and the receiver's CPU, both sides'
    background CPU and the wire, or the topology's link where that is slower (an emulated run waits for it).
    Still latency + bytes x inverse bandwidth per pair, so the planners take it as they take the route's."""

    def __init__(self, topology: Topology, ex: ExecutorFit, micro_batches: int):
        super().__init__(topology)
        m = max(1, int(micro_batches))
        apart = ~np.eye(len(self.names), dtype=bool) & np.isfinite(self.latency)
        cpu = ex.send_fixed + ex.recv_fixed + 2.0 * ex.background_other
        self.latency[apart] = 2 * m * (cpu + np.maximum(ex.wire_fixed, self.latency[apart]))
        self.inv_bandwidth[apart] = 2 * (ex.send_per_byte + ex.recv_per_byte
                                         + np.maximum(ex.wire_per_byte, self.inv_bandwidth[apart]))


class CalibratedModel(CostModel):
    name = "calibrated"
    label = COST_MODEL_LABELS["calibrated"]
    pass_ = "forward + backward"

    def __init__(self, profile: MachineProfile, procs: int = 1, micro_batches: int = MICRO_BATCHES):
        if not isinstance(profile, MachineProfile):
            raise LabError("the calibrated model needs a machine profile: calibrate this machine first",
                           where="cost model")
        self.profile = profile
        self.procs = int(procs)
        self.micro_batches = int(micro_batches)
        self.fit = profile.compute_fit(self.procs)
        self.executor = profile.executor  # the placement executor's own costs, when they were measured

    def op_seconds(self, op, device: Device, topology: Topology) -> float:
        slower = catalogue_slowdown(topology, device, op.op_class)
        if not math.isfinite(slower):
            return math.inf
        cls, flops = op_features(op)
        t = self.fit.cost(cls).time(flops)
        if self.executor is not None:  # as the executor runs it: its own factor and its per-operator cost
            t = t * self.executor.compute + self.executor.node
        return t * slower

    def link_cost(self, topology: Topology) -> LinkCost:
        if self.executor is None:
            return LinkCost(topology)
        return MachineLinkCost(topology, self.executor, self.micro_batches)

    def describe(self) -> str:
        links = (f"; a tensor between devices costs what the executor pays on this machine: {2 * self.micro_batches} "
                 "messages per pass (each part's activation and gradient), each with CPU on both sides and the wire, "
                 "or the topology's link where slower" if self.executor is not None else
                 "; transfers by the topology's links (this profile has no measurement of the executor's messages)")
        return (f"this machine's calibrated forward + backward cost of each operator class (profile of "
                f"{self.profile.created[:10]}, {self.procs} process{'es' if self.procs > 1 else ''}), times how "
                "much slower than the fastest device the catalogue says each device is, as emulated runs wait"
                + links)


def cost_model(name: str, profile: MachineProfile | None) -> CostModel:
    """The cost model called ``name`` (:data:`lab.scenario.names.COST_MODELS`); the calibrated one
    reads ``profile``, the saved profile of this machine."""
    if name == "datasheet":
        return DATASHEET
    if name == "calibrated":
        if profile is None:
            raise LabError("the calibrated model needs this machine's profile, and there is none yet: calibrate "
                           "the machine on the Fidelity page (or with python -m lab.calibrate), or use the "
                           "datasheet model", where="cost model")
        return CalibratedModel(profile)
    raise LabError(f"unknown cost model {name!r}; choose one of {list(COST_MODEL_LABELS)}", where="cost model")


__all__ = ["CalibratedModel", "MachineLinkCost", "cost_model"]
