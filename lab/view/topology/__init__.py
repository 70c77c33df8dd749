"""The Topology page's model: the editor of the cluster's tables and what changes it (``editor``), and what the page
shows of the cluster (``sections``). The tables themselves are :mod:`lab.view.topology_tables`."""

from lab.view.topology.editor import (EDITOR, EDITOR_KEYS, NEW_DEVICE_KEYS, UPLOAD_ERROR, add_device, add_refusal,
                                      added, after_edit, any_edited, discard, edited, editor_after, editor_columns,
                                      editor_for, editor_key, flash, follow_kind, forget_new_device, fresh_editor,
                                      load_preset, needs_new_name, prepare_new_device, propose_name, read_upload,
                                      refusal, route_ends, take_edit, take_upload, upload_refusal)
from lab.view.topology.sections import (CLAIM, EDIT, INTRO, ROUTES, comparison, comparison_text, device_source,
                                        heatmap, link_source, network, route)

__all__ = ["EDITOR", "EDITOR_KEYS", "NEW_DEVICE_KEYS", "UPLOAD_ERROR", "add_device", "add_refusal", "added",
           "after_edit", "any_edited", "discard", "edited", "editor_after", "editor_columns", "editor_for",
           "editor_key", "flash", "follow_kind", "forget_new_device", "fresh_editor", "load_preset", "needs_new_name",
           "prepare_new_device", "propose_name", "read_upload", "refusal", "route_ends", "take_edit", "take_upload",
           "upload_refusal", "CLAIM", "EDIT", "INTRO", "ROUTES", "comparison", "comparison_text", "device_source",
           "heatmap", "link_source", "network", "route"]
