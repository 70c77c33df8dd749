"""lab.machine.fidelity: measured means and medians of stored runs, the table beside the prediction, the preset batch and the error statistics."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lab.errors import LabError
from lab.machine.calibrate import synthetic_profile
from lab.machine.fidelity import (
    FidelityBatch,
    compare,
    evaluate_runs,
    measured_step,
    prediction_table,
    preset_batch,
    step_error_summary,
)
from lab.machine.predict import PARTS, predict_step
from tests.machine.test_predict import sc_of
from lab.scenario.document import Scenario

# The MLP 64-128-64-10 at batch 32, counted by hand (a multiply-add is 2 FLOPs; ReLU 1 per element).
MLP_MATMUL_FLOPS = [2 * 32 * 64 * 128 * 2 / 3, 2 * 32 * 128 * 64, 2 * 32 * 64 * 10]  # first: no input gradient
MLP_RELU_FLOPS = [32 * 128, 32 * 64]
MLP_PARAMS = 64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10  # 17,226


def synthetic_metrics(steps=20, workers=2, step_s=0.01, compute=(0.004, 0.006), comm=0.003, idle=(0.002, 0.0),
                      jitter=0.0, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows, wall = [], 0.0
    for s in range(1, steps + 1):
        dt = step_s + (jitter * rng.standard_normal() if jitter else 0.0)
        if s == 3:
            dt = 10 * step_s  # an outlier the median ignores and the mean counts
        wall += dt
        rows.append({"run_id": "r", "step": s, "worker": -1, "wall": wall})
        for w in range(workers):
            rows.append({"run_id": "r", "step": s, "worker": w, "t_compute": compute[w], "t_comm": comm,
                         "t_idle": idle[w], "t_compress": 0.0, "t_emul_compute": 0.0, "t_emul_comm": 0.0,
                         "bytes_sent": 1000.0, "wall": wall})
    df = pd.DataFrame(rows)
    for c in ("t_compute", "t_comm", "t_idle", "t_compress", "t_emul_compute", "t_emul_comm", "bytes_sent"):
        df[c] = df[c].astype(float)
    return df


def test_measured_step_means_and_medians():
    """The default statistic is the mean over the steps after the warm-up (the wall time per step the
    run achieved), so the slow step 3 counts; the median ignores it."""
    m = measured_step(synthetic_metrics(), warmup=2)
    assert m["statistic"] == "mean"
    assert m["step"] == pytest.approx((17 * 0.01 + 0.1) / 18)  # steps 3..20: one of 10x the others
    assert m["compute"] == pytest.approx(0.005)
    assert m["comm"] == pytest.approx(0.003)
    assert m["idle"] == pytest.approx(0.001)
    assert m["steps"] == 18 and m["bytes_sent"] == 1000.0
    assert m["per_worker"][1]["compute"] == pytest.approx(0.006)
    med = measured_step(synthetic_metrics(), warmup=2, statistic="median")
    assert med["step"] == pytest.approx(0.01) and med["statistic"] == "median"
    assert measured_step(synthetic_metrics(), warmup=3)["step"] == pytest.approx(0.01)  # the slow step left out
    with pytest.raises(LabError, match="statistic"):
        measured_step(synthetic_metrics(), statistic="mode")
    with pytest.raises(LabError, match="warm-up"):
        measured_step(synthetic_metrics(steps=3), warmup=5)
    with pytest.raises(LabError, match="no measurements"):
        measured_step(synthetic_metrics().iloc[0:0])


def test_compare_and_prediction_table():
    prof = synthetic_profile()
    sc = sc_of(model="mlp", workers=2)
    metrics = synthetic_metrics()
    pred = predict_step(sc, prof)
    rows = {r["part"]: r for r in compare(pred, measured_step(metrics))}
    assert set(rows) == set(PARTS)
    assert rows["step"]["error"] == pytest.approx(pred.step / 0.01 - 1)
    assert math.isnan(rows["compress"]["error"])  # measured 0: no relative error
    df = prediction_table(profile=prof, scenario=sc, metrics=metrics)
    assert list(df.columns) == ["part", "predicted_ms", "measured_ms", "error_pct"]
    step = df[df.part == "step time"].iloc[0]
    assert step.measured_ms == pytest.approx(10.0) and step.predicted_ms == pytest.approx(pred.step * 1e3)
    assert step.error_pct == pytest.approx((pred.step / 0.01 - 1) * 100)


def test_prediction_table_without_profile(lab_db, monkeypatch):
    monkeypatch.setenv("LAB_DATA", str(lab_db.parent))
    with pytest.raises(LabError, match="calibrate"):
        prediction_table("no-such-run")


def test_evaluate_stored_runs(lab_db):
    from lab.store.runs import RunStore

    store = RunStore(lab_db)
    prof = synthetic_profile()
    sc = sc_of(model="mlp", workers=2)
    rid = store.create_run(sc, status="done")
    m = synthetic_metrics()
    store.add_metrics(rid, m.drop(columns=["run_id"]).to_dict("records"))
    empty = store.create_run(sc, status="done")
    rows, skipped = evaluate_runs(store, prof)
    assert [r["id"] for r in rows] == [rid] and [s["id"] for s in skipped] == [empty]
    r = rows[0]
    pred = predict_step(sc, prof).step
    assert r["measured"] == pytest.approx(0.01) and r["predicted"] == pytest.approx(pred)
    assert r["error"] == pytest.approx(pred / 0.01 - 1)
    assert (r["model"], r["workers"], r["compressed"], r["emulated"]) == ("mlp", 2, False, False)
    assert step_error_summary([(r["predicted"], r["measured"])]) == pytest.approx(
        math.exp(abs(math.log(pred / 0.01))) - 1)


def test_fidelity_batch_queues_the_preset_batch(lab_db):
    from lab.store.runs import RunStore

    class Manager:  # the part of lab.jobs.manager.JobManager the batch uses
        def __init__(self):
            self.store = RunStore(lab_db)

        def submit_many(self, items):
            from lab.jobs.manager import Job

            return [Job(self.store.create_run(sc, name=name, status="queued")) for sc, name in items]

    b = FidelityBatch(Manager(), synthetic_profile(), steps=30).start()
    s = b.status()
    assert s["total"] == len(preset_batch()) == len(b.run_ids) and s["running"] and s["done"] == 0
    for rid in b.run_ids[:-1]:
        b.manager.store.set_status(rid, "done")
    b.manager.store.set_status(b.run_ids[-1], "failed")
    s = b.status()
    assert s["finished"] and not s["running"] and s["done"] == s["total"] and "did not finish" in s["error"]


def test_geomean_error_by_hand():
    # |ln 1.1| and |ln(1/1.1)| are equal: the error is 10 % both ways
    assert step_error_summary([(1.1, 1.0), (1.0, 1.1)]) == pytest.approx(0.1)
    assert step_error_summary([(2.0, 1.0), (1.0, 1.0)]) == pytest.approx(math.sqrt(2) - 1)


# ----- the preset batch and the lessons ------------------------------------------------------------
def test_preset_batch_spans_the_cases_and_passes_the_job_checks():
    from lab.train.layout import check_scenario

    batch = preset_batch(steps=30)
    assert {s.training.workers for s in batch} == {1, 2, 3, 4}
    assert {s.training.model for s in batch} == {"mlp", "cnn"}
    assert any(s.training.compression.kind == "group_topk" for s in batch)
    assert any(s.training.emulate for s in batch) and any(not s.training.emulate for s in batch)
    for sc in batch:
        assert sc.training.steps == 30
        check_scenario(sc)
        assert Scenario.from_url_param(sc.to_url_param()) == sc


def test_reproducibility_pairs_runs_of_the_same_scenario_only():
    from lab.machine.fidelity import reproducibility, scenario_key

    a, b = preset_batch(20)[:2]
    renamed = a.replace(name="another name")
    assert scenario_key(a) == scenario_key(renamed) != scenario_key(b)
    rows = [{"scenario_key": scenario_key(a), "measured": 0.010},
            {"scenario_key": scenario_key(b), "measured": 0.050},
            {"scenario_key": scenario_key(renamed), "measured": 0.020},
            {"scenario_key": scenario_key(a), "measured": 0.010}]
    spread, pairs = reproducibility(rows)
    assert pairs == 2  # (10 ms, 20 ms) and (20 ms, 10 ms); b ran once
    assert spread == pytest.approx(1.0)  # |ln 2| both times: exp(ln 2) - 1
    assert reproducibility(rows[:2]) == (pytest.approx(math.nan, nan_ok=True), 0)


def test_oracle_error_is_the_best_constant_per_scenario():
    """The oracle's error equals a brute-force search over constant predictions per scenario, and
    no constant does better; scenarios measured once are left out."""
    import itertools

    from lab.machine.fidelity import oracle_error, scenario_key

    a, b, c = preset_batch(20)[:3]
    meas = {scenario_key(a): [0.010, 0.013, 0.011], scenario_key(b): [0.050, 0.040]}
    rows = [{"scenario_key": k, "measured": m} for k, ms in meas.items() for m in ms]
    rows.append({"scenario_key": scenario_key(c), "measured": 0.5})  # ran once: not counted
    err, n = oracle_error(rows)
    assert n == 5
    # by hand: a's median 0.011 -> |ln(11/10)| + |ln(11/13)|; b: any constant between -> |ln(5/4)|
    by_hand = math.exp((math.log(1.1) + math.log(13 / 11) + math.log(1.25)) / 5) - 1
    assert err == pytest.approx(by_hand, rel=1e-12)
    grid = {k: ms + [min(ms) * (max(ms) / min(ms)) ** (i / 40) for i in range(-10, 51)] for k, ms in meas.items()}
    best = min(sum(abs(math.log(pa / m)) for m in meas[scenario_key(a)]) + sum(abs(math.log(pb / m)) for m in meas[scenario_key(b)])
               for pa, pb in itertools.product(grid[scenario_key(a)], grid[scenario_key(b)]))
    assert math.exp(best / 5) - 1 >= err - 1e-12
    assert math.exp(best / 5) - 1 == pytest.approx(err, rel=1e-9)  # the grid holds the measured values
    assert oracle_error(rows[-1:]) == (pytest.approx(math.nan, nan_ok=True), 0)


def test_a_run_measured_under_load_is_flagged_kept_apart_and_corrected_by_its_load(lab_db):
    from lab.machine.fidelity import fidelity_table, load_line, load_slowdown, load_summary
    from lab.store.runs import RunStore

    store = RunStore(lab_db)
    prof = synthetic_profile()
    sc = sc_of(model="mlp", workers=2)
    quiet, busy, old = (store.create_run(sc, status="done") for _ in range(3))
    for rid, step_s in ((quiet, 0.01), (busy, 0.02), (old, 0.01)):
        store.add_metrics(rid, synthetic_metrics(step_s=step_s).drop(columns=["run_id"]).to_dict("records"))
    store.merge_info(quiet, {"load": {"others_share": 0.05, "cpus": 2, "pressure": 0.01}})
    store.merge_info(busy, {"load": {"others_share": 0.5, "cpus": 2, "pressure": 0.6}})  # two spinners beside it
    rows, _ = evaluate_runs(store, prof)
    by = {r["id"]: r for r in rows}
    pred = predict_step(sc, prof).step
    assert [by[r]["under_load"] for r in (quiet, busy, old)] == [False, True, False]  # old: no load recorded
    # two processes on the one core the spinners left: twice as slow as on two free cores
    assert load_slowdown(by[busy]["load"], 2) == pytest.approx(2.0)
    assert by[busy]["corrected"] == pytest.approx(2 * pred) and by[old]["corrected"] == pytest.approx(pred)
    assert by[quiet]["corrected"] == pytest.approx(pred * 2 / (2 * 0.95))  # a little load: a little slower
    s = load_summary(rows)
    assert (s["n_quiet"], s["n_loaded"]) == (2, 1)
    assert s["quiet"] == pytest.approx(step_error_summary([(pred, by[quiet]["measured"]), (pred, by[old]["measured"])]))
    assert s["loaded_raw"] == pytest.approx(step_error_summary([(pred, by[busy]["measured"])]))
    assert s["loaded_corrected"] == pytest.approx(step_error_summary([(2 * pred, by[busy]["measured"])]))
    line = load_line(s)
    assert line.startswith("1 run(s)") and f"{s['loaded_corrected'] * 100:.1f} %" in line
    assert load_line(load_summary([by[quiet]])) == ""
    table = {t["id"]: t for t in fidelity_table(rows)}
    assert table[busy]["under load"] and table[busy]["other work (% of CPU)"] == pytest.approx(50.0)
    assert table[busy]["corrected for the load (ms)"] == pytest.approx(2 * pred * 1e3)
    assert table[quiet]["corrected for the load (ms)"] is None and table[old]["other work (% of CPU)"] is None


@pytest.mark.parametrize("procs, share, cpus, slowdown", [
    (2, 0.0, 2, 1.0),      # a quiet machine
    (1, 0.5, 2, 1.0),      # one process beside one spinner on two cores: a core each
    (1, 2 / 3, 2, 1.5),    # one process beside two spinners: three share two cores
    (4, 0.5, 2, 2.0),      # four processes on two cores, half of them taken: twice the crowding
    (3, 0.25, 4, 1.0),     # three processes fit in the three cores left
])
def test_the_load_slowdown_shares_the_cores_the_other_work_left(procs, share, cpus, slowdown):
    from lab.machine.fidelity import load_slowdown

    assert load_slowdown({"others_share": share, "cpus": cpus}, procs) == pytest.approx(slowdown)
    assert load_slowdown(None, procs) == 1.0


def test_a_profile_calibrated_under_load_says_so():
    import dataclasses

    from lab.machine.fidelity import calibrate_now_words, profile_load_words

    prof = synthetic_profile()
    assert profile_load_words(prof) == ""
    loaded = dataclasses.replace(prof, machine={**prof.machine, "load": {"others_share": 0.4, "cpus": 2}})
    assert "40 %" in profile_load_words(loaded)
    assert calibrate_now_words(0) == "" and calibrate_now_words(3).startswith("3 job(s)")


def test_the_load_stretches_what_needs_a_core_and_not_an_emulated_sleep(lab_db):
    from lab.store.runs import RunStore

    store = RunStore(lab_db)
    prof = synthetic_profile()
    sc = sc_of(model="mlp", workers=2, emulate=True, worker_devices=("gpu", "host"))
    rid = store.create_run(sc, status="done")
    store.add_metrics(rid, synthetic_metrics(step_s=0.03).drop(columns=["run_id"]).to_dict("records"))
    store.merge_info(rid, {"load": {"others_share": 0.5, "cpus": 2}})
    (row,), _ = evaluate_runs(store, prof)
    pred = predict_step(sc, prof)
    asleep = pred.emul_compute + pred.emul_comm
    assert asleep > 0  # the host stands in for a slower device: it sleeps part of each step
    assert row["corrected"] == pytest.approx(asleep + (pred.step - asleep) * 2.0)
