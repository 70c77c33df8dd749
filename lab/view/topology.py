"""The Topology page's logic that is neither a widget nor a figure: the editor's state kept between
runs, the checks before a device is added, the route's ends, an uploaded file, and the sentences
built from the model's numbers.

Messages quote user text through ``quote`` (the page passes its Markdown escaper), so this module
stays free of streamlit.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, MutableMapping

from lab.errors import LabError
from lab.scenario.document import Scenario
from lab.view.topology_tables import (
    COLUMN_LABELS,
    EditOutcome,
    default_attach,
    free_name,
    kind_change,
    names_in,
    to_tables,
)
from lab.scenario.topology import (
    DEVICE_TYPES,
    LINK_KINDS,
    OP_CLASS_LABELS,
    OP_CLASSES,
    Topology,
)
from lab.view.state import VIEW, fit_choice

Quote = Callable[[str], str]

#: Where the page keeps the editor's state in the session (see :func:`fresh_editor`).
EDITOR = "topo_editor"

#: The table each data editor shows, and the short name in its widget key ``topo_{short}_{version}``.
EDITOR_KEYS = {"devices": "dev", "switches": "sw", "links": "link"}


def editor_key(table: str, version: int) -> str:
    """The widget key of ``table``'s editor: a new version starts an editor with no edits."""
    return f"topo_{EDITOR_KEYS[table]}_{version}"


# ---- the editor's state -------------------------------------------------------------------------

def fresh_editor(topo: Topology, version: int) -> dict:
    """The editor's state for ``topo`` as it is: its tables, a new version, no refused edit."""
    d, l, s = to_tables(topo)
    return {"devices": d, "links": l, "switches": s, "version": version + 1, "produced": topo, "error": None}


def editor_after(out: EditOutcome, version: int, flash: str | None = None) -> dict:
    """The editor's state after an edit's outcome ``out``: its tables, a new version, the topology
    it produced, its refusal as (table, message) if any, and ``flash`` (a one-run message) if given."""
    d, l, s = out.tables
    state = {"devices": d, "links": l, "switches": s, "version": version + 1, "produced": out.topology,
             "error": (out.error.table, str(out.error)) if out.error else None}
    if flash is not None:
        state["flash"] = flash
    return state


def after_edit(out: EditOutcome, version: int) -> dict:
    """The editor's state after an edit of the tables, announcing it when it was applied."""
    return editor_after(out, version, "Edit applied: every page now uses this topology." if out.applied else None)


