"""The Topology page's editor: its state kept between runs (the tables, a version that starts the data editors
afresh, the topology they produced, a refused edit), what a preset, an upload, an edit of the tables or the
add-a-device popover does to it, and the checks before a device is added.

Functions that change the state take the session as a plain mapping, so this module stays free of streamlit;
messages that quote user text reach the page as notices (shown as text).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, MutableMapping

from lab.errors import LabError
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario
from lab.scenario.topology import DEVICE_TYPES, LINK_KINDS, OP_CLASS_LABELS, OP_CLASSES, Topology
from lab.view.section import Notice, Section
from lab.view.state import VIEW, fit_choice
from lab.view.topology_tables import (COLUMN_LABELS, EditOutcome, add_catalogue_device, apply_edit, default_attach,
                                      free_name, kind_change, names_in, to_tables)

#: Where the page keeps the editor's state in the session (see :func:`fresh_editor`).
EDITOR = "topo_editor"

#: Where the page keeps why an uploaded file was not loaded, until the file is removed or another topology loaded.
UPLOAD_ERROR = "topo_upload_error"

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


def editor_columns(table: str) -> dict[str, dict[str, Any]]:
    """How the editor of ``table`` ("devices", "switches" or "links") shows its columns, as
    :func:`ui.column_config` takes them: column -> {"kind": "text", "select" or "number", and that kind's
    keywords}; a column left out keeps streamlit's default."""
    if table == "devices":
        return {"name": {"kind": "text", "label": "name", "required": True},
                "type": {"kind": "select", "label": "type", "options": list(DEVICE_TYPES), "required": True},
                "pool": {"kind": "text", "label": "pool"},
                "memory_GB": {"kind": "number", "label": COLUMN_LABELS["memory_GB"], "format": "%.3g"},
                **{f"{op}_TFLOPs": {"kind": "number", "label": COLUMN_LABELS[f"{op}_TFLOPs"],
                                    "help": OP_CLASS_LABELS[op], "format": "%.4g"} for op in OP_CLASSES}}
    if table == "switches":
        return {"name": {"kind": "text", "label": "switch"}}
    return {"kind": {"kind": "select", "label": "kind", "options": list(LINK_KINDS)},
            "bandwidth_GBps": {"kind": "number", "label": COLUMN_LABELS["bandwidth_GBps"], "format": "%.4g"},
            "latency_us": {"kind": "number", "label": COLUMN_LABELS["latency_us"], "format": "%.4g"}}


def edited(state: Any) -> bool:
    """Whether a data editor's widget state holds an edit (changed, added or deleted rows)."""
    return bool(state) and any(state.get(k) for k in ("edited_rows", "added_rows", "deleted_rows"))


def any_edited(session: Mapping[str, Any], version: int) -> bool:
    """Whether any of the three editors of ``version`` holds an edit."""
    return any(edited(session.get(editor_key(t, version))) for t in EDITOR_KEYS)


def refusal(ed: Mapping[str, Any], table: str) -> Section | None:
    """The message of the editor's refused edit (``ed["error"]``: table, message) above ``table``, or None when
    there is none or it is about another table (one about the whole topology goes above the devices)."""
    error = ed.get("error")
    if not error or (error[0] or "devices") != table:
        return None
    return Section(f"topo_refused_{table}", notices=(Notice(
        "This edit is not applied, so every page keeps the last valid topology. " + error[1]
        + ". Fix the cell, or discard the edit.", "error", ":material/error:"),))


# ---- what changes the editor --------------------------------------------------------------------

def editor_for(session: MutableMapping[str, Any], topo: Topology) -> dict:
    """The editor's state for the scenario's topology: kept while its tables produced ``topo``, made afresh on a
    first visit or after a preset, an upload, a link or a lesson changed the topology."""
    ed = session.get(EDITOR)
    if ed is None or ed["produced"] != topo:
        ed = session[EDITOR] = fresh_editor(topo, ed["version"] if ed else 0)
    return ed


def flash(ed: dict) -> list[Section]:
    """The one-run message of the last change (an applied edit, an added device), taken from the editor's state."""
    text = ed.pop("flash", None)
    return [Section("topo_flash", notices=(Notice(text, "success", ":material/check:"),))] if text else []


def discard(session: MutableMapping[str, Any], topo: Topology) -> None:
    """Drop a refused edit: the editors start again from the topology every page uses."""
    session[EDITOR] = fresh_editor(topo, session[EDITOR]["version"])


def _start_over(session: MutableMapping[str, Any], topo: Topology) -> None:
    """A new topology from outside the editor (a preset, an upload): fresh tables, no upload error, and the
    add-a-device popover's values forgotten."""
    session[EDITOR] = fresh_editor(topo, session[EDITOR]["version"] if EDITOR in session else 0)
    session.pop(UPLOAD_ERROR, None)
    forget_new_device(session)


def load_preset(session: MutableMapping[str, Any], sc: Scenario, key: str) -> Scenario:
    """The scenario with preset ``key``'s topology (named after it), the editor started over."""
    topo = preset(key)
    _start_over(session, topo)
    return sc.replace(name=f"{topo.name}-scenario", topology=topo)


