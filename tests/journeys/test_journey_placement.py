"""Browser journey for a design review: on Placement, pin conv1 to a device, see what it costs, and
share the view as a link that opens the same model, strategy, pin and makespan in a fresh browser."""

import re

import pytest

from tests.conftest import WAIT_MS, settle
from tests.journey import (
    choose,
    heading,
    metric,
    nav,
    new_page,
    no_error_boxes,
    selected,
    take_link,
)

pytestmark = pytest.mark.timeout(300)

MODEL = "LeNet-style CNN"
STRATEGY = "HEFT (rank order, gap insertion)"


def pick(pg, label: str, option: str) -> None:
    """:func:`journey.choose`, clicking the box again when the first click only took the focus from a
    button pressed just before (Streamlit's select opens on the second click then)."""
    box = pg.get_by_role("combobox", name=label, exact=True).first
    box.click()
    item = pg.get_by_role("option", name=option, exact=True)
    try:
        item.wait_for(timeout=3_000)
    except Exception:  # noqa: BLE001 - playwright's TimeoutError: the list did not open
        box.click()
    item.click()
    settle(pg)


def test_pin_travels_in_the_link_with_the_same_makespan(streamlit_server, browser):
    pg = new_page(browser)
    try:
        pg.goto(streamlit_server + "/placement")
        settle(pg)
        choose(pg, "Model", MODEL)
        choose(pg, "Strategy", STRATEGY)
        free_span = metric(pg, "Makespan")
        pg.get_by_role("button", name="Keep this plan as the baseline").click()
        settle(pg)
        pick(pg, "Operator to pin", "conv1")
        pick(pg, "on device", "host")
        pg.get_by_role("button", name="Pin", exact=True).click()
        settle(pg)
        pg.get_by_text("conv1 → host").first.wait_for(timeout=WAIT_MS)
        pinned_span = metric(pg, "Makespan")
        assert pinned_span != free_span  # conv1 off its fastest device changes the plan
        summary = pg.get_by_text("conv1 pinned to host: makespan +").first
        summary.wait_for(timeout=WAIT_MS)
        assert re.search(r"conv1 pinned to host: makespan \+\d+\.\d %", summary.inner_text())
        no_error_boxes(pg)

        nav(pg, "Topology")  # the page keeps its model, strategy and pin across navigation
        nav(pg, "Placement")
        assert selected(pg, "Model") == MODEL and selected(pg, "Strategy") == STRATEGY
        assert metric(pg, "Makespan") == pinned_span
        assert pg.get_by_text("conv1 → host").count() >= 1

        url = take_link(pg)
        assert "/placement?" in url
    finally:
        pg.context.close()

    fresh = new_page(browser, browser.new_context(viewport={"width": 1400, "height": 900}))
    try:
        fresh.goto(url)
        settle(fresh)
        heading(fresh, "Placement")
        assert selected(fresh, "Model") == MODEL
        assert selected(fresh, "Strategy") == STRATEGY
        fresh.get_by_text("conv1 → host").first.wait_for(timeout=WAIT_MS)
        assert metric(fresh, "Makespan") == pinned_span
        no_error_boxes(fresh)
    finally:
        fresh.context.close()


SVG_TEXT = """(sel) => Array.from(document.querySelectorAll(sel + ' .js-plotly-plot text'))
  .map(t => t.textContent).join('\\n')"""


def baseline_summary(pg) -> str:
    texts = [t for t in pg.locator("[data-testid='stMarkdownContainer']").all_inner_texts() if "makespan" in t
             and "%" in t and ":" in t and "Makespan (" not in t]
    return texts[0] if texts else ""


def test_a_kept_baseline_names_a_topology_change_and_travels_in_the_link(streamlit_server, browser):
    """Keep the CXL plan as the baseline, load the PCIe preset on Topology, come back: the comparison names the
    links that changed (it once said "same settings"), shows no rounding noise (it once showed
    -0.0000000000000002), and a fresh browser opened from the link shows the same comparison. The strategy
    chart names each strategy as the Strategy menu does."""
    pg = new_page(browser)
    try:
        pg.goto(streamlit_server + "/placement")
        settle(pg)
        heading(pg, "Placement")
        menu = selected(pg, "Strategy")
        pg.locator(".st-key-pl_compare_fig").first.scroll_into_view_if_needed()
        pg.wait_for_function("() => document.querySelector('.st-key-pl_compare_fig .js-plotly-plot .main-svg')",
                             timeout=WAIT_MS)
        bars = pg.evaluate(SVG_TEXT, ".st-key-pl_compare_fig")
        assert menu in bars, (menu, bars)
        pg.get_by_role("button", name="Keep this plan as the baseline").click()
        settle(pg)
        assert baseline_summary(pg).startswith("same settings: makespan +0.0 %"), baseline_summary(pg)
        nav(pg, "Topology")
        pg.get_by_role("button", name="Load preset").wait_for(timeout=WAIT_MS)
        pick(pg, "Preset", "(2) the same devices on PCIe (through the host)")
        pg.get_by_role("button", name="Load preset").click()
        settle(pg)
        nav(pg, "Placement")
        heading(pg, "Against a baseline")
        summary = baseline_summary(pg)
        assert "same settings" not in summary and re.search(r"link \S+–\S+", summary), summary
        assert "e-1" not in pg.locator("[data-testid='stMain']").inner_text()
        no_error_boxes(pg)
        url = take_link(pg)
    finally:
        pg.context.close()
    fresh = new_page(browser)
    try:
        fresh.goto(url)
        settle(fresh)
        heading(fresh, "Against a baseline")
        assert baseline_summary(fresh) == summary
        no_error_boxes(fresh)
    finally:
        fresh.context.close()
