"""The Compression page under streamlit's AppTest, rendered whole: its forms from the view table and its model's
sections with their badges; a form's submit, the ring's Apply button and the grid's Queue button. What the sections
hold is tested on the page model (tests/view/test_view_compression.py)."""

from __future__ import annotations

import pytest

import ui
from lab.compression.compressors import TopK
from lab.compression.study import real_gradients
from tests.conftest import app_test, assert_no_exception


@pytest.fixture(scope="module")
def at():
    page = app_test("pages/compression.py", timeout=180)
    assert_no_exception(page)
    return page


def text(at) -> str:
    return " ".join([m.value for m in at.markdown] + [c.value for c in at.caption])


def test_page_renders_every_section_with_labels(at, spawns):
    assert at.title[0].value == "Compression"
    heads = [h.value for h in at.header]
    assert heads[:3] == ["Compressors on one gradient",
                         "Sharing across workers: the edge-compression design's sparse ring and its fill-in", "The Cholesky claim (the CXL design)"]
    assert "Training with compression" in heads
    assert at.button(key="cp_grid_run").label == "Queue 9 runs"  # three optimisers x the three default variants
    n = real_gradients("mlp", 1, 64, 0)[0].numel()
    body = text(at)
    assert f"**{n:,} entries**" in body
    assert "measured" in body and "modelled" in body
    assert len(at.dataframe[0].value) == 14  # 4 ratios x 3 sparse compressors + fp16 + none
    assert "Each worker kept **" in body and "Adding the factors gives" in body
    assert len(at.get("plotly_chart")) >= 6
    assert at.radio(key="cp_source").options == ["real (one backward pass on digits)", "generated"]


def test_ring_with_another_compressor_and_apply_to_scenario(at, spawns):
    at.slider(key="ring_workers").set_value(3)
    at.selectbox(key="ring_kind").set_value("topk")
    at.number_input(key="ring_ratio").set_value(0.02)
    at.button(key="ring_run").click().run()
    assert_no_exception(at)
    n = real_gradients("mlp", 1, 64, 0)[0].numel()
    assert f"Each worker kept **{TopK(0.02).k_for(n):,}**" in text(at)
    at.button(key="ring_apply").click().run()
    assert_no_exception(at)
    c = at.session_state["scenario"].training.compression
    assert (c.kind, c.ratio, c.group_size) == ("topk", 0.02, 1024)


def test_generated_gradient_and_refused_ratio(at, spawns):
    at.radio(key="cp_source").set_value("generated")
    at.number_input(key="cp_n").set_value(20_000)
    at.number_input(key="cp_group").set_value(100)
    at.multiselect(key="cp_ratios").set_value([0.001, 0.1])
    at.button(key="cp_run").click().run()
    assert_no_exception(at)
    assert "**20,000 entries**" in text(at)
    assert any("k = 0" in w.value and ui.plain("0.001") in w.value for w in at.warning)  # shown as text
    df = at.dataframe[0].value
    assert set(df[df["compressor"] == "Group-TopK (top k in every group)"]["ratio"]) == {0.1}


