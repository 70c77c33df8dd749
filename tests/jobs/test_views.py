"""lab.jobs.views: the plain data the Jobs and Training pages show."""

from lab.jobs.views import start_phase
from lab.scenario.document import default_scenario
from lab.store.runs import RunStore


def test_start_phase_says_where_a_job_is_on_its_way(tmp_path):
    s = RunStore(tmp_path / "runs.db")
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(workers=2, steps=50))
    rid = s.create_run(sc)
    assert start_phase(s, rid, 3) == "queued behind 2 jobs"
    assert start_phase(s, rid, 1) == "queued behind 0 jobs"
    s.set_status(rid, "running")
    assert start_phase(s, rid) == "starting the launcher"
    s.add_stage(rid, "started")
    assert start_phase(s, rid) == "starting workers (0 of 2 ready)"
    s.set_heartbeats(rid, [{"worker": 0, "attempt": 0, "pid": 1, "step": 0, "phase": "busy", "t": 0.0}])
    assert start_phase(s, rid) == "starting workers (1 of 2 ready)"
    s.set_heartbeats(rid, [{"worker": w, "attempt": 0, "pid": 1, "step": 0, "phase": "busy", "t": 0.0} for w in (0, 1)])
    assert start_phase(s, rid) == "joining the group"
    s.add_stage(rid, "data")
    assert start_phase(s, rid) == "first step"
    s.add_metrics(rid, [{"step": 7, "worker": -1, "loss": 1.0}])
    assert start_phase(s, rid) == "step 7 of 50"
    s.set_status(rid, "done")
    assert start_phase(s, rid) == "step 7 of 50"
