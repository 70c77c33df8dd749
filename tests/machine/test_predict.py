"""lab.machine.predict: predictions for synthetic profiles equal hand calculations."""

from __future__ import annotations


import pytest

from lab.modelled.collectives.ring import ring_bytes_per_rank

from lab.errors import LabError
from lab.machine.calibrate import synthetic_profile
from lab.machine.predict import predict_step
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
    # what the lab's ring sends (the rank that sends most): every chunk but one, twice (tests/modelled/test_ring_cost)
    assert p.bytes_sent == pytest.approx(max(ring_bytes_per_rank(MLP_PARAMS + 1, workers)))


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
    assert p.bytes_sent == pytest.approx(max(ring_bytes_per_rank(n, 4)))  # what the lab's dense ring sends
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
@pytest.mark.parametrize("path", sorted(LESSONS.glob("*.json")), ids=lambda p: p.name)
def test_lesson_files_round_trip(path):
    import json

    if path.name == "index.json":
        index = json.loads(path.read_text())
        assert len(index["lessons"]) == 22
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


