"""Bring your own network: an ONNX file uploaded on the Placement page becomes one of the page's models (checked,
converted and kept by :mod:`lab.scenario.onnx_models`); the model box offers the presets, the zoo and every
network this server holds, and names a link's network it does not hold."""

from __future__ import annotations

from typing import Any, Mapping, MutableMapping

from lab.errors import LabError
from lab.scenario import onnx_models
from lab.scenario.names import MODEL_LABELS, MODELS
from lab.train.data import IN_FEATURES
from lab.view.section import Notice, Section

RESULT = "pl_upload_result"
SEEN = "pl_upload_seen"


def take(session: MutableMapping[str, Any], upload: Any) -> str | None:
    """The model name of an uploaded file (``file_id``, ``name``, ``getvalue()``), read once per file, or None (no
    file, the same file again, or a refused one: why is kept for :func:`notes`)."""
    if upload is None:
        session.pop(RESULT, None)
        return None
    if session.get(SEEN) == upload.file_id:
        return None
    session[SEEN] = upload.file_id
    try:
        info = onnx_models.keep(upload.getvalue(), str(upload.name))
    except LabError as exc:
        session[RESULT] = ("error", f"{exc} The model shown is unchanged.")
        return None
    session[RESULT] = ("success", f"{info.filename}: {info.operators} ONNX operators, {info.params:,} weights, "
                                  f"samples of shape {info.sample_shape}, fed {onnx_models.feed(info.sample_shape, IN_FEATURES)[1]}. "
                                  f"It is the model below, kept on this server "
                                  f"as {info.name} (a link names it so).")
    return info.name


def notes(session: Mapping[str, Any]) -> list[Section]:
    """What became of the last file uploaded, while it is there."""
    got = session.get(RESULT)
    return [Section("pl_upload_note", notices=(Notice(got[1], got[0]),))] if got else []


def options(current: str | None = None) -> tuple[str, ...]:
    """The models the page offers: the presets and the zoo, every uploaded network this server holds, and the
    one the view names (a link's network this server does not hold is named, and refused where it is built)."""
    names = [*MODELS, *(m.name for m in onnx_models.kept())]
    if current and current not in names and onnx_models.is_uploaded_model(current):
        names.append(current)
    return tuple(names)


def label(name: str) -> str:
    """A model's name in the box."""
    if name in MODEL_LABELS:
        return MODEL_LABELS[name]
    held = {m.name: m for m in onnx_models.kept()}
    return held[name].label if name in held else f"{name} (an uploaded network this server does not hold)"


def control_options(key: str, current: Any = None) -> dict:
    """The options and names the page's control ``key`` takes beside its table entry."""
    return {"options": options(current), "format_func": label} if key == "pl_model" else {}


__all__ = ["RESULT", "control_options", "label", "notes", "options", "take"]
