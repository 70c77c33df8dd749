"""A topology as editable tables (display units) and back, with row-precise errors.

Tables use display units so a person can type them: memory in GB, throughput in TFLOP/s (an
empty cell means "no kernel for this operator class"), bandwidth in GB/s, latency in microseconds.
The conversion back to a :class:`Topology` checks every cell in those same units and names the
table, the row and the column at fault, so a message quotes what the person typed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

from lab.errors import LabError
from lab.scenario.catalogue import (
    LINK_CATALOGUE,
    PRESET_LABELS,
    as_pcie,
    catalogue_device,
    has_cxl,
    preset,
)
from lab.scenario.topology import (
    _NAME_MAX,
    DEVICE_TYPES,
    LINK_KINDS,
    OP_CLASSES,
    Device,
    Link,
    Switch,
    Topology,
)
from lab.view.state import VIEW

GB = 1e9
TFLOPS = 1e12
US = 1e-6

DEVICE_COLUMNS = ["name", "type", "pool", "memory_GB"] + [f"{op}_TFLOPs" for op in OP_CLASSES]
LINK_COLUMNS = ["a", "b", "kind", "bandwidth_GBps", "latency_us"]
SWITCH_COLUMNS = ["name"]

#: The header each column shows in the editor, with its unit; messages name columns by it.
COLUMN_LABELS: dict[str, str] = {
    "name": "name", "type": "type", "pool": "pool", "memory_GB": "memory (GB)",
    **{f"{op}_TFLOPs": f"{op} (TFLOP/s)" for op in OP_CLASSES},
    "a": "a", "b": "b", "kind": "kind", "bandwidth_GBps": "bandwidth (GB/s each way)", "latency_us": "latency (µs)",
}
#: The unit a number in each column is typed in (for "got ..." in a message).
COLUMN_UNITS: dict[str, str] = {"memory_GB": "GB", **{f"{op}_TFLOPs": "TFLOP/s" for op in OP_CLASSES},
                                "bandwidth_GBps": "GB/s", "latency_us": "µs"}


class TableError(LabError):
    """A LabError about one of the editor's tables; ``table`` is "devices", "links" or "switches"
    (None for a problem of the whole topology), so a page can show it beside that table."""

    def __init__(self, message: str, *, where: str | None = None, table: str | None = None):
        super().__init__(message, where=where)
        self.table = table


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
    devices["memory_GB"] = devices["memory_GB"].astype("float64")
    links = pd.DataFrame([{"a": l.a, "b": l.b, "kind": l.kind, "bandwidth_GBps": l.bandwidth / GB,
                           "latency_us": l.latency / US} for l in topo.links], columns=LINK_COLUMNS)
    for col in ("bandwidth_GBps", "latency_us"):
        links[col] = links[col].astype("float64")
    switches = pd.DataFrame([{"name": s.name} for s in topo.switches], columns=SWITCH_COLUMNS)
    return devices, links, switches


def _empty(v: Any) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    return isinstance(v, str) and not v.strip()


def _cell(row: dict, col: str, where: str, table: str, *, required: bool = True) -> Any:
    v = row.get(col)
    if _empty(v):
        if required:
            raise TableError(f"column {COLUMN_LABELS.get(col, col)!r} is empty", where=where, table=table)
        return None
    return v


def _text(row: dict, col: str, where: str, table: str) -> str:
    v = str(_cell(row, col, where, table)).strip()
    if len(v) > _NAME_MAX:
        raise TableError(f"column {COLUMN_LABELS.get(col, col)!r} may have at most {_NAME_MAX} characters "
                         f"(got {len(v)})", where=where, table=table)
    return v


def _number(v: Any, col: str, where: str, table: str) -> float:
    label = COLUMN_LABELS.get(col, col)
    if isinstance(v, bool):
        raise TableError(f"column {label!r} must be a number (got {v!r})", where=where, table=table)
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise TableError(f"column {label!r} must be a number (got {v!r})", where=where, table=table) from None
    if not math.isfinite(x):
        raise TableError(f"column {label!r} must be a finite number (got {x})", where=where, table=table)
    return x


def _got(x: float, col: str) -> str:
    return f"got {x:g} {COLUMN_UNITS.get(col, '')}".rstrip()


def _positive(row: dict, col: str, where: str, table: str, hint: str = "") -> float:
    x = _number(_cell(row, col, where, table), col, where, table)
    if x <= 0:
        raise TableError(f"column {COLUMN_LABELS[col]!r} must be positive{hint} ({_got(x, col)})",
                         where=where, table=table)
    return x


def _blank(row: dict) -> bool:
    return all(_empty(v) for v in row.values())


def from_tables(name: str, devices: pd.DataFrame, links: pd.DataFrame, switches: pd.DataFrame | None = None,
                description: str = "") -> Topology:
    """Build and validate a Topology from the three tables (display units).

    Every cell is checked as typed (positive memory, bandwidth and throughput, non-negative
    latency, finite numbers, known types and kinds, names used once, link ends that exist); a
    problem raises :class:`TableError` naming the table, the row (1-based, as shown) and the
    column with its unit. Rows left wholly blank are skipped."""
    devs: list[Device] = []
    owner: dict[str, str] = {}  # name -> where it was first used
    for i, row in enumerate(devices.to_dict("records")):
        if _blank(row):
            continue  # a blank row added in the editor and not filled in
        where = f"devices row {i + 1}"
        dname = _text(row, "name", where, "devices")
        where = f"device {dname!r} (devices row {i + 1})"
        if dname in owner:
            raise TableError(f"the name {dname!r} is already used by {owner[dname]}; every device and switch "
                             "needs its own name", where=where, table="devices")
        owner[dname] = f"devices row {i + 1}"
        dtype = str(_cell(row, "type", where, "devices")).strip()
        if dtype not in DEVICE_TYPES:
            raise TableError(f"column 'type' must be one of {', '.join(DEVICE_TYPES)} (got {dtype!r})",
                             where=where, table="devices")
        mem = _positive(row, "memory_GB", where, "devices")
        thr = {}
        for op in OP_CLASSES:
            col = f"{op}_TFLOPs"
            if not _empty(row.get(col)):
                thr[op] = _positive(row, col, where, "devices", hint="; leave it empty for no kernel") * TFLOPS
        if not thr:
            raise TableError("has no kernels: give a positive TFLOP/s in at least one operator-class column",
                             where=where, table="devices")
        pool = row.get("pool")
        pool = "pool0" if _empty(pool) else _text(row, "pool", where, "devices")
        devs.append(Device(name=dname, type=dtype, pool=pool, memory=mem * GB, throughput=thr))
    sws: list[Switch] = []
    if switches is not None:
        for i, row in enumerate(switches.to_dict("records")):
            if _blank(row):
                continue
            where = f"switches row {i + 1}"
            sname = _text(row, "name", where, "switches")
            if sname in owner:
                raise TableError(f"the name {sname!r} is already used by {owner[sname]}; every device and switch "
                                 "needs its own name", where=where, table="switches")
            owner[sname] = f"switches row {i + 1}"
            sws.append(Switch(sname))
    lks: list[Link] = []
    pairs: dict[frozenset, int] = {}
    for i, row in enumerate(links.to_dict("records")):
        if _blank(row):
            continue
        where = f"links row {i + 1}"
        a, b = _text(row, "a", where, "links"), _text(row, "b", where, "links")
        where = f"links row {i + 1} ({a}–{b})"
        for end in (a, b):
            if end not in owner:
                raise TableError(f"{end!r} is not a device or switch of this topology", where=where, table="links")
        if a == b:
            raise TableError("a link must join two different nodes", where=where, table="links")
        pair = frozenset((a, b))
        if pair in pairs:
            raise TableError(f"links row {pairs[pair]} already joins these two nodes", where=where, table="links")
        pairs[pair] = i + 1
        kind = str(_cell(row, "kind", where, "links")).strip()
        if kind not in LINK_KINDS:
            raise TableError(f"column 'kind' must be one of {', '.join(LINK_KINDS)} (got {kind!r})",
                             where=where, table="links")
        bw = _positive(row, "bandwidth_GBps", where, "links")
        lat = 0.0
        if not _empty(row.get("latency_us")):
            lat = _number(row["latency_us"], "latency_us", where, "links")
            if lat < 0:
                raise TableError(f"column {COLUMN_LABELS['latency_us']!r} must not be negative "
                                 f"({_got(lat, 'latency_us')})", where=where, table="links")
        lks.append(Link(a=a, b=b, kind=kind, bandwidth=bw * GB, latency=lat * US))
    if not devs:
        raise TableError("the devices table is empty: a topology needs at least one device", table="devices")
    topo = Topology(name=name, devices=tuple(devs), links=tuple(lks), switches=tuple(sws), description=description)
    try:
        return topo.validate()
    except LabError as exc:  # what the cell checks cannot see: the graph as a whole
        raise TableError(str(exc), table="links") from None


def tables_equal(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """The same cells (empty equals empty), whatever the index and dtypes."""
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return False
    for ra, rb in zip(a.to_dict("records"), b.to_dict("records")):
        for col in a.columns:
            x, y = ra[col], rb[col]
            if _empty(x) and _empty(y):
                continue
            if _empty(x) or _empty(y) or x != y:
                return False
    return True


# ---- names ------------------------------------------------------------------------------------

def free_name(base: str, taken: Iterable[Any]) -> str:
    """A name for a new device of type ``base`` that no device or switch uses yet: ``base`` itself
    if free, else ``base1``, ``base2``, ... (the first free one). Non-text entries of ``taken``
    (blank editor cells) are ignored."""
    used = {str(t).strip() for t in taken if isinstance(t, str)}
    if base not in used:
        return base
    k = 1
    while f"{base}{k}" in used:
        k += 1
    return f"{base}{k}"


def names_in(devices: pd.DataFrame, switches: pd.DataFrame) -> list[str]:
    """Every device and switch name of the tables (blank cells left out), in table order."""
    out = []
    for col in (devices["name"], switches["name"]):
        out += [str(n).strip() for n in col if isinstance(n, str) and n.strip()]
    return out


def with_device(tables: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame], device: Device,
                link: Link) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The tables with one more device row and one more link row (display units)."""
    devices, links, switches = tables
    one = Topology("one", (device,), (), ())
    dev_row = to_tables(one)[0]
    link_row = pd.DataFrame([{"a": link.a, "b": link.b, "kind": link.kind, "bandwidth_GBps": link.bandwidth / GB,
                              "latency_us": link.latency / US}], columns=LINK_COLUMNS)
    return _stack(devices, dev_row), _stack(links, link_row), switches.reset_index(drop=True)


