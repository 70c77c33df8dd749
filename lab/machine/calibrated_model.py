"""The calibrated machine model behind the cost-model interface (:mod:`lab.modelled.costmodel`).

An operator's seconds on a device are this machine's fitted forward + backward cost of its class
(the same per-class costs :func:`lab.machine.predict.predict_step` adds up for a training step),
times how much slower than the topology's fastest device the catalogue says the device is: the
factor the lab's emulated workers sleep. So a placement made with this model and a Training-page
prediction read the same numbers.
"""

from __future__ import annotations

import math

from lab.errors import LabError
from lab.machine.profile import MachineProfile, op_features
from lab.modelled.costmodel import DATASHEET, CostModel, catalogue_slowdown
from lab.scenario.names import COST_MODEL_LABELS
from lab.scenario.topology import Device, Topology


class CalibratedModel(CostModel):
    name = "calibrated"
    label = COST_MODEL_LABELS["calibrated"]
    pass_ = "forward + backward"

    def __init__(self, profile: MachineProfile, procs: int = 1):
        if not isinstance(profile, MachineProfile):
            raise LabError("the calibrated model needs a machine profile: calibrate this machine first",
                           where="cost model")
        self.profile = profile
        self.procs = int(procs)
        self.fit = profile.compute_fit(self.procs)

    def op_seconds(self, op, device: Device, topology: Topology) -> float:
        slower = catalogue_slowdown(topology, device, op.op_class)
        if not math.isfinite(slower):
            return math.inf
        cls, flops = op_features(op)
        return self.fit.cost(cls).time(flops) * slower

    def describe(self) -> str:
        return (f"this machine's calibrated forward + backward cost of each operator class (profile of "
                f"{self.profile.created[:10]}, {self.procs} process{'es' if self.procs > 1 else ''}), times how "
                "much slower than the fastest device the catalogue says each device is, as emulated runs wait")


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


__all__ = ["CalibratedModel", "cost_model"]
