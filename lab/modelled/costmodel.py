"""One interface for the lab's cost models: a traced model and a topology in, seconds out.

Two models answer it:

* :class:`DatasheetModel`: the catalogue's throughput of each device for each operator class
  (:mod:`lab.modelled.datasheet`); an operator's forward pass.
* the calibrated model (:class:`lab.machine.calibrated_model.CalibratedModel`): this machine's per-class
  costs fitted by the calibration, each device slower than the topology's fastest by the
  catalogue's ratio, which is what the lab's emulated runs sleep; an operator's forward and
  backward pass, the part of a training step the Training page predicts with the same numbers.

Both move bytes with the route formula (latency + bytes / bottleneck bandwidth): the emulated links
of a run wait exactly that long, so the calibrated model has nothing of its own to add there.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping

from lab.modelled.datasheet import LinkCost, check_speed, op_time
from lab.scenario.names import COST_MODEL_LABELS
from lab.scenario.topology import Device, Topology

if TYPE_CHECKING:  # pragma: no cover
    from lab.modelled.opgraph import Op, OpGraph


class CostModel:
    """Seconds of an operator on a device of a topology; transfers by the route formula."""

    name = ""  # a key the pages and the view state use
    label = ""  # what the model is, for a person
    pass_ = ""  # what one operator's seconds cover ("forward pass" or "forward + backward")

    def op_seconds(self, op: "Op", device: Device, topology: Topology) -> float:
        raise NotImplementedError

    def describe(self) -> str:
        """One sentence on where this model's numbers come from."""
        raise NotImplementedError

    def compute_table(self, graph: "OpGraph", topology: Topology,
                      speed: Mapping[str, float] | None = None) -> dict[str, dict[str, float]]:
        """{operator: {device: seconds}} (inf: no kernel); ``speed`` divides a device's times."""
        factors = check_speed(speed, topology.device_names)
        return {op.name: {d.name: self.op_seconds(op, d, topology) / factors[d.name] for d in topology.devices}
                for op in graph.ops}

    def link_cost(self, topology: Topology) -> LinkCost:
        return LinkCost(topology)


class DatasheetModel(CostModel):
    name = "datasheet"
    label = COST_MODEL_LABELS["datasheet"]
    pass_ = "forward pass"

    def op_seconds(self, op: "Op", device: Device, topology: Topology) -> float:
        return op_time(op, device)

    def describe(self) -> str:
        return ("FLOPs / the device's catalogue throughput for the operator's class (a device without that kernel "
                "cannot run it); one forward pass")


DATASHEET = DatasheetModel()


def fastest_throughput(topology: Topology, op_class: str) -> float:
    """The highest catalogue throughput any device of ``topology`` has for ``op_class`` (0: none)."""
    return max((d.throughput.get(op_class) or 0.0 for d in topology.devices), default=0.0)


def catalogue_slowdown(topology: Topology, device: Device, op_class: str) -> float:
    """How many times slower than the topology's fastest ``device`` is at ``op_class`` (inf: no kernel)."""
    thr = device.throughput.get(op_class)
    return fastest_throughput(topology, op_class) / thr if thr else math.inf


__all__ = ["CostModel", "DatasheetModel", "DATASHEET", "fastest_throughput", "catalogue_slowdown"]