def default_attach(devices: pd.DataFrame, switches: pd.DataFrame) -> str | None:
    """The node a new device is linked to unless the person picks one: the first switch, else the
    first device, else None (empty tables)."""
    switch_names = names_in(devices.iloc[:0], switches)
    return (switch_names or names_in(devices, switches) or [None])[0]


def add_catalogue_device(current: Topology, tables: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame], name: str,
                         device_type: str, attach: str, kind: str, bandwidth_GBps: float,
                         latency_us: float) -> EditOutcome:
    """The edit that adds a catalogue device of ``device_type`` named ``name`` to the tables, linked
    to ``attach`` by a ``kind`` link (bandwidth in GB/s, latency in µs), applied as
    :func:`apply_edit` applies an edit of the editor."""
    link = Link(name, attach, kind, bandwidth_GBps * GB, latency_us * US)
    return apply_edit(current, tables, with_device(tables, catalogue_device(name, device_type), link))


def _stack(top: pd.DataFrame, bottom: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``top`` then ``bottom`` (the same columns), number columns kept as numbers."""
    out = pd.DataFrame(top.to_dict("records") + bottom.to_dict("records"), columns=list(top.columns))
    for col in out.columns:
        if col in COLUMN_UNITS:
            out[col] = _numeric_or_object(out[col])
    return out


# ---- link kinds -------------------------------------------------------------------------------

def catalogue_numbers(kind: Any) -> tuple[float, float] | None:
    """(bandwidth in GB/s, latency in µs) of the link catalogue for ``kind``, or None."""
    if not isinstance(kind, str) or kind not in LINK_CATALOGUE:
        return None
    bw, lat, _ = LINK_CATALOGUE[kind]
    return bw / GB, lat / US


def _is(value: Any, target: float) -> bool:
    return not _empty(value) and isinstance(value, (int, float)) and math.isclose(float(value), target,
                                                                                    rel_tol=1e-9, abs_tol=1e-12)


def kind_change(old_kind: Any, new_kind: Any, bandwidth: Any, latency: Any) -> tuple[Any, Any]:
    """(bandwidth GB/s, latency µs) after a link's kind changes from ``old_kind`` to ``new_kind``.

    A number that is empty or still the old kind's catalogue value follows the kind (becomes the
    new kind's catalogue value); a number the person typed themselves stays."""
    new = catalogue_numbers(new_kind)
    if new is None or old_kind == new_kind:
        return bandwidth, latency
    old = catalogue_numbers(old_kind)
    out = []
    for value, i in ((bandwidth, 0), (latency, 1)):
        follows = _empty(value) or (old is not None and _is(value, old[i]))
        out.append(new[i] if follows else value)
    return out[0], out[1]


def fill_link_kinds(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """The links table ``after`` an edit, with the kind rule applied to every row whose kind changed
    (rows are matched by index label, as the editor keeps them; a new row's old kind is none).

    A bandwidth or latency changed in this same edit is the person's own and is kept."""
    out = after.copy()
    for col in ("bandwidth_GBps", "latency_us"):
        out[col] = out[col].astype("object")
    for label in out.index:
        new_kind = out.at[label, "kind"]
        old_row = before.loc[label] if label in before.index else None
        old_kind = old_row["kind"] if old_row is not None else None
        if _empty(new_kind) or new_kind == old_kind:
            continue
        bw, lat = out.at[label, "bandwidth_GBps"], out.at[label, "latency_us"]
        kept_bw = old_row is not None and not _same(old_row["bandwidth_GBps"], bw)
        kept_lat = old_row is not None and not _same(old_row["latency_us"], lat)
        nbw, nlat = kind_change(old_kind if not _empty(old_kind) else None, new_kind, bw, lat)
        if not kept_bw:
            out.at[label, "bandwidth_GBps"] = nbw
        if not kept_lat:
            out.at[label, "latency_us"] = nlat
    for col in ("bandwidth_GBps", "latency_us"):
        out[col] = _numeric_or_object(out[col])
    return out


def _same(x: Any, y: Any) -> bool:
    if _empty(x) and _empty(y):
        return True
    return not _empty(x) and not _empty(y) and x == y


def _numeric_or_object(col: pd.Series) -> pd.Series:
    try:
        return col.astype("float64")
    except (TypeError, ValueError):
        return col


# ---- one edit of the editor ------------------------------------------------------------------

@dataclass
class EditOutcome:
    """What one edit of the tables does: the tables to show next (``tables``), the topology every
    page uses next (``topology``), whether that changed (``applied``), and the message of a
    refused edit (``error``, a TableError; the tables then hold what the person typed)."""

    tables: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]
    topology: Topology
    applied: bool
    error: TableError | None = None


def apply_edit(current: Topology, before: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
               after: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]) -> EditOutcome:
    """One edit of the editor: ``before`` the tables it started from, ``after`` as edited.

    The links' kind rule is applied (:func:`fill_link_kinds`). A valid edit that changes the
    topology is applied and the tables become that topology's; a valid edit that changes nothing
    keeps what was typed (a blank new row stays to be filled); an invalid one keeps what was typed
    and the current topology, with its message."""
    devices, links, switches = (t.reset_index(drop=True) for t in after)
    links = fill_link_kinds(before[1], after[1]).reset_index(drop=True)
    try:
        topo = from_tables(current.name, devices, links, switches, current.description)
    except TableError as exc:
        return EditOutcome((devices, links, switches), current, False, exc)
    if topo == current:
        return EditOutcome((devices, links, switches), current, False)
    return EditOutcome(to_tables(topo), topo, True)


