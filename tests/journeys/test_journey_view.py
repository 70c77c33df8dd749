"""Browser journeys: what a person sets on a page stays set across pages, and a link reproduces it
in a fresh browser."""

import pytest
from playwright.sync_api import expect

from tests.conftest import WAIT_MS, settle
from tests.journey import (
    choose,
    heading,
    metric,
    nav,
    new_page,
    no_error_boxes,
    open_link,
    radio,
    selected,
    slide,
    slider_value,
    take_link,
    type_number,
)

pytestmark = pytest.mark.timeout(300)


def test_all_reduce_controls_survive_navigation_and_travel_in_a_link(streamlit_server, browser):
    pg = new_page(browser)
    try:
        pg.goto(streamlit_server + "/allreduce")
        settle(pg)
        choose(pg, "Algorithm", "binary tree (reduce + broadcast)")
        slide(pg, "Buffer per device S", 3)  # 4 MiB -> 256 MiB, one size step is 4x
        slide(pg, "Step (0 = before the first)", 3)
        assert selected(pg, "Algorithm") == "binary tree (reduce + broadcast)"
        assert slider_value(pg, "Buffer per device S") == "256 MiB"
        assert slider_value(pg, "Step (0 = before the first)") == "3"
        time_here = metric(pg, "Modelled time")

        nav(pg, "Topology")
        nav(pg, "Placement")
        nav(pg, "All-reduce")
        assert selected(pg, "Algorithm") == "binary tree (reduce + broadcast)"
        assert slider_value(pg, "Buffer per device S") == "256 MiB"
        assert slider_value(pg, "Step (0 = before the first)") == "3"
        assert metric(pg, "Modelled time") == time_here
        no_error_boxes(pg)

        url = take_link(pg)
        assert "/allreduce?" in url
    finally:
        pg.context.close()

    fresh = open_link(browser, url, "All-reduce")
    try:
        assert selected(fresh, "Algorithm") == "binary tree (reduce + broadcast)"
        assert slider_value(fresh, "Buffer per device S") == "256 MiB"
        assert slider_value(fresh, "Step (0 = before the first)") == "3"
        assert metric(fresh, "Modelled time") == time_here
        no_error_boxes(fresh)
    finally:
        fresh.context.close()


def test_a_damaged_view_in_a_link_falls_back_with_a_notice(streamlit_server, browser):
    pg = new_page(browser)
    try:
        pg.goto(streamlit_server + "/allreduce?v=not-a-view")
        settle(pg)
        assert pg.get_by_text("From the link: the view part of the link is damaged").count() == 1
        assert selected(pg, "Algorithm") == "ring (reduce-scatter + all-gather)"
        no_error_boxes(pg)
    finally:
        pg.context.close()


def test_ring_lessons_steps_can_be_done_by_clicking(streamlit_server, browser):
    """The two All-reduce lessons, step by step, as their panels say."""
    pg = new_page(browser)
    try:
        pg.goto(streamlit_server + "/")
        settle(pg)
        pg.get_by_role("button", name="Open this lesson").nth(0).click()
        settle(pg)
        heading(pg, "All-reduce")
        panel = pg.locator(".st-key-lesson_panel")
        assert "Ring all-reduce, step by step" in panel.inner_text()
        ring = pg.get_by_text("Ring: host → gpu → fpga → asic → host")
        assert ring.count() == 1
        for target, tick in ((1, 0), (3, 1), (6, 2)):
            slide(pg, "Step (0 = before the first)", target - int(slider_value(pg, "Step (0 = before the first)")))
            assert slider_value(pg, "Step (0 = before the first)") == str(target)
            panel.get_by_role("checkbox").nth(tick).check(force=True)
            settle(pg)
        sent = pg.locator("[data-testid='stDataFrame']").filter(has_text="sent / S")
        assert sent.count() >= 1
        slide(pg, "Buffer per device S", -3)  # 4 MiB -> 64 KiB
        small = metric(pg, "Modelled time")
        slide(pg, "Buffer per device S", 6)  # -> 256 MiB
        large = metric(pg, "Modelled time")
        assert small != large
        panel.get_by_role("checkbox").nth(3).check(force=True)
        settle(pg)
        assert "(4 of 5 steps done)" in panel.inner_text()
        no_error_boxes(pg)

        nav(pg, "Home")
        pg.get_by_role("button", name="Open this lesson").nth(1).click()
        settle(pg)
        panel = pg.locator(".st-key-lesson_panel")
        assert "Why the slowest link sets the pace" in panel.inner_text()
        assert pg.get_by_text("as listed 16 GB/s").count() + pg.get_by_text("16 GB/s", exact=False).count() >= 1
        listed = metric(pg, "Modelled time")
        radio(pg, "Ring order", "the lab's: widest slowest hop")
        lab_order = metric(pg, "Modelled time")
        assert lab_order != listed
        choose(pg, "Algorithm", "hierarchical (groups, then leaders' ring)")
        assert pg.locator("[data-testid='stDataFrame']").filter(has_text="busbw").count() >= 1
        no_error_boxes(pg)
    finally:
        pg.context.close()


def test_the_jobs_pages_what_if_and_fault_form_survive_navigation_and_travel_in_a_link(streamlit_server, browser):
    """The Jobs page's controls were once drawn outside the view table: a link lost them."""
    pg = new_page(browser)
    try:
        pg.goto(streamlit_server + "/jobs")
        settle(pg)
        heading(pg, "Jobs")
        choose(pg, "Topology", "(5) edge cluster: 8 weak devices on 100 Mbit/s")
        type_number(pg, "At most this many jobs at once (0: no limit)", 2)
        pg.get_by_text("Watch a failure: start a job with an injected fault").click()
        settle(pg)
        choose(pg, "Fault", "hang")
        type_number(pg, "At step", 11)

        nav(pg, "Topology")
        nav(pg, "Jobs")
        assert selected(pg, "Topology") == "(5) edge cluster: 8 weak devices on 100 Mbit/s"
        assert pg.get_by_label("At most this many jobs at once (0: no limit)", exact=True).input_value() == "2"
        url = take_link(pg)
        assert "/jobs?" in url
        no_error_boxes(pg)
    finally:
        pg.context.close()

    fresh = open_link(browser, url, "Jobs")
    try:
        assert selected(fresh, "Topology") == "(5) edge cluster: 8 weak devices on 100 Mbit/s"
        # read once the page has drawn the link's values (a loaded server may show a first draw before them); a
        # value the link lost would stay and fail this
        expect(fresh.get_by_label("At most this many jobs at once (0: no limit)", exact=True)).to_have_value(
            "2", timeout=WAIT_MS)
        fresh.get_by_text("Watch a failure: start a job with an injected fault").click()
        settle(fresh)
        assert selected(fresh, "Fault") == "hang"
        expect(fresh.get_by_label("At step", exact=True)).to_have_value("11", timeout=WAIT_MS)
        no_error_boxes(fresh)
    finally:
        fresh.context.close()
