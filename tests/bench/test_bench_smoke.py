"""Every script of bench/ runs in its smoke mode (its smallest sizes, seconds) and prints its table: a bench that
no longer runs is a red test here, not a surprise on the day it is needed."""

from __future__ import annotations

import os
import sys

import pytest

from bench.common import run_in_session
from tests.conftest import ROOT

BENCHES = sorted((ROOT / "bench").glob("bench_*.py"))


def test_every_bench_script_is_here():
    assert len(BENCHES) >= 19


# bench_cluster starts a Ray cluster: it runs on the test worker that runs the other clusters, one at a time
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.xdist_group("ray")) if p.stem == "bench_cluster"
                                  else p for p in BENCHES], ids=lambda p: p.stem)
def test_a_bench_runs_in_its_smoke_mode_and_prints_its_table(path, tmp_path, spawns):
    # Its own run store and data folder: a smoke run leaves nothing in the checkout.
    env = dict(os.environ, PYTHONPATH=str(ROOT), LAB_DB=str(tmp_path / "runs.db"), LAB_DATA=str(tmp_path),
               TMPDIR=str(tmp_path))
    proc = run_in_session([sys.executable, str(path), "--smoke"], 240, cwd=ROOT, env=env)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, f"{path.name} --smoke exited {proc.returncode}:\n{err[-3000:]}"
    lines = out.splitlines()
    # bench.common.table draws a rule of dashes under its header: at least one table was printed.
    assert any(line.strip() and set(line.replace(" ", "")) == {"-"} for line in lines), out[-2000:]
