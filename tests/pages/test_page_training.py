"""The Training page under AppTest: its settings, built from the Scenario's field tables, edit the scenario, a short
real run started from the page is watched to completion, Stop, a double click and the one-click comparison, and
errors are messages. What the forms, the Scenario they make and the live view hold is tested on the page model
(tests/view/test_view_training.py)."""

from __future__ import annotations

import time

import pytest

from lab.jobs.guard import WINDOW_S
from lab.scenario.document import Compression
from lab.store.runs import RunStore
import ui
from lab.view import training as view
from tests.conftest import app_test, assert_no_exception

pytestmark = pytest.mark.timeout(300)


def texts(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [s.value for s in at.subheader]
    parts += [str(e.value) for e in at.error] + [str(w.value) for w in at.warning] + [str(i.value) for i in at.info]
    return "\n".join(parts)


def line(at, start: str) -> str:
    """What follows ``start`` in the one markdown element holding it, markdown escapes removed."""
    found = [m.value.replace("\\", "") for m in at.markdown if start in m.value]
    assert len(found) == 1, (start, found)
    return found[0].split(start, 1)[1].strip()


def run_until(at, cond, timeout=180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        if cond(at):
            return at
        time.sleep(1.0)
    raise AssertionError("timed out: " + texts(at)[-2000:])


def test_training_page_edits_the_scenario_and_runs_a_short_job(lab_db, spawns):
    at = app_test("pages/training.py")
    assert_no_exception(at)
    assert "No runs yet" in texts(at)
    at.selectbox(key="tr_optimizer").set_value("adabelief").run()
    at.number_input(key="tr_steps").set_value(12).run()
    at.number_input(key="tr_lr").set_value(0.01).run()
    at.selectbox(key="tr_cmp_kind").set_value("group_topk").run()
    assert_no_exception(at)
    tr = at.session_state["scenario"].training
    assert (tr.optimizer, tr.steps, tr.lr, tr.workers) == ("adabelief", 12, 0.01, 2)
    assert tr.compression.kind == "group_topk"

    at.button(key="train_run").click().run()
    assert_no_exception(at)
    rid = at.session_state["train_watch"]
    store = RunStore(lab_db)
    run_until(at, lambda a: store.status(rid) in ("done", "failed", "diverged"))
    at.run()
    assert_no_exception(at)
    run = store.get_run(rid)
    assert run["status"] == "done", run["error"]
    assert run["scenario"]["training"]["optimizer"] == "adabelief" and run["pid"]
    assert f"Run {rid}" in texts(at)
    # The header reads the stored run's settings, not the controls: switching compression off now
    # changes the line above Run, not what this run says it ran with.
    at.selectbox(key="tr_cmp_kind").set_value("none").run()
    assert_no_exception(at)
    assert line(at, "**Compression:**") == "no compression"
    assert line(at, "**Compression in this run:**").startswith("Group-TopK, 1 % per group of 1024")
    # which implementation ran: the run's own setting (the multi-tensor path unless Fused optimiser was on)
    assert line(at, "**Optimiser in this run:**") == "AdaBelief, multi-tensor (torch._foreach_* operations)"
    bars = at.get("progress")
    assert bars and "done: step 12 of 12" in bars[0].proto.text
    assert len(at.get("plotly_chart")) == 3  # loss, accuracy, time split
    assert "measured" in texts(at)
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics[ui.plain("Wall time (s)")]) > 0  # the labels are shown as text


def test_stop_button_ends_the_job(lab_db, spawns):
    from lab.train.launcher_record import processes_of

    at = app_test("pages/training.py")
    at.number_input(key="tr_steps").set_value(100_000).run()
    at.selectbox(key="tr_sync").set_value("param_server").run()
    at.toggle(key="tr_emulate").set_value(True).run()  # workers on gpu (defaults), server on the host
    at.button(key="train_run").click().run()
    rid = at.session_state["train_watch"]
    store = RunStore(lab_db)
    # The per-worker time split is written after the job's own step records: wait for both.
    run_until(at, lambda a: store.progress(rid) >= 10 and len(a.get("plotly_chart")) == 3)
    assert "parameter server" in str(at.get("plotly_chart")[2].proto.spec)
    at.button(key=f"train_stop_{rid}").click().run()
    assert_no_exception(at)
    assert store.status(rid) == "stopped"
    deadline = time.monotonic() + 10
    while processes_of(rid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_of(rid) == []
    at.run()
    assert any("stopped by" in str(w.value) for w in at.warning)  # who stopped it: the Jobs page's concern


def test_a_bad_emulation_mapping_is_a_message_not_a_traceback(lab_db, spawns):
    at = app_test("pages/training.py")
    at.toggle(key="tr_emulate").set_value(True).run()
    assert_no_exception(at)
    at.selectbox(key="tr_dev_0").set_value("fpga").run()
    at.button(key="train_run").click().run()
    assert not at.exception
    errors = [str(e.value) for e in at.error]
    assert any("no matmul kernel" in e for e in errors), errors
    assert RunStore(lab_db).list_runs().empty


def test_one_click_comparison_queues_every_variant_with_equal_seeds_and_opens_compare(lab_db, spawns):
    from lab.jobs.variants import settings_of
    from lab.jobs.manager import shared

    at = app_test("pages/training.py")
    at.number_input(key="tr_steps").set_value(4).run()
    at.slider(key="tr_workers").set_value(1).run()
    at.number_input(key="tr_seed").set_value(5).run()
    at.number_input(key="tr_repeats").set_value(2).run()
    at.button(key="train_compare").click().run()
    assert_no_exception(at)
    store = RunStore(lab_db)
    try:
        runs = [store.get_run(r) for r in store.list_runs().id]
        assert len(runs) == 6 * 2  # three optimisers x {dense, Group-TopK 1 % + EF} x two seeds
        # exactly the page model's comparison of this scenario for this student (its seeds: the view's tests)
        sc, owner = at.session_state["scenario"], at.session_state["job_owner"]
        assert sorted(str(sorted(settings_of(r["scenario"]).items())) for r in runs) == sorted(
            str(sorted(settings_of(s.to_dict()).items())) for s, _ in view.comparison(sc, 2, owner))
        assert all(settings_of(r["scenario"])["steps"] == 4 for r in runs)
        # the Compare page opens on exactly those runs, grouped by variant, one line style per compression
        assert [t.value for t in at.title] == ["Compare runs"]
        assert sorted(at.multiselect(key="cmp_runs").value) == sorted(r["id"] for r in runs)
        summary = next(d.value for d in at.dataframe if "variant" in d.value.columns)
        assert len(summary) == 6 and set(summary.repeats) == {2}
        assert any("still queued or running" in str(i.value) for i in at.info)
    finally:
        jm, owner = shared(), at.session_state["job_owner"]
        for rid in store.list_runs(statuses=("queued", "running")).id:
            jm.stop(rid, owner)
        for rid in store.list_runs().id:
            jm.wait(rid, timeout=60)


def test_compression_controls_edit_the_scenario_and_the_line_above_run(lab_db, spawns):
    at = app_test("pages/training.py")
    assert_no_exception(at)
    assert line(at, "**Compression:**") == "no compression"
    at.selectbox(key="tr_cmp_kind").set_value("group_topk").run()
    at.number_input(key="tr_cmp_ratio").set_value(0.02).run()
    at.number_input(key="tr_cmp_group").set_value(512).run()
    at.checkbox(key="tr_cmp_ef").check().run()
    at.selectbox(key="tr_cmp_sharing").set_value("sparse_ring").run()
    assert_no_exception(at)
    assert at.session_state["scenario"].training.compression == Compression(
        kind="group_topk", ratio=0.02, group_size=512, error_feedback=True, sharing="sparse_ring")
    assert line(at, "**Compression:**") == "Group-TopK, 2 % per group of 512, with error feedback, shared by sparse ring"

    at.selectbox(key="tr_cmp_kind").set_value("topk").run()
    at.checkbox(key="tr_cmp_ef").uncheck().run()
    assert line(at, "**Compression:**") == "global Top-K, 2 % of all entries, without error feedback, shared by sparse ring"

    # The scenario holds them: another page and back, the controls start from it again.
    at.switch_page("pages/home.py").run()
    at.switch_page("pages/training.py").run()
    assert_no_exception(at)
    assert at.selectbox(key="tr_cmp_kind").value == "topk" and at.number_input(key="tr_cmp_ratio").value == 0.02
    assert at.number_input(key="tr_cmp_group").value == 512

    # Compression needs the gradient all-reduce: the page says so before anything is queued.
    at.selectbox(key="tr_sync").set_value("param_server").run()
    assert any("gradient all-reduce only" in str(w.value) for w in at.warning)
    at.selectbox(key="tr_cmp_kind").set_value("none").run()
    assert not at.warning and line(at, "**Compression:**") == "no compression"
    assert at.session_state["scenario"].training.compression.kind == "none"


def test_powersgd_takes_a_rank_and_a_warmup_instead_of_a_ratio(lab_db, spawns):
    at = app_test("pages/training.py")
    at.selectbox(key="tr_cmp_kind").set_value("powersgd").run()
    assert_no_exception(at)
    keys = {w.key for w in at.get("number_input")}
    assert {"tr_cmp_rank", "tr_cmp_warmup"} <= keys and not {"tr_cmp_ratio", "tr_cmp_group"} & keys
    assert at.selectbox(key="tr_cmp_sharing").disabled and at.checkbox(key="tr_cmp_ef").disabled
    at.number_input(key="tr_cmp_rank").set_value(4).run()
    at.number_input(key="tr_cmp_warmup").set_value(5).run()
    comp = at.session_state["scenario"].training.compression
    assert (comp.kind, comp.rank, comp.warmup) == ("powersgd", 4, 5)
    assert line(at, "**Compression:**").startswith("PowerSGD, rank 4 after 5 plain all-reduce steps")
    assert "powerSGD_hook" in texts(at)  # the page says which implementation runs
    at.selectbox(key="tr_cmp_kind").set_value("bf16_hook").run()
    assert line(at, "**Compression:**").startswith("BF16 hook, every entry cast to bf16")
    assert at.number_input(key="tr_cmp_ratio").disabled


def test_lesson_mode_keeps_the_compressor_and_ratio(lab_db, spawns):
    at = app_test("pages/training.py", query={"lesson": "1"})
    assert_no_exception(at)
    keys = {w.key for kind in ("selectbox", "number_input", "checkbox") for w in at.get(kind)}
    assert {"tr_cmp_kind", "tr_cmp_ratio"} <= keys
    assert not {"tr_cmp_group", "tr_cmp_sharing", "tr_cmp_ef"} & keys  # advanced: from the scenario as it is
    at.selectbox(key="tr_cmp_kind").set_value("randomk").run()
    at.number_input(key="tr_cmp_ratio").set_value(0.05).run()
    assert line(at, "**Compression:**").startswith("Random-K, 5 % of all entries")
    comp = at.session_state["scenario"].training.compression
    assert (comp.kind, comp.ratio) == ("randomk", 0.05)


def test_two_quick_clicks_on_run_queue_one_job(lab_db, spawns):
    at = app_test("pages/training.py")
    # long enough that it cannot end between the two clicks: its end reruns the page, which would
    # clear the second click's message before it is read
    at.number_input(key="tr_steps").set_value(1500).run()
    at.slider(key="tr_workers").set_value(1).run()
    at.button(key="train_run").click().run()
    first_done = time.monotonic()
    at.button(key="train_run").click().run()  # the second click of a double click
    assert_no_exception(at)
    store = RunStore(lab_db)
    runs = store.list_runs()
    assert len(runs) == 1, runs
    rid = runs.id.iloc[0]
    assert at.session_state["train_watch"] == rid
    assert any("Already queued" in str(i.value) for i in at.info), texts(at)
    run_until(at, lambda a: store.status(rid) in ("done", "failed", "diverged"))
    assert store.status(rid) == "done", store.get_run(rid)["error"]

    # Once that run has finished and a few seconds have passed, the same settings run again.
    while time.monotonic() < first_done + WINDOW_S:
        time.sleep(0.2)
    at.button(key="train_run").click().run()
    assert_no_exception(at)
    assert len(store.list_runs()) == 2
    again = at.session_state["train_watch"]
    assert again != rid
    if store.status(again) in ("queued", "running"):  # not needed further: end it
        at.button(key=f"train_stop_{again}").click().run()
    assert store.status(again) in ("stopped", "done")
