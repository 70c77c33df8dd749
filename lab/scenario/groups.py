"""A topology's resource groups: its devices grouped by (pool, hardware type), the unit the job
scheduler hands out."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    """A resource group: devices of one hardware type. ``speed``: FLOP/s of one device for the
    operator class the what-if uses (0: no kernel for it, so no job can use the group)."""

    name: str
    type: str
    devices: tuple[str, ...]
    pool: str = ""
    speed: float = 1.0

    @property
    def size(self) -> int:
        return len(self.devices)


def resource_groups(topology, op_class: str = "matmul") -> list[Group]:
    """The topology's devices grouped by (pool, hardware type), in the order they appear; a group's
    device names are ``"<group>/<device>"``. ``speed`` is the slowest member's FLOP/s for ``op_class``."""
    order: list[tuple[str, str]] = []
    members: dict[tuple[str, str], list] = {}
    for d in topology.devices:
        key = (d.pool, d.type)
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(d)
    out = []
    for pool, typ in order:
        name = f"{pool}:{typ}"
        devs = members[(pool, typ)]
        speed = min(float(d.throughput.get(op_class, 0.0)) for d in devs)
        out.append(Group(name, typ, tuple(f"{name}/{d.name}" for d in devs), pool, speed))
    return out