# ---- comparisons ------------------------------------------------------------------------------

AS_PCIE = "as_pcie"  # the comparison with the same cluster wired with PCIe through the host


def comparison_option_label(key: str) -> str:
    """How the comparison picker shows ``key``: :data:`AS_PCIE` or a preset's name (the view table's labels)."""
    return dict(VIEW["topo_cmp"].setting.names)[key]


def comparison_target(mine: Topology, key: str) -> tuple[Topology, str] | None:
    """The topology to compare ``mine`` with, and its label: ``mine`` with PCIe through the host
    for :data:`AS_PCIE` (None when ``mine`` has no CXL link, so nothing to replace), else the preset."""
    if key == AS_PCIE:
        return (as_pcie(mine), "PCIe through the host") if has_cxl(mine) else None
    return preset(key), f"preset {PRESET_LABELS[key].split(' ')[0]}"

def transfer_comparison(topologies: dict[str, Topology], nbytes: float,
                        exclude: Iterable[str] = ()) -> pd.DataFrame:
    """Transfer time of ``nbytes`` between every device pair present in all the given topologies
    (devices named in ``exclude`` left out).

    One row per (pair, topology): route, hops, bottleneck (bytes/s), latency (s), time (s).
    """
    names = None
    for t in topologies.values():
        s = set(t.device_names)
        names = s if names is None else names & s
    skip = set(exclude)
    order = [n for n in next(iter(topologies.values())).device_names if n in (names or set()) and n not in skip]
    rows = []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            for label, t in topologies.items():
                p = t.path(a, b)
                rows.append({"pair": f"{a}→{b}", "topology": label, "route": " → ".join(p.nodes),
                             "hops": p.hops, "bottleneck_Bps": p.bottleneck, "latency_s": p.latency,
                             "time_s": p.time(nbytes)})
    return pd.DataFrame(rows, columns=["pair", "topology", "route", "hops", "bottleneck_Bps", "latency_s", "time_s"])


