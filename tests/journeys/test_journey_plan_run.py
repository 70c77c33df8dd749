"""Browser journey for a design review: on Placement, pin conv1 to the FPGA, pick the 1F1B schedule, run the plan for
a few steps, see the measured step beside the modelled one, the bubble on each panel and the activation memory
measured beside its model and GPipe's and the replay of the recorded step (the run's Gantt has the three
panels, the replay's error is a metric and the caption gives the prediction's expected error), and share the view
as a link that shows a second student, in a fresh browser, the same run with the same measured step and pin."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import dataclasses

from lab.machine.calibrate import synthetic_profile
from lab.machine.profile import ExecutorFit
from lab.store.runs import RunStore
from tests.conftest import WAIT_MS, settle
from tests.journey import choose, heading, new_page, no_error_boxes, selected, take_link, type_number

pytestmark = pytest.mark.timeout(420)

MODEL = "LeNet-style CNN"
STRATEGY = "greedy earliest finish"
STEPS = 8
MEASURED = "Step, measured (median)"
SCHEDULE = "1F1B: one forward, one backward (fewer activations held)"
PEAK = "Peak activations, measured / modelled"
SIZES = re.compile(r"^\d+(\.\d+)? [kMG]?B / \d+(\.\d+)? [kMG]?B$")
MS = re.compile(r"^\d+(\.\d+)?(e[+-]?\d+)? ms$")  # milliseconds in lab.view.placement.plans: 3 significant digits

# The text plotly drew in the chart of a widget key (its subplot titles are annotations).
SVG_TEXT = """(sel) => Array.from(document.querySelectorAll(sel + ' .js-plotly-plot text'))
  .map(t => t.textContent).join('\\n')"""


def pick(pg, label: str, option: str) -> None:
    """:func:`journey.choose`, clicking the box again when the first click only took the focus."""
    box = pg.get_by_role("combobox", name=label, exact=True).first
    box.click()
    item = pg.get_by_role("option", name=option, exact=True)
    try:
        item.wait_for(timeout=3_000)
    except Exception:  # noqa: BLE001 - playwright's TimeoutError: the list did not open
        box.click()
    item.click()
    settle(pg)


def pin_and_set_steps(pg, op: str, device: str, steps: int) -> None:
    """Pin ``op`` to ``device`` as a person does, wait until the page says so, and set the run's steps."""
    pick(pg, "Operator to pin", op)
    pick(pg, "on device", device)
    pg.get_by_role("button", name="Pin", exact=True).click()
    settle(pg)
    pg.get_by_text(f"{op} → {device}").first.wait_for(timeout=WAIT_MS)
    type_number(pg, "Steps", steps)
    no_error_boxes(pg)


def metric_exact(pg, label: str) -> str | None:
    """The value of the metric whose label is exactly ``label`` (None while it is not on the page)."""
    for m in pg.locator("[data-testid='stMetric']").all():
        if m.locator("[data-testid='stMetricLabel']").inner_text().strip() == label:
            return m.locator("[data-testid='stMetricValue']").inner_text().strip()
    return None


def metric_shown(pg, label: str, timeout_ms: int = WAIT_MS) -> str | None:
    """The metric's value once the page shows it (a page from a link draws its sections one after another), or
    None after ``timeout_ms``."""
    waited = 0
    while (value := metric_exact(pg, label)) is None and waited < timeout_ms:
        pg.wait_for_timeout(250)
        waited += 250
    return value


def gantt_text(pg) -> str:
    chart = pg.locator(".st-key-pl_run_gantt_fig").first
    chart.scroll_into_view_if_needed()
    pg.wait_for_function("() => document.querySelector('.st-key-pl_run_gantt_fig .js-plotly-plot .main-svg')",
                         timeout=WAIT_MS)
    return pg.evaluate(SVG_TEXT, ".st-key-pl_run_gantt_fig")


def wait_until_done(pg, shot: Path, timeout_s: float = 180) -> str:
    """Poll the "Run" metric until it says done and the run's Gantt is drawn; its value."""
    deadline, status = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        status = metric_exact(pg, "Run")
        if status and not status.startswith(("queued", "running")):
            break
        pg.wait_for_timeout(1_000)
    if not (status or "").startswith("done"):
        pg.screenshot(path=str(shot), full_page=True)
        pytest.fail(f"the run did not end done within {timeout_s:.0f} s: Run = {status!r} (screenshot {shot})")
    pg.locator(".st-key-pl_run_gantt_fig").first.wait_for(timeout=WAIT_MS)
    settle(pg)
    return status


