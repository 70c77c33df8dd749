"""lab.machine.predict: predictions for synthetic profiles equal hand calculations; measured means and medians; tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lab.errors import LabError
from lab.machine.calibrate import synthetic_profile
from lab.machine.predict import (
    PARTS,
    FidelityBatch,
    compare,
    evaluate_runs,
    measured_step,
    predict_step,
    prediction_table,
    preset_batch,
    step_error_summary,
)
from lab.machine.profile import LinearCost
from lab.scenario.catalogue import preset
from lab.scenario.document import Compression, Scenario, Training
from tests.conftest import ROOT

LESSONS = ROOT / "assets" / "lessons"
US = 1e-6
# The MLP 64-128-64-10 at batch 32, counted by hand (a multiply-add is 2 FLOPs; ReLU 1 per element).
MLP_MATMUL_FLOPS = [2 * 32 * 64 * 128 * 2 / 3, 2 * 32 * 128 * 64, 2 * 32 * 64 * 10]  # first: no input gradient
MLP_RELU_FLOPS = [32 * 128, 32 * 64]
MLP_PARAMS = 64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10  # 17,226


def sc_of(topology="cxl", **training) -> Scenario:
    comp = training.pop("compression", None)
    tr = Training(**training)
    if comp:
        tr = tr.replace(compression=Compression(**comp))
    return Scenario(name="t", topology=preset(topology), training=tr)


def mlp_fb(overhead=10 * US, throughput=1e9, fixed=100 * US) -> float:
    ops = MLP_MATMUL_FLOPS + MLP_RELU_FLOPS
    return fixed + sum(overhead + f / throughput for f in ops)


def test_one_worker_is_compute_only_and_matches_hand_calculation():
    prof = synthetic_profile()
    p = predict_step(sc_of(model="mlp", workers=1, batch_size=32), prof)
    fb = mlp_fb()
    assert p.per_worker[0].fb == pytest.approx(fb, rel=1e-12)
    assert p.per_worker[0].opt == pytest.approx(50 * US)
    assert p.compute == pytest.approx(fb + 50 * US)
    assert p.comm == 0 and p.idle == 0 and p.compress == 0
    assert p.step == pytest.approx(fb + 50 * US)


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_dense_allreduce_alpha_beta_by_hand(workers):
    alpha, beta = 100 * US, 1e-9
    prof = synthetic_profile(alpha=alpha, beta=beta)
    p = predict_step(sc_of(model="mlp", workers=workers, batch_size=32), prof)
    nbytes = (MLP_PARAMS + 1) * 4  # the flat buffer carries the loss in one extra slot
    comm = 2 * (workers - 1) * alpha + 2 * (workers - 1) / workers * nbytes * beta
    assert p.comm == pytest.approx(comm, rel=1e-12)
    assert p.step == pytest.approx(mlp_fb() + 50 * US + comm, rel=1e-12)
    assert p.idle == 0.0
    assert p.bytes_sent == pytest.approx(2 * (workers - 1) * math.ceil((MLP_PARAMS + 1) / workers) * 4)


def test_contention_scales_compute_not_comm():
    sc = sc_of(model="mlp", workers=2, batch_size=32)
    p0, p1 = predict_step(sc, synthetic_profile()), predict_step(sc, synthetic_profile(contention=2.0))
    assert p1.compute == pytest.approx(2 * p0.compute)
    assert p1.comm == pytest.approx(p0.comm)
    assert predict_step(sc_of(model="mlp", workers=1), synthetic_profile(contention=2.0)).compute == \
        pytest.approx(p0.compute)  # one process alone is never slowed down


def test_emulated_waits_use_the_workers_formulas():
    from lab.train.emulation import ring_allreduce_time

    prof = synthetic_profile()
    sc = sc_of(model="mlp", workers=2, batch_size=32, emulate=True, worker_devices=("gpu", "host"))
    p = predict_step(sc, prof)
    c = mlp_fb() + 50 * US
    gpu, host = (sc.topology.device(d).throughput["matmul"] for d in ("gpu", "host"))
    scale = gpu / host  # the MLP's dominant class is matmul; the host is about 10x slower
    assert scale > 5
    w0, w1 = p.per_worker
    assert w0.emul_compute == 0.0
    assert w1.emul_compute == pytest.approx((scale - 1) * c)
    assert w1.compute == pytest.approx(scale * c)
    assert w0.idle == pytest.approx((scale - 1) * c) and w1.idle == pytest.approx(0.0)
    link = ring_allreduce_time(sc.topology, ("gpu", "host"), (MLP_PARAMS + 1) * 4)
    assert link > 0
    base = 2 * 100 * US + (MLP_PARAMS + 1) * 4 * 1e-9
    assert p.comm == pytest.approx(base + link)
    assert p.step == pytest.approx(scale * c + base + link)


def test_group_topk_sparse_allgather_bytes_and_time_by_hand():
    prof = synthetic_profile(per_hop=200 * US, per_byte=2e-9, compress=LinearCost(20 * US, 0.0, 1e-9))
    sc = sc_of(model="mlp", workers=3, batch_size=32,
               compression={"kind": "group_topk", "ratio": 0.01, "group_size": 1024, "sharing": "sparse_allgather"})
    p = predict_step(sc, prof)
    n = MLP_PARAMS  # the gradient without the loss slot is compressed
    kept = (n // 1024) * 10 + max(1, round(0.01 * (n % 1024)))  # 16 full groups x 10 + tail of 842 -> 8
    assert kept == 168
    payload = 24 + 6 * kept  # header + fp32 value and uint16 in-group offset per entry
    sent = 2 * payload  # N - 1 hops of equal-size payloads (no count travels in the training job)
    assert p.bytes_sent == pytest.approx(sent)
    assert p.comm == pytest.approx(2 * 200 * US + sent * 2e-9)
    assert p.compress == pytest.approx(20 * US + n * 1e-9)
    assert p.step == pytest.approx(mlp_fb() + 50 * US + p.compress + p.comm)


def test_dense_sharing_of_compressed_gradients_counts_the_dense_ring():
    prof = synthetic_profile()
    sc = sc_of(model="mlp", workers=4, compression={"kind": "topk", "ratio": 0.05, "sharing": "dense"})
    p = predict_step(sc, prof)
    n = MLP_PARAMS
    assert p.bytes_sent == pytest.approx(2 * 3 * math.ceil(n / 4) * 4)
    assert p.comm == pytest.approx(6 * 200 * US + p.bytes_sent * 2e-9)


def test_jitter_and_rest_of_the_step():
    prof = synthetic_profile(jitter=LinearCost(300 * US), remainder=LinearCost(400 * US))
    p = predict_step(sc_of(model="mlp", workers=2, batch_size=32), prof)
    c = mlp_fb() + 50 * US
    assert p.idle == pytest.approx(300 * US) and p.rest == pytest.approx(400 * US)
    assert p.step == pytest.approx(c + 300 * US + 400 * US + 2 * 100 * US + (MLP_PARAMS + 1) * 4 * 1e-9)
    one = predict_step(sc_of(model="mlp", workers=1, batch_size=32), prof)
    assert one.idle == 0 and one.rest == 0  # one process: no collective, nothing to wait for


def test_weighted_split_gives_imbalance():
    prof = synthetic_profile(throughput=1e8)
    sc = sc_of("gpu-npu", model="mlp", workers=4, split="weighted", worker_devices=("gpu0", "gpu1", "npu0", "npu1"))
    p = predict_step(sc, prof)
    batches = [w.batch for w in p.per_worker]
    assert sum(batches) == 4 * 32 and len(set(batches)) > 1
    slowest = max(w.compute for w in p.per_worker)
    for w in p.per_worker:
        assert w.idle == pytest.approx(slowest - w.compute, abs=1e-12)


def test_other_sync_modes_are_marked_approximate():
    prof = synthetic_profile()
    for sync, workers in (("param_server", 2), ("state_allreduce", 2)):
        p = predict_step(sc_of(model="mlp", workers=workers, sync=sync), prof)
        assert p.approximate and p.comm > 0 and p.step > p.compute


def test_prediction_needs_a_profile():
    with pytest.raises(LabError, match="calibrate"):
        predict_step(sc_of(), None)


# ----- measured side -------------------------------------------------------------------------------
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
    from lab.train.plan import check_scenario

    batch = preset_batch(steps=30)
    assert {s.training.workers for s in batch} == {1, 2, 3, 4}
    assert {s.training.model for s in batch} == {"mlp", "cnn"}
    assert any(s.training.compression.kind == "group_topk" for s in batch)
    assert any(s.training.emulate for s in batch) and any(not s.training.emulate for s in batch)
    for sc in batch:
        assert sc.training.steps == 30
        check_scenario(sc)
        assert Scenario.from_url_param(sc.to_url_param()) == sc


@pytest.mark.parametrize("path", sorted(LESSONS.glob("*.json")), ids=lambda p: p.name)
def test_lesson_files_round_trip(path):
    import json

    if path.name == "index.json":
        index = json.loads(path.read_text())
        assert len(index["lessons"]) == 3
        for lesson in index["lessons"]:
            assert (LESSONS / lesson["scenario"]).exists() and (LESSONS / lesson["text"]).read_text().strip()
            assert lesson["page"].startswith("pages/")
        return
    sc = Scenario.from_json(path.read_text())
    assert Scenario.from_url_param(sc.to_url_param()) == sc
    assert Scenario.from_json(sc.to_json()) == sc


def test_compute_after_a_wait_is_slower():
    from dataclasses import replace

    prof = replace(synthetic_profile(), wait_slowdown=[[0.0, 1.0], [0.001, 2.0]])
    assert prof.wait_factor(0.0) == 1.0 and prof.wait_factor(0.0005) == pytest.approx(1.5)
    assert prof.wait_factor(1.0) == 2.0  # flat beyond the last wait
    one = predict_step(sc_of(model="mlp", workers=1), prof)
    assert one.compute == pytest.approx(mlp_fb() + 50 * US)  # never waits
    two = predict_step(sc_of(model="mlp", workers=2), prof)  # waits 269 us in the all-reduce
    c0 = mlp_fb() + 50 * US
    for w in two.per_worker:
        waited = two.step - w.compute
        assert w.compute == pytest.approx(c0 * prof.wait_factor(waited), rel=1e-5)
    assert two.compute > c0


def test_reproducibility_pairs_runs_of_the_same_scenario_only():
    from lab.machine.predict import reproducibility, scenario_key

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

    from lab.machine.predict import oracle_error, scenario_key

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
