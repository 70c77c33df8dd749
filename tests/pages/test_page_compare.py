"""The Compare page under AppTest: drawn whole from its model (tests/view/test_view_compare.py tests what the
sections hold), its Pool button's callback, and a deletion confirmed and done."""

from __future__ import annotations

import json

from lab.store.runs import RunStore
from tests.conftest import app_test, assert_no_exception
from tests.jobs.test_comparison import scenario, store_run
from tests.pages.test_page_fidelity import OWNER, data, runs_under_load  # noqa: F401 - data is a fixture

PAGE = "pages/compare.py"


def test_the_page_draws_the_comparison_and_the_prediction_whole(data, lab_db, spawns):  # noqa: F811
    at = app_test(PAGE)
    assert_no_exception(at)
    assert [i.value for i in at.info] == ["No stored runs of yours yet: start one on the Training page (the switch "
                                          "above adds the whole class's)."]
    quiet, busy, _ = runs_under_load(lab_db)
    at.session_state["job_owner"] = OWNER
    at.session_state["cmp_runs"] = [quiet, busy]
    at.run()
    assert_no_exception(at)
    assert at.multiselect(key="cmp_runs").value == [quiet, busy]
    assert at.radio(key="cmp_x").options == ["step (count)", "wall time (s)"]
    titles = [json.dumps(json.loads(c.proto.spec)["layout"].get("title", {})) for c in at.get("plotly_chart")]
    assert len(titles) == 3 and "Training loss" in titles[0] and "Test accuracy" in titles[1]  # and the prediction
    assert [s.value for s in at.subheader] == ["Summary by variant", "Predicted beside measured"]
    summary = next(d.value for d in at.dataframe if "variant" in d.value.columns)
    assert list(summary.columns)[:4] == ["variant", "repeats", "final test accuracy (%)", "reached 90 %"]
    assert "predicted step time (ms, modelled)" in summary.columns
    table = next(d.value for d in at.dataframe if "predicted step (ms)" in d.value.columns)
    assert set(table["id"]) == {quiet, busy}
    per_run = next(d.value for d in at.dataframe if "emulated link wait (s/worker)" in d.value.columns)
    assert list(per_run["id"]) == [quiet, busy]
    warnings = " ".join(w.value for w in at.warning)  # a run's name is user text: shown as text
    assert "1 of the chosen runs" in warnings and "\\*\\*loud\\*\\*" in warnings and "](" not in warnings
    captions = [c.value for c in at.caption]
    assert sum("measured" in c for c in captions) >= 3 and any("modelled" in c for c in captions)
    assert [b.proto.label for b in at.get("download_button")] == ["Download the summary (CSV)",
                                                                 "Download every step with its settings (CSV)"]


def test_pool_adds_the_class_repeats_and_delete_removes_the_chosen_runs(data, lab_db, spawns):  # noqa: F811
    st = RunStore(lab_db)
    mine = store_run(st, scenario(seed=0), [0.5, 0.8])
    st.merge_info(mine, {"owner": OWNER})
    theirs = store_run(st, scenario(seed=3), [0.5, 0.9])  # the same variant, another seed, the command line's
    at = app_test()
    at.session_state["job_owner"] = OWNER
    at.switch_page(PAGE).run()
    assert at.multiselect(key="cmp_runs").value == [mine]
    at.button(key="cmp_pool").click().run()
    assert_no_exception(at)
    assert at.multiselect(key="cmp_runs").value == [mine, theirs]
    assert at.button(key="cmp_delete").disabled
    at.multiselect(key="cmp_runs").set_value([mine]).run()
    at.checkbox(key="cmp_confirm").check().run()
    assert at.checkbox(key="cmp_confirm").label == "Yes, delete 1 run(s)"
    at.button(key="cmp_delete").click().run()
    assert_no_exception(at)
    assert set(st.list_runs().id) == {theirs}
