"""Compressed gradient all-reduce in the training job (lab.train.compressed): real 2-worker runs of a
few steps against the one-process reference (same batches, compressors, error-feedback residuals and
sharing schedules), byte for byte; the ratio-1 run against the uncompressed reference; emulated link
waits per message; divergence; refused combinations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lab.compression.compressors import GroupTopK
from lab.errors import LabError
from lab.jobs import grid
from lab.scenario.catalogue import preset
from lab.scenario.document import Compression, Scenario, default_scenario
from lab.store.runs import JOB_WORKER, RunStore
from lab.train import reference
from lab.comm.spawn import run_local
from lab.testing.hook_workers import ddp_job_worker
from tests.conftest import run_command
from lab.train.layout import check_scenario
from lab.train.reference import single_process

pytestmark = pytest.mark.timeout(180)
STEPS = 6


def scenario(sharing: str, ef: bool, *, ratio: float = 0.05, group_size: int = 256, edge: bool = False,
             **training) -> Scenario:
    sc = default_scenario()
    if edge:  # two edge devices on 100 Mbit/s links: every message waits its modelled transfer time
        sc = Scenario("edge", preset("edge"))
        training.update(emulate=True, worker_devices=("edge0", "edge1"))
    comp = Compression(kind="group_topk", ratio=ratio, group_size=group_size, error_feedback=ef, sharing=sharing)
    settings = {"workers": 2, "steps": STEPS, "lr": 0.01, "check_every": 1, "allreduce_impl": "ring", **training}
    tr = sc.training.replace(compression=comp, **settings)
    return sc.replace(training=tr)


def run(sc: Scenario, db) -> tuple[RunStore, str]:
    res = run_command(sc, db)
    store = RunStore(db)
    assert res.status == "done", res.error
    return store, res.run_id


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.mark.parametrize("sharing,ef,edge", [("sparse_allgather", True, True), ("sparse_ring", False, False),
                                             ("dense", True, False)])
def test_compressed_run_matches_the_reference_byte_for_byte(lab_db, sharing, ef, edge, spawns):
    sc = scenario(sharing, ef, edge=edge)
    store, rid = run(sc, lab_db)  # check_every=1: the workers' parameter checksums agree after every step
    ref = reference.compressed_single_process(sc.training)
    ck = torch.load(store.checkpoint_dir(rid) / "final.pt", weights_only=True)
    assert max_diff(ck["model"], ref["state"]) <= 1e-5
    # it trained: not the initial weights
    assert max_diff(ck["model"], reference.compressed_single_process(sc.training, steps=0)["state"]) > 1e-3
    info = store.get_run(rid)["info"]
    assert info["bytes_kind"] == "measured"
    m = store.metrics(rid)
    per = m[m.worker >= 0].sort_values(["step", "worker"])
    sent = per.pivot(index="step", columns="worker", values="bytes_sent").to_numpy()
    recv = per.pivot(index="step", columns="worker", values="bytes_recv").to_numpy()
    assert sent.tolist() == ref["bytes_sent"] and recv.tolist() == ref["bytes_recv"]
    kept = GroupTopK(0.05, 256).kept(info["params"])
    assert all(k == [kept, kept] for k in ref["kept"])
    if sharing == "sparse_allgather":  # one message per step: the payload, 24 B header + 6 B per kept entry
        assert (sent == 24 + 6 * kept).all()
    elif sharing == "dense":  # the lab ring of the decompressed fp32 gradient (no loss slot)
        assert (sent == info["params"] * 4).all()  # 2 (N-1)/N x 4 n with N = 2
    else:  # the sparse ring: 8 B per (index, value) pair, fill-in included, and less than dense
        assert (sent % 8 == 0).all() and (sent < info["params"] * 4 / 3).all()
    assert (per.t_compress > 0).all() and (per.t_comm >= 0).all() and (per.t_comm + per.t_idle > 0).all()
    # idle is capped at the time in the collective, so a worker that waited for all of it books
    # t_comm 0; the last to arrive waits for nobody, so each step has one worker with t_comm > 0
    assert (per.groupby("step").t_comm.max() > 0).all()
    # the job's loss is the batch-weighted mean of the workers' (equal batches: the plain mean)
    job = m[m.worker == JOB_WORKER].set_index("step").loss.dropna()
    mean = per.groupby("step").loss.mean()
    assert np.allclose(job.to_numpy(), mean[job.index].to_numpy(), rtol=1e-6)
    if edge:  # the link waits: one message per step, slept by the sender before sending
        topo = sc.topology
        want = [topo.transfer_time("edge0", "edge1", int(b)) for b in per.bytes_sent]
        assert per.t_emul_comm.to_numpy() == pytest.approx(want, rel=1e-9)
        assert (per.t_emul_comm <= per.t_comm + per.t_idle + 1e-9).all()


def test_ratio_one_equals_the_uncompressed_run_and_lr_scaling_applies(lab_db, spawns):
    # Group-TopK keeping every entry, shared by sparse all-gather: the mean gradient of the
    # combined batch, so the one-process run on the combined batch (what uncompressed runs equal)
    sc = scenario("sparse_allgather", False, ratio=1.0, group_size=64, lr_scaling=True)
    store, rid = run(sc, lab_db)
    info = store.get_run(rid)["info"]
    assert info["lr_effective"] == pytest.approx(0.02)  # linear scaling: lr x 2 workers
    ck = torch.load(store.checkpoint_dir(rid) / "final.pt", weights_only=True)
    assert max_diff(ck["model"], single_process(sc.training)) <= 1e-5
    per = store.metrics(rid)
    per = per[per.worker >= 0]
    assert (per.bytes_sent == 24 + 6 * info["params"]).all()  # every entry, 6 B each


def test_a_diverging_compressed_run_stops_on_every_worker_at_once(lab_db, spawns):
    # lr 10 with decoupled weight decay 1 (as in test_train): the weights blow up within a few steps
    sc = scenario("sparse_ring", True, steps=60, optimizer="adabelief", lr=10.0, weight_decay=1.0)
    res = run_command(sc, lab_db)
    store = RunStore(lab_db)
    assert res.status == "diverged", res.error
    job = store.metrics(res.run_id, worker=JOB_WORKER)
    last = int(job.step.max())
    assert last < 60 and not np.isfinite(job[job.step == last].loss).any()
    per = store.metrics(res.run_id)
    per = per[per.worker >= 0]
    assert sorted(per[per.step == last].worker) == [0, 1]  # both workers recorded the last step


@pytest.mark.parametrize("kind,rank,model", [("powersgd", 2, "cnn"), ("fp16_hook", 1, "mlp")])
def test_a_job_with_torchs_hook_trains_to_ddps_parameters(lab_db, tmp_path, kind, rank, model, spawns):
    """The lab's job with one of torch's compression hooks against DDP with the hook itself, same batches."""
    sc = default_scenario()
    comp = Compression(kind=kind, rank=rank, warmup=3)
    tr = sc.training.replace(workers=2, steps=STEPS, lr=0.01, model=model, check_every=1, allreduce_impl="ring",
                             lr_scaling=False, compression=comp)
    store, rid = run(sc.replace(training=tr), lab_db)
    run_local(ddp_job_worker, 2, (tr.to_dict(), str(tmp_path / "ddp.pt")), timeout_s=120)
    want = torch.load(tmp_path / "ddp.pt", weights_only=True)
    got = torch.load(store.checkpoint_dir(rid) / "final.pt", weights_only=True)["model"]
    assert max_diff(got, want) <= 1e-6
    assert max_diff(got, reference.single_process(tr, steps=0)) > 1e-3  # it trained
    m = store.metrics(rid)
    sent = m[m.worker == 0].sort_values("step").bytes_sent.to_numpy()
    n = store.get_run(rid)["info"]["params"]
    if kind == "powersgd":  # warm-up: the whole fp32 gradient; then far less (two ranks: each entry sent once)
        assert (sent[:3] == 4 * n).all() and (sent[3:] < n).all()
    else:
        assert (sent == 2 * n).all()


def test_refused_and_allowed_combinations():
    sc = default_scenario()
    gtk = Compression(kind="group_topk", ratio=0.01)
    for sync in ("state_allreduce", "param_server"):
        bad = sc.replace(training=sc.training.replace(sync=sync, compression=gtk))
        with pytest.raises(LabError, match="sync = 'allreduce'") as e:
            check_scenario(bad)
        assert e.value.where == "training.compression"
        # without compression the same sync mode is fine
        check_scenario(sc.replace(training=sc.training.replace(sync=sync)))
    with pytest.raises(LabError, match="k = 0"):
        check_scenario(sc.replace(training=sc.training.replace(
            compression=Compression(kind="group_topk", ratio=0.001, group_size=100))))
    with pytest.raises(LabError, match="keeps none"):
        check_scenario(sc.replace(training=sc.training.replace(compression=Compression(kind="topk", ratio=1e-6))))
    plan = check_scenario(sc.replace(training=sc.training.replace(compression=gtk, lr_scaling=True, workers=4)))
    assert plan.lr == pytest.approx(4 * sc.training.lr)


def test_submitting_a_refused_combination_queues_nothing(lab_db):
    from lab.jobs.manager import JobManager

    sc = default_scenario()
    bad = sc.replace(training=sc.training.replace(sync="state_allreduce",
                                                  compression=Compression(kind="topk", ratio=0.01)))
    jm = JobManager(lab_db)
    with pytest.raises(LabError, match="compression"):
        jm.submit(bad)
    assert RunStore(lab_db).list_runs().empty


def test_grid_scenarios_are_nine_runs_of_gradient_allreduce():
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(sync="state_allreduce", compression=Compression(sharing="dense")))
    items = grid.grid_scenarios(sc)
    assert len(items) == 9 and len({name for _, name in items}) == 9
    got = {(s.training.optimizer, grid.variant_of(s.training.to_dict())) for s, _ in items}
    assert got == {(o, v) for o in grid.COMPARED_OPTIMIZERS for v in grid.GRID_DEFAULT}
    for s, _ in items:
        tr = s.training
        assert tr.sync == "allreduce" and tr.allreduce_impl == "ring"
        assert tr.compression.kind in ("none", "group_topk")
        if tr.compression.kind == "group_topk":
            assert tr.compression.ratio == 0.01 and tr.compression.sharing == "sparse_allgather"
        check_scenario(s)
    assert math.isclose(grid.GRID_RATIO, 0.01)
