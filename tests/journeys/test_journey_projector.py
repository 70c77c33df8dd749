"""Every page opens in headless Chromium on a 1024x768 projector without a page error or an exception box, and
shows nothing wider than the window, no chart title, axis title or legend cut off or drawn over its plot, and no
select box whose chosen value is cut short."""

from __future__ import annotations

import pytest

from app import available_pages
from tests.conftest import WAIT_MS, page_url_path, settle
from tests.journey import new_page, no_error_boxes

pytestmark = pytest.mark.timeout(300)

PAGES = [f for f, _, _ in available_pages()]

# Every problem the page shows at this size, as text (an empty list: none).
PROBLEMS = r"""() => {
  const out = [], W = window.innerWidth;
  const main = document.querySelector("[data-testid='stMain']") || document.body;
  if (main.scrollWidth > main.clientWidth + 2) out.push(`the page is ${main.scrollWidth}px wide in ${main.clientWidth}px`);
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const svg = plot.querySelector('.main-svg');
    if (!svg) continue;
    const box = svg.getBoundingClientRect();
    if (box.width === 0) continue;
    if (box.right > W + 1) out.push(`a chart reaches ${Math.round(box.right)}px`);
    for (const t of plot.querySelectorAll('.gtitle, .g-xtitle text, .g-ytitle text, .g-x2title text, .g-y2title text')) {
      const r = t.getBoundingClientRect();
      if (!t.textContent.trim() || r.width === 0) continue;
      if (r.left < box.left - 1 || r.right > box.right + 1)
        out.push(`chart text cut off: "${t.textContent.slice(0, 60)}" (${Math.round(r.left)}-${Math.round(r.right)} in ${Math.round(box.left)}-${Math.round(box.right)})`);
    }
    const legend = plot.querySelector('.legend'), drag = plot.querySelector('.nsewdrag');
    if (legend && drag) {
      const a = legend.getBoundingClientRect(), b = drag.getBoundingClientRect();
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 4 && h > 4) out.push(`a legend covers its chart: ${plot.closest('[class*=st-key-]')?.className.match(/st-key-\S+/)?.[0] || ''}`);
    }
  }
  for (const box of main.querySelectorAll("[data-testid='stSelectbox'] input[role='combobox']")) {
    if (box.scrollWidth > box.clientWidth + 1) out.push(`a select box cuts its value short: "${box.value.slice(0, 60)}"`);
  }
  for (const label of main.querySelectorAll("[data-testid='stWidgetLabel'] [data-testid='stMarkdownContainer']")) {
    if (label.scrollWidth > label.clientWidth + 1) out.push(`a control's label is cut short: "${label.textContent.slice(0, 60)}"`);
  }
  return out;
}"""


def all_charts_drawn(pg) -> None:
    """Once the page's script has run, scroll to each shown chart and wait until plotly has drawn it: Streamlit
    draws a chart once it is near the view, and a browser context loads plotly afresh, which a busy server can
    take seconds to serve (a chart counted at once was not there yet)."""
    settle(pg)
    for el in pg.locator(".stPlotlyChart").all():
        if not el.is_visible():
            continue  # on a tab not shown or in a closed expander
        el.scroll_into_view_if_needed()
        el.locator(".js-plotly-plot .main-svg").first.wait_for(state="attached", timeout=WAIT_MS)
    settle(pg)


@pytest.mark.parametrize("file", PAGES)
def test_every_page_fits_a_1024x768_projector(streamlit_server, browser, file):
    pg = new_page(browser, browser.new_context(viewport={"width": 1024, "height": 768}))
    try:
        pg.goto(streamlit_server + page_url_path(file))
        # a loaded machine may not have started the page's script when the app first says it is not running
        pg.locator("h1").first.wait_for(timeout=WAIT_MS)
        settle(pg)
        all_charts_drawn(pg)
        no_error_boxes(pg)  # the page opens without a page error or an exception box
        problems = pg.evaluate(PROBLEMS)
        assert not problems, problems
    finally:
        pg.context.close()


def test_a_busy_servers_jobs_and_comparison_fit_a_1024x768_projector(browser, tmp_path):
    """Twenty stored runs of six variants: the Jobs page with the class's jobs (its lifecycle chart's legend) and
    the Compare page with every run (six curves, the summary and the verdicts) fit the window."""
    from lab.scenario.document import Compression, default_scenario
    from lab.store.runs import JOB_WORKER, RunStore
    from lab.view.state import encode
    from tests.conftest import lab_server

    st = RunStore(tmp_path / "runs.db")
    ids = []
    for k in range(20):
        opt = ("adam", "adabelief", "maxadabelief")[k % 3]
        kind = "none" if k % 2 else "group_topk"
        sc = default_scenario()
        sc = sc.replace(training=sc.training.replace(optimizer=opt, seed=k, steps=40, workers=2, compression=Compression(
            kind=kind, ratio=0.01, error_feedback=kind != "none")))
        rid = st.create_run(sc, name=f"run {k} · {opt} · {kind}", status="done")
        for stage in ("submitted", "parsed", "scheduled", "started", "running", "ended", "released"):
            st.job_records.add_event(rid, stage)
        st.add_metrics(rid, [{"step": s, "worker": JOB_WORKER, "loss": 2.0 / s, "wall": 0.01 * s,
                              "test_acc": (0.5 + 0.01 * k + 0.005 * s) if s % 10 == 0 else None}
                             for s in range(1, 41)])
        ids.append(rid)
    with lab_server(tmp_path) as base:
        for path in ("/jobs", "/compare?v=" + encode({"cmp_runs": ids, "cmp_class": True})):
            pg = new_page(browser, browser.new_context(viewport={"width": 1024, "height": 768}))
            try:
                pg.goto(base + path)
                # a loaded machine may not have started the page's script when the app first says it is not running
                pg.locator("h1").first.wait_for(timeout=WAIT_MS)
                settle(pg)
                if path == "/jobs":
                    pg.get_by_text("Show the whole class's jobs (read-only)").click()
                    settle(pg)
                    # a loaded server may not have begun the rerun the click asked for when the page first reads
                    # as settled: the class's jobs are drawn once the switch reads as on and the page settles again
                    pg.locator("[data-testid='stCheckbox'] input, [data-testid='stToggle'] input").first.wait_for(
                        state="attached", timeout=WAIT_MS)
                    pg.wait_for_timeout(500)
                    settle(pg)
                all_charts_drawn(pg)
                assert pg.locator(".js-plotly-plot").count() >= 1
                problems = pg.evaluate(PROBLEMS)
                assert not problems, (path, problems)
            finally:
                pg.context.close()
