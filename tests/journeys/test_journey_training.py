"""Browser journey on the Training page: compression set by clicking, a double click on Run queues one
job, and the run's header says which compression it ran with (from the stored run, not the controls)."""

import pytest

from lab.store.runs import RunStore
from tests.conftest import lab_server, settle
from tests.journey import choose, heading, new_page, no_error_boxes, type_number, wait_for_run

pytestmark = pytest.mark.timeout(420)


def markdown_with(pg, text: str) -> str:
    return pg.locator("[data-testid='stMarkdownContainer']").filter(has_text=text).first.inner_text()


def test_a_group_topk_run_set_by_clicking_says_group_topk_in_its_header(browser, tmp_path):
    with lab_server(tmp_path) as base:
        pg = new_page(browser)
        try:
            pg.goto(base + "/training")
            settle(pg)
            heading(pg, "Training")
            assert "no compression" in markdown_with(pg, "Compression:")
            type_number(pg, "Steps (count)", 6)
            type_number(pg, "Batch per worker (samples)", 16)
            choose(pg, "Compressor", "Group-TopK")
            line = markdown_with(pg, "Compression:")
            assert "Group-TopK, 1 % per group of 1024" in line and "sparse all-gather" in line, line

            run = pg.get_by_role("button", name="Run", exact=True)
            run.click()
            pg.wait_for_timeout(350)
            run.click()  # a double click, as people do
            wait_for_run(pg)
            store = RunStore(tmp_path / "runs.db")
            runs = store.list_runs()
            assert len(runs) == 1, runs[["id", "status"]]
            rid = runs.id.iloc[0]
            tr = store.get_run(rid)["scenario"]["training"]
            assert (tr["steps"], tr["workers"], tr["batch_size"], tr["compression"]["kind"]) == (6, 2, 16, "group_topk")

            pg.get_by_text("done: step 6 of 6").wait_for(timeout=120_000)
            settle(pg)
            assert store.status(rid) == "done", store.get_run(rid)["error"]
            assert pg.get_by_role("heading", name=f"Run {rid}").count() == 1
            assert "Group-TopK, 1 % per group of 1024" in markdown_with(pg, "Compression in this run:")

            # Switching compression off changes the next run's line, not what this run ran with.
            choose(pg, "Compressor", "none (no compression)")
            assert "no compression" in markdown_with(pg, "Compression:")
            assert "Group-TopK" in markdown_with(pg, "Compression in this run:")
            assert len(store.list_runs()) == 1
            no_error_boxes(pg)
        finally:
            pg.context.close()


def test_a_powersgd_run_on_the_fused_optimiser_set_by_clicking_says_both_and_travels_in_a_link(browser, tmp_path):
    """torch's PowerSGD with its rank and warm-up, and the fused optimiser, set by clicking: the run's header names
    both implementations; a link opens the same settings in a fresh browser, while a second student's own page
    keeps its own."""
    from tests.journey import open_link, take_link

    with lab_server(tmp_path) as base:
        pg = new_page(browser)
        other = new_page(browser)  # a second student beside the first
        try:
            pg.goto(base + "/training")
            settle(pg)
            heading(pg, "Training")
            type_number(pg, "Steps (count)", 8)
            type_number(pg, "Batch per worker (samples)", 16)
            choose(pg, "Compressor", "PowerSGD")
            type_number(pg, "PowerSGD rank", 3)
            type_number(pg, "PowerSGD warm-up (steps)", 4)
            pg.get_by_text("Fused optimiser (compiled)", exact=True).click()
            settle(pg)
            assert "PowerSGD, rank 3 after 4 plain all-reduce steps" in markdown_with(pg, "Compression:")

            pg.get_by_role("button", name="Run", exact=True).click()
            wait_for_run(pg)
            store = RunStore(tmp_path / "runs.db")
            rid = store.list_runs().id.iloc[0]
            tr = store.get_run(rid)["scenario"]["training"]
            assert tr["fused"] is True and (tr["compression"]["kind"], tr["compression"]["rank"],
                                            tr["compression"]["warmup"]) == ("powersgd", 3, 4)
            # The header reads the stored run, so it says both as soon as the run is queued; that such a run trains
            # to its end is checked below the browser (tests/optim/test_fused.py), without waiting here for its
            # kernels to compile.
            heading(pg, f"Run {rid}")
            assert "one fused pass per parameter" in markdown_with(pg, "Optimiser in this run:")
            assert "powerSGD_hook arithmetic" in markdown_with(pg, "Compression in this run:")
            no_error_boxes(pg)

            other.goto(base + "/training")
            settle(other)
            heading(other, "Training")
            assert "no compression" in markdown_with(other, "Compression:")  # the first student's choice is theirs

            url = take_link(pg)
        finally:
            pg.context.close()
            other.context.close()

        fresh = open_link(browser, url, "Training")
        try:
            assert "PowerSGD, rank 3 after 4 plain all-reduce steps" in markdown_with(fresh, "Compression:")
            assert fresh.get_by_label("PowerSGD rank", exact=True).first.input_value() == "3"
            no_error_boxes(fresh)
        finally:
            fresh.context.close()
