"""A placement run's activation memory: each process's peak of bytes saved for the backward, modelled from the
operator graph and the run's schedule (:mod:`lab.modelled.placement.memory`), beside what the run counted with
the same hook (``saved_peak`` in the run's facts)."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch

from lab.errors import LabError
from lab.memo import SharedCache
from lab.modelled.placement.memory import micro_rows, peaks, saved_by_op
from lab.scenario.document import Scenario
from lab.train import placement_run

_MODELLED = SharedCache(32)


def modelled_peaks(sc: Scenario, dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """Each device's modelled peak (bytes) of the scenario's placement run, under its schedule, its tensors in
    ``dtype`` (a run's own: float32)."""
    sc = placement_run.resolved(sc)
    got = _MODELLED.get((sc.to_json(indent=None), str(dtype)), lambda: _refused_or(sc, dtype))
    if isinstance(got, LabError):  # kept too: the run view asks again every second while a run is live
        raise got.with_traceback(None)
    return got


def _refused_or(sc: Scenario, dtype: torch.dtype) -> dict[str, float] | LabError:
    try:
        return _peaks(sc, dtype)
    except LabError as exc:
        return exc


def _peaks(sc: Scenario, dtype: torch.dtype) -> dict[str, float]:
    tr = sc.training
    ds, model = placement_run.model_for(sc)
    plan = placement_run.resolve(sc, model, ds.in_features)
    cut, _ = placement_run.pieces(model, plan)
    owner = {a: op.name for op in plan.graph.ops for a in op.absorbed}
    saved = saved_by_op(model, ds.in_features, owner, dtype)
    rows = micro_rows(tr.batch_size, tr.micro_batches)
    piece_bytes = [[saved.piece(p.ops, r) for r in rows] for p in cut]
    return peaks(tr.schedule, plan.devices, [p.device for p in cut], piece_bytes, tr.micro_batches)


def memory_rows(devices: Sequence[str], modelled: Mapping[str, float] | None,
                measured: Sequence[float] | None) -> list[dict[str, Any]]:
    """Per device: the modelled and the measured peak (bytes; None where unknown) and measured / modelled - 1."""
    out = []
    for i, d in enumerate(devices):
        mod = (modelled or {}).get(d)
        mea = measured[i] if measured is not None and i < len(measured) else None
        err = (mea / mod - 1.0) if mod and mea is not None else None
        out.append({"device": d, "modelled": mod, "measured": mea, "error": err})
    return out


def memory_error(rows: Sequence[Mapping[str, Any]]) -> float:
    """Geometric-mean error of the measured peaks against the modelled, exp(mean |ln(measured / modelled)|) - 1,
    over the devices that hold something (nan when none)."""
    logs = [abs(math.log(r["measured"] / r["modelled"])) for r in rows
            if r.get("modelled") and r.get("measured")]
    return math.exp(sum(logs) / len(logs)) - 1.0 if logs else math.nan
