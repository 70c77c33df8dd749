"""Heterogeneous cluster topologies: devices, switches, links, routes.

Units are SI throughout: bytes, bytes/s, seconds, FLOP/s. Convert only for display.

A :class:`Topology` is a frozen value. Its graph (networkx) is built on demand. Routes take
the *widest* path between two nodes (the largest bottleneck bandwidth) and, among those, the
lowest summed latency, then the fewest hops. A transfer of ``n`` bytes over a route costs
``latency + n / bottleneck`` (cut-through: the slowest hop bounds the whole path).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Mapping

import networkx as nx

from lab.errors import LabError
from lab.scenario.routes import RouteTable, route_table
from lab.scenario.text import (  # check_text, nfc and shown: other modules import them from here too
    NAME_MAX,
    check_distinct,
    check_name,
    check_text,
    loads,
    nfc,
    shown,
)

#: Operator classes a device may have kernels for. "elementwise" covers activations.
OP_CLASSES: tuple[str, ...] = ("matmul", "conv", "elementwise", "norm", "pool", "other")
OP_CLASS_LABELS: dict[str, str] = {
    "matmul": "matmul / linear",
    "conv": "convolution",
    "elementwise": "element-wise / activation (ReLU, add, mul)",
    "norm": "normalisation",
    "pool": "pooling",
    "other": "other (softmax, mean, reshape...)",
}

DEVICE_TYPES: tuple[str, ...] = ("cpu", "gpu", "fpga", "asic", "dpu", "npu", "tpu")
DEVICE_TYPE_LABELS: dict[str, str] = {
    "cpu": "host CPU", "gpu": "GPU", "fpga": "FPGA", "asic": "ASIC",
    "dpu": "DPU", "npu": "NPU", "tpu": "TPU",
}
LINK_KINDS: tuple[str, ...] = ("cxl", "pcie", "upi", "nvlink", "switch", "ethernet")
LINK_KIND_LABELS: dict[str, str] = {
    "cxl": "CXL", "pcie": "PCIe", "upi": "UPI/QPI", "nvlink": "NVLink-like",
    "switch": "switch port", "ethernet": "Ethernet",
}

_NAME_MAX = NAME_MAX
MAX_DEVICES = 256  # a topology's size is capped: every page's routes and schedules grow with it
MAX_SWITCHES = 64
MAX_LINKS = 1024
_DESCRIPTION_MAX = 2000


def _check_size(devices: int, switches: int, links: int, where: str) -> None:
    """The caps, checked before any route is computed: every page's routes and schedules grow with them."""
    for n, cap, what in ((devices, MAX_DEVICES, "devices"), (switches, MAX_SWITCHES, "switches"),
                         (links, MAX_LINKS, "links")):
        if n > cap:
            raise LabError(f"has {n:,} {what}; the lab takes at most {cap:,}", where=where)


def _check_name(name: Any, where: str) -> str:
    return check_name(name, where)


def _as_float(value: int | float, what: str, where: str) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer too large for a float
        raise LabError(f"{what} is too large (an integer of about {int(value.bit_length() * 0.30103)} digits)",
                       where=where) from None


