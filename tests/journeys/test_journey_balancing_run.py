"""Browser journey for the load-balancing design's claim: on Placement, with the GPU made much slower than its
datasheet (which the planner does not know), run the balancing loop for real (both rules), watch the rounds
come in measured beside the modelled loop, and share the view: a fresh browser shows the same runs."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.scenario.topology import Topology
from lab.store.runs import RunStore
from tests.conftest import WAIT_MS, settle
from tests.journey import choose, heading, new_page, no_error_boxes, take_link, type_number

pytestmark = pytest.mark.timeout(420)

SVG_TEXT = """(sel) => Array.from(document.querySelectorAll(sel + ' .js-plotly-plot text'))
  .map(t => t.textContent).join('\\n')"""
LINE = re.compile(r"^(wait|throughput) \((shift by waiting time|proportional to measured speed)\), (\w+)")


def four_devices() -> Scenario:
    """The CXL cluster without its DPU: a balancing run has a process per device, and a test starts at most 4."""
    d = preset("cxl").to_dict()
    d["devices"] = [x for x in d["devices"] if x["name"] != "dpu"]
    d["links"] = [x for x in d["links"] if "dpu" not in (x["a"], x["b"])]
    return Scenario("four devices", Topology.from_dict(d), Training(model="cnn"))


def run_lines(pg) -> list[str]:
    return [t for t in pg.locator("[data-testid='stMarkdownContainer']").all_inner_texts() if LINE.match(t.strip())]


def wait_for_both(pg, shot: Path, timeout_s: float = 240) -> list[str]:
    """The two loops' lines once both ended and their baselines too (the session's table has no run left
    queued or running)."""
    deadline, lines = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        lines = run_lines(pg)
        chart = pg.locator(".st-key-pl_bal_outcome_fig").first
        busy = chart.count() == 0 or re.search(r"\((queued|running)\)", pg.evaluate(SVG_TEXT, ".st-key-pl_bal_outcome_fig"))
        if len(lines) == 2 and not busy and all(LINE.match(t.strip()).group(3) not in ("queued", "running")
                                                for t in lines):
            return lines
        pg.wait_for_timeout(1_000)
    pg.screenshot(path=str(shot), full_page=True)
    pytest.fail(f"the two balancing runs did not end within {timeout_s:.0f} s: {lines} (screenshot {shot})")


def test_the_balancing_loop_runs_for_real_beside_its_model_and_the_link_shows_it_again(
        streamlit_server, browser, tmp_path_factory, tmp_path):
    (data,) = tmp_path_factory.getbasetemp().glob("server-data[0-9]*")
    db = RunStore(data / "runs.db")
    pg = new_page(browser)
    try:
        pg.goto(streamlit_server + "/placement?s=" + four_devices().to_url_param())
        settle(pg)
        heading(pg, "Placement")
        choose(pg, "Model", "LeNet-style CNN")
        type_number(pg, "max rounds", 6)
        type_number(pg, "Steps per round", 3)
        no_error_boxes(pg)
        before = set(db.list_runs().id)
        pg.get_by_role("button", name="Run the balancing loop (both rules)").click()
        settle(pg)
        lines = wait_for_both(pg, tmp_path / "balance.png")
        assert all(LINE.match(t.strip()).group(3) == "done" for t in lines), lines
        assert all(re.search(r"\d+ round\(s\), \d+ operator move\(s\); step [\d.e+-]+ ms in round 1", t) for t in lines)
        new = set(db.list_runs().id) - before
        runs = [db.get_run(rid) for rid in new]
        loops = [r for r in runs if r["scenario"]["training"]["balance"] != "off"]
        baselines = sorted(r["scenario"]["training"]["strategy"] for r in runs if r not in loops)
        assert len(loops) == 2 and baselines == ["even_split", "type_rule"], [r["name"] for r in runs]
        for run in runs:  # one emulated cluster for the loops and their baselines
            tr = run["scenario"]["training"]
            assert tr["slowdown"] == {"gpu": 20.0} and tr["emulate"] is True
        bars = pg.evaluate(SVG_TEXT, ".st-key-pl_bal_outcome_fig")
        assert "even contiguous layer split (done)" in bars and "balancing loop (wait), last round (done)" in bars, bars
        assert re.search(r"\d (ms|s) \([+-]\d+% vs the even split\)", bars), bars
        for run in loops:
            rid, tr = run["id"], run["scenario"]["training"]
            assert tr["balance"] in ("wait", "throughput") and tr["round_steps"] == 3 and tr["steps"] <= 18
            assert len(run["info"]["balance"]["rounds"]) >= 1
            chart = pg.locator(f".st-key-pl_bal_{rid}_fig").first
            chart.scroll_into_view_if_needed()
            text = pg.evaluate(SVG_TEXT, f".st-key-pl_bal_{rid}_fig")
            assert "gpu, measured" in text and "gpu, modelled" in text, text
            assert "Step time (relative to round 1)" in text
        pg.screenshot(path=str(tmp_path / "balance-done.png"), full_page=True)
        no_error_boxes(pg)
        url = take_link(pg)
    finally:
        pg.context.close()

    fresh = new_page(browser, browser.new_context(viewport={"width": 1400, "height": 900}))
    try:
        fresh.goto(url)
        settle(fresh)
        heading(fresh, "Placement")
        fresh.get_by_text("Steps per round").first.wait_for(timeout=WAIT_MS)
        deadline = time.monotonic() + 60
        while len(run_lines(fresh)) < 2 and time.monotonic() < deadline:
            fresh.wait_for_timeout(500)
        assert sorted(t.split(":")[0] for t in run_lines(fresh)) == sorted(t.split(":")[0] for t in lines)
        no_error_boxes(fresh)
    finally:
        fresh.context.close()