def both_panels(text: str) -> None:
    assert re.search(r"^measured, with emulated waits: ", text, re.M), text
    assert re.search(r"^modelled: ", text, re.M), text
    assert re.search(r"^replayed: measured task times, no gaps: ", text, re.M), text


# "This machine": made-up costs, with the executor's own terms as a calibration of 29 plans would leave them.
EXECUTOR = ExecutorFit(compute=1.0, call=50e-6, backward_call=50e-6, send_fixed=50e-6, recv_fixed=50e-6,
                       wire_fixed=300e-6, fit_error=0.2, cases=29, procs=(1, 2, 3, 4))
# What its plans drawn at random after the fit measured (lab.machine.heldout), which every prediction quotes.
HELDOUT = {"seed": 77, "plans": 11, "loaded": 1, "geomean_error": 0.2, "worst": 0.55, "tau": 0.84, "rows": [],
           "covered": {"procs": [1, 2, 3, 4], "micro_batches": [1, 8], "emulated": [False, True], "models": ["cnn"],
                       "longest_step": 1.0}}
EXPECTED = "expected error: within 20 % (geometric mean; worst 55 %, Kendall tau 0.84) on the 11 plans drawn at random"


def test_a_pinned_plan_run_is_shared_with_its_measured_and_modelled_step(
        streamlit_server, browser, tmp_path_factory, tmp_path):
    (data,) = tmp_path_factory.getbasetemp().glob("server-data[0-9]*")  # the session server's LAB_DATA
    profile = data / "machine_profile.json"
    had_profile = profile.exists()
    if not had_profile:
        dataclasses.replace(synthetic_profile(), executor=EXECUTOR, heldout=HELDOUT).save(profile)  # the modelled panel's costs
    try:
        pg = new_page(browser)
        try:
            pg.goto(streamlit_server + "/placement")
            settle(pg)
            heading(pg, "Placement")
            no_error_boxes(pg)
            choose(pg, "Model", MODEL)
            choose(pg, "Strategy", STRATEGY)
            pin_and_set_steps(pg, "conv1", "fpga", STEPS)
            choose(pg, "Schedule", SCHEDULE)  # the plan holds one stretch of the model per device: 1F1B runs it
            settle(pg)

            db = RunStore(data / "runs.db")  # the server's store (other journeys may share it)
            before = set(db.list_runs().id)
            pg.get_by_role("button", name="Run this plan").click()
            settle(pg)
            status = wait_until_done(pg, tmp_path / "plan-run.png")
            assert re.fullmatch(r"done, \d+ steps measured \(the first 2 are warm-up\)", status), status
            step = metric_exact(pg, MEASURED)
            assert step and MS.match(step), step
            assert MS.match(metric_exact(pg, "Step, modelled") or ""), metric_exact(pg, "Step, modelled")
            text = gantt_text(pg)
            both_panels(text)
            # The bubble's share of device time on the measured and the modelled panel alike.
            assert len(re.findall(r"^(measured|modelled)[^\n]*, bubble \d+% of device time$", text, re.M)) == 2, text
            peak = metric_exact(pg, PEAK)
            assert SIZES.match(peak or ""), peak
            pg.get_by_text("Activation memory under 1F1B").first.wait_for(timeout=WAIT_MS)
            assert re.fullmatch(r"[+-]\d+%", metric_exact(pg, "Replay error (drawn step)") or ""), \
                metric_exact(pg, "Replay error (drawn step)")
            if not had_profile:  # the caption quotes how far this profile's model was off when last measured
                pg.get_by_text(EXPECTED).first.wait_for(timeout=10_000)
            no_error_boxes(pg)

            new = set(db.list_runs().id) - before
            assert len(new) == 1, new  # one click, one run
            tr = db.get_run(new.pop())["scenario"]["training"]
            assert tr["parallel"] == "placement" and tr["steps"] == STEPS and tr["strategy"] == "greedy_eft"
            assert tr["schedule"] == "1f1b"
            assert tr["pins"] == {"conv1": "fpga"} and dict(tr["placement"])["conv1"] == "fpga"

            url = take_link(pg)
            assert "/placement?" in url
            no_error_boxes(pg)
        finally:
            pg.context.close()

        fresh = new_page(browser, browser.new_context(viewport={"width": 1400, "height": 900}))
        try:
            fresh.goto(url)
            settle(fresh)
            heading(fresh, "Placement")
            assert selected(fresh, "Model") == MODEL and selected(fresh, "Strategy") == STRATEGY
            assert selected(fresh, "Schedule") == SCHEDULE
            fresh.get_by_text("conv1 → fpga").first.wait_for(timeout=WAIT_MS)
            fresh.locator(".st-key-pl_run_gantt_fig").first.wait_for(timeout=WAIT_MS)
            settle(fresh)
            assert metric_shown(fresh, "Run") == status
            assert metric_shown(fresh, MEASURED) == step
            assert metric_shown(fresh, PEAK) == peak  # the counted bytes, the same in the link
            both_panels(gantt_text(fresh))
            no_error_boxes(fresh)
            with fresh.expect_download(timeout=WAIT_MS) as got:
                fresh.get_by_role("button", name="Download this view as a report").click()
            report = tmp_path / "placement-report.html"
            got.value.save_as(report)
        finally:
            fresh.context.close()
        read_report_offline(browser, report, url, {"Model (pl_model)": "cnn", "Strategy (pl_strategy)": "greedy_eft",
                                                   "training.pins": '{"conv1": "fpga"}'})
        same_figures_from_the_command_line(report, url, data)
    finally:
        if not had_profile:
            profile.unlink(missing_ok=True)


