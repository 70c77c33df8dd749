"""Browser journey for a design review: on Placement, pin conv1 to a device, see what it costs, and
share the view as a link that opens the same model, strategy, pin and makespan in a fresh browser."""

import re

import pytest

from tests.conftest import settle
from tests.journey import (
    choose,
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
        pg.get_by_text("conv1 → host").first.wait_for(timeout=30_000)
        pinned_span = metric(pg, "Makespan")
        assert pinned_span != free_span  # conv1 off its fastest device changes the plan
        summary = pg.get_by_text("conv1 pinned to host: makespan +").first
        summary.wait_for(timeout=30_000)
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
        fresh.get_by_role("heading", name="Placement").first.wait_for(timeout=30_000)
        assert selected(fresh, "Model") == MODEL
        assert selected(fresh, "Strategy") == STRATEGY
        fresh.get_by_text("conv1 → host").first.wait_for(timeout=30_000)
        assert metric(fresh, "Makespan") == pinned_span
        no_error_boxes(fresh)
    finally:
        fresh.context.close()