def editor_columns(table: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """How the editor of ``table`` ("devices", "switches" or "links") shows its columns: column ->
    (kind, keywords), kind "text", "select" or "number", the keywords those of streamlit's column
    config of that kind; a column left out keeps streamlit's default."""
    if table == "devices":
        return {"name": ("text", {"label": "name", "required": True}),
                "type": ("select", {"label": "type", "options": list(DEVICE_TYPES), "required": True}),
                "pool": ("text", {"label": "pool"}),
                "memory_GB": ("number", {"label": COLUMN_LABELS["memory_GB"], "format": "%.3g"}),
                **{f"{op}_TFLOPs": ("number", {"label": COLUMN_LABELS[f"{op}_TFLOPs"], "help": OP_CLASS_LABELS[op],
                                               "format": "%.4g"}) for op in OP_CLASSES}}
    if table == "switches":
        return {"name": ("text", {"label": "switch"})}
    return {"kind": ("select", {"label": "kind", "options": list(LINK_KINDS)}),
            "bandwidth_GBps": ("number", {"label": COLUMN_LABELS["bandwidth_GBps"], "format": "%.4g"}),
            "latency_us": ("number", {"label": COLUMN_LABELS["latency_us"], "format": "%.4g"})}


def edited(state: Any) -> bool:
    """Whether a data editor's widget state holds an edit (changed, added or deleted rows)."""
    return bool(state) and any(state.get(k) for k in ("edited_rows", "added_rows", "deleted_rows"))


def any_edited(session: Mapping[str, Any], version: int) -> bool:
    """Whether any of the three editors of ``version`` holds an edit."""
    return any(edited(session.get(editor_key(t, version))) for t in EDITOR_KEYS)


def refusal(error: tuple[str | None, str] | None, table: str, quote: Quote) -> str | None:
    """The message shown above ``table`` for the refused edit ``error`` (table, message), or None
    when there is none or it is about another table (one about the whole topology goes above the
    devices)."""
    if not error or (error[0] or "devices") != table:
        return None
    return ("This edit is not applied, so every page keeps the last valid topology. " + quote(error[1])
            + ". Fix the cell, or discard the edit.")


# ---- adding a device ------------------------------------------------------------------------------

def needs_new_name(name: str | None, was_taken: Any, taken: list[str]) -> bool:
    """Whether the popover proposes a name again: none yet, or the names in use changed and the
    current one is now among them (a name the person types stays, to be refused)."""
    return name is None or (was_taken != taken and name.strip() in taken)


def propose_name(session: MutableMapping[str, Any]) -> None:
    """Propose a free name for a new device of the chosen type (``topo_new_type``), free among the
    editor's tables."""
    ed = session[EDITOR]
    session["topo_new_name"] = free_name(session["topo_new_type"], names_in(ed["devices"], ed["switches"]))


def follow_kind(session: MutableMapping[str, Any]) -> None:
    """The new link's numbers after its kind (``topo_new_kind``) changed: the kind's catalogue
    bandwidth and latency, unless the person typed their own (:func:`kind_change`)."""
    bw, lat = kind_change(session.get("_topo_new_kind_was"), session["topo_new_kind"], session.get("topo_new_bw"),
                          session.get("topo_new_lat"))
    session["topo_new_bw"], session["topo_new_lat"] = float(bw), float(lat)
    session["_topo_new_kind_was"] = session["topo_new_kind"]


NEW_DEVICE_KEYS = ("topo_new_type", "topo_new_name", "topo_new_attach", "topo_new_kind", "topo_new_bw", "topo_new_lat",
                   "_topo_new_kind_was", "_topo_new_taken")


def forget_new_device(session: MutableMapping[str, Any]) -> None:
    """Drop the add-a-device popover's values before a rerun that a new topology starts: that run stops before
    the popover is drawn, Streamlit then forgets its widgets while their keys linger, and the popover came back
    showing its first type beside another type's caption with no name and no link numbers.
    :func:`prepare_new_device` fills them in afresh."""
    for k in NEW_DEVICE_KEYS:
        session.pop(k, None)


def prepare_new_device(session: MutableMapping[str, Any]) -> list[str]:
    """Set the add-a-device popover's choices before its widgets are drawn, and return the names in
    use: type gpu at first; a proposed name (again when the topology now uses it); the node to link
    to (the first switch, else device, when none is chosen or it is gone); the first link kind with
    its catalogue numbers."""
    ed = session[EDITOR]
    taken = names_in(ed["devices"], ed["switches"])
    session.setdefault("topo_new_type", VIEW["topo_new_type"].spec.default)
    if needs_new_name(session.get("topo_new_name"), session.get("_topo_new_taken"), taken):
        propose_name(session)  # a name the topology now uses is replaced; one the person types stays, to be refused
    session["_topo_new_taken"] = taken
    if session.get("topo_new_attach") not in taken:
        session["topo_new_attach"] = default_attach(ed["devices"], ed["switches"])
    if "topo_new_kind" not in session:
        session["topo_new_kind"] = VIEW["topo_new_kind"].spec.default
        session["_topo_new_kind_was"] = None
        follow_kind(session)
    return taken


def add_refusal(name: str, taken: Iterable[str], pending_edit: bool, quote: Quote) -> str | None:
    """Why a device named ``name`` (stripped) cannot be added, or None: no name, a name in use
    (with a free one proposed), or an edit of the tables that is not applied."""
    taken = list(taken)
    if not name:
        return "Give the new device a name."
    if name in taken:
        return (f"Nothing was added: a device or switch named “{quote(name)}” already exists, and every "
                f"device and switch needs its own name. “{quote(free_name(name, taken))}” is free.")
    if pending_edit:
        return "Nothing was added: the tables hold an edit that is not applied; fix or discard it first."
    return None


def added(name: str, quote: Quote) -> str:
    """The message after a device named ``name`` was added."""
    return f"Added “{quote(name)}”: every page now uses this topology."


# ---- the route and the upload ---------------------------------------------------------------------

def route_ends(names: list[str], value: Callable[[str], Any],
               quote: Quote) -> list[tuple[str, str, str | None]]:
    """The route pickers (``topo_from``, ``topo_to``) whose choice is no longer a device: (key, the
    new choice, a notice naming the old one or None if there was none). ``value(key)`` is the
    current choice; the fallbacks are the first and the second device."""
    out = []
    for key, fallback, what in (("topo_from", names[0], "starts"), ("topo_to", names[min(1, len(names) - 1)], "ends")):
        was = value(key)
        now, changed = fit_choice(was, names, fallback)
        if changed:
            out.append((key, now, f"“{quote(was)}” is no longer a device, so the route {what} at "
                                  f"“{quote(now)}”." if was else None))
    return out


def read_upload(name: str, data: bytes) -> tuple[Scenario | None, str | None]:
    """An uploaded scenario or topology JSON file: (the Scenario, None), or (None, why it was not loaded)."""
    try:
        return Scenario.from_json(data), None
    except LabError as exc:
        return None, f"{name} was not loaded: {exc}"


# ---- the comparison -------------------------------------------------------------------------------

def comparison_text(span: tuple[float, float], size_mb: float, other_label: str, badge: str,
                    pairs: tuple[int, int] | None = None) -> str:
    """The sentence under the comparison: how many times as long the transfers take on the other
    design (``span``, the range of other-time / mine-time) and whether one is faster for every pair;
    with ``pairs`` (pairs drawn, pairs in all) when the figure draws only some, a sentence saying so."""
    lo, hi = span
    times = f"{lo:.2f}×" if hi - lo < 0.005 else f"{lo:.2f}× to {hi:.2f}×"
    verdict = ("this cluster is faster for every pair" if lo > 1.0005 else
               "this cluster is slower for every pair" if hi < 0.9995 else
               "neither is faster for every pair")
    drawn = (f" The bars show the first {pairs[0]:,} of the {pairs[1]:,} pairs; the range above covers them all."
             if pairs and pairs[0] < pairs[1] else "")
    return (f"In this model, device-to-device transfers of {size_mb:g} MB take {times} as long with "
            f"{other_label} as on this cluster: {verdict}. The gap comes from the link numbers in "
            f"the tables, not from a measurement {badge}.{drawn}")