def _check_positive(value: Any, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LabError(f"{what} must be a number (got {shown(value)})", where=where)
    value = _as_float(value, what, where)
    if not math.isfinite(value):
        raise LabError(f"{what} must be finite (got {value})", where=where)
    if value <= 0:
        raise LabError(f"{what} must be positive (got {value:g})", where=where)
    return value


def _check_nonnegative(value: Any, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LabError(f"{what} must be a number (got {shown(value)})", where=where)
    value = _as_float(value, what, where)
    if not math.isfinite(value):
        raise LabError(f"{what} must be finite (got {value})", where=where)
    if value < 0:
        raise LabError(f"{what} must not be negative (got {value:g})", where=where)
    return value


def _check_keys(d: Any, allowed: Iterable[str], required: Iterable[str], where: str) -> None:
    if not isinstance(d, Mapping):
        raise LabError(f"expected an object with fields {sorted(allowed)}, got {type(d).__name__}", where=where)
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise LabError(f"unknown field(s) {shown(unknown, 200)}; allowed: {sorted(allowed)}", where=where)
    missing = [k for k in required if k not in d]
    if missing:
        raise LabError(f"missing field(s) {missing}", where=where)


@dataclass(frozen=True)
class Device:
    """A compute device. ``throughput`` maps each operator class it has a kernel for to FLOP/s.

    A class missing from ``throughput`` means the device has no kernel for it and cannot run it.
    """

    name: str
    type: str
    pool: str = "pool0"
    memory: float = 16e9  # bytes
    throughput: Mapping[str, float] = field(default_factory=dict)  # FLOP/s per op class

    def __post_init__(self) -> None:  # names compare in composed form, however they were typed
        object.__setattr__(self, "name", nfc(self.name))
        object.__setattr__(self, "pool", nfc(self.pool))

    @property
    def kernels(self) -> frozenset[str]:
        return frozenset(self.throughput)

    def validate(self) -> None:
        _check_name(self.name, "device")
        where = f"device {shown(self.name)}"
        if self.type not in DEVICE_TYPES:
            raise LabError(f"unknown type {shown(self.type)}; allowed: {list(DEVICE_TYPES)}", where=where)
        _check_name(self.pool, where + " pool")
        _check_positive(self.memory, "memory (bytes)", where)
        if not self.throughput:
            raise LabError("has no kernels: give a positive FLOP/s for at least one operator class "
                           f"({', '.join(OP_CLASSES)})", where=where)
        for op, flops in self.throughput.items():
            if op not in OP_CLASSES:
                raise LabError(f"unknown operator class {shown(op)}; allowed: {list(OP_CLASSES)}", where=where)
            _check_positive(flops, f"throughput for {op} (FLOP/s)", where)

    def to_dict(self) -> dict:
        return {"name": self.name, "type": self.type, "pool": self.pool, "memory": self.memory,
                "throughput": {k: self.throughput[k] for k in OP_CLASSES if k in self.throughput}}

    @staticmethod
    def from_dict(d: Any, where: str = "device") -> "Device":
        _check_keys(d, ("name", "type", "pool", "memory", "throughput"), ("name", "type", "throughput"), where)
        thr = d["throughput"]
        if not isinstance(thr, Mapping):
            raise LabError("throughput must be an object {operator class: FLOP/s}", where=f"device {shown(d['name'])}")
        dev = Device(name=d["name"], type=d["type"], pool=d.get("pool", "pool0"),
                     memory=d.get("memory", 16e9), throughput=dict(thr))
        dev.validate()
        return Device(name=dev.name, type=dev.type, pool=dev.pool, memory=float(dev.memory),
                      throughput={k: float(v) for k, v in thr.items()})


@dataclass(frozen=True)
class Switch:
    """A switch: a node that forwards traffic and computes nothing."""

    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", nfc(self.name))

    def to_dict(self) -> dict:
        return {"name": self.name}

    @staticmethod
    def from_dict(d: Any, where: str = "switch") -> "Switch":
        _check_keys(d, ("name",), ("name",), where)
        return Switch(_check_name(d["name"], where))


@dataclass(frozen=True)
class Link:
    """A full-duplex link: each direction carries ``bandwidth`` bytes/s after ``latency`` s."""

    a: str
    b: str
    kind: str
    bandwidth: float  # bytes/s, each direction
    latency: float = 1e-6  # seconds

    def __post_init__(self) -> None:  # endpoints name devices and switches in their composed form
        object.__setattr__(self, "a", nfc(self.a))
        object.__setattr__(self, "b", nfc(self.b))

    @property
    def name(self) -> str:
        return f"{self.a}–{self.b}"

    def validate(self) -> None:
        where = f"link {shown(self.a)}–{shown(self.b)}"
        _check_name(self.a, where + " endpoint a")
        _check_name(self.b, where + " endpoint b")
        where = f"link {shown(self.a)}–{shown(self.b)}"
        if self.a == self.b:
            raise LabError("a link must join two different nodes", where=where)
        if self.kind not in LINK_KINDS:
            raise LabError(f"unknown kind {shown(self.kind)}; allowed: {list(LINK_KINDS)}", where=where)
        _check_positive(self.bandwidth, "bandwidth (bytes/s)", where)
        _check_nonnegative(self.latency, "latency (s)", where)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "kind": self.kind, "bandwidth": self.bandwidth, "latency": self.latency}

    @staticmethod
    def from_dict(d: Any, where: str = "link") -> "Link":
        _check_keys(d, ("a", "b", "kind", "bandwidth", "latency"), ("a", "b", "kind", "bandwidth"), where)
        link = Link(a=d["a"], b=d["b"], kind=d["kind"], bandwidth=d["bandwidth"], latency=d.get("latency", 1e-6))
        link.validate()
        return Link(link.a, link.b, link.kind, float(link.bandwidth), float(link.latency))


@dataclass(frozen=True)
class Path:
    """The route a transfer takes between two nodes."""

    nodes: tuple[str, ...]
    links: tuple[Link, ...]
    bottleneck: float  # bytes/s (inf for a node to itself)
    latency: float  # seconds, summed over hops

    @property
    def hops(self) -> int:
        return len(self.links)

    @property
    def slowest_link(self) -> Link | None:
        return min(self.links, key=lambda l: l.bandwidth) if self.links else None

    def time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` over this route: latency + bytes / bottleneck bandwidth."""
        if not self.links:
            return 0.0
        return self.latency + nbytes / self.bottleneck


@dataclass(frozen=True)
class Topology:
    name: str
    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    switches: tuple[Switch, ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", nfc(self.name))
        object.__setattr__(self, "description", nfc(self.description))

    # ----- validation -------------------------------------------------------------------------
    def validate(self) -> "Topology":
        _check_name(self.name, "topology name")
        check_text(self.description, "topology", what="the description", max_len=_DESCRIPTION_MAX, multiline=True)
        where = f"topology {shown(self.name)}"
        _check_size(len(self.devices), len(self.switches), len(self.links), where)
        if not self.devices:
            raise LabError("a topology needs at least one device", where=where)
        seen: set[str] = set()
        for node in (*self.devices, *self.switches):
            if isinstance(node, Device):
                node.validate()
            else:
                _check_name(node.name, "switch")
            if node.name in seen:
                raise LabError(f"duplicate name {shown(node.name)}: every device and switch needs its own name",
                               where=where)
            seen.add(node.name)
        # Names a reader cannot tell apart are one name to them: a route "from gpu" must be unambiguous.
        check_distinct((n.name for n in (*self.devices, *self.switches)), where, namespace="the topology")
        check_distinct((d.pool for d in self.devices), where, namespace="the topology's pools", what="pool")
        pairs: set[frozenset] = set()
        for link in self.links:
            link.validate()
            for end in (link.a, link.b):
                if end not in seen:
                    raise LabError(f"endpoint {shown(end)} is not a device or switch of this topology",
                                   where=f"link {shown(link.a)}–{shown(link.b)}")
            pair = frozenset((link.a, link.b))
            if pair in pairs:
                raise LabError("duplicate link: two links join the same pair of nodes",
                               where=f"link {shown(link.a)}–{shown(link.b)}")
            pairs.add(pair)
        if len(seen) > 1:
            g = self._build_graph()
            if not nx.is_connected(g):
                parts = sorted((sorted(c) for c in nx.connected_components(g)), key=len)
                raise LabError(f"the graph is disconnected: {parts[0]} cannot reach the rest; "
                               "add a link", where=where)
        return self

    # ----- graph and routes -------------------------------------------------------------------
    def _build_graph(self) -> nx.Graph:
        g = nx.Graph()
        for d in self.devices:
            g.add_node(d.name, kind="device", type=d.type, pool=d.pool)
        for s in self.switches:
            g.add_node(s.name, kind="switch", type="switch", pool="")
        for link in self.links:
            g.add_edge(link.a, link.b, link=link, bandwidth=link.bandwidth, latency=link.latency)
        return g

    @cached_property
    def graph(self) -> nx.Graph:
        return self._build_graph()

    @cached_property
    def _routes(self) -> RouteTable:
        """Every pair's route, shared by every equal topology in this process (:func:`route_table`)."""
        g = self.graph
        return route_table(tuple(g.nodes),
                           tuple((u, v, e["bandwidth"], e["latency"]) for u, v, e in g.edges(data=True)))

    def device(self, name: str) -> Device:
        for d in self.devices:
            if d.name == name:
                return d
        raise LabError(f"no device named {shown(name)}; devices: {self.device_names}")

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    @property
    def pools(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for d in self.devices:
            out.setdefault(d.pool, []).append(d.name)
        return out

    def path(self, a: str, b: str) -> Path:
        """The widest route from ``a`` to ``b`` (then lowest latency, then fewest hops)."""
        route = self._routes.route(a, b)
        if route is None:
            return Path((a, b), (), 0.0, math.inf)
        nodes, bottleneck, latency = route
        g = self.graph
        return Path(nodes, tuple(g[u][v]["link"] for u, v in zip(nodes, nodes[1:])), bottleneck, latency)

    def transfer_time(self, a: str, b: str, nbytes: float) -> float:
        p = self.path(a, b)
        if p.bottleneck == 0.0:
            return math.inf
        return p.time(nbytes)

    def path_matrix(self, nbytes: float, names: list[str] | None = None) -> dict[str, Any]:
        """All-pairs table over devices: transfer seconds for ``nbytes``, bottleneck, latency, hops."""
        names = names or self.device_names
        return {"names": names, **self._routes.matrix(names, nbytes)}

    # ----- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description,
                "devices": [d.to_dict() for d in self.devices],
                "switches": [s.to_dict() for s in self.switches],
                "links": [l.to_dict() for l in self.links]}

    @staticmethod
    def from_dict(d: Any) -> "Topology":
        _check_keys(d, ("name", "description", "devices", "switches", "links"), ("devices", "links"), "topology")
        for key in ("devices", "switches", "links"):
            if key in d and not isinstance(d[key], list):
                raise LabError(f"{key} must be a list", where="topology")
        _check_size(len(d["devices"]), len(d.get("switches", [])), len(d["links"]), "topology")
        devices = tuple(Device.from_dict(x, where=f"devices[{i}]") for i, x in enumerate(d["devices"]))
        switches = tuple(Switch.from_dict(x, where=f"switches[{i}]") for i, x in enumerate(d.get("switches", [])))
        links = tuple(Link.from_dict(x, where=f"links[{i}]") for i, x in enumerate(d["links"]))
        name = d.get("name", "custom")
        _check_name(name, "topology name")
        desc = check_text(d.get("description", ""), "topology", what="the description", max_len=_DESCRIPTION_MAX,
                          multiline=True)
        return Topology(name=name, devices=devices, links=links, switches=switches, description=desc).validate()

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @staticmethod
    def from_json(text: str | bytes) -> "Topology":
        return Topology.from_dict(_loads(text))

    # ----- editing helpers (return new values) -------------------------------------------------
    def replace(self, **changes: Any) -> "Topology":
        fields = {"name": self.name, "devices": self.devices, "links": self.links,
                  "switches": self.switches, "description": self.description}
        fields.update(changes)
        return Topology(**fields)


def _loads(text: str | bytes) -> Any:
    # NaN and Infinity parse as floats: every number's own check then names the field that holds one.
    return loads(text)
