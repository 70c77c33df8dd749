"""Browser journey on the All-reduce page: the step-through has one step control. Play moves it, and the
figure and the page link follow it; at the last step the play stops."""

from __future__ import annotations

import re
import time

import pytest

from tests.conftest import WAIT_MS, settle
from tests.journey import new_page, no_error_boxes, slider_value, take_link

pytestmark = pytest.mark.timeout(300)

STEP = "Step (0 = before the first)"
TITLE = """() => Array.from(document.querySelectorAll('.st-key-ar_steps_fig .js-plotly-plot .gtitle'))
  .map(t => t.textContent).join(' ')"""


def shown(pg) -> tuple[str, str]:
    """The slider's value and the step the figure's title names, read together once they agree (a tick of the
    play may fall between the two reads)."""
    for _ in range(20):
        a = slider_value(pg, STEP)
        title = pg.evaluate(TITLE)
        m = re.search(r"step (\d+) of (\d+)", title)
        b = m.group(1) if m else ("0" if "before the first step" in title else "?")
        if a == b and a == slider_value(pg, STEP):
            return a, title
        pg.wait_for_timeout(150)
    raise AssertionError(f"the slider ({a}) and the figure ({title!r}) disagree")


def test_play_moves_the_one_step_control_the_figure_and_the_link_to_the_end(streamlit_server, browser):
    pg = new_page(browser)
    try:
        pg.goto(streamlit_server + "/allreduce")
        settle(pg)
        pg.locator(".st-key-ar_steps_fig .js-plotly-plot").first.wait_for(timeout=WAIT_MS)
        assert pg.locator(".st-key-ar_steps_fig .slider-container").count() == 0  # the figure has no slider of its own
        step, _ = shown(pg)
        assert step == "0"
        pg.get_by_text("▶ Play the steps").click()
        deadline = time.monotonic() + 60
        seen = {0}
        while time.monotonic() < deadline:
            step, title = shown(pg)
            seen.add(int(step))
            total = int(re.search(r"of (\d+)", title).group(1)) if "of" in title else None
            if total and int(step) == total and not pg.locator(".st-key-ar_play input[type=checkbox]").is_checked():
                break
            pg.wait_for_timeout(300)
        else:
            pytest.fail(f"the play did not reach the last step and stop: saw steps {sorted(seen)}")
        assert len(seen) >= 3, seen  # it moved through the steps, not straight to the end
        settle(pg)
        url = take_link(pg)
        assert "v=" in url
        no_error_boxes(pg)
    finally:
        pg.context.close()
    fresh = new_page(browser)
    try:
        fresh.goto(url)
        settle(fresh)
        fresh.locator(".st-key-ar_steps_fig .js-plotly-plot").first.wait_for(timeout=WAIT_MS)
        assert shown(fresh)[0] == step
        no_error_boxes(fresh)
    finally:
        fresh.context.close()
