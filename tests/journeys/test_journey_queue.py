"""Browser journey: two students on one server. Student A starts a long run; student B, a moment later, a
short one. B's page says another student's job holds the server and yields soon; B's run starts beside A's
(which yields, at the lowest priority) and is done while A's still runs; A's page never offered B's run."""

import pytest

from lab.store.runs import RunStore
from lab.train.launcher_record import processes_of
from tests.conftest import WAIT_MS, lab_server, settle
from tests.journey import heading, new_page, no_error_boxes, slide, type_number, wait_for_run

pytestmark = pytest.mark.timeout(600)


def start_run(pg, base: str, steps: int) -> None:
    pg.goto(base + "/training")
    settle(pg)
    heading(pg, "Training")
    slide(pg, "Workers (processes)", -1)
    type_number(pg, "Steps (count)", steps)
    pg.get_by_role("button", name="Run", exact=True).click()
    wait_for_run(pg)


def test_a_short_run_starts_beside_another_students_long_one(browser, tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_SLICE_S", "2")  # lab_server passes the environment on
    store = RunStore(tmp_path / "runs.db")
    with lab_server(tmp_path) as base:
        a, b = new_page(browser), new_page(browser)  # two browser contexts: two people
        try:
            start_run(a, base, 50_000)
            long_id = store.list_runs().id.iloc[0]
            a.get_by_text("running: step").first.wait_for(timeout=180_000)
            start_run(b, base, 200)
            runs = store.list_runs()
            short_id = next(r for r in runs.id if r != long_id)
            assert runs.set_index("id").owner[short_id] != runs.set_index("id").owner[long_id]
            heading(b, f"Run {short_id}")
            # the short run is done (it did not wait for the long one) while the long one still runs
            b.get_by_text("done: step 200 of 200").first.wait_for(timeout=180_000)
            assert store.status(long_id) == "running"
            ev = store.job_records.events(long_id)
            assert "yielded" in set(ev.event)
            assert a.get_by_role("heading", name=f"Run {short_id}").count() == 0  # not A's to see as A's
            no_error_boxes(a)
            no_error_boxes(b)
            a.get_by_role("button", name="Stop", exact=True).click()
            settle(a)
            a.get_by_text("stopped").first.wait_for(timeout=WAIT_MS)
        finally:
            a.context.close()
            b.context.close()
    for rid in store.list_runs().id:
        assert processes_of(rid) == []
