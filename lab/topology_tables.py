"""A topology as editable tables (display units) and back, with row-precise errors.

Tables use display units so a person can type them: memory in GB, throughput in TFLOP/s (an
empty cell means "no kernel for this operator class"), bandwidth in GB/s, latency in microseconds.
The conversion back to a :class:`Topology` validates everything and names the row at fault.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from lab.errors import LabError
from lab.topology import OP_CLASSES, Device, Link, Switch, Topology

GB = 1e9
TFLOPS = 1e12
US = 1e-6

DEVICE_COLUMNS = ["name", "type", "pool", "memory_GB"] + [f"{op}_TFLOPs" for op in OP_CLASSES]
LINK_COLUMNS = ["a", "b", "kind", "bandwidth_GBps", "latency_us"]
SWITCH_COLUMNS = ["name"]


def to_tables(topo: Topology) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    dev_rows = []
    for d in topo.devices:
        row: dict[str, Any] = {"name": d.name, "type": d.type, "pool": d.pool, "memory_GB": d.memory / GB}
        for op in OP_CLASSES:
            row[f"{op}_TFLOPs"] = d.throughput[op] / TFLOPS if op in d.throughput else None
        dev_rows.append(row)
    devices = pd.DataFrame(dev_rows, columns=DEVICE_COLUMNS)
    for op in OP_CLASSES:
        devices[f"{op}_TFLOPs"] = devices[f"{op}_TFLOPs"].astype("float64")
    links = pd.DataFrame([{"a": l.a, "b": l.b, "kind": l.kind, "bandwidth_GBps": l.bandwidth / GB,
                           "latency_us": l.latency / US} for l in topo.links], columns=LINK_COLUMNS)
    switches = pd.DataFrame([{"name": s.name} for s in topo.switches], columns=SWITCH_COLUMNS)
    return devices, links, switches


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _cell(row: dict, col: str, where: str, *, required: bool = True) -> Any:
    v = row.get(col)
    if _empty(v):
        if required:
            raise LabError(f"column {col!r} is empty", where=where)
        return None
    return v


def _number(v: Any, col: str, where: str) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise LabError(f"column {col!r} must be a number (got {v!r})", where=where) from None
    return x


def from_tables(name: str, devices: pd.DataFrame, links: pd.DataFrame, switches: pd.DataFrame | None = None,
                description: str = "") -> Topology:
    """Build and validate a Topology from the three tables (display units)."""
    devs = []
    for i, row in enumerate(devices.to_dict("records")):
        if all(_empty(v) for v in row.values()):
            continue  # a blank row added in the editor and not filled in
        where = f"devices row {i + 1}"
        dname = str(_cell(row, "name", where)).strip()
        where = f"device {dname!r} (row {i + 1})"
        thr = {}
        for op in OP_CLASSES:
            v = row.get(f"{op}_TFLOPs")
            if not _empty(v):
                thr[op] = _number(v, f"{op}_TFLOPs", where) * TFLOPS
        mem = _number(_cell(row, "memory_GB", where), "memory_GB", where) * GB
        pool = row.get("pool")
        devs.append(Device(name=dname, type=str(_cell(row, "type", where)),
                           pool="pool0" if _empty(pool) else str(pool).strip(), memory=mem, throughput=thr))
    sws = []
    if switches is not None:
        for i, row in enumerate(switches.to_dict("records")):
            if all(_empty(v) for v in row.values()):
                continue
            sws.append(Switch(str(_cell(row, "name", f"switches row {i + 1}")).strip()))
    lks = []
    for i, row in enumerate(links.to_dict("records")):
        if all(_empty(v) for v in row.values()):
            continue
        where = f"links row {i + 1}"
        lat = row.get("latency_us")
        lks.append(Link(a=str(_cell(row, "a", where)).strip(), b=str(_cell(row, "b", where)).strip(),
                        kind=str(_cell(row, "kind", where)),
                        bandwidth=_number(_cell(row, "bandwidth_GBps", where), "bandwidth_GBps", where) * GB,
                        latency=0.0 if _empty(lat) else _number(lat, "latency_us", where) * US))
    return Topology(name=name, devices=tuple(devs), links=tuple(lks), switches=tuple(sws),
                    description=description).validate()


def transfer_comparison(topologies: dict[str, Topology], nbytes: float) -> pd.DataFrame:
    """Transfer time of ``nbytes`` between every device pair present in all the given topologies.

    One row per (pair, topology): route, hops, bottleneck (bytes/s), latency (s), time (s).
    """
    names = None
    for t in topologies.values():
        s = set(t.device_names)
        names = s if names is None else names & s
    order = [n for n in next(iter(topologies.values())).device_names if n in (names or set())]
    rows = []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            for label, t in topologies.items():
                p = t.path(a, b)
                rows.append({"pair": f"{a}→{b}", "topology": label, "route": " → ".join(p.nodes),
                             "hops": p.hops, "bottleneck_Bps": p.bottleneck, "latency_s": p.latency,
                             "time_s": p.time(nbytes)})
    return pd.DataFrame(rows)
