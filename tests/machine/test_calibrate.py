"""lab.machine.calibrate: the fits recover known coefficients; a tiny real calibration gives sane positive
numbers and a saved profile that loads back."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from lab.errors import LabError
from lab.machine import calibrate
from lab.machine import cases, probes
from lab.machine import fit as fit_mod
from lab.machine import profile as profile_mod
from lab.modelled.opgraph import trace
from tests.conftest import ROOT


def feat(counts: dict, flops: dict, tensors: int) -> dict:
    return {"counts": {c: counts.get(c, 0) for c in calibrate.COMPUTE_CLASSES},
            "flops": {c: float(flops.get(c, 0.0)) for c in calibrate.COMPUTE_CLASSES}, "tensors": tensors}


def test_graph_features_of_the_mlp_by_hand():
    f = profile_mod.graph_features(trace("mlp", batch_size=32), 6)
    assert f["counts"]["matmul"] == 3 and f["counts"]["elementwise"] == 2 and f["tensors"] == 6
    first = 2 * 32 * 64 * 128 * 2 / 3  # the first product needs no input gradient
    assert f["flops"]["matmul"] == pytest.approx(first + 2 * 32 * 128 * 64 + 2 * 32 * 64 * 10)
    assert f["flops"]["elementwise"] == pytest.approx(32 * 128 + 32 * 64)


def test_fit_compute_recovers_known_costs():
    rng = np.random.default_rng(0)
    truth = {"matmul": (20e-6, 10e9), "conv": (50e-6, 5e9), "elementwise": (5e-6, 1e9)}
    fixed, per_tensor = 150e-6, 8e-6
    samples = []
    for _ in range(40):
        counts = {c: int(rng.integers(1, 6)) for c in truth}
        flops = {c: float(rng.uniform(1e4, 5e7)) for c in truth}
        tensors = int(rng.integers(2, 30))
        t = fixed + per_tensor * tensors + sum(counts[c] * ov + flops[c] / thr for c, (ov, thr) in truth.items())
        samples.append({"features": feat(counts, flops, tensors), "seconds": t})
    fit = calibrate.fit_compute(samples)
    assert fit.fixed == pytest.approx(fixed, rel=1e-3)
    assert fit.per_tensor == pytest.approx(per_tensor, rel=1e-3)
    for c, (ov, thr) in truth.items():
        assert fit.classes[c].overhead == pytest.approx(ov, rel=1e-3)
        assert fit.classes[c].throughput == pytest.approx(thr, rel=1e-3)
    assert fit.fit_error < 1e-6
    assert fit.classes["pool"] == fit.classes["elementwise"]  # no calibration case had pooling
    for s in samples:
        assert profile_mod.compute_seconds(fit, s["features"]) == pytest.approx(s["seconds"], rel=1e-6)


def test_fit_linear_and_nnls_keep_terms_non_negative():
    rows = [(t, n, 40e-6 + 10e-6 * t + 3e-9 * n) for t in (2, 8, 24) for n in (1e3, 1e5)]
    c = profile_mod.fit_linear(rows)
    assert (c.fixed, c.per_tensor, c.per_unit) == pytest.approx((40e-6, 10e-6, 3e-9), rel=1e-6)
    # a decreasing relation cannot be fitted with non-negative terms: the slope stays at 0
    x = profile_mod.nnls_relative(np.array([[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]]), np.array([3.0, 2.0, 1.0]))
    assert np.all(x >= 0)
    with pytest.raises(LabError):
        profile_mod.nnls_relative(np.ones((2, 2)), np.array([1.0, -1.0]))


def test_geomean_error():
    assert profile_mod.geomean_error([2.0, 0.5], [1.0, 1.0]) == pytest.approx(1.0)
    assert math.isnan(profile_mod.geomean_error([], []))


def test_profile_json_round_trip_and_damage(tmp_path):
    p = calibrate.synthetic_profile()
    path = p.save(tmp_path / "prof.json")
    assert profile_mod.load_profile(path) == p
    assert profile_mod.load_profile(tmp_path / "missing.json") is None
    d = json.loads(path.read_text())
    d["version"] = 1
    (tmp_path / "old.json").write_text(json.dumps(d))
    with pytest.raises(LabError, match="another version"):
        profile_mod.load_profile(tmp_path / "old.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(LabError, match="not JSON"):
        profile_mod.load_profile(tmp_path / "bad.json")
    d = json.loads(path.read_text())
    del d["compute"]["classes"]
    (tmp_path / "cut.json").write_text(json.dumps(d))
    with pytest.raises(LabError, match="damaged"):
        profile_mod.load_profile(tmp_path / "cut.json")


def test_profile_lookups():
    p = calibrate.synthetic_profile(contention=2.0, procs=(1, 2, 4))
    assert p.slowdown(1) == 1.0 and p.slowdown(2) == 2.0 and p.slowdown(3) == 2.0  # nearest: 2 and 4 tie -> 4
    assert p.compute_fit(2).classes["matmul"].throughput == pytest.approx(0.5e9)
    assert p.optimizer_cost("adam", 2).fixed == pytest.approx(100e-6)
    assert p.allreduce_fit("gloo", 3).alpha == pytest.approx(100e-6)
    with pytest.raises(LabError, match="no timing"):
        calibrate.MachineProfile.from_dict({**p.to_dict(), "sharing": {"2": {}}}).sharing_fit("sparse_ring", 2)


def test_profile_path_follows_lab_data(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    assert calibrate.profile_path() == tmp_path / "machine_profile.json"
    assert calibrate.progress_path() == tmp_path / "machine_profile.progress.json"


def test_step_harness_is_the_workers_step():
    h = probes.StepHarness(cases.build_calibration_net("MLP", {"hidden": (16,)}), batch=8)
    lv = h.forward_backward()
    assert math.isfinite(lv) and h.gflat[-1] == pytest.approx(lv)
    assert float(h.gflat[:-1].abs().sum()) > 0  # gradients landed in the flat buffer
    assert all(p.grad.data_ptr() >= h.gflat.data_ptr() for p in h.params)


def test_measurements_are_positive():
    rows = probes.measure_compute(nets=[0], batches=(8,), repeat=3, passes=1)
    assert rows[0]["seconds"] > 0 and rows[0]["features"]["counts"]["matmul"] == 2
    opt = probes.measure_optimizers(kinds=("adam",), repeat=3, shapes=((2, 1000),))
    assert opt["adam"][0][2] > 0
    comp = probes.measure_compressors(keys=("group_topk",), sizes=(4096,), repeat=2)
    assert set(comp) == {"group_topk", "group_topk+ef"} and all(r[0][2] > 0 for r in comp.values())


_TINY = """
import json, sys
import multiprocessing.forkserver as fs
from lab.machine import calibrate
from lab.machine.insitu import Case
seen = []
prof = calibrate.calibrate(procs=(1, 2), nets=[0, 7], repeat=3, allreduce_iters=2, allreduce_sizes=(4096, 16384),
                   cycle_repeat=4, progress=lambda m, f: seen.append(f),
                   executor_cases=[Case(0, "one"), Case(7, "alt2")], heldout=1, heldout_seed=6)
