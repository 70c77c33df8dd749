"""Emulated heterogeneity: which device each worker stands for, how much slower it is, and how long
messages take on the links of the topology.

Compute: every worker measures its own compute time per step (forward, backward, optimiser). A
worker standing for a slower device then waits ``(scale - 1) x`` that time, where ``scale`` =
(fastest mapped device's throughput) / (this device's throughput) for the model's dominant operator
class. The fastest worker waits nothing, so the emulated cluster is as fast as this machine makes
its fastest member.

Links: the lab's ring sleeps ``topology.transfer_time(src device, dst device, bytes)`` before each
message. Gloo's all-reduce has no per-message hook, so with ``allreduce_impl = "gloo"`` the worker
sleeps the modelled time of a ring all-reduce on those links after the real one.

Everything here is labelled *emulated*: the waits are real wall time, but their length is the
topology's model, not a measurement of the device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from lab.errors import LabError
from lab.scenario.topology import Topology
from lab.modelled.collectives.ring import ring_steps


def op_flops(model: nn.Module, in_features: int) -> dict[str, float]:
    """Forward FLOPs of one sample in the linear ("matmul") and convolution ("conv") layers, counted
    with forward hooks (cheap: no tracing). For the lab's models these dominate every other class;
    lab.modelled.opgraph has the full per-operator count."""
    flops = {"matmul": 0.0, "conv": 0.0}

    def lin(mod, inp, out):
        flops["matmul"] += 2.0 * mod.in_features * out.numel()

    def conv(mod, inp, out):
        flops["conv"] += 2.0 * math.prod(mod.kernel_size) * (mod.in_channels // mod.groups) * out.numel()

    hooks = [m.register_forward_hook(lin) for m in model.modules() if isinstance(m, nn.Linear)]
    hooks += [m.register_forward_hook(conv) for m in model.modules() if isinstance(m, nn.Conv2d)]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, in_features))
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return flops


def dominant_op_class(model: nn.Module, in_features: int) -> str:
    """The operator class (matmul or conv) with the most forward FLOPs."""
    f = op_flops(model, in_features)
    return max(f, key=lambda k: f[k])


@dataclass(frozen=True)
class Emulation:
    """Per-worker devices, throughputs and compute scales (all lists indexed by worker rank)."""

    devices: tuple[str, ...]
    op_class: str
    throughputs: tuple[float, ...]  # FLOP/s of each worker's device for op_class
    scales: tuple[float, ...]  # >= 1; 1 for the fastest worker

    @property
    def shares(self) -> list[float]:
        """Compute shares (fractions summing to 1) for a weighted split."""
        tot = sum(self.throughputs)
        return [t / tot for t in self.throughputs]


def worker_devices(topology: Topology, mapped: tuple[str, ...], workers: int, op_class: str) -> Emulation:
    """Check the mapping of workers to devices and work out their throughputs and scales."""
    if len(mapped) < workers:
        raise LabError(f"{workers} workers but only {len(mapped)} device(s) mapped; list one device of the "
                       f"topology per worker (devices: {topology.device_names})", where="training.worker_devices")
    devs = tuple(mapped[:workers])
    thr = []
    for w, name in enumerate(devs):
        dev = topology.device(name)
        if op_class not in dev.throughput:
            have = ", ".join(sorted(dev.throughput)) or "none"
            raise LabError(f"worker {w} is mapped to {name!r}, which has no {op_class} kernel (the model's "
                           f"dominant operator class); it has: {have}. Map it to a device with a {op_class} kernel",
                           where="training.worker_devices")
        thr.append(float(dev.throughput[op_class]))
    fastest = max(thr)
    return Emulation(devs, op_class, tuple(thr), tuple(fastest / t for t in thr))


def server_device(topology: Topology, mapped: tuple[str, ...], workers: int) -> str:
    """The parameter server's device: the entry after the workers' in worker_devices, else the first
    host CPU of the topology, else its first device."""
    if len(mapped) > workers:
        topology.device(mapped[workers])
        return mapped[workers]
    for d in topology.devices:
        if d.type == "cpu":
            return d.name
    return topology.devices[0].name


def ring_link_delay(topology: Topology, devices: tuple[str, ...]) -> Callable[[int, int, int], float]:
    """The lab ring's ``link_delay(src_rank, dst_rank, nbytes) -> seconds`` for these devices."""

    def delay(src: int, dst: int, nbytes: int) -> float:
        if devices[src] == devices[dst]:
            return 0.0
        return topology.transfer_time(devices[src], devices[dst], nbytes)

    return delay


def ring_allreduce_time(topology: Topology, devices: tuple[str, ...], nbytes: float) -> float:
    """Modelled seconds of a ring all-reduce of ``nbytes`` over these devices: 2 (N - 1) steps, each
    as long as the slowest neighbour transfer of one chunk (nbytes / N)."""
    n = len(devices)
    if n < 2:
        return 0.0
    chunk = nbytes / n
    step = max((topology.transfer_time(devices[r], devices[(r + 1) % n], chunk)
                if devices[r] != devices[(r + 1) % n] else 0.0) for r in range(n))
    return ring_steps(n) * step
