"""lab.comm: the lab's ring all-reduce against gloo's all_reduce on real processes, and the
nccl-tests style measurement command (end to end, and a worker that dies)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import torch

from lab.comm import BYTES, ByteCounter, ring_allreduce
from lab.comm import measure as comm_measure
from lab.errors import LabError
from tests.conftest import ROOT

COUNTS = [1, 2, 3, 7, 100, 1001]
TOL = {"float32": 1e-5, "float64": 1e-12, "int64": 0.0}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("procs, piece", [(1, 256), (2, 256), (3, None), (4, 256)])
def test_ring_equals_gloo_all_reduce(procs, piece, spawns):
    # one process group per N, every size and case inside it; with 256-byte pieces even these
    # small tensors run the multi-piece pipeline (uneven pieces, empty chunks); N=3 uses the
    # default pieces (one per chunk at these sizes, two per chunk for the 6.4 MB tensor)
    counts = COUNTS + ([1_600_003] if piece is None else [])
    rows = comm_measure.check_ring(procs, counts, seed=procs, piece_bytes=piece)
    cases = [r for r in rows if r["case"] != "link_delay"]
    assert len(cases) == len(counts) * 5
    for r in cases:
        assert r["max_diff"] <= TOL[r["dtype"]], r
        # the bytes every rank really sent and received are those the schedule model counts
        assert r["sent"] == r["model_sent"], r
        assert r["received"] == r["model_received"], r
    for r in cases:
        if procs > 1 and r["count"] % procs == 0 and r["case"] == "sum" and r["dtype"] == "float32":
            assert r["sent"] == [2 * (procs - 1) * r["count"] * 4 // procs] * procs
    delay = rows[-1]
    assert delay["case"] == "link_delay" and delay["ok"]
    if procs > 1:
        assert delay["messages"] == 2 * (procs - 1)  # 3N floats: one piece per step
        assert delay["delay"] == pytest.approx(0.01 * delay["messages"])
        assert delay["seconds"] >= delay["delay"]


def test_ring_rejects_bad_input_in_process():
    with pytest.raises(LabError, match="op"):
        ring_allreduce(torch.ones(3), op="max")
    with pytest.raises(LabError, match="floating-point"):
        ring_allreduce(torch.ones(3, dtype=torch.int64), op="mean")
    with pytest.raises(LabError, match="process group"):
        ring_allreduce(torch.ones(3))


def test_byte_counter():
    c = ByteCounter()
    c.add(10, 20, 1, 2)
    c.add(1, 2)
    assert c.snapshot() == {"sent": 11, "received": 22, "messages_sent": 1, "messages_received": 2}
    c.reset()
    assert c.sent == c.received == 0
    assert isinstance(BYTES, ByteCounter)


def test_sizes_and_units():
    assert comm_measure.parse_size("4K") == 4096
    assert comm_measure.parse_size("32M") == 32 << 20
    assert comm_measure.parse_size("1000") == 1000
    assert comm_measure.parse_size("1.5k") == 1536
    for bad in ("", "-4K", "4Q", "abc"):
        with pytest.raises(LabError):
            comm_measure.parse_size(bad)
    assert comm_measure.sizes_between(4096, 32768) == [4096, 8192, 16384, 32768]
    assert comm_measure.sizes_between(6, 24) == [4, 12, 24]  # whole float32 elements
    with pytest.raises(LabError):
        comm_measure.sizes_between(4096, 1024)
    with pytest.raises(LabError, match="csv or .json"):
        comm_measure.write_rows([], "out.txt")


@pytest.mark.timeout(180)
def test_measure_command_end_to_end(tmp_path, spawns):
    out = tmp_path / "allreduce.json"
    p = subprocess.run([sys.executable, "-m", "lab.comm.measure", "--procs", "2", "--min-bytes", "4K",
                        "--max-bytes", "16K", "--iters", "2", "--warmup", "1", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert p.returncode == 0, p.stderr
    assert "busbw (GB/s)" in p.stdout and "geometric-mean error" in p.stdout
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [(r["size"], r["impl"]) for r in rows] == [(s, i) for s in (4096, 8192, 16384) for i in ("ring", "gloo")]
    for r in rows:
        assert r["correct"] and r["source"] == "measured" and r["iters"] == 2
        assert r["time_min"] <= r["time"] <= r["time_max"]
        assert r["algbw"] == pytest.approx(r["size"] / r["time"])
        assert r["busbw"] == pytest.approx(r["algbw"] * 2 * (2 - 1) / 2)
    # the same rows as CSV
    csv_path = comm_measure.write_rows(rows, tmp_path / "allreduce.csv")
    with csv_path.open() as f:
        back = list(csv.DictReader(f))
    assert [int(r["size"]) for r in back] == [r["size"] for r in rows]
    # a model fit to these rows predicts every size
    fit = comm_measure.fit_rows(rows, "ring")
    assert len(fit.predicted) == 3 and fit.alpha >= 0 and fit.beta >= 0


@pytest.mark.timeout(120)
def test_measure_function_reports_progress(spawns):
    seen = []
    rows = comm_measure.measure(2, [4096], iters=2, impls=("gloo", "ring"), warmup=0,
                     progress=lambda done, total, row: seen.append((done, total, row["impl"])))
    assert seen == [(1, 2, "gloo"), (2, 2, "ring")]
    assert [r["impl"] for r in rows] == ["gloo", "ring"]


@pytest.mark.timeout(120)
def test_a_dying_worker_gives_a_clear_error(spawns):
    with pytest.raises(LabError, match=r"worker rank 1 of 3 died \(exit code 3\).*reaped.*dying on purpose"):
        comm_measure.measure(3, [4096], iters=1, warmup=0, die_rank=1, timeout=60)
    p = subprocess.run([sys.executable, "-m", "lab.comm.measure", "--procs", "2", "--min-bytes", "4K",
                        "--max-bytes", "4K", "--iters", "1", "--die-rank", "0"],
                       cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert p.returncode == 2
    assert "worker rank 0 of 2 died" in p.stderr and "Traceback" not in p.stderr


def test_measure_rejects_bad_arguments():
    with pytest.raises(LabError, match="procs"):
        comm_measure.measure(0, [4096])
    with pytest.raises(LabError, match="implementation"):
        comm_measure.measure(2, [4096], impls=("nccl",))
    with pytest.raises(LabError, match="multiples of 4"):
        comm_measure.measure(2, [4097])
