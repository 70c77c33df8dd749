"""lab.machine.trace_export: valid trace-event JSON, one track per worker, durations equal to the run store's."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lab.errors import LabError
from lab.machine.calibrate import synthetic_profile
from lab.machine.predict import predict_step
from lab.machine.trace_export import (
    MAX_STEPS,
    pick_step,
    run_trace,
    store_trace,
    to_json,
)
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training

COLS = ("t_compute", "t_emul_compute", "t_compress", "t_idle", "t_comm", "t_emul_comm")


def metrics(workers=3, steps=5) -> pd.DataFrame:
    rows, wall = [], 0.0
    for s in range(1, steps + 1):
        wall += 0.02 + (0.05 if s == 2 else 0.0)
        rows.append({"step": s, "worker": -1, "wall": wall})
        for w in range(workers):
            rows.append({"step": s, "worker": w, "t_compute": 0.004 + 0.001 * w, "t_emul_compute": 0.001 * w,
                         "t_compress": 0.0005, "t_idle": 0.002 - 0.0005 * w, "t_comm": 0.006, "t_emul_comm": 0.002,
                         "wall": wall - 0.0001 * w})
    return pd.DataFrame(rows)


def events(doc, pid=1):
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]


def test_trace_is_valid_trace_event_json_with_one_track_per_worker():
    doc = json.loads(to_json(run_trace(metrics(), steps=(1, 5), name="r")))
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] == "ms"
    xs = events(doc)
    for e in xs:
        assert set(e) >= {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
        assert e["dur"] >= 0 and e["ts"] >= 0
    assert {e["tid"] for e in xs} == {0, 1, 2}
    names = {(e["tid"], e["args"]["name"]) for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names == {(0, "worker 0"), (1, "worker 1"), (2, "worker 2")}
    assert any(e["name"] == "process_name" for e in doc["traceEvents"])
    assert min(e["ts"] for e in xs) == 0.0


def test_durations_and_order_match_the_run_store():
    m = metrics()
    doc = run_trace(m, steps=(4, 4))
    for w in range(3):
        row = m[(m.step == 4) & (m.worker == w)].iloc[0]
        ev = sorted([e for e in events(doc) if e["tid"] == w], key=lambda e: e["ts"])
        want = [("compute", row.t_compute - row.t_emul_compute), ("device wait (emulated)", row.t_emul_compute),
                ("compression", row.t_compress), ("idle (waiting for the slowest)", row.t_idle),
                ("communication", row.t_comm - row.t_emul_comm), ("link wait (emulated)", row.t_emul_comm)]
        want = [(n, d) for n, d in want if d > 0]
        assert [e["name"] for e in ev] == [n for n, _ in want]
        for e, (_, d) in zip(ev, want):
            assert e["dur"] == pytest.approx(d * 1e6, abs=1e-3)
        for a, b in zip(ev, ev[1:]):  # back to back, no overlap
            assert b["ts"] == pytest.approx(a["ts"] + a["dur"], abs=2e-3)
        # every worker's step ends at its recorded wall time (relative to the trace start)
        starts = {}
        for r in m[(m.step == 4)].itertuples():
            if r.worker >= 0:
                starts[r.worker] = r.wall - sum(getattr(r, c) for c in ("t_compute", "t_compress", "t_idle", "t_comm"))
        t0 = min(starts.values())
        assert ev[-1]["ts"] + ev[-1]["dur"] == pytest.approx((row.wall - t0) * 1e6, abs=1e-2)


def test_default_is_one_typical_step_and_small():
    m = metrics(steps=40)
    s = pick_step(m, warmup=1)
    assert s != 2  # the slow step is not the typical one
    doc = run_trace(m)
    assert doc["otherData"]["steps"] == [pick_step(m), pick_step(m)]
    assert len(to_json(doc)) < 20_000


def test_prediction_adds_a_second_process():
    sc = Scenario(name="t", topology=preset("cxl"), training=Training(model="mlp", workers=3))
    pred = predict_step(sc, synthetic_profile())
    doc = run_trace(metrics(), steps=(1, 1), prediction=pred)
    pe = events(doc, pid=2)
    assert {e["tid"] for e in pe} == {0, 1, 2}
    for w in pred.per_worker:
        total = sum(e["dur"] for e in pe if e["tid"] == w.worker)
        assert total == pytest.approx(w.step * 1e6, rel=1e-6)
    assert all(e["args"]["kind"] in ("modelled", "emulated") for e in pe)


def test_errors_are_clear():
    with pytest.raises(LabError, match="no measurements"):
        run_trace(metrics().iloc[0:0])
    with pytest.raises(LabError, match="at most"):
        run_trace(metrics(steps=5), steps=(1, MAX_STEPS + 1))
    with pytest.raises(LabError, match="no measured steps"):
        run_trace(metrics(steps=5), steps=(50, 60))
    with pytest.raises(LabError, match="empty"):
        run_trace(metrics(), steps=(3, 2))


def test_store_trace(lab_db):
    from lab.store.runs import RunStore

    st = RunStore(lab_db)
    sc = Scenario(name="stored", topology=preset("cxl"), training=Training(model="mlp", workers=3))
    rid = st.create_run(sc, status="done")
    st.add_metrics(rid, metrics().to_dict("records"))
    doc = store_trace(st, rid, profile=synthetic_profile())
    assert doc["otherData"]["run_id"] == rid
    assert {e["pid"] for e in doc["traceEvents"] if e["ph"] == "X"} == {1, 2}
    json.loads(to_json(doc))
