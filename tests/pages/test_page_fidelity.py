"""Fidelity page (AppTest): drawn whole without a profile and with a stored run beside its prediction, the
calibration and batch buttons; what its sections hold is tested on the page model (tests/view/test_view_fidelity.py).
And the pages that show a stored run beside its prediction (Training, All-reduce) and the Home page's lessons."""

from __future__ import annotations

import json

import pytest

import ui
from lab.machine.calibrate import synthetic_profile
from lab.machine.predict import predict_step
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.store.runs import RunStore
from tests.conftest import ROOT, app_test, assert_no_exception

PAGE = "pages/fidelity.py"


@pytest.fixture
def data(lab_db, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()
    return tmp_path


OWNER = "tester"  # the browser session the Training page shows runs of


def stored_run(lab_db, steps=20, step_s=0.01) -> tuple[str, Scenario]:
    st = RunStore(lab_db)
    sc = Scenario(name="stored mlp", topology=preset("cxl"), training=Training(model="mlp", workers=2, steps=steps))
    rid = st.create_run(sc, status="done", info={"owner": OWNER})  # the page's session's own run
    rows, wall = [], 0.0
    for s in range(1, steps + 1):
        wall += step_s
        rows.append({"step": s, "worker": -1, "wall": wall})
        for w in range(2):
            rows.append({"step": s, "worker": w, "t_compute": 0.004, "t_comm": 0.003, "t_idle": 0.001 * w,
                         "t_compress": 0.0, "t_emul_compute": 0.0, "t_emul_comm": 0.0, "bytes_sent": 1e5,
                         "wall": wall})
    st.add_metrics(rid, rows)
    return rid, sc


def page_with_a_stored_run(lab_db, page: str):
    """A saved synthetic profile, one stored run, and ``page`` opened: (AppTest, run id, scenario, profile)."""
    prof = synthetic_profile()
    prof.save()
    rid, sc = stored_run(lab_db)
    at = app_test(page)
    at.session_state["job_owner"] = OWNER
    at.run()
    assert_no_exception(at)
    return at, rid, sc, prof


def test_page_without_profile_or_runs(data, spawns):
    at = app_test(PAGE)
    assert_no_exception(at)
    assert any("no profile yet" in i.value for i in at.info)
    assert at.button(key="fid_calibrate")
    assert at.button(key="fid_batch").disabled  # nothing to predict with yet


def test_the_page_draws_a_stored_run_beside_its_prediction_whole(data, lab_db, spawns):
    at, rid, sc, prof = page_with_a_stored_run(lab_db, PAGE)
    assert [h.value for h in at.subheader] == ["This machine", "Stored runs: predicted against measured",
                                               "Placement runs: prediction, replay and measurement",
                                               "One step as a trace"]
    assert [m.label for m in at.metric] == ["Model error, step time", "Target on this machine", "Runs compared",
                                            "Re\\-measured spread", "Best possible here"]   # labels shown as text
    assert at.metric[0].value.endswith(" %") and at.metric[0].help.startswith("exp(mean over runs")
    assert len(at.get("plotly_chart")) == 3 + 1  # step time, error, parts; the calibration's classes
    table = [d.value for d in at.dataframe if "measured step (ms)" in d.value.columns][0]
    assert list(table["id"]) == [rid]
    assert any("SimAI" in m.value for m in at.markdown)
    assert "synthetic" in "".join(m.value for m in at.markdown)  # the profile's machine description
    captions = " ".join(c.value for c in at.caption)
    assert "measured" in captions and "modelled" in captions and "events; timestamps in µs" in captions
    assert at.selectbox(key="fid_trace_run").value == rid
    assert at.get("download_button")[0].proto.label == "Download the trace (JSON)"


def test_calibrate_button_starts_the_background_calibration(data, monkeypatch, spawns):
    import lab.machine.calibrate as cal

    calls = []

    def fake_start(path=None, quick=False, wait_quiet_s=0.0):
        calls.append((quick, wait_quiet_s))
        cal._write_progress(cal.profile_path(), message="compute, one process", fraction=0.25, done=False,
                            error=None)

    monkeypatch.setattr(cal, "start_background", fake_start)
    at = app_test(PAGE)
    assert not [b for b in at.button if b.key == "fid_calibrate_wait"]  # no job runs: nothing to wait for
    at.toggle(key="fid_quick").set_value(True).run()
    at.button(key="fid_calibrate").click().run()
    assert_no_exception(at)
    assert calls == [(True, 0.0)]
    at.run()
    assert at.button(key="fid_calibrate").disabled  # one calibration at a time
    cal._write_progress(cal.profile_path(), message="failed", fraction=1.0, done=True, error="no cores left")
    at.run()
    assert any("no cores left" in e.value for e in at.error)


def test_beside_running_jobs_the_page_offers_to_wait_for_a_quiet_machine(data, monkeypatch, spawns):
    import lab.machine.calibrate as cal
    from lab.jobs.running import RunningJobs

    calls = []
    monkeypatch.setattr(cal, "start_background", lambda path=None, quick=False, wait_quiet_s=0.0:
                        calls.append(wait_quiet_s))
    monkeypatch.setattr(RunningJobs, "ids", lambda self: ["r1", "r2"])
    at = app_test(PAGE)
    assert any(ui.plain("2 job(s) are running") in w.value for w in at.warning)  # its words: the model's test
    assert at.button(key="fid_calibrate").label == "Calibrate now"
    at.button(key="fid_calibrate_wait").click().run()
    assert_no_exception(at)
    assert calls == [cal.PAGE_WAIT_S]


def test_preset_batch_button_queues_the_batch(data, lab_db, monkeypatch, spawns):
    import lab.machine.fidelity as machine_fidelity

    synthetic_profile().save()
    started, owners = [], []

    class FakeBatch:
        def __init__(self, manager, profile, steps=60, owner=None):
            started.append(steps)
            owners.append(owner)

        def start(self):
            return self

        def running(self):
            return True

        def status(self):
            return {"total": 13, "done": 4, "current": "fidelity: cnn 1w", "run_ids": [], "error": None,
                    "finished": False, "running": True}

    monkeypatch.setattr(machine_fidelity, "FidelityBatch", FakeBatch)
    at = app_test(PAGE)
    at.number_input(key="fid_steps").set_value(30).run()
    at.button(key="fid_batch").click().run()
    assert_no_exception(at)
    assert started == [30]
    assert owners == [at.session_state["job_owner"]] and owners[0]  # the batch's runs are the starter's
    at.run()
    assert at.button(key="fid_batch").disabled  # one batch at a time


def test_home_opens_a_lesson_on_its_page_with_its_scenario(data, spawns):
    at = app_test("pages/home.py")
    assert_no_exception(at)
    index = json.loads((ROOT / "assets" / "lessons" / "index.json").read_text())
    lesson = [x for x in index["lessons"] if x["id"] == "ring-allreduce"][0]
    at.button(key="lesson_ring-allreduce").click().run()
    assert_no_exception(at)
    want = Scenario.from_json((ROOT / "assets" / "lessons" / lesson["scenario"]).read_text())
    assert at.session_state["scenario"] == want
    assert at.session_state["lesson_mode"] is True
    assert at.query_params["lesson"] == ["1"] or at.query_params["lesson"] == "1"
    s = at.query_params["s"]
    assert Scenario.from_url_param(s[0] if isinstance(s, list) else s) == want


def test_allreduce_page_draws_the_profile_beside_its_measurement(data, spawns):
    from lab.machine.profile import CommFit, MachineProfile

    prof = synthetic_profile()
    fits = {"gloo": CommFit(100e-6, 1e-9, 0.0), "ring": CommFit(150e-6, 2e-9, 0.0)}
    MachineProfile.from_dict({**prof.to_dict(), "measured_allreduce": {"2": {k: v.__dict__ for k, v in fits.items()}}}).save()
    rows = []
    for impl, f in fits.items():
        for size in (4096, 16384, 65536):
            t = f.time(2, size) * 1.1  # measured 10 % slower than the profile
            rows.append({"procs": 2, "size": size, "count": size // 4, "impl": impl, "time": t, "time_min": t,
                         "time_max": t, "iters": 3, "algbw": size / t, "busbw": size / t, "correct": True,
                         "source": "measured"})
    at = app_test("pages/allreduce.py")
    at.session_state["ar_rows"] = rows
    at.run()
    assert_no_exception(at)
    cap = " ".join(c.value for c in at.caption)
    assert "machine profile" in cap and "gloo 10%" in cap and "ring 10%" in cap


def test_training_page_shows_the_finished_run_beside_its_prediction(data, lab_db, spawns):
    at, rid, sc, prof = page_with_a_stored_run(lab_db, "pages/training.py")
    chart = at.get("plotly_chart")
    bars = [json.loads(c.proto.spec) for c in chart]
    pred = [b for b in bars if any(t.get("name", "").startswith("predicted") for t in b["data"])]
    assert len(pred) == 1
    traces = {t["name"]: t for t in pred[0]["data"]}
    step = predict_step(sc, prof).step
    assert traces["predicted (modelled)"]["y"][-1] == pytest.approx(step * 1e3)
    assert traces["measured"]["y"][-1] == pytest.approx(10.0)


def test_training_page_without_profile_says_how_to_get_one(data, lab_db, spawns):
    stored_run(lab_db)
    at = app_test("pages/training.py")
    at.session_state["job_owner"] = OWNER
    at.run()
    assert_no_exception(at)
    assert any("calibrate this machine" in c.value for c in at.caption)


def runs_under_load(lab_db) -> tuple[str, str, Scenario]:
    """Two stored runs of one scenario, (the quiet one, one measured under load whose name holds Markdown, the
    scenario), with a synthetic profile saved."""
    synthetic_profile().save()
    quiet, sc = stored_run(lab_db)
    busy, _ = stored_run(lab_db, step_s=0.02)
    st = RunStore(lab_db)
    st.merge_info(quiet, {"load": {"others_share": 0.02, "cpus": 2, "pressure": 0.0}})
    st.merge_info(busy, {"load": {"others_share": 0.5, "cpus": 2, "pressure": 0.5}})
    st.update_run(busy, name="**loud** [x](http://e.test)")  # a name is user text: shown as text
    return quiet, busy, sc


def test_a_run_measured_under_load_is_flagged_on_the_training_page(data, lab_db, spawns):
    # the Fidelity and Compare pages' flags are tested on their models and the Compare page's AppTest
    runs_under_load(lab_db)
    at = app_test("pages/training.py")
    at.session_state["job_owner"] = OWNER
    at.run()
    assert_no_exception(at)
    warnings = " ".join(w.value for w in at.warning)
    assert "Measured under load: other work took 50 %" in warnings  # the newest run, the loaded one, is watched
