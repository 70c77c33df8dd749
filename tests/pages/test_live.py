"""A live part of a page backs off when its render is slow: lab.view.live's interval, and the Jobs list and
Compare under AppTest with a store slowed down on purpose, whose refresh interval leaves the page idle at least
two thirds of the time."""
from __future__ import annotations

import time

import pytest

from lab.jobs.manager import JobManager
from lab.scenario.document import default_scenario
from lab.store.runs import RunStore
from lab.view.live import IDLE_SHARE, MAX_INTERVAL_S, interval
from tests.conftest import app_test, assert_no_exception

OWNER = "live-owner"


def test_the_interval_is_the_base_until_a_render_takes_a_third_of_it_then_doubles():
    assert interval(1.0, None) == interval(1.0, 0.0) == interval(1.0, float("nan")) == 1.0
    assert interval(1.0, 0.33) == 1.0  # idle two thirds of the time already
    assert interval(1.0, 0.34) == 2.0 and interval(1.0, 0.66) == 2.0 and interval(1.0, 0.67) == 4.0
    assert interval(3.0, 5.0) == 24.0 and interval(3.0, 60.0) == MAX_INTERVAL_S
    for base in (0.9, 1.0, 2.0, 3.0):  # brute force: the smallest doubling of the base that leaves the share idle
        for render in [i / 100 for i in range(1, 1200, 7)]:
            iv = interval(base, render)
            k = 0
            while base * 2 ** k * (1 - IDLE_SHARE) < render - 1e-12:
                k += 1
            assert iv == pytest.approx(min(MAX_INTERVAL_S, base * 2 ** k)), (base, render)


@pytest.mark.parametrize("page,key", [("pages/jobs.py", "jobs"), ("pages/compare.py", "compare")])
def test_a_slow_store_makes_a_live_page_refresh_less_often(page, key, lab_db, monkeypatch):
    store = RunStore(lab_db)
    rid = store.create_run(default_scenario(), status="queued", name="waiting")
    store.merge_info(rid, {"owner": OWNER})
    slow = RunStore.list_runs

    def list_runs(self, *a, **kw):  # every read of the run list takes 0.4 s more
        time.sleep(0.4)
        return slow(self, *a, **kw)

    monkeypatch.setattr(RunStore, "list_runs", list_runs)
    monkeypatch.setattr(JobManager, "_start", lambda self, spec: None)  # the job stays queued: no process
    at = app_test()
    at.session_state["job_owner"] = OWNER
    at.session_state["cmp_runs"] = [rid]
    at.switch_page(page).run(timeout=120)
    assert_no_exception(at)
    render = at.session_state[f"_live_render_{key}"]
    every = at.session_state[f"_live_interval_{key}"]
    assert store.status(rid) == "queued" and render >= 0.4  # the live part read the slowed list at least once
    # the interval the page declared leaves it idle at least two thirds of the time after that render
    assert every >= min(MAX_INTERVAL_S, render / (1 - IDLE_SHARE)) - 1e-9
    assert every > (1.0 if key == "jobs" else 3.0) or render <= 0.34 * every


def test_a_slow_render_keeps_the_answer_to_a_second_click_on_screen(lab_db, monkeypatch):
    """On a loaded server the live part's render is slow; the rerun that sets its longer interval would wipe
    the "Already queued" answer to a double click's second click before anyone read it."""
    slow, reads = RunStore.list_runs, []

    def list_runs(self, *a, **kw):  # a server getting busier: each read of the run list slower than the last
        reads.append(1)
        time.sleep(0.1 * len(reads))
        return slow(self, *a, **kw)

    monkeypatch.setattr(RunStore, "list_runs", list_runs)
    monkeypatch.setattr(JobManager, "_start", lambda self, spec: None)  # the job stays queued: no process
    at = app_test("pages/training.py")
    at.button(key="train_run").click().run(timeout=120)
    at.button(key="train_run").click().run(timeout=120)
    assert_no_exception(at)
    assert len(RunStore(lab_db).list_runs()) == 1
    assert any("Already queued" in str(i.value) for i in at.info), [str(i.value) for i in at.info]
    assert at.session_state["_live_render_training"] >= 0.3  # slow: without the answer kept, a rerun wipes it
    at.run(timeout=120)  # the next run, answering no click, sets the longer interval again
    assert not any("Already queued" in str(i.value) for i in at.info)
