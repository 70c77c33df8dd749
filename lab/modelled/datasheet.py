"""The cost model: an operator on a device -> seconds; bytes over a path -> seconds.

Pure and small on purpose (a later step calibrates it against this machine):

* compute: ``seconds = FLOPs / (device.throughput[op_class] * speed)``, ``inf`` when the device has
  no kernel for the class. ``speed`` is an optional per-device factor (1 = as the catalogue says,
  0.5 = half as fast). An operator with 0 FLOPs takes 0 s on a device that has the kernel.
* transfer: ``topology.transfer_time(a, b, nbytes)`` (latency + bytes / bottleneck bandwidth of
  the widest route), 0 on the same device. :class:`LinkCost` is the same thing as two matrices
  over the devices (latency and inverse bottleneck bandwidth) so that schedulers can take a whole
  row at once.

The model assumes links without contention (two transfers on one link do not slow each other),
as HEFT-style list schedulers do.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping

import numpy as np

from lab.errors import LabError
from lab.scenario.topology import Device, Topology

if TYPE_CHECKING:  # pragma: no cover
    from lab.modelled.opgraph import Op, OpGraph


def check_speed(speed: Mapping[str, float] | None, devices: list[str], what: str = "speed factor") -> dict[str, float]:
    """A full {device: factor} map (missing devices: 1.0); factors must be positive and finite."""
    out = {d: 1.0 for d in devices}
    for name, f in (speed or {}).items():
        if name not in out:
            raise LabError(f"{what} given for {name!r}, which is not a device; devices: {devices}")
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or f <= 0:
            raise LabError(f"{what} of {name!r} must be a positive finite number (got {f!r})")
        out[name] = float(f)
    return out


def op_seconds(op_class: str, flops: float, device: Device, speed: float = 1.0) -> float:
    """Seconds for ``flops`` of class ``op_class`` on ``device`` (inf if it has no such kernel)."""
    thr = device.throughput.get(op_class)
    if not thr:
        return math.inf
    return float(flops) / (thr * speed) if flops else 0.0


def op_time(op: "Op", device: Device, speed: float = 1.0) -> float:
    return op_seconds(op.op_class, op.flops, device, speed)


def transfer_seconds(topology: Topology, a: str, b: str, nbytes: float) -> float:
    """Seconds to move ``nbytes`` from device ``a`` to device ``b`` (0 if they are the same)."""
    if a == b:
        return 0.0
    return topology.transfer_time(a, b, nbytes)


def compute_table(graph: "OpGraph", topology: Topology,
                  speed: Mapping[str, float] | None = None) -> dict[str, dict[str, float]]:
    """{operator: {device: seconds}} for every operator and every device (inf: no kernel)."""
    factors = check_speed(speed, topology.device_names)
    return {op.name: {d.name: op_time(op, d, factors[d.name]) for d in topology.devices} for op in graph.ops}


class LinkCost:
    """``link_time(a, b, nbytes)`` for a topology, backed by latency and inverse-bandwidth matrices.

    ``seconds = latency[a, b] + nbytes * inv_bandwidth[a, b]``, 0 when ``a == b``. Equal to
    :meth:`lab.scenario.topology.Topology.transfer_time`.
    """

    def __init__(self, topology: Topology, names: list[str] | None = None):
        self.names = list(names or topology.device_names)
        self.index = {n: i for i, n in enumerate(self.names)}
        m = len(self.names)
        self.latency = np.zeros((m, m))
        self.inv_bandwidth = np.zeros((m, m))
        if not m:
            return
        # Every pair's route numbers at once from the route table (a route's own nodes and links are
        # not needed here, and building them pair by pair takes seconds at the size caps).
        table = topology.path_matrix(1.0, self.names)
        bw, lat = np.array(table["bottleneck"], dtype=float), np.array(table["latency"], dtype=float)
        apart = ~np.eye(m, dtype=bool)
        unreachable = apart & (bw == 0.0)
        reach = apart & ~unreachable
        self.latency[reach], self.inv_bandwidth[reach] = lat[reach], 1.0 / bw[reach]
        self.latency[unreachable], self.inv_bandwidth[unreachable] = math.inf, math.inf

    def __call__(self, a: str, b: str, nbytes: float) -> float:
        if a == b:
            return 0.0
        i, j = self.index[a], self.index[b]
        return float(self.latency[i, j] + nbytes * self.inv_bandwidth[i, j])

    def matrices(self, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(latency, inverse bandwidth) over ``names`` in that order."""
        try:
            idx = [self.index[n] for n in names]
        except KeyError as exc:
            raise LabError(f"device {exc.args[0]!r} is not in this link model; devices: {self.names}") from None
        return self.latency[np.ix_(idx, idx)], self.inv_bandwidth[np.ix_(idx, idx)]


__all__ = ["op_seconds", "op_time", "transfer_seconds", "compute_table", "LinkCost", "check_speed"]