prof.save(sys.argv[1])
print(json.dumps(seen))
fs._forkserver._stop()  # reaped here, so that its ranks' CPU reaches the test's account of this process
"""


@pytest.mark.timeout(600)
def test_tiny_calibration_end_to_end(tmp_path, spawns):
    """A calibration in a process of its own, with the machine's busy time and the CPU of that process's whole tree
    (the test's reaped children: it, and all it reaped) taken around it: the other work it records is at most what
    the machine did beside that tree."""
    import resource
    import subprocess
    import sys

    from lab.processes import _busy_cpu_s

    def children_cpu():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    busy0, tree0 = _busy_cpu_s(), children_cpu()
    proc = subprocess.run([sys.executable, "-c", _TINY, str(tmp_path / "tiny.json")], capture_output=True, text=True,
                          cwd=str(ROOT), timeout=540)
    beside = (_busy_cpu_s() - busy0) - (children_cpu() - tree0)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    prof = profile_mod.load_profile(tmp_path / "tiny.json")
    assert seen[0] == 0.0 and seen[-1] == 1.0
    load = prof.machine["load"]
    # The calibration's window lies inside the test's: the other work it saw is at most the other work beside its
    # tree (clock ticks of 10 ms). Booking its own ranks as other work broke this by their CPU, seconds of it.
    assert load["others_cpu_s"] <= beside + 0.05 + 0.02 * load["own_cpu_s"], (load, beside)
    assert load["own_cpu_s"] > 0
    # One plan drawn at random with the seed asked for, predicted and run after the fit, and its score kept.
    held = prof.heldout
    assert held["seed"] == 6 and len(held["rows"]) == 1 and held["plans"] + held["loaded"] == 1
    row = held["rows"][0]
    assert row["modelled"] > 0 and row["measured"] > 0
    if held["plans"]:  # scored only when it ran on a quiet machine
        hi, lo = max(row["measured"], row["modelled"]), min(row["measured"], row["modelled"])
        assert held["geomean_error"] == pytest.approx(hi / lo - 1, rel=1e-9)
    assert "held-out: " in calibrate.format_profile(prof)
    assert prof.procs == [1, 2]
    c = prof.compute
    assert c.fixed >= 0 and c.per_tensor >= 0 and c.samples == 4
    for cc in c.classes.values():
        assert cc.overhead >= 0 and cc.throughput > 0
    assert math.isfinite(prof.slowdown(2)) and prof.slowdown(2) > 0  # its size is a timing: load can move it
    for kind in calibrate.OPTIMIZERS:
        o = prof.optimizer[kind]
        assert min(o.fixed, o.per_tensor, o.per_unit) >= 0 and o.time(1e4, 4) > 0
    assert prof.compressor["group_topk"].time(1e4) > 0
    ab = prof.allreduce["2"]["gloo"]
    assert ab.alpha >= 0 and ab.beta >= 0 and ab.time(2, 65536) > 0
    assert set(prof.measured_allreduce["2"]) == {"gloo", "ring"}
    assert set(prof.sharing["2"]) == set(calibrate.SHARING)
    assert prof.jitter["2"].fixed >= 0 and prof.remainder["2"].fixed >= 0
    assert prof.machine["cores"] >= 1 and prof.created
    ex = prof.executor  # the placement executor measured in place, on the two plans asked for
    # Two plans cannot tell the terms apart (under load the fit has given all of a step to one term, and once none
    # of it to the CPU terms): some cost per step is found, no term is negative.
    terms = (ex.compute, ex.call, ex.backward_call, ex.node, ex.loss, ex.send_fixed, ex.send_per_byte, ex.recv_fixed,
             ex.recv_per_byte, ex.background_same, ex.background_other, ex.wire_fixed, ex.wire_per_byte, ex.wake)
    assert ex.cases == 2 and ex.procs == (1, 2) and math.isfinite(ex.fit_error)
    assert min(terms) >= 0 and sum(terms) > 0
    path = prof.save(tmp_path / "machine_profile.json")
    back = profile_mod.load_profile(path)
    assert back == prof
    assert "process" in calibrate.format_profile(back)
    again = calibrate.refit(back)  # the same rows through the same fit: the same N-process terms
    assert (again.contention, again.step_extra, again.cycle_wait, again.allreduce, again.sharing) == \
        (prof.contention, prof.step_extra, prof.cycle_wait, prof.allreduce, prof.sharing)
    assert set(prof.step_extra) >= {"2"} and prof.cycle_wait["2"] >= 0
    with pytest.raises(LabError, match="calibrate again"):
        calibrate.refit(calibrate.synthetic_profile())


def test_fit_cycles_recovers_known_in_context_costs():
    base = calibrate.synthetic_profile().compute  # 100 us per step + 10 us per operator
    opt = {"adam": calibrate.LinearCost(50e-6, 0.0, 0.0)}
    procs, alpha, beta = 3, 400e-6, 2e-9
    k, d = 1.5, 200e-6  # compute with N processes: 1.5 x the one-process time + 200 us per step
    feats, rows, alone = {}, [], {}
    for i, net in enumerate((0, 3, 7, 12)):
        counts = {c: 0 for c in calibrate.COMPUTE_CLASSES}
        counts["elementwise"] = 5 * (i + 1)
        feats[(net, 16)] = {"counts": counts, "flops": {c: 0.0 for c in calibrate.COMPUTE_CLASSES}, "tensors": 4}
        alone[net] = 100e-6 + 50e-6 * (i + 1) + 50e-6  # forward + backward + the optimiser step
    for i, (net, extra) in enumerate([(0, 0.0), (3, 0.0), (7, 0.0), (12, 9e-3)]):
        numel = 1000 * (i + 1)
        c = k * alone[net] + d
        comm = 2 * (procs - 1) * alpha + 2 * (procs - 1) / procs * numel * 4 * beta + extra  # one outlier case
        rows.append({"kind": "gloo", "net": net, "batch": 16, "fb": 0.7 * c, "opt": 0.3 * c, "cpu": c,
                     "compress": 0.0, "comm": comm, "idle": 200e-6 + extra, "cycle": c + comm + 200e-6 + extra + 300e-6,
                     "bytes_sent": 0.0, "hops": 4.0, "numel": numel})
    for net in (3, 7):
        rows.append({"kind": "sparse_allgather", "net": net, "batch": 16, "fb": k * alone[net] + d, "opt": 0.0,
                     "cpu": 0.0, "compress": 1e-4, "comm": 2 * 700e-6 + 5000 * 3e-9, "idle": 0.0, "cycle": 0.0,
                     "bytes_sent": 5000.0, "hops": 2.0, "numel": 1000})
    fit = fit_mod.fit_cycles(procs, rows, base, opt, feats, betas={"gloo": beta, "ring": 3e-9})
    ab = fit["comm"]["gloo"]
    assert ab.alpha == pytest.approx(alpha, rel=1e-6) and ab.beta == beta  # the median ignores the outlier
    sh = fit["comm"]["sparse_allgather"]
    assert sh.per_hop == pytest.approx(700e-6, rel=1e-6) and sh.fit_error == pytest.approx(0.0, abs=1e-9)
    assert fit["jitter"].fixed == pytest.approx(200e-6)
    assert fit["remainder"].fixed == pytest.approx(300e-6, rel=1e-6)
    assert fit["contention"] == pytest.approx(k, rel=1e-6)  # wall time of fb + opt = k x alone + d
    assert fit["step_extra"] == pytest.approx(d, rel=1e-5)
    waits = sorted(r["cycle"] - r["fb"] - r["opt"] for r in rows if r["kind"] == "gloo")
    assert fit["wait"] == pytest.approx((waits[1] + waits[2]) / 2)  # the median wait per step of the dense cases


def test_compute_slowdown_with_one_case_or_equal_cases_is_a_plain_factor():
    base = calibrate.synthetic_profile().compute
    opt = {"adam": calibrate.LinearCost(50e-6, 0.0, 0.0)}
    feat = {"counts": {c: 0 for c in calibrate.COMPUTE_CLASSES}, "flops": {c: 0.0 for c in calibrate.COMPUTE_CLASSES}, "tensors": 0}
    row = {"net": 0, "batch": 16, "fb": 200e-6, "opt": 100e-6, "numel": 11}
    assert fit_mod.fit_compute_slowdown([row, dict(row)], base, opt, {(0, 16): feat}) == (pytest.approx(2.0), 0.0)
    assert fit_mod.fit_compute_slowdown([], base, opt, {}) == (1.0, 0.0)


def test_profile_compute_with_n_processes_adds_the_fixed_extra_once():
    p = dataclasses.replace(calibrate.synthetic_profile(contention=2.0), step_extra={"2": 300e-6}, cycle_wait={"2": 0.001},
                            wait_slowdown=[[0.0, 1.0], [0.001, 1.5], [0.01, 3.0]])
    feat = {"counts": {c: 0 for c in calibrate.COMPUTE_CLASSES}, "flops": {c: 0.0 for c in calibrate.COMPUTE_CLASSES}, "tensors": 0}
    feat["counts"]["matmul"] = 3
    one = profile_mod.compute_seconds(p.compute_fit(1), feat)
    assert one == pytest.approx(100e-6 + 3 * 10e-6)
    assert profile_mod.compute_seconds(p.compute_fit(2), feat) == pytest.approx(2.0 * one + 300e-6)
    assert p.extra_per_step(1) == 0.0 and p.extra_per_step(4) == pytest.approx(300e-6)  # nearest count
    # the N-process terms hold the 1 ms wait of their calibration runs: only what goes beyond counts
    assert p.extra_wait_factor(0.001, 2) == 1.0 and p.extra_wait_factor(0.0, 2) == 1.0
    assert p.extra_wait_factor(0.01, 2) == pytest.approx(3.0 / 1.5)
    assert p.extra_wait_factor(0.01, 1) == pytest.approx(3.0)  # one process: no calibration wait


@pytest.mark.timeout(300)
def test_loop_calibration_runs_the_job_loop_on_calibration_networks(tmp_path, monkeypatch, spawns):
    """lab.machine.loop: the N-process rows come from the training job's own Trainer on a
    calibration network (not a preset model): bytes as the lab ring counts them, times positive."""
    from lab.machine.loop import measure_loop

    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    rows = measure_loop(2, [("ring", 0), ("sparse_allgather", 0)], steps=12)
    assert [r["kind"] for r in rows] == ["ring", "sparse_allgather"]
    cls_name, kwargs = calibrate.CALIBRATION_NETS[0]
    numel = sum(p.numel() for p in cases.build_calibration_net(cls_name, kwargs).parameters()) + 1  # + the loss slot
    ring, sparse = rows
    assert ring["numel"] == sparse["numel"] == numel
    assert ring["bytes_sent"] == pytest.approx(numel * 4, rel=0.01)  # 2(N-1)/N of the buffer, N = 2
    assert 0 < sparse["bytes_sent"] < 0.1 * ring["bytes_sent"]  # Group-TopK 1 %
    assert (ring["hops"], sparse["hops"]) == (2.0, 1.0)
    for r in rows:
        assert r["fb"] > 0 and r["comm"] > 0 and r["cycle"] >= r["fb"] and r["idle"] >= 0
    assert sparse["compress"] > 0 and ring["compress"] == 0
    assert os.environ["LAB_DATA"] == str(tmp_path)  # restored after the temporary store


def test_unknown_cycle_source_is_a_clear_error():
    with pytest.raises(LabError, match="cycle_source"):
        calibrate.calibrate(cycle_source="guess")


@pytest.mark.timeout(300)
def test_loop_calibration_with_one_process_prices_the_job_loop(tmp_path, monkeypatch, spawns):
    """One process in the job's loop: compute only (no collective), and a profile whose contention
    table holds that one-process cost applies it to one-process predictions."""
    import dataclasses

    from lab.machine.loop import measure_loop

    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    (row,) = measure_loop(1, [("gloo", 0)], steps=12)
    assert row["fb"] > 0 and row["hops"] == 0 and row["bytes_sent"] == 0
    prof = calibrate.synthetic_profile()
    assert prof.slowdown(1) == 1.0
    loop = dataclasses.replace(prof, contention={**prof.contention, "1": 1.25})
    assert loop.slowdown(1) == 1.25 and loop.slowdown(2) == prof.slowdown(2)
    assert loop.compute_fit(1).fixed == pytest.approx(prof.compute_fit(1).fixed * 1.25)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux only")
def test_calibration_processes_are_pinned_as_the_job_manager_pins_ranks(monkeypatch, spawns):
    """Rank k goes to the k-th job core in turn (the uniform placement on an idle machine, as
    lab.jobs.manager pins a job's ranks: the allowed cores but the first LAB_PAGE_CPUS, kept for the pages);
    LAB_CALIBRATION_PIN=0 leaves the process free."""
    import subprocess
    import sys

    from lab.jobs.slots import local_groups

    allowed = sorted(os.sched_getaffinity(0))
    assert [cases.rank_cpu(k) for k in range(4)] == [allowed[k % len(allowed)] for k in range(4)]
    assert [g.name for g in local_groups()] == [f"cpu{c}" for c in allowed]  # the job manager's cores
    monkeypatch.setenv("LAB_PAGE_CPUS", "1")  # one core kept for the pages
    jobs = allowed[1:] if len(allowed) > 1 else allowed
    assert [cases.rank_cpu(k) for k in range(4)] == [jobs[k % len(jobs)] for k in range(4)]
    assert [g.name for g in local_groups()] == [f"cpu{c}" for c in jobs]
    monkeypatch.setenv("LAB_PAGE_CPUS", str(len(allowed)))  # none would be left: every core
    assert [cases.rank_cpu(k) for k in range(len(allowed))] == allowed
    monkeypatch.delenv("LAB_PAGE_CPUS")
    code = "import os; from lab.machine.cases import pin_rank; pin_rank({}); print(sorted(os.sched_getaffinity(0)))"
    root = str(ROOT)
    for rank, flag, want in ((1, "1", [cases.rank_cpu(1)]), (2, "1", [cases.rank_cpu(2)]), (1, "0", allowed)):
        out = subprocess.run([sys.executable, "-c", code.format(rank)], cwd=root, capture_output=True, text=True,
                             env={**os.environ, "LAB_CALIBRATION_PIN": flag}, timeout=180, check=True).stdout
        assert out.strip() == str(want)


def test_the_calibration_progress_says_its_step_the_time_so_far_and_what_is_left():
    from lab.machine.calibrate import progress_line

    p = {"message": "compute, 2 processes", "fraction": 0.25, "started": 1000.0}
    assert progress_line(p, now=1030.0) == "calibrating: compute, 2 processes (25% done, 30 s so far, about 1 min 30 s left)"
    assert progress_line(dict(p, fraction=0.01), now=1005.0) == "calibrating: compute, 2 processes (1% done, 5 s so far)"
