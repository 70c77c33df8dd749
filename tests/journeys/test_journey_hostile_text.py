"""Browser journey: user text that looks like Markdown or HTML reaches every page as text. A scenario
whose names hold Markdown images and links, raw HTML and bare addresses, all pointing at 127.0.0.2,
is opened on every page with its figures drawn, its refusals provoked (a pin, a run) and its names
carried in links (?v=, ?l=): the browser fetches nothing but the app itself, the document holds no
link or image to 127.0.0.2 (plotly's SVG included), and the names are there, literally, as text."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from app import available_pages
from lab.view import state as viewstate
from tests.conftest import WAIT_MS, page_url_path, settle
from tests.journey import new_page, no_error_boxes
from tests.pages.hostile import (ANCHOR, BAD_PIN, BARE, GOOD_PIN, HTML, IMG, LINK, OP, OUTSIDE, REFUSED_RUN,
                                 hostile_scenario)

pytestmark = pytest.mark.timeout(900)

WJ = "\u2060"  # the word joiner ui.plain puts into addresses: invisible, left out when comparing text

# Every element of the document (HTML or SVG) that points at the outside origin.
POINTING_OUT = """(origin) => {
  const out = [];
  for (const el of document.querySelectorAll('*')) {
    for (const v of [el.getAttribute('href'), el.getAttribute('src'),
                     el.getAttributeNS('http://www.w3.org/1999/xlink', 'href')]) {
      if (v && v.includes(origin)) { out.push(el.outerHTML.slice(0, 300)); break; }
    }
  }
  return out;
}"""

# Every element is drawn (Streamlit shows a skeleton while a chart's or a table's code loads), and
# every plotly chart has drawn its SVG.
CHARTS_DRAWN = """() => !document.querySelector("[data-testid='stSkeleton']")
  && Array.from(document.querySelectorAll("[data-testid='stPlotlyChart']"))
       .every(c => c.querySelector('.js-plotly-plot .main-svg'))"""

SVG_TEXT = """(sel) => Array.from(document.querySelectorAll(sel + ' .js-plotly-plot text'))
  .map(t => t.textContent).join('\\n')"""


def open_page(pg, base: str, path: str, **params: str) -> None:
    """Open ``path`` with the link's ``params`` in a new session, and wait until its run is over and
    every element is drawn. (Before the session's first run the app reads as not running, so the
    sidebar, drawn at the start of every run, is waited for first.)"""
    pg.goto(base + path + "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items()))
    pg.locator("[data-testid='stSidebar']").get_by_text("Scenario:").wait_for(timeout=WAIT_MS)
    settle(pg)
    pg.wait_for_function(CHARTS_DRAWN, timeout=WAIT_MS)


def shown(pg, where: str = "[data-testid='stApp']") -> str:
    return pg.locator(where).inner_text().replace(WJ, "")


def svg_text(pg, key: str) -> str:
    """The text plotly drew in the chart of widget key ``key`` (its tick labels, legend, node labels)."""
    return pg.evaluate(SVG_TEXT, f".st-key-{key}")


def nothing_points_out(pg, where: str) -> None:
    """No live link or image to the outside origin anywhere in the document, and no exception box."""
    no_error_boxes(pg)
    assert pg.locator(f"a[href^='http://{OUTSIDE}']").count() == 0, where
    assert pg.locator(f"img[src^='http://{OUTSIDE}']").count() == 0, where
    assert pg.locator(f"svg a[href^='http://{OUTSIDE}']").count() == 0, where
    pointing = pg.evaluate(POINTING_OUT, OUTSIDE)
    assert not pointing, (where, pointing)


def wait_for_text(pg, text: str, where: str = "[data-testid='stMain']") -> None:
    """Wait until ``text`` is shown (with the word joiners left out) in ``where``."""
    pg.wait_for_function("([sel, text]) => { const e = document.querySelector(sel);"
                         " return e && e.innerText.replaceAll('\\u2060', '').includes(text); }",
                         arg=[where, text], timeout=WAIT_MS)


def test_markdown_and_html_in_names_are_shown_as_text_and_fetch_nothing(streamlit_server, browser):
    base = streamlit_server
    good = hostile_scenario(pins=GOOD_PIN).to_url_param()
    pg = new_page(browser)
    foreign: list[str] = []
    pg.on("request", lambda r: None if r.url.startswith(base) or r.url.startswith(("data:", "blob:"))
          else foreign.append(r.url))
    try:
        # Every page, its figures drawn; the sidebar names the scenario, literally.
        for file, _, _ in available_pages():
            open_page(pg, base, page_url_path(file), s=good)
            sidebar = shown(pg, "[data-testid='stSidebar']")
            assert IMG in sidebar and HTML in sidebar, (file, sidebar)
            nothing_points_out(pg, file)

        # Topology: the graph (device and switch names under their nodes) and the route under the pickers.
        open_page(pg, base, "/topology", s=good)
        wait_for_text(pg, "Route ")
        nothing_points_out(pg, "topology")
        drawn = svg_text(pg, "topo_net_fig")
        assert ANCHOR in drawn and HTML in drawn and BARE in drawn, drawn  # plotly shows &lt; as <
        assert IMG in svg_text(pg, "topo_heat_fig")  # the route matrix's tick labels
        main = shown(pg, "[data-testid='stMain']")
        assert f"About “**{LINK}**”" in main and f"Route host → {BARE} → {IMG}:" in main, main

        # All-reduce: every hostile device takes part; its step-through and timelines name them.
        open_page(pg, base, "/allreduce", s=good)
        wait_for_text(pg, "Host aggregation:")
        nothing_points_out(pg, "allreduce")
        for chart in ("ar_steps_fig", "ar_trigger_fig"):
            drawn = svg_text(pg, chart)
            assert all(n in drawn for n in (IMG, LINK, ANCHOR, HTML)), (chart, drawn)
        assert f"Ring: {IMG} → {LINK}" in shown(pg, "[data-testid='stMain']")

        # Placement: the Gantt with a pin on a hostile device, then a pin the page refuses.
        open_page(pg, base, "/placement", s=good)
        wait_for_text(pg, "Pinned:")
        nothing_points_out(pg, "placement")
        assert IMG in svg_text(pg, "pl_gantt_fig")  # its lane: every operator runs on the GPU
        assert IMG in svg_text(pg, "pl_dag_fig") and HTML in svg_text(pg, "pl_balance_fig")  # legends
        open_page(pg, base, "/placement", s=hostile_scenario(pins=BAD_PIN).to_url_param())
        refusal = pg.locator("[data-testid='stAlert']").filter(has_text="is pinned to").first
        refusal.wait_for(timeout=WAIT_MS)
        nothing_points_out(pg, "placement, refused pin")
        assert OP in refusal.inner_text().replace(WJ, "") and ANCHOR in refusal.inner_text().replace(WJ, "")

        # A link whose view names an operator that does not exist: its notice quotes it as text.
        open_page(pg, base, "/placement", s=good, v=viewstate.encode({"pl_why": ANCHOR}))
        wait_for_text(pg, f"({ANCHOR} is not in this graph)")
        nothing_points_out(pg, "placement, ?v=")

        # Training: a worker on a device without a matmul kernel; the run is refused, quoting it.
        open_page(pg, base, "/training", s=hostile_scenario(**REFUSED_RUN).to_url_param())
        pg.get_by_role("button", name="Run", exact=True).click()
        refusal = pg.locator("[data-testid='stAlert']").filter(has_text="matmul").first
        refusal.wait_for(timeout=WAIT_MS)
        settle(pg)
        nothing_points_out(pg, "training, refused run")
        assert ANCHOR in refusal.inner_text().replace(WJ, "")

        # A link naming a lesson that does not exist: a one-line notice quoting it as text.
        open_page(pg, base, "/allreduce", s=good, l=IMG + HTML)
        wait_for_text(pg, f"The lesson in this link ({IMG + HTML}) does not exist;")
        nothing_points_out(pg, "allreduce, ?l=")

        assert not foreign, foreign
    finally:
        pg.context.close()
