"""The training job: equivalence with one process, every sync mode, torchrun, faults, divergence,
emulation, checkpoints and the data shards. Every job here is a few steps on 2-3 processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lab.errors import LabError
from lab.scenario.document import Training, default_scenario
from lab.scenario.models import build_model
from lab.store.runs import RunStore
from lab.train import data as data_mod
from lab.train.reference import single_process
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(180)
LINE = re.compile(r"^run (\S+) test_accuracy (\S+)$")


def run_cli(*args: str, torchrun: bool = False, timeout: float = 150) -> tuple[str, float, subprocess.CompletedProcess]:
    if torchrun:
        cmd = [str(ROOT / ".venv/bin/torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "lab.train", *args]
    else:
        cmd = [sys.executable, "-m", "lab.train", *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, LAB_GLOO_TIMEOUT="30"))
    lines = proc.stdout.strip().splitlines()
    assert lines, (proc.returncode, proc.stderr[-3000:])
    m = LINE.match(lines[-1])
    assert m, (lines[-1], proc.stderr[-3000:])
    return m.group(1), float(m.group(2)), proc


def processes_with(text: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains ``text``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            out.append(int(d.name))
    return out


def final_state(store: RunStore, run_id: str) -> dict:
    ck = torch.load(store.checkpoint_dir(run_id) / "final.pt", weights_only=True)
    return ck


def assert_close_state(a: dict, b: dict, tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for k in a:
        diff = (a[k].double() - b[k].double()).abs().max().item()
        assert diff <= tol, (k, diff)


# ----- equivalence ---------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer,impl,model", [("adam", "gloo", "mlp"), ("adabelief", "ring", "cnn"),
                                                  ("maxadabelief", "gloo", "mlp")])
def test_gradient_allreduce_equals_one_process_on_combined_batch(lab_db, optimizer, impl, model):
    from lab.optim.optimizers import make_optimizer

    steps, workers = 6, 2
    rid, acc, proc = run_cli("--workers", str(workers), "--steps", str(steps), "--optimizer", optimizer,
                             "--allreduce-impl", impl, "--model", model, "--set", "check_every=1",
                             "--set", "lr=0.01")
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = RunStore(lab_db)
    assert store.status(rid) == "done"
    tr = Training(workers=workers, steps=steps, optimizer=optimizer, lr=0.01, model=model)
    ref = single_process(tr)
    ck = final_state(store, rid)  # torch.load(..., weights_only=True)
    assert ck["step"] == steps and ck["run_id"] == rid
    assert_close_state(ck["model"], ref)
    # the distributed run really moved away from the initial weights
    init = single_process(tr, steps=0)
    assert max((ck["model"][k] - init[k]).abs().max().item() for k in init) > 1e-3
    # the checkpoint restores model and optimiser
    restored = build_model(model, 64, 10, seed=1)
    restored.load_state_dict(ck["model"])
    opt = make_optimizer(optimizer, restored.parameters())
    opt.load_state_dict(ck["optimizer"])
    assert int(opt.state[next(iter(restored.parameters()))]["step"]) == steps
    torch.set_rng_state(ck["rng"])
    m = store.metrics(rid)
    per = m[m.worker >= 0]
    assert sorted(per.worker.unique()) == [0, 1]
    assert (per.bytes_sent > 0).all() and (per.t_compute > 0).all()
    assert per.t_compress.eq(0).all()
    if impl == "ring":  # the lab's ring counts what it sends: 2 (N-1)/N of the buffer, per step
        params = store.get_run(rid)["info"]["params"]
        assert per.bytes_sent.iloc[0] == pytest.approx(2 * (workers - 1) / workers * (params + 1) * 4, rel=1e-3)


def test_param_server_matches_one_process(lab_db):
    rid, acc, proc = run_cli("--workers", "2", "--steps", "5", "--sync", "param_server", "--lr", "0.01",
                             "--set", "check_every=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = RunStore(lab_db)
    assert store.status(rid) == "done"
    assert store.get_run(rid)["info"]["server_rank"] == 2
    ref = single_process(Training(workers=2, steps=5, lr=0.01))
    assert_close_state(final_state(store, rid)["model"], ref)
    m = store.metrics(rid)
    assert sorted(m.worker.unique()) == [-1, 0, 1, 2]  # two workers, the server, the job


def test_state_allreduce_keeps_parameters_identical(lab_db):
    # check_every=1: the checksum all-gather compares every rank's parameters after every step
    rid, acc, proc = run_cli("--workers", "2", "--steps", "8", "--sync", "state_allreduce",
                             "--optimizer", "maxadabelief", "--lr", "0.01", "--set", "check_every=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = RunStore(lab_db)
    assert store.status(rid) == "done"
    job = store.metrics(rid, worker=-1)
    assert job.loss.iloc[-1] < job.loss.dropna().iloc[0]
    assert acc > 0.3
    # it is a different algorithm from gradient all-reduce: not the combined-batch trajectory
    ref = single_process(Training(workers=2, steps=8, lr=0.01, optimizer="maxadabelief"))
    ck = final_state(store, rid)
    assert max((ck["model"][k] - ref[k]).abs().max().item() for k in ref) > 1e-6
    assert {"exp_avg", "exp_avg_var", "max_exp_avg_var"} <= set(ck["optimizer"]["state"][0])


def test_torchrun_two_processes(lab_db):
    rid, acc, proc = run_cli("--steps", "5", "--lr", "0.01", "--set", "lr_scaling=true", torchrun=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = RunStore(lab_db)
    run = store.get_run(rid)
    assert run["status"] == "done" and run["info"]["launcher"] == "torchrun"
    assert run["info"]["workers"] == 2
    assert run["info"]["lr_effective"] == pytest.approx(0.02)  # linear scaling: lr x 2 workers
    assert 0.0 < acc <= 1.0
    assert_close_state(final_state(store, rid)["model"],
                       single_process(Training(workers=2, steps=5, lr=0.01, lr_scaling=True)))


# ----- failures ------------------------------------------------------------------------------
@pytest.mark.parametrize("fault,expect", [("raise", "injected fault: worker 1 raised at step 3"),
                                          ("kill", "worker 1 (pid")])
def test_a_failing_worker_ends_the_job_with_its_error(lab_db, fault, expect):
    rid, acc, proc = run_cli("--workers", "2", "--steps", "50", "--set", f"fault={fault}", "--set", "fault_worker=1",
                             "--set", "fault_step=3", timeout=60)
    assert proc.returncode == 1
    store = RunStore(lab_db)
    run = store.get_run(rid)
    assert run["status"] == "failed"
    assert expect in run["error"]
    if fault == "kill":
        assert "SIGKILL" in run["error"]
    assert store.progress(rid) < 50
    assert processes_with(rid) == []  # the launcher reaped every worker


def test_diverging_loss_stops_the_run(lab_db):
    # lr 10 with decoupled weight decay 1: every step multiplies the weights by 1 - lr*wd = -9
    rid, acc, proc = run_cli("--workers", "2", "--steps", "60", "--optimizer", "adabelief", "--lr", "10",
                             "--set", "weight_decay=1.0")
    assert proc.returncode == 2
    store = RunStore(lab_db)
    run = store.get_run(rid)
    assert run["status"] == "diverged"
    assert "loss became" in run["error"]
    job = store.metrics(rid, worker=-1)
    last = int(job.step.max())
    assert last < 60
    assert not np.isfinite(job[job.step == last].loss).any()
    assert not (store.checkpoint_dir(rid) / "final.pt").exists()


def test_unknown_device_and_bad_values_are_clear_errors(lab_db):
    proc = subprocess.run([sys.executable, "-m", "lab.train", "--workers", "2", "--steps", "2", "--emulate"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "training.worker_devices: emulation needs the device of every worker" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "lab.train", "--set", "lr=-1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "training.lr: must be at least 0" in proc.stderr


# ----- emulation, weighted split, exchange, checkpoints --------------------------------------
def test_emulated_devices_wait_and_weighted_split(lab_db):
    # host CPU (matmul 2 TFLOP/s) and GPU (19.5 TFLOP/s) of the cxl preset: the host worker waits
    # 8.75x its measured compute, and gets 2/21.5 of the data and of the combined batch.
    rid, acc, proc = run_cli("--workers", "2", "--steps", "12", "--emulate", "--split", "weighted", "--set",
                             'worker_devices=["host","gpu"]', "--set", "exchange_share=0.05",
                             "--set", "checkpoint_every=5")
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = RunStore(lab_db)
    info = store.get_run(rid)["info"]
    assert info["emulated"] and info["dominant_op"] == "matmul"
    assert info["scales"] == pytest.approx([19.5 / 2.0, 1.0])
    assert info["batch_sizes"] == [6, 58]  # 64 x 2/21.5 and 64 x 19.5/21.5, rounded
    assert sum(info["shard_sizes"]) == 1347 and info["shard_sizes"][0] < info["shard_sizes"][1] / 8
    m = store.metrics(rid)
    host, gpu = m[m.worker == 0], m[m.worker == 1]
    # the host's emulated wait is 8.75x its real compute: compute = real + wait
    real = host.t_compute - host.t_emul_compute
    assert (host.t_emul_compute.sum() / real.sum()) == pytest.approx(8.75, rel=0.2)
    assert gpu.t_emul_compute.sum() == 0.0
    # link waits: the modelled CXL transfer times of the messages (tiny, but counted)
    assert (m[m.worker >= 0].t_emul_comm > 0).all()
    assert (m[m.worker >= 0].t_emul_comm <= m[m.worker >= 0].t_comm + m[m.worker >= 0].t_idle + 1e-9).all()
    # the fast worker idles while the slow one computes
    assert gpu.t_idle.sum() > 3 * host.t_idle.sum()
    # the task-level design's exchange travels too: more than the gradient all-reduce's bytes every step
    grad_bytes = (info["params"] + 1) * 4
    assert (m[m.worker >= 0].bytes_sent > grad_bytes).all()
    assert (store.checkpoint_dir(rid) / "step000005.pt").exists()
    assert (store.checkpoint_dir(rid) / "final.pt").exists()


# ----- data ----------------------------------------------------------------------------------
def test_digits_and_synthetic_data():
    ds = data_mod.load_dataset("digits", seed=0)
    assert ds.x_train.shape == (1347, 64) and ds.x_test.shape == (450, 64)
    assert float(ds.x_train.min()) >= 0.0 and float(ds.x_train.max()) <= 1.0
    assert torch.equal(ds.x_test, data_mod.load_dataset("digits", seed=0).x_test)
    assert not torch.equal(ds.x_test, data_mod.load_dataset("digits", seed=1).x_test)
    syn = data_mod.load_dataset("synthetic", size=5000, seed=3)
    assert syn.x_train.shape[0] + syn.x_test.shape[0] == 5000
    assert set(syn.y_train.tolist()) == set(range(10))


@pytest.mark.parametrize("split", ["even", "weighted", "dirichlet"])
def test_shards_are_disjoint_and_cover_the_training_set(split):
    y = data_mod.load_dataset().y_train.numpy()
    shards = data_mod.make_shards(y, 3, split, weights=[1, 2, 5], alpha=0.1, seed=4)
    allidx = np.concatenate(shards)
    assert len(allidx) == len(y) and len(np.unique(allidx)) == len(y)
    sizes = [len(s) for s in shards]
    if split == "even":
        assert max(sizes) - min(sizes) <= 1
    if split == "weighted":
        assert sizes == data_mod.split_counts(len(y), [1, 2, 5])
    if split == "dirichlet":  # non-IID: with alpha 0.1 each worker is dominated by a few classes
        for s in shards:
            counts = np.bincount(y[s], minlength=10)
            assert np.sort(counts)[-3:].sum() > 0.6 * counts.sum()


def test_bad_splits_are_lab_errors():
    y = np.arange(10) % 10
    with pytest.raises(LabError, match="worker_devices"):
        data_mod.make_shards(y, 2, "weighted")
    with pytest.raises(LabError, match="cannot be shared"):
        data_mod.make_shards(y, 20, "even")


def test_sampler_and_exchange_share():
    x = torch.arange(20.0).reshape(10, 2)
    y = torch.arange(10)
    s = data_mod.ShardSampler(x, y, batch=4, seed=0, rank=0)
    seen = torch.cat([s.next_batch()[1] for _ in range(5)])  # 20 samples = exactly two passes
    assert sorted(seen.tolist()) == sorted(list(range(10)) * 2)
    give, keep = s.pick_share(0.3)
    assert len(give) == 3 and len(keep) == 7 and set(give.tolist()).isdisjoint(keep.tolist())
    assert len(s.pick_share(1.0)[1]) == 1  # always keeps one sample


def test_combined_batches_are_the_workers_batches_concatenated():
    ds = data_mod.load_dataset()
    comb = data_mod.combined_batches(ds, 2, "even", 8, 3)
    w0 = data_mod.worker_data(ds, 0, 2, "even", 8)
    w1 = data_mod.worker_data(ds, 1, 2, "even", 8)
    for x, y in comb:
        x0, y0 = w0.next_batch()
        x1, y1 = w1.next_batch()
        assert torch.equal(x, torch.cat([x0, x1])) and torch.equal(y, torch.cat([y0, y1]))


def test_emulation_scales_and_errors():
    from lab.scenario.models import build_model
    from lab.train import emulation as emu

    topo = default_scenario().topology
    assert emu.dominant_op_class(build_model("mlp"), 64) == "matmul"
    assert emu.dominant_op_class(build_model("cnn"), 64) == "conv"
    e = emu.worker_devices(topo, ("gpu", "host", "gpu"), 3, "matmul")
    assert e.scales == pytest.approx((1.0, 9.75, 1.0))
    with pytest.raises(LabError, match="no matmul kernel"):
        emu.worker_devices(topo, ("gpu", "fpga"), 2, "matmul")
    with pytest.raises(LabError, match="only 1 device"):
        emu.worker_devices(topo, ("gpu",), 2, "matmul")
    t = emu.ring_allreduce_time(topo, ("gpu", "host"), 1e6)
    assert t == pytest.approx(2 * topo.transfer_time("gpu", "host", 5e5))


def test_paired_benchmark_runs_the_lab_loop_and_ddp_in_the_same_processes(tmp_path, monkeypatch):
    """bench/bench_train.py's measurement: every rank runs the job's Trainer (checkpoints included),
    then the DDP loop; one row of positive samples/s per round."""
    from lab.train.reference import paired_throughput

    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    rows = paired_throughput(tmp_path, workers=2, steps=12, warmup=4, batch=16, rounds=2)
    assert len(rows) == 2
    assert all(r["lab"] > 0 and r["ddp"] > 0 for r in rows)
    store = RunStore(tmp_path / "paired.db")
    assert len(store.list_runs()) == 2 and all(store.progress(r) == 12 for r in store.list_runs().id)


def test_digits_load_once_under_concurrent_sessions(tmp_path, monkeypatch):
    """Eight threads (the app's sessions submitting at the same moment) get equal digits arrays from
    a single .npz load: concurrent np.load of the header raised SystemError in CPython 3.11."""
    import threading

    import lab.train.data as D

    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    x0, y0 = D._digits_arrays()  # writes the cache file of this LAB_DATA
    D._DIGITS.clear()
    calls = []
    real = np.load
    monkeypatch.setattr(D.np, "load", lambda *a, **k: calls.append(1) or real(*a, **k))
    out, errors = [], []
    barrier = threading.Barrier(8)

    def go():
        barrier.wait()
        try:
            out.append(D._digits_arrays())
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(out) == 8 and len(calls) == 1
    for x, y in out:
        assert np.array_equal(x, x0) and np.array_equal(y, y0)
    out[0][0][0, 0] = 99.0  # callers get copies: the cache stays intact
    assert D._digits_arrays()[0][0, 0] == x0[0, 0]
