"""lab.view.compare: the Compare page's model (the Runs box's runs, the comparison's sections and downloads, every
run's numbers, the prediction beside them), from a run store."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from lab.jobs import comparison as jobs_comparison
from lab.machine.calibrate import synthetic_profile
from lab.machine.predict import predict_step
from lab.store.runs import JOB_WORKER, RunStore
from lab.view import compare as view
from lab.view.state import VIEW
from tests.jobs.test_comparison import scenario, store_rows, store_run
from tests.pages.test_page_fidelity import runs_under_load
from tests.view.sections import by_key, figure_json


@pytest.fixture
def data(lab_db, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_DATA", str(tmp_path))  # no machine profile unless a test saves one
    return RunStore(lab_db)


def test_the_controls_are_the_view_tables_and_say_their_choices():
    assert {k for k, c in VIEW.items() if c.page == "compare"} == {"cmp_class", "cmp_runs", "cmp_confirm", "cmp_x",
                                                                   "cmp_target"}
    assert dict(VIEW["cmp_x"].setting.names) == {"step": "step (count)", "wall": "wall time (s)"}


def test_the_runs_box_offers_ones_own_runs_and_keeps_the_chosen_ones(data):
    mine = [data.create_run(scenario(seed=s), status="done", info={"owner": "me"}) for s in range(8)]
    queued = data.create_run(scenario(seed=9), status="queued", info={"owner": "me"})
    other = data.create_run(scenario(seed=10), status="done", info={"owner": "other"})
    pick = view.picker("me", False, [])
    assert set(pick.labels) == {*mine, queued} and list(pick.labels)[0] == queued  # newest first
    assert pick.kept == mine[::-1][:6]  # none chosen yet: the six newest finished
    assert view.picker("me", False, [mine[0], "gone"]).kept == [mine[0]]  # a deleted run drops out
    pick = view.picker("me", False, [other])  # a link's run stays, whoever's it is
    assert other in pick.labels and pick.kept == [other]
    assert other in view.picker("me", True, []).labels
    assert view.picker("nobody", False, []) == view.Picker({}, [])


def test_the_summary_counts_the_repeats_that_reached_the_target_first_on_screen_and_in_the_csv(data):
    # two repeats reach 80 % at step 60; the third tops out at 76.7 %
    reach = [0.5, 0.6, 0.7, 0.75, 0.78, 0.81, 0.82]
    ids = [store_run(data, scenario(seed=s), reach) for s in range(2)]
    ids.append(store_run(data, scenario(seed=2), [0.5, 0.6, 0.7, 0.75, 0.76, 0.767, 0.767]))
    model = view.comparison_model(ids, 80.0, "step")
    summary = by_key(model.sections)["cmp_summary"]
    assert (summary.header, summary.level, summary.kind) == ("Summary by variant", "subheader", "measured")
    row = summary.table[0]
    assert list(row)[:5] == ["variant", "repeats", "final test accuracy (%)", "reached 80 %", "steps to 80 %"]
    assert row["repeats"] == 3 and row["reached 80 %"] == "2 of 3"
    assert row["steps to 80 %"] == "60 ± 0 (range 60–60)"  # over the two that reached it
    assert "Reached: how many of the repeats reached the target" in summary.caption
    csv = pd.read_csv(io.StringIO(model.downloads[0]["data"]))
    assert list(csv.columns).index("reached 80 % (count)") == list(csv.columns).index("repeats") + 1
    assert (csv["repeats"].iloc[0], csv["reached 80 % (count)"].iloc[0]) == (3, 2)
    assert csv["steps to 80 % mean"].iloc[0] == 60 and csv["steps to 80 % min"].iloc[0] == 60
    assert csv["final test accuracy mean (%)"].iloc[0] == pytest.approx((82 + 82 + 76.7) / 3)


def test_variants_are_drawn_by_colour_and_line_style_with_their_downloads(data):
    ids = []
    for opt in ("adam", "adabelief", "maxadabelief"):
        for kind in ("none", "group_topk"):
            ids += [store_run(data, scenario(opt, kind, seed), [0.5, 0.85 + 0.02 * seed]) for seed in range(2)]
    model = view.comparison_model(ids, 90.0, "step")
    s = by_key(model.sections)
    summary = s["cmp_summary"].table
    assert len(summary) == 6 and {r["repeats"] for r in summary} == {2}
    acc = figure_json(s["cmp_acc"])
    assert "Test accuracy" in json.dumps(acc["layout"]["title"]) and acc["layout"]["height"] >= 400
    lines = [t for t in acc["data"] if t.get("mode") == "lines+markers"]
    assert len(lines) == 6
    by_label = {t["name"]: (t["line"]["color"], t["line"]["dash"]) for t in lines}
    assert by_label["Adam · dense"][0] == by_label["Adam · Group-TopK 1 % + EF"][0]  # colour = optimiser
    assert by_label["Adam · dense"][1] != by_label["Adam · Group-TopK 1 % + EF"][1]  # style = compression
    assert by_label["Adam · dense"][0] != by_label["AdaBelief · dense"][0]
    assert "Training loss" in json.dumps(figure_json(s["cmp_loss"])["layout"]["title"])
    assert s["cmp_acc"].kind == "measured" and s["cmp_acc"].caption.startswith("colour = optimiser")
    assert "running max of a growing value" in s["cmp_belief"].caption  # AdaBelief beside Max-AdaBelief
    assert "cmp_loaded" not in s and "predicted step time (ms, modelled)" not in summary[0]  # no profile
    assert [d["label"] for d in model.downloads] == ["Download the summary (CSV)",
                                                     "Download every step with its settings (CSV)"]
    assert [d["key"] for d in model.downloads] == ["cmp_download_summary", "cmp_download"]
    every = pd.read_csv(io.StringIO(model.downloads[1]["data"]()))  # read when the button is pressed
    assert set(every.run_id) == set(ids) and "optimizer" in every.columns
    verdicts = [x for x in model.sections if x.key == "cmp_verdict_list"][0]
    assert s["cmp_verdicts"].values == {"against": "Adam · dense"}  # the best mean (the first of equals); names
    assert verdicts.intro.count("\n") == 4 and verdicts.values["v0"] == "Adam · Group-TopK 1 % + EF"  # as values
    assert verdicts.intro.startswith("- **{v0}** (+0.00 points): {w0}.") and "not distinguishable" in verdicts.values["w0"]


def test_a_long_run_is_drawn_thinned_and_says_so(data, monkeypatch):
    monkeypatch.setattr(jobs_comparison, "MAX_CURVE_POINTS", 100)
    rid = store_rows(data, scenario(), 3000, eval_every=2)
    model = view.comparison_model([rid], 90.0, "step")
    s = by_key(model.sections)
    for key in ("cmp_loss", "cmp_acc"):
        assert all(len(t.get("x", [])) <= 100 for t in figure_json(s[key])["data"])
    assert "at most 100 points" in s["cmp_acc"].caption
    m = data.metrics(rid)
    r = jobs_comparison.run_result(rid, m[m.worker == JOB_WORKER], m[m.worker != JOB_WORKER], 0.9, workers=2)
    assert s["cmp_summary"].table[0]["final test accuracy (%)"] == jobs_comparison.Spread.of([r.final_acc]).text(100)
    assert len(pd.read_csv(io.StringIO(model.downloads[1]["data"]()))) == len(m)  # every step


def test_same_seed_runs_are_named_once_and_every_run_has_its_row(data):
    a0 = store_run(data, scenario("adam", seed=0), [0.5, 0.88])
    again = store_run(data, scenario("adam", seed=0), [0.5, 0.88])
    s = by_key(view.comparison_model([a0, again], 90.0, "wall").sections)
    same = s["cmp_same_seed_0"]
    assert same.values == {"variant": "Adam · dense"} and same.caption.startswith("{variant}: 1 run(s) with the same")
    per_run = view.per_run([a0, again])[0]
    assert [r["id"] for r in per_run.table] == [a0, again] and per_run.key == "cmp_table"
    assert list(per_run.table[0])[:9] == [*view.SETTINGS, "final test accuracy (%)"]
    assert per_run.table[0]["final test accuracy (%)"] == pytest.approx(88.0)
    assert per_run.columns["sent (MB)"] == {"kind": "number", "format": "%.3f"} and "name" not in per_run.columns


def test_runs_under_load_are_named_and_the_prediction_stands_beside_the_measurement(data, lab_db):
    assert view.prediction([])[0].notices[0].text.startswith("No machine profile yet")
    quiet, busy, sc = runs_under_load(lab_db)
    model = view.comparison_model([quiet, busy], 90.0, "step")
    s = by_key(model.sections)
    loaded = s["cmp_loaded"].notices[0]
    assert loaded.level == "warning" and loaded.text.startswith("1 of the chosen runs")
    assert "**loud** [x](http://e.test) (50 %)" in loaded.text  # user text, shown as text by the page
    assert "predicted step time (ms, modelled)" in s["cmp_summary"].table[0]
    assert s["cmp_summary"].caption.endswith(view.PREDICTED)
    pred = view.prediction([quiet, busy])
    assert [x.key for x in pred] == ["cmp_pred"] and pred[0].kind == "modelled"
    rows = {r["id"]: r for r in pred[0].table}
    assert set(rows) == {quiet, busy}
    assert rows[quiet]["predicted step (ms)"] == pytest.approx(predict_step(sc, synthetic_profile()).step * 1e3)
    assert rows[quiet]["measured step (ms)"] == pytest.approx(10.0)
    assert figure_json(pred[0])["data"]

    def predict(db, created, profile, ids):
        return [], [{"id": i, "why": "no steps"} for i in ids]

    skipped = view.prediction([quiet], predict)
    assert [(x.values, x.caption) for x in skipped] == [({"id": quiet, "why": "no steps"},
                                                          "Run {id} not predicted: {why}")]


def test_queued_runs_are_waited_for_and_the_class_pools_its_repeats(data):
    done = store_run(data, scenario(seed=0), [0.5, 0.9])
    queued = data.create_run(scenario(seed=1), status="queued")
    assert view.waiting([done]) == (0, [])
    live, notice = view.waiting([done, queued])
    assert live == 1 and notice[0].notices[0].text.startswith("1 of 2 chosen runs are still queued or running")
    other = store_run(data, scenario(seed=5), [0.5, 0.8])
    assert set(view.pooled([done])) == {done, other}