#: The comparison's rows (and bars) cover the pairs of the first devices, at most this many pairs: at
#: the size caps every pair would be some 30,000 bars; the range of the ratio still covers every pair.
MAX_COMPARED_PAIRS = 66


def compare_designs(mine: Topology, other: Topology, nbytes: float, labels: tuple[str, str]) -> tuple[pd.DataFrame, tuple[float, float] | None]:
    """Device-to-device transfers on ``mine`` and ``other`` (the devices both have by name; host
    CPUs of ``mine`` left out unless that leaves fewer than two devices) and the range of
    other-time / mine-time over every pair (None when there is no pair). The rows are the pairs of
    the first devices, at most :data:`MAX_COMPARED_PAIRS`; ``df.attrs["pairs"]`` is (pairs in the
    rows, pairs in all)."""
    hosts = [d.name for d in mine.devices if d.type == "cpu"]
    common = set(mine.device_names) & set(other.device_names)
    exclude = hosts if len(common - set(hosts)) >= 2 else []
    order = [n for n in mine.device_names if n in common and n not in set(exclude)]
    shown = len(order)
    while shown * (shown - 1) // 2 > MAX_COMPARED_PAIRS:
        shown -= 1
    df = transfer_comparison({labels[0]: mine, labels[1]: other}, nbytes, [*exclude, *order[shown:]])
    pairs = len(order) * (len(order) - 1) // 2
    df.attrs["pairs"] = (shown * (shown - 1) // 2, pairs)
    if not pairs:
        return df, None
    upper = np.triu_indices(len(order), 1)  # each pair once, the earlier device first, as the rows have it
    t0 = np.array(mine.path_matrix(nbytes, order)["time"])[upper]
    t1 = np.array(other.path_matrix(nbytes, order)["time"])[upper]
    ratio = t1 / t0
    return df, (float(ratio.min()), float(ratio.max()))
