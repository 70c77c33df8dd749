"""A placement run's ranks decided once, at submit (lab.train.placed.PlacedRanks): their devices and the messages
between them, carried in the job spec to the launcher, which pins the ranks and names a failed stage from them."""
from __future__ import annotations

import pytest

from lab.errors import LabError
from lab.modelled.opgraph import trace
from lab.modelled.placement.cores import DEFAULT_RANK_POLICY, rank_cores
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.scenario.models import build_model
from lab.train import placement_run
from lab.train.launcher import JobSpec, launch, named, preflight
from lab.train.placed import PlacedRanks
from lab.train.watch import Failure


def scenario(micro: int, split_at: int, schedule: str = "gpipe") -> Scenario:
    """The MLP cut in two: its first ``split_at`` operators on edge0, the rest on edge1 (a chain of two stages)."""
    ops = trace(build_model("mlp", 64, 10), 24, 64).names
    placement = {op: "edge0" if i < split_at else "edge1" for i, op in enumerate(ops)}
    tr = Training(model="mlp", parallel="placement", batch_size=24, micro_batches=micro, steps=3,
                  schedule=schedule).replace(placement=placement)
    return Scenario("placed", preset("edge"), tr)


@pytest.mark.parametrize("micro", [1, 3, 4])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_chain_of_two_stages_sends_each_micro_batch_once_each_way(micro, schedule):
    sc, placed = preflight(scenario(micro, 2, schedule))
    assert placed.devices == ("edge0", "edge1") == tuple(placement_run.stage_devices(sc))
    # The textbook count: one activation forward and one gradient back per micro-batch.
    assert placed.messages == ((0, 1, 2 * micro),)


def test_a_data_parallel_job_has_no_placed_ranks():
    sc, placed = preflight(Scenario("dp", preset("edge"), Training(workers=2, steps=3)))
    assert placed is None and sc.training.parallel == "data"


def test_the_cores_are_the_rank_policys_over_the_jobs_own_cores():
    placed = PlacedRanks(("a", "b", "c"), ((0, 1, 8), (1, 2, 8)))
    got = placed.cores([5, 7])
    assert got == [None if c is None else [5, 7][c] for c in rank_cores(3, 2, {(0, 1): 8, (1, 2): 8})]
    assert set(got) - {None} <= {5, 7}
    # Partners apart: ranks 0 and 2 talk most, so they get different cores, where turns would put them together.
    busy = PlacedRanks(("a", "b", "c"), ((0, 2, 12), (0, 1, 1)))
    assert busy.cores([5, 7], "partners") == [5, 7, 7]
    assert busy.cores([5, 7], "turns") == [5, 7, 5] and busy.cores([5, 5, 7], "turns") == [5, 7, 5]
    assert PlacedRanks(("a", "b")).cores([3, 4], "partners") == [3, 4]  # a core each while there are enough
    if DEFAULT_RANK_POLICY == "free":  # measured fastest: the kernel moves every rank, no launcher work at all
        assert got == [None, None, None]


def test_it_travels_in_the_job_spec_and_back():
    _, placed = preflight(scenario(2, 3))
    spec = JobSpec("r1", {"name": "x"}, "/tmp/runs.db", (0, 1), placed=placed.to_dict())
    back = JobSpec.from_dict(spec.to_dict())
    assert PlacedRanks.from_dict(back.placed) == placed
    assert JobSpec.from_dict({**spec.to_dict(), "placed": None}).placed is None


@pytest.mark.parametrize("bad", [
    {"devices": "edge0"}, {"devices": []}, {"devices": ["a", 3]}, {}, "a list", None,
    {"devices": ["a", "b"], "messages": [[0, 2, 1]]}, {"devices": ["a", "b"], "messages": [[1, 0, 1]]},
    {"devices": ["a", "b"], "messages": [[0, 1, -1]]}, {"devices": ["a", "b"], "messages": [[0, 1]]},
    {"devices": ["a", "b"], "messages": [["x", 1, 2]]}, {"devices": ["a", "b"], "messages": [[0, 1, 2.5]]},
    {"devices": ["a", "b"], "messages": [[False, True, 2]]},
], ids=repr)
def test_a_malformed_placement_in_a_spec_is_refused_with_why(bad):
    with pytest.raises(LabError, match="malformed placement"):
        PlacedRanks.from_dict(bad)


def test_a_spec_whose_placement_is_not_a_record_is_refused():
    with pytest.raises(LabError, match="malformed job spec"):
        JobSpec.from_dict({"run_id": "r1", "scenario": {}, "db": "x", "placed": ["edge0"]})


def test_a_failed_rank_is_named_by_the_device_decided_at_submit():
    sc, placed = preflight(scenario(2, 2))
    ops = [op for op, d in sc.training.placement if d == "edge1"]
    got = named(Failure(1, "error", "worker 1 failed: boom"), sc, placed)
    assert got.error.startswith(f"the stage process of device edge1 (rank 1: {ops[0]}")
    assert got.error.endswith("failed: boom")
    plain = Failure(1, "error", "worker 1 failed: boom")
    assert named(plain, sc, None) == plain  # a data-parallel job's worker keeps its number
    assert named(Failure(5, "error", "worker 5 failed"), sc, placed).error == "worker 5 failed"


def test_a_spec_whose_placement_does_not_fit_its_scenario_is_refused_before_anything_starts(tmp_path):
    sc, placed = preflight(scenario(2, 2))
    wrong = PlacedRanks(placed.devices + ("edge2",))
    with pytest.raises(LabError, match="places 3 ranks, and the scenario's placement job has 2"):
        launch(sc, store_path=tmp_path / "runs.db", checked=True, placed=wrong)
    dp, _ = preflight(Scenario("dp", preset("edge"), Training(workers=2, steps=3)))
    with pytest.raises(LabError, match="places 2 ranks, and the scenario's data job has 2"):
        launch(dp, store_path=tmp_path / "runs.db", checked=True, placed=placed)