def test_cholesky_on_a_gram_matrix_and_without_damping(at, spawns):
    at.selectbox(key="ch_matrix").set_value("Gram of the digit images (64x64)")
    at.number_input(key="ch_damping").set_value(0.001)
    at.button(key="ch_run").click().run()
    assert_no_exception(at)
    tables = [d.value for d in at.dataframe]
    chol = next(t for t in tables if "sent" in t.columns)
    assert list(chol["bytes (B)"]) == [64 * 64 * 4, 64 * 65 // 2 * 4, 64 * 65 // 2 * 4]
    assert "Adding the factors gives" in text(at)
    at.number_input(key="ch_damping").set_value(0.0)
    at.button(key="ch_run").click().run()
    assert_no_exception(at)
    assert any(ui.plain("positive-definite") in i.value for i in at.info)


# ---- the preset grid of training runs -----------------------------------------------------------
def grid_table(page):
    tables = [d.value for d in page.dataframe if "variant" in d.value.columns]
    assert len(tables) == 1
    return tables[0]


def test_grid_button_queues_nine_runs_then_they_are_stopped(lab_db, spawns):
    import time

    from lab.jobs.grid import variant_of
    from lab.jobs.manager import shared
    from lab.scenario.names import COMPARED_OPTIMIZERS
    from lab.store.runs import RunStore
    from lab.train.launcher_record import processes_of

    page = app_test("pages/compression.py", timeout=180)
    page.button(key="cp_grid_run").click().run()
    assert_no_exception(page)
    store = RunStore(lab_db)
    ids = page.session_state["cp_grid_runs"]
    assert len(ids) == 9 and page.session_state["cmp_runs"] == ids  # preselected on the Compare page
    runs = store.list_runs().set_index("id").loc[ids]
    assert runs.status.isin(["queued", "running"]).all() and (runs.sync == "allreduce").all()
    got = sorted((store.get_run(r)["scenario"]["training"]["optimizer"],
                  variant_of(store.get_run(r)["scenario"]["training"])) for r in ids)
    assert got == sorted((o, v) for o in COMPARED_OPTIMIZERS for v in ("dense", "gtk", "gtk_ef"))
    comps = [store.get_run(r)["scenario"]["training"]["compression"] for r in ids]
    assert sorted(c["kind"] for c in comps).count("group_topk") == 6 and {c["ratio"] for c in comps
                                                                         if c["kind"] == "group_topk"} == {0.01}
    # the page queued them on the shared manager of this run store (the Training page's): stop them
    # all there, the queued ones first (so none starts), then whatever runs; no process is left
    jm = shared(lab_db)
    assert set(ids) <= set(jm.queued()) | set(jm.jobs.ids())
    jm.shutdown()
    deadline = time.monotonic() + 30
    while any(processes_of(r) for r in ids) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not any(processes_of(r) for r in ids)
    assert set(store.list_runs().set_index("id").loc[ids].status) <= {"stopped", "done"}
    page.run()
    assert_no_exception(page)
    table = grid_table(page)
    assert len(table) == 9 and set(table["status"]) <= {"stopped", "done"}


def test_grid_results_table_and_figure_from_the_store(lab_db, spawns):
    from lab.jobs.grid import grid_scenarios
    from lab.scenario.document import default_scenario
    from lab.store.runs import JOB_WORKER, RunStore

    store = RunStore(lab_db)
    ids = []
    for k, (sc, name) in enumerate(grid_scenarios(default_scenario())[:3]):  # adam: dense, gtk, gtk + EF
        rid = store.create_run(sc.replace(training=sc.training.replace(steps=4)), name=name, status="done")
        rows = [{"step": s, "worker": JOB_WORKER, "test_acc": 0.5 + 0.1 * k, "wall": 0.01 * s} for s in range(5)]
        rows += [{"step": s, "worker": w, "bytes_sent": 1000.0 * (k + 1), "t_compress": 0.001 * k}
                 for s in range(1, 5) for w in range(2)]
        store.add_metrics(rid, rows)
        ids.append(rid)
    page = app_test("pages/compression.py", timeout=180)
    page.session_state["cp_grid_runs"] = ids
    page.run()
    assert_no_exception(page)
    # the session's grid drawn from the store (what its rows, figure and sentences hold: the page model's tests)
    table = grid_table(page)
    assert list(table["variant"]) == ["dense (fp32 ring)", "Group-TopK 1%", "Group-TopK 1% + error feedback"]
    figs = [c for c in page.get("plotly_chart") if "(the grid)" in str(c.proto.spec)]
    assert len(figs) == 1
    words = " ".join(m.value for m in page.markdown).replace("\\", "")  # the page escapes Markdown
    assert "Where each one wins in these runs" in words
    assert "Highest final test accuracy: Group-TopK 1% + error feedback (70.0 %)." in words
