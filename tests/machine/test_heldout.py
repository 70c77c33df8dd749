"""lab.machine.heldout: the calibration's plans drawn at random. The same seed draws the same plans; every plan
passes the lab's own checks and lies in the space the pages offer; drawn plans run as jobs from the command line;
the score is computed as the bench computes it."""

from __future__ import annotations

import dataclasses
import math

import pytest

from lab.errors import LabError
from lab.machine import heldout
from lab.machine.calibrate import synthetic_profile
from lab.scenario.document import Scenario
from lab.scenario.names import STRATEGY_NAMES
from lab.train.placement_run import stage_count
from tests.conftest import run_command


@pytest.fixture(scope="module")
def drawn():
    return heldout.draw(1, 6)  # its first plans are small: they run as jobs below


def test_the_same_seed_draws_the_same_plans_and_another_seed_others(drawn):
    again = heldout.draw(1, 3)  # the first plans of a seed do not depend on how many follow
    assert [sc.to_json() for sc, _ in drawn[:3]] == [sc.to_json() for sc, _ in again]
    assert [a for _, a in drawn[:3]] == [a for _, a in again]
    other = heldout.draw(2, 3)
    assert [sc.to_json() for sc, _ in other] != [sc.to_json() for sc, _ in drawn[:3]]


def test_the_drawn_strategies_are_ones_the_pages_offer():
    assert set(heldout.DRAWN_STRATEGIES) <= set(STRATEGY_NAMES)
    assert len(set(heldout.DRAWN_STRATEGIES)) == len(heldout.DRAWN_STRATEGIES)


def test_every_drawn_plan_passes_the_labs_checks_and_lies_in_the_space_users_reach(drawn):
    for sc, about in drawn:
        back = Scenario.from_json(sc.to_json())  # the scenario's own checks, as a link or a file is read
        tr = back.training
        assert tr.parallel == "placement" and tr.placement, about
        assert 1 <= stage_count(back) == about["procs"] <= heldout.MAX_PROCS
        assert 1 <= tr.micro_batches <= 8 and 0.25 <= tr.model_width <= 1.0 and tr.model in heldout.NETWORKS
        assert about["strategy"] == "pins" or about["strategy"] == tr.strategy
        assert not tr.pins or about["strategy"] == "pins"
        assert {d for _, d in tr.placement} <= {d.name for d in back.topology.devices}


@pytest.mark.slow  # half a minute of building and tracing torchvision's networks: out of the fast loop
def test_a_wide_draw_reaches_every_kind_of_plan():
    """Over forty plans: topologies generated and preset, every network kind, pins, both modes, 1 to 4
    processes."""
    about = [a for _, a in heldout.draw(5, 40)]
    assert {a["procs"] for a in about} == {1, 2, 3, 4}
    assert {a["emulated"] for a in about} == {False, True}
    assert any(a["strategy"] == "pins" for a in about) and any(a["topology"].startswith("drawn") for a in about)
    assert any(a["topology"] in ("cxl", "pcie", "two_pools", "gpu_npu", "edge") for a in about)
    assert {a["model"] for a in about} & {"mlp", "cnn", "resnet", "transformer"}
    assert {a["model"] for a in about} - {"mlp", "cnn", "resnet", "transformer"}  # torchvision's too


def test_the_score_is_the_geometric_mean_worst_and_tau_of_the_quiet_plans():
    rows = [{"modelled": 1.0, "measured": 1.5, "loaded": False}, {"modelled": 2.0, "measured": 2.0, "loaded": False},
            {"modelled": 4.0, "measured": 3.0, "loaded": False}, {"modelled": 1.0, "measured": 50.0, "loaded": True}]
    got = heldout.score(rows)
    assert got["plans"] == 3 and got["loaded"] == 1
    assert got["geomean_error"] == pytest.approx(math.exp((math.log(1.5) + 0 + math.log(4 / 3)) / 3) - 1)
    assert got["worst"] == pytest.approx(0.5)  # the loaded run's 49x is not scored
    assert got["tau"] == pytest.approx(1.0)
    assert math.isnan(heldout.score([rows[-1]])["geomean_error"])


def test_drawn_plans_run_as_jobs_from_the_command_line(drawn, tmp_path, spawns):
    for sc, about in drawn[:2]:
        short = sc.replace(training=sc.training.replace(steps=2, eval_every=1))
        res = run_command(short, tmp_path / "runs.db")
        assert res.status == "done", (about, res.error)


def test_the_check_predicts_runs_and_scores_drawn_plans(spawns):
    got = heldout.check(synthetic_profile(), seed=1, n=2, steps=heldout.WARMUP + 1)
    assert got["seed"] == 1 and len(got["rows"]) == 2
    assert [{k: r[k] for k in ("model", "procs")} for r in got["rows"]] == \
        [{k: a[k] for k in ("model", "procs")} for _, a in heldout.draw(1, 2, synthetic_profile())]
    for r in got["rows"]:
        assert r["modelled"] > 0 and r["measured"] > 0 and 0.0 <= r["others"] <= 1.0
    assert got["plans"] + got["loaded"] == 2
    assert got["covered"]["procs"] == sorted({r["procs"] for r in got["rows"]})

    # Run again from the profile that keeps the set (the bench's noise floor): the same plans, measured anew.
    prof = dataclasses.replace(synthetic_profile(), heldout=got)
    rows = heldout.again(prof)
    assert [{k: v for k, v in r.items() if k not in ("again", "others_again")} for r in rows] == got["rows"]
    for r in rows:
        assert r["again"] > 0 and 0.0 <= r["others_again"] <= 1.0
    # A profile whose seed no longer draws the plans it recorded, or that recorded none, is refused before any run.
    moved = dataclasses.replace(prof, heldout={**got, "rows": [dict(got["rows"][0], model="vgg11"), got["rows"][1]]})
    with pytest.raises(LabError, match="seed 1 now draws another plan 1"):
        heldout.again(moved)
    with pytest.raises(LabError, match="no plans drawn at random"):
        heldout.again(synthetic_profile())
