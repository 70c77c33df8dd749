"""The training job: equivalence with one process, every sync mode, torchrun, faults, divergence,
emulation, checkpoints and the data shards. Every job here is a few steps on 2-3 processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from lab.scenario.document import Training
from lab.scenario.models import build_model
from lab.store.runs import RunStore
from lab.train.launcher_record import processes_of
from lab.train.reference import single_process
from tests.conftest import ROOT

pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.timeout(180)]
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
    ev = store.job_records.events(rid)  # the command line's launcher forks its ranks, which compute what one process does
    assert ev[ev.event == "started"].detail.iloc[0]["start"] == "forked"
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
    assert processes_of(rid) == []  # the launcher reaped every worker


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




@pytest.mark.parametrize("spec, says", [(b"{not json", "not JSON"), (b"[1, 2]", "not a JSON object"),
                                        (b'{"run_id": "x y", "scenario": {}, "db": "d"}', "run id"),
                                        (b'{"run_id": "r1"}', "needs a run id, a scenario")])
def test_a_malformed_job_spec_is_one_line_and_exit_2(spec, says, lab_db):
    proc = subprocess.run([sys.executable, "-m", "lab.train", "--spec", "-"], input=spec, cwd=ROOT,
                          env=dict(os.environ, LAB_DB=str(lab_db)), capture_output=True, timeout=120)
    err = proc.stderr.decode().strip()
    assert proc.returncode == 2 and len(err.splitlines()) == 1 and says in err, err
    assert RunStore(lab_db).list_runs().empty  # nothing ran, nothing was written


@pytest.mark.parametrize("model,width", [("resnet18", 0.5), ("mobilenet_v3_small", 1.0), ("vgg11", 0.5),
                                         ("vit_small", 1.0)])
def test_a_zoo_network_trains_data_parallel_on_two_workers(lab_db, model, width):
    from lab.scenario.document import default_scenario

    steps = 3
    tr = default_scenario().training.replace(workers=2, steps=steps, model=model, batch_size=16, lr=0.01,
                                             check_every=1, model_width=width)  # the two largest at half width
    rid, _, proc = run_cli("--workers", "2", "--steps", str(steps), "--model", model, "--batch-size", "16",
                           "--lr", "0.01", "--check-every", "1", "--set", f"model_width={width}")
    store = RunStore(lab_db)
    assert store.status(rid) == "done", proc.stderr[-2000:]
    per = store.metrics(rid)
    per = per[per.worker >= 0]
    assert sorted(per.groupby("worker").step.max()) == [steps, steps] and np.isfinite(per.loss).all()
    got = final_state(store, rid)["model"]
    init = single_process(tr, steps=0)
    assert {k: v.shape for k, v in got.items() if k in init} == {k: v.shape for k, v in init.items()}
    assert max((got[k].double() - init[k].double()).abs().max().item() for k in init) > 1e-3  # it trained
    if model == "vit_small":  # layer norm only: two workers' mean gradient is the combined batch's
        ref = single_process(tr)
        # except the keys' bias: softmax ignores a constant added to a row of scores, so its exact gradient is
        # zero and Adam steps it by the sign of rounding noise, in one process as in two
        e = build_model(model, 64, 10).net.hidden_dim
        for k in [k for k in ref if k.endswith("in_proj_bias")]:
            got[k], ref[k] = torch.cat([got[k][:e], got[k][2 * e:]]), torch.cat([ref[k][:e], ref[k][2 * e:]])
        assert_close_state(got, ref, tol=1e-4)


def test_the_command_line_trains_a_network_from_an_onnx_file_and_refuses_a_broken_one(lab_db, tmp_path, monkeypatch):
    from lab.scenario import onnx_models
    from tests.scenario.test_onnx_models import exported

    monkeypatch.setenv("LAB_DATA", str(tmp_path / "data"))
    good, bad = tmp_path / "mine.onnx", tmp_path / "broken.onnx"
    good.write_bytes(exported("mlp")[1])
    bad.write_bytes(good.read_bytes()[:500])
    rid, acc, proc = run_cli("--onnx", str(good), "--workers", "2", "--steps", "4", "--set", "check_every=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = RunStore(lab_db)
    kept = onnx_models.kept(tmp_path / "data" / "models")
    assert [m.filename for m in kept] == ["mine.onnx"]
    assert store.status(rid) == "done" and store.get_run(rid)["scenario"]["training"]["model"] == kept[0].name
    proc = subprocess.run([sys.executable, "-m", "lab.train", "--onnx", str(bad)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "broken.onnx" in lines[0] and "not an ONNX model" in lines[0]
