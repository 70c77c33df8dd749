"""A training step as a Chrome / Perfetto trace (the trace-event JSON format).

:func:`run_trace` turns a run's measured timings (the run store's per-worker rows) into complete
events ("ph": "X"), one track (``tid``) per worker, in one process (``pid`` 1, "measured"). Each
worker's step is laid out in the order the worker runs it, ending at the wall-clock time the worker
recorded for the end of that step:

    compute (measured) | device wait (emulated) | compression | idle | communication | link wait (emulated)

(the run store keeps the optimiser step inside ``t_compute``, so it is drawn with the compute at the
start of the step). With a :class:`lab.machine.predict.Prediction` the predicted step is added as a second
process (``pid`` 2, "predicted"), same tracks. Timestamps and durations are microseconds, as the
format wants. Open the file at https://ui.perfetto.dev or chrome://tracing.

The default is one step (the one whose duration is closest to the median after the warm-up), which
keeps the file to a few kilobytes; ``steps=(first, last)`` exports a range (at most
:data:`MAX_STEPS` steps).
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

from lab.errors import LabError
from lab.machine.fidelity import default_warmup
from lab.machine.predict import predict_step
from lab.scenario.document import Scenario

MAX_STEPS = 200
#: (run store column, event name, category). The order is the order within a step.
SEGMENTS = (
    ("compute", "compute", "compute"),
    ("emul_compute", "device wait (emulated)", "compute"),
    ("compress", "compression", "compression"),
    ("idle", "idle (waiting for the slowest)", "idle"),
    ("comm", "communication", "communication"),
    ("emul_comm", "link wait (emulated)", "communication"),
)
MEASURED_PID, PREDICTED_PID = 1, 2


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) and v > 0 else 0.0


def _parts_from_row(row: Any) -> dict[str, float]:
    """Seconds of each segment of one run-store row (emulated waits split out of compute and comm)."""
    emul_c, emul_m = _num(row.get("t_emul_compute")), _num(row.get("t_emul_comm"))
    return {"compute": max(0.0, _num(row.get("t_compute")) - emul_c), "emul_compute": emul_c,
            "compress": _num(row.get("t_compress")), "idle": _num(row.get("t_idle")),
            "comm": max(0.0, _num(row.get("t_comm")) - emul_m), "emul_comm": emul_m}


def _events(pid: int, tid: int, step: int, end_s: float, parts: dict[str, float], kind: str) -> list[dict]:
    total = sum(parts.values())
    t = end_s - total
    out = []
    for key, name, cat in SEGMENTS:
        d = parts.get(key, 0.0)
        if d <= 0:
            continue
        label = "emulated" if key.startswith("emul") else kind
        out.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": round(t * 1e6, 3),
                    "dur": round(d * 1e6, 3), "args": {"step": step, "seconds": d, "kind": label}})
        t += d
    return out


def _meta(pid: int, name: str, workers: Sequence[int], sort: int) -> list[dict]:
    ev = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}},
          {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": sort}}]
    for w in workers:
        ev.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": int(w), "args": {"name": f"worker {w}"}})
        ev.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": int(w), "args": {"sort_index": int(w)}})
    return ev


def pick_step(metrics: Any, warmup: int | None = None) -> int:
    """The step after the warm-up whose duration (whole job) is closest to the median."""

    job = metrics[metrics.worker == -1].sort_values("step")
    job = job[job.step >= 1]
    if job.empty:
        per = metrics[metrics.worker >= 0]
        if per.empty:
            raise LabError("the run has no measured steps yet", where="trace export")
        return int(per.step.max())
    last = int(job.step.max())
    warmup = default_warmup(last) if warmup is None else warmup
    dt = job.wall.diff()
    ok = (job.step > warmup) & dt.notna() & (job.step.diff() == 1)
    if not ok.any():
        return last
    d = dt[ok]
    med = float(d.median())
    return int(job.step[ok].iloc[int((d - med).abs().values.argmin())])


def run_trace(metrics: Any, *, steps: tuple[int, int] | None = None, prediction: Any = None,
              name: str = "run", run_id: str | None = None) -> dict:
    """The trace-event document (a dict; :func:`to_json` writes it) of a run's measured steps."""
    if metrics is None or len(metrics) == 0:
        raise LabError("the run has no measurements to export yet", where="trace export")
    per = metrics[metrics.worker >= 0]
    if per.empty:
        raise LabError("the run has no per-worker measurements to export", where="trace export")
    if steps is None:
        s = pick_step(metrics)
        first, last = s, s
    else:
        first, last = int(steps[0]), int(steps[1])
        if last < first:
            raise LabError(f"the step range {first}..{last} is empty", where="trace export")
        if last - first + 1 > MAX_STEPS:
            raise LabError(f"export at most {MAX_STEPS} steps at once (asked for {last - first + 1})",
                           where="trace export")
    sel = per[(per.step >= first) & (per.step <= last)].sort_values(["step", "worker"])
    if sel.empty:
        have = f"{int(per.step.min())}..{int(per.step.max())}"
        raise LabError(f"no measured steps in {first}..{last}; the run has steps {have}", where="trace export")
    workers = sorted(int(w) for w in sel.worker.unique())
    t0 = None
    events: list[dict] = []
    for _, row in sel.iterrows():
        parts = _parts_from_row(row)
        end = _num(row.get("wall"))
        start = end - sum(parts.values())
        t0 = start if t0 is None else min(t0, start)
        events += _events(MEASURED_PID, int(row["worker"]), int(row["step"]), end, parts, "measured")
    for e in events:  # start the trace at 0
        e["ts"] = round(e["ts"] - t0 * 1e6, 3)
    meta = _meta(MEASURED_PID, f"{name}: measured (run store)", workers, 0)
    if prediction is not None:
        pw = list(getattr(prediction, "per_worker", ()))
        ptracks = [int(w.worker) for w in pw]
        meta += _meta(PREDICTED_PID, f"{name}: predicted (cost model)", ptracks, 1)
        for w in pw:
            parts = {"compute": max(0.0, w.compute - w.emul_compute), "emul_compute": w.emul_compute,
                     "compress": w.compress, "idle": w.idle, "comm": max(0.0, w.comm - w.emul_comm),
                     "emul_comm": w.emul_comm}
            events += _events(PREDICTED_PID, int(w.worker), first, w.step, parts, "modelled")
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"run": name, "run_id": run_id or "", "steps": [first, last],
                          "source": "hetlab run store (measured); lab.machine.predict (modelled)",
                          "units": "microseconds"}}


def to_json(doc: dict) -> str:
    return json.dumps(doc, separators=(",", ":"))


def store_trace(store: Any, run_id: str, *, steps: tuple[int, int] | None = None, profile: Any = None) -> dict:
    """:func:`run_trace` of a stored run (with the prediction when a machine profile is given)."""

    run = store.get_run(run_id)
    pred = None
    if profile is not None:

        pred = predict_step(Scenario.from_dict(run["scenario"]), profile)
    return run_trace(store.metrics(run_id), steps=steps, prediction=pred, name=run["name"], run_id=run_id)


__all__ = ["run_trace", "store_trace", "to_json", "pick_step", "SEGMENTS", "MAX_STEPS"]
