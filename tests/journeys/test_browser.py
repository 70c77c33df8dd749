"""In a real browser (the app run with `streamlit run` on a free port): a broken upload and a deep link to a
fresh server. That every page opens without an error is checked on the projector's size
(tests/journeys/test_journey_projector.py)."""

import json

import pytest

from tests.conftest import WAIT_MS, settle
from tests.journey import heading


@pytest.fixture(scope="module")
def page(streamlit_server, browser):
    pg = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    yield pg
    pg.close()


def test_topology_invalid_upload_in_browser(page, streamlit_server, tmp_path):
    from lab.scenario.catalogue import preset

    bad = preset("cxl").to_dict()
    bad["devices"][1]["memory"] = -1
    f = tmp_path / "broken.json"
    f.write_text(json.dumps(bad))
    page.goto(streamlit_server + "/topology")
    settle(page)
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(f))
    page.get_by_text("broken.json was not loaded").wait_for(timeout=WAIT_MS)
    settle(page)
    assert page.locator("[data-testid='stException']").count() == 0
    assert "must be positive" in page.locator("[data-testid='stAlert']").first.inner_text()


def test_a_fresh_server_opened_on_a_deep_link_routes_through_app_py(browser, tmp_path):
    """The first request a server gets is a shared link to a page (the lessons give such links):
    the page still comes through app.py's st.navigation (titles in the sidebar, the wide layout),
    not Streamlit's fallback that runs a file of pages/ on its own."""
    from tests.conftest import lab_server

    with lab_server(tmp_path) as base:
        pg = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            pg.goto(base + "/allreduce?lesson=1")
            settle(pg)
            heading(pg, "All-reduce")
            nav = pg.locator("[data-testid='stSidebarNav']").inner_text()
            assert "All-reduce" in nav and "Fidelity" in nav, nav
            assert "allreduce" not in nav and "app" not in nav.split(), nav
            assert pg.locator("[data-testid='stException']").count() == 0
            assert pg.get_by_text("Iterations per size").count() == 0  # ?lesson=1 kept: advanced controls hidden
        finally:
            pg.close()
