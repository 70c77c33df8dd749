"""Smoke test in a real browser: every page opens in headless Chromium without a page error or an
exception box. Runs the app with `streamlit run` on a free port."""

import json

import pytest
from conftest import page_url_path, settle

from app import available_pages

PAGES = [f for f, _, _ in available_pages()]


@pytest.fixture(scope="module")
def page(streamlit_server, browser):
    pg = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    yield pg
    pg.close()


@pytest.mark.parametrize("file", PAGES)
def test_page_opens_without_errors(page, streamlit_server, file):
    page.errors.clear()
    page.goto(streamlit_server + page_url_path(file))
    settle(page)
    boxes = page.locator("[data-testid='stException']").all_inner_texts()
    assert not boxes, boxes
    assert not page.errors, page.errors
    assert page.locator("h1").count() >= 1


def test_topology_invalid_upload_in_browser(page, streamlit_server, tmp_path):
    from lab.catalogue import preset

    bad = preset("cxl").to_dict()
    bad["devices"][1]["memory"] = -1
    f = tmp_path / "broken.json"
    f.write_text(json.dumps(bad))
    page.goto(streamlit_server + "/topology")
    settle(page)
    page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(f))
    page.get_by_text("broken.json was not loaded").wait_for(timeout=30_000)
    settle(page)
    assert page.locator("[data-testid='stException']").count() == 0
    assert "must be positive" in page.locator("[data-testid='stAlert']").first.inner_text()
