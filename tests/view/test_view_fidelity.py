"""lab.view.fidelity: the Fidelity page's model (the profile and its calibration, stored runs beside their
prediction, the placement runs, a run's step as a trace), from a run store and a synthetic profile."""

from __future__ import annotations

import json
import math
import os

import pytest

from lab.machine import calibrate as cal
from lab.machine.calibrate import synthetic_profile
from lab.machine.predict import predict_step
from lab.view import fidelity as view
from lab.view.state import VIEW
from tests.pages.test_page_fidelity import OWNER, runs_under_load, stored_run
from tests.view.sections import by_key, figure_json


@pytest.fixture
def data(lab_db, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    return tmp_path


def test_the_calibration_controls_are_advanced_ones_of_the_view_table():
    assert {k for k, c in VIEW.items() if c.page == "fidelity"} == {"fid_quick", "fid_steps", "fid_class",
                                                                    "fid_trace_run"}
    assert VIEW["fid_quick"].advanced and VIEW["fid_steps"].advanced  # lesson mode hides them
    assert not VIEW["fid_class"].advanced and not VIEW["fid_trace_run"].advanced


def test_without_a_profile_the_page_says_how_to_get_one_and_predicts_nothing(data):
    here = view.machine(None, 0)
    s = by_key(here.sections)
    assert "no profile yet" in s["fid_no_profile"].notices[0].text and s["fid_no_profile"].notices[0].level == "info"
    assert "Calibrate while no training runs" in s["fid_quiet"].caption and "fid_busy" not in s
    assert (here.label, here.wait) == ("Calibrate this machine", False)
    assert view.stored_runs(None, OWNER, False, False) == ([], None)
    assert view.calibration_measured(None, False) == []
    assert view.profile() is None


def test_the_profile_its_calibration_tables_and_beside_running_jobs_an_offer_to_wait(data):
    prof = synthetic_profile()
    here = view.machine(prof, 2)
    s = by_key(here.sections)
    assert s["fid_profile"].intro == "**Profile:** {profile}" and "synthetic" in s["fid_profile"].values["profile"]
    assert s["fid_profile"].kind == "measured" and "compute fit error" in s["fid_profile"].caption
    busy = s["fid_busy"].notices[0]
    assert busy.level == "warning" and "2 job(s) are running" in busy.text
    assert (here.label, here.wait) == ("Calibrate now", True)
    assert f"after {cal.PAGE_WAIT_S / 60:.0f} minutes" in here.wait_help
    measured = by_key(view.calibration_measured(prof, False))
    assert list(measured) == ["fid_classes", "fid_comm", "fid_step_terms"]
    assert figure_json(measured["fid_classes"])["data"] and measured["fid_comm"].table
    assert view.calibration_measured(prof, True) == []  # lesson mode leaves the details out


def test_calibrate_starts_the_background_calibration_and_its_progress_is_read(data, monkeypatch):
    calls = []
    monkeypatch.setattr(cal, "start_background", lambda path=None, quick=False, wait_quiet_s=0.0:
                        calls.append((quick, wait_quiet_s)))
    view.calibrate(True, False)
    view.calibrate(False, True)
    assert calls == [(True, 0.0), (False, cal.PAGE_WAIT_S)]
    assert view.calibration_progress() == view.Progress() and not view.calibrating()
    cal._write_progress(cal.profile_path(), message="compute, one process", fraction=0.25, done=False, error=None)
    p = view.calibration_progress()  # this process wrote it: it lives
    assert view.calibrating() and p.bar[0] == 0.25 and "compute, one process" in p.bar[1] and not p.ended
    cal._write_progress(cal.profile_path(), message="done", fraction=1.0, done=True, error=None)
    assert view.calibration_progress().ended and not view.calibrating()
    cal._write_progress(cal.profile_path(), message="failed", fraction=1.0, done=True, error="no cores left")
    failed = view.calibration_progress().sections[0].notices[0]
    assert failed.level == "error" and failed.text == "The last calibration failed: no cores left"


def test_the_preset_batch_is_the_starters_and_says_how_far_it_is(monkeypatch):
    import lab.machine.fidelity as machine_fidelity

    started = []

    class FakeBatch:
        def __init__(self, manager, profile, steps=60, owner=None):
            started.append((steps, owner))
            self.state = {"total": 13, "done": 4, "current": "fidelity: cnn 1w", "run_ids": [], "error": None,
                          "finished": False, "running": True}

        def start(self):
            return self

        def status(self):
            return self.state

    monkeypatch.setattr(machine_fidelity, "FidelityBatch", FakeBatch)
    batch = view.start_batch(None, synthetic_profile(), 30, "me")
    assert started == [(30, "me")]
    p = view.batch_progress(batch)
    assert p.bar == (4 / 13, "4 of 13 runs done; running: fidelity: cnn 1w") and p.sections == ()
    batch.state = {**batch.state, "running": False, "finished": True, "done": 13, "run_ids": ["a", "b"],
                   "error": "1 run(s) did not finish: b"}
    p = view.batch_progress(batch)
    assert p.bar is None and p.sections[0].caption == "The preset batch finished (2 runs)."
    assert (p.sections[1].notices[0].level, p.sections[1].notices[0].text) == ("warning", "1 run(s) did not finish: b")
    assert view.batch_progress(None) == view.Progress()


def test_a_stored_run_beside_its_prediction(data, lab_db):
    prof = synthetic_profile()
    rid, sc = stored_run(lab_db)
    runs, aside = view.stored_runs(prof, OWNER, False, False)
    s = by_key(runs)
    pred = predict_step(sc, prof).step
    metrics = {m[0]: m for m in s["fid_metrics"].metrics}
    assert metrics["Model error, step time"][1] == f"{(math.exp(abs(math.log(pred / 0.01))) - 1) * 100:.1f} %"
    assert metrics["Target on this machine"][1] == "≤ 15 %" and metrics["Runs compared"][1] == "1"
    assert "over the runs measured on a quiet machine" in metrics["Model error, step time"][2]
    assert "SimAI" in s["fid_verdict"].text and "fid_loaded" not in s
    assert [x for x in ("fid_scatter", "fid_errors", "fid_parts") if x in s] == ["fid_scatter", "fid_errors", "fid_parts"]
    assert (s["fid_scatter"].kind, s["fid_errors"].kind) == ("measured", "modelled") and figure_json(s["fid_parts"])["data"]
    table = s["fid_table"].table
    assert [r["id"] for r in table] == [rid]
    assert table[0]["measured step (ms)"] == pytest.approx(10.0)
    assert table[0]["predicted step (ms)"] == pytest.approx(pred * 1e3)
    assert aside is None
    assert "fid_parts" not in by_key(view.stored_runs(prof, OWNER, False, True)[0])  # lesson mode: fewer charts
    # another student sees the run only with the whole class's
    assert "No finished runs" in view.stored_runs(prof, "someone else", False, False)[0][0].notices[0].text
    assert by_key(view.stored_runs(prof, "someone else", True, False)[0])["fid_table"].table[0]["id"] == rid


def test_the_same_scenario_run_twice_shows_the_measurement_spread(data, lab_db):
    stored_run(lab_db, step_s=0.010)
    stored_run(lab_db, step_s=0.020)
    s = by_key(view.stored_runs(synthetic_profile(), OWNER, False, False)[0])
    metrics = {m[0]: m[1] for m in s["fid_metrics"].metrics}
    assert metrics["Re-measured spread"] == "100.0 %"  # 10 ms then 20 ms: exp(|ln 2|) - 1
    assert metrics["Best possible here"] == "41.4 %"  # any constant between 10 and 20 ms: exp(|ln 2| / 2) - 1


def test_a_run_measured_under_load_is_kept_out_of_the_error_and_flagged(data, lab_db):
    prof = synthetic_profile()
    quiet, busy, sc = runs_under_load(lab_db)
    s = by_key(view.stored_runs(prof, OWNER, False, False)[0])
    pred = predict_step(sc, prof).step
    metric = {m[0]: m[1] for m in s["fid_metrics"].metrics}["Model error, step time"]
    assert metric == f"{(math.exp(abs(math.log(pred / 0.01))) - 1) * 100:.1f} %"  # the quiet run's alone
    loaded = s["fid_loaded"].notices[0]
    assert loaded.level == "warning" and "1 run(s) were measured while other work took more than 15 %" in loaded.text
    table = {r["id"]: r for r in s["fid_table"].table}
    assert table[busy]["under load"] and not table[quiet]["under load"]
    assert [t["name"] for t in figure_json(s["fid_scatter"])["data"] if t.get("mode") == "markers"]  # the quiet run drawn


def test_runs_the_model_cannot_compare_are_listed_apart_outside_lesson_mode(data, lab_db):
    def predict(db, created, profile, ids):
        return [], [{"id": i, "why": "no steps"} for i in ids]

    rid, _ = stored_run(lab_db)
    runs, aside = view.stored_runs(synthetic_profile(), OWNER, False, False, predict)
    assert [s.key for s in runs] == ["fid_no_runs"]
    assert aside[0] == "1 run(s) not compared" and aside[1][0].table == [{"id": rid, "why": "no steps"}]
    assert view.stored_runs(synthetic_profile(), OWNER, False, True, predict)[1] is None


def test_placement_runs_and_a_runs_step_as_a_trace(data, lab_db):
    prof = synthetic_profile()
    assert view.placement_runs(prof, OWNER, False)[0].caption.startswith("No finished placement runs yet")
    assert view.trace_runs(OWNER, False, None) == {}
    rid, _ = stored_run(lab_db)
    labels = view.trace_runs(OWNER, False, None)
    assert list(labels) == [rid] and view.trace_runs("someone else", False, None) == {}
    assert list(view.trace_runs("someone else", False, rid)) == [rid]  # a link's run stays
    download, caption = view.trace(rid, prof)
    assert download["file_name"] == f"{rid}-step.trace.json" and download["key"] == "fid_trace_download"
    doc = json.loads(download["data"])
    assert doc["traceEvents"] and caption[0].kind == "measured"
    assert f"{len(doc['traceEvents'])} events" in caption[0].caption
    assert view.db() == str(os.environ["LAB_DB"])