def take_upload(session: MutableMapping[str, Any], upload: Any) -> Scenario | None:
    """The scenario an uploaded file (``file_id``, ``name``, ``getvalue()``) holds, read once per file, or None
    (nothing new, or a file that was not loaded: why is kept for :func:`upload_refusal`). No file (removed, or the
    page was left: the uploader forgets its file then) drops the last file's error too."""
    if upload is None:
        session.pop(UPLOAD_ERROR, None)
        return None
    if session.get("topo_upload_seen") == upload.file_id:
        return None
    session["topo_upload_seen"] = upload.file_id
    loaded, session[UPLOAD_ERROR] = read_upload(upload.name, upload.getvalue())
    if loaded is not None:
        _start_over(session, loaded.topology)
    return loaded


def upload_refusal(session: Mapping[str, Any]) -> list[Section]:
    """Why the uploaded file was not loaded, while it is there."""
    error = session.get(UPLOAD_ERROR)
    return [Section("topo_upload_refused", notices=(Notice(error + " The current topology is unchanged.", "error",
                                                           ":material/error:"),))] if error else []


def take_edit(session: MutableMapping[str, Any], sc: Scenario, edited: tuple) -> Scenario:
    """The scenario after an edit of the three tables (devices, links, switches as edited): with the edit's
    topology when it was applied, else as it was (a refused edit is kept in the editor with its message)."""
    ed = session[EDITOR]
    out = apply_edit(sc.topology, (ed["devices"], ed["links"], ed["switches"]), edited)
    session[EDITOR] = after_edit(out, ed["version"])
    return sc.replace(topology=out.topology) if out.applied else sc


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
    session.setdefault("topo_new_type", VIEW["topo_new_type"].setting.default)
    if needs_new_name(session.get("topo_new_name"), session.get("_topo_new_taken"), taken):
        propose_name(session)  # a name the topology now uses is replaced; one the person types stays, to be refused
    session["_topo_new_taken"] = taken
    if session.get("topo_new_attach") not in taken:
        session["topo_new_attach"] = default_attach(ed["devices"], ed["switches"])
    if "topo_new_kind" not in session:
        session["topo_new_kind"] = VIEW["topo_new_kind"].setting.default
        session["_topo_new_kind_was"] = None
        follow_kind(session)
    return taken


def add_refusal(name: str, taken: Iterable[str], pending_edit: bool) -> str | None:
    """Why a device named ``name`` (stripped) cannot be added, or None: no name, a name in use
    (with a free one proposed), or an edit of the tables that is not applied."""
    taken = list(taken)
    if not name:
        return "Give the new device a name."
    if name in taken:
        return (f"Nothing was added: a device or switch named “{name}” already exists, and every "
                f"device and switch needs its own name. “{free_name(name, taken)}” is free.")
    if pending_edit:
        return "Nothing was added: the tables hold an edit that is not applied; fix or discard it first."
    return None


def added(name: str) -> str:
    """The message after a device named ``name`` was added."""
    return f"Added “{name}”: every page now uses this topology."


def add_device(session: MutableMapping[str, Any], sc: Scenario) -> tuple[Scenario | None, list[Section]]:
    """Add the popover's device (its type, name, the node it links to, the link's kind, bandwidth and latency) to
    the scenario's topology: (the new scenario, []) or (None, why nothing was added)."""
    ed = session[EDITOR]
    tables = (ed["devices"], ed["links"], ed["switches"])
    name = session["topo_new_name"].strip()
    problem = add_refusal(name, names_in(ed["devices"], ed["switches"]), bool(ed.get("error")))
    if problem is None:
        out = add_catalogue_device(sc.topology, tables, name, session["topo_new_type"], session["topo_new_attach"],
                                   session["topo_new_kind"], session["topo_new_bw"], session["topo_new_lat"])
        problem = f"Nothing was added: {out.error}." if out.error else None
    if problem is not None:
        return None, [Section("topo_add_refused", notices=(Notice(problem, "error", ":material/error:"),))]
    session[EDITOR] = editor_after(out, ed["version"], added(name))
    return sc.replace(topology=out.topology), []


# ---- the route's ends and the upload ---------------------------------------------------------------------

def route_ends(names: list[str], value: Callable[[str], Any]) -> list[tuple[str, str, str | None]]:
    """The route pickers (``topo_from``, ``topo_to``) whose choice is no longer a device: (key, the
    new choice, a notice naming the old one or None if there was none). ``value(key)`` is the
    current choice; the fallbacks are the first and the second device."""
    out = []
    for key, fallback, what in (("topo_from", names[0], "starts"), ("topo_to", names[min(1, len(names) - 1)], "ends")):
        was = value(key)
        now, changed = fit_choice(was, names, fallback)
        if changed:
            out.append((key, now, f"“{was}” is no longer a device, so the route {what} at “{now}”." if was else None))
    return out


def read_upload(name: str, data: bytes) -> tuple[Scenario | None, str | None]:
    """An uploaded scenario or topology JSON file: (the Scenario, None), or (None, why it was not loaded)."""
    try:
        return Scenario.from_json(data), None
    except LabError as exc:
        return None, f"{name} was not loaded: {exc}"
