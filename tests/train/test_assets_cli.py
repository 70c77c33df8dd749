"""Every shipped example runs from the command line as the README says (``python -m lab.train --scenario
FILE``), and a scenario a worker would refuse is refused before any process starts: exit 2, one line."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from lab.scenario.document import Scenario
from lab.train.launcher import preflight, world_size
from tests.conftest import ROOT

ASSETS = sorted((ROOT / "assets").glob("*.json"))
LESSONS = sorted(p for p in (ROOT / "assets" / "lessons").glob("*.json") if p.name != "index.json")
#: file name -> what its one-line refusal says. Empty: every shipped example is meant to run.
REFUSED: dict[str, str] = {}


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, LAB_DB=str(tmp_path / "runs.db"), LAB_DATA=str(tmp_path / "data"), LAB_GLOO_TIMEOUT="60")
    return subprocess.run([sys.executable, "-m", "lab.train", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=400)


def runs_in_store(tmp_path: Path) -> int:
    db = tmp_path / "runs.db"
    if not db.exists():
        return 0
    with sqlite3.connect(db) as c:
        return c.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


def test_the_examples_are_there():
    assert len(ASSETS) >= 5 and LESSONS


@pytest.mark.timeout(900)
@pytest.mark.parametrize("asset", ASSETS, ids=lambda p: p.name)
def test_every_shipped_example_runs_from_the_command_line(asset, tmp_path, spawns):
    assert world_size(Scenario.from_json(asset.read_bytes())) <= 4  # at most 4 worker processes here
    p = run_cli(tmp_path, "--scenario", str(asset), "--steps", "2")
    if asset.name in REFUSED:
        err = p.stderr.strip()
        assert p.returncode == 2 and "\n" not in err and REFUSED[asset.name] in err, p.stderr[-2000:]
        return
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1].startswith("run "), p.stdout[-500:]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_every_lesson_scenario_passes_the_checks_a_job_makes(lesson):
    preflight(Scenario.from_json(lesson.read_bytes()))


@pytest.mark.timeout(300)
def test_a_worker_on_a_device_without_the_kernel_is_refused_before_any_process_starts(tmp_path, spawns):
    doc = json.loads((ROOT / "assets" / "two-pools-hierarchical.json").read_text())
    doc["training"]["worker_devices"] = ["p0-gpu", "p0-fpga", "p1-gpu", "p1-fpga"]  # an MLP on FPGAs: no matmul
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    p = run_cli(tmp_path, "--scenario", str(bad), "--steps", "2")
    err = p.stderr.strip()
    assert p.returncode == 2, p.stderr[-3000:]
    assert "\n" not in err and "Traceback" not in err, err[-3000:]
    assert err.startswith("lab.train: training.worker_devices: worker 1 is mapped to 'p0-fpga'"), err
    assert "no matmul kernel" in err
    assert runs_in_store(tmp_path) == 0  # refused before the run was recorded, so before any worker