def read_report_offline(browser, report: Path, url: str | None, expect: dict) -> None:
    """The downloaded report in a fresh browser that may reach no address but the file: every figure drawn, the
    measured and modelled badges, the settings ``expect`` names (a value, or a pattern it matches), the machine,
    and the link that reopens the view (``url``, when the test knows it)."""
    ctx = browser.new_context(viewport={"width": 1024, "height": 768})
    asked: list[str] = []

    def only_the_file(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            asked.append(route.request.url)
            route.abort()

    ctx.route("**/*", only_the_file)
    pg = new_page(browser, ctx)
    try:
        pg.goto(report.as_uri())
        pg.wait_for_function("() => document.body.dataset.drawn !== '0'", timeout=WAIT_MS)
        drawn = pg.evaluate("document.body.dataset.drawn")
        assert drawn.isdigit() and int(drawn) >= 3, drawn
        assert pg.locator(".plot .main-svg").count() >= int(drawn)  # each figure is an svg plotly drew
        text = pg.locator("body").inner_text()
        assert "measured" in text and "modelled" in text
        assert pg.locator("#pl_run_gantt .kind-measured, #pl_run_gantt figure .badge").count() >= 1
        facts = pg.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll('dl.about dt'))
            .map(dt => [dt.textContent, dt.nextElementSibling.textContent]))""")
        for k, want in expect.items():
            assert (want.fullmatch(facts[k]) if isinstance(want, re.Pattern) else facts[k] == want), (k, facts)
        assert facts["cores"] and "load_average_1min" in facts
        if url is not None:
            assert pg.locator(f'a[href="{url}"]').count() == 1  # the link that reopens the view
        assert pg.locator("a", has_text="/placement?").count() == 1
        assert not asked and not pg.errors, (asked, pg.errors)
        # printed on A4 at 12 mm margins (703 CSS pixels across), nothing runs past the page's edge
        pg.set_viewport_size({"width": 703, "height": 1000})
        pg.emulate_media(media="print")
        pg.wait_for_function("() => Array.from(document.querySelectorAll('.plot .main-svg'))"
                             ".every(s => s.getBoundingClientRect().right <= 703)", timeout=10_000)
        assert pg.evaluate("document.documentElement.scrollWidth") <= 703
        assert pg.pdf(format="A4").startswith(b"%PDF")
    finally:
        ctx.close()


def same_figures_from_the_command_line(report: Path, url: str, data: Path) -> None:
    """``python -m lab.report`` of the same link, on the server's data, draws the same figures from the same data."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT
    from tests.report.test_report_html import figures_of

    out = report.with_name("cli-report.html")
    proc = subprocess.run([sys.executable, "-m", "lab.report", "--link", url, "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, env=dict(os.environ, LAB_DATA=str(data),
                                                                                LAB_DB=str(data / "runs.db")))
    assert proc.returncode == 0, proc.stderr[-2000:]
    page, cli = figures_of(report.read_text()), figures_of(out.read_text())
    assert [f["data"] for f in cli] == [f["data"] for f in page]
