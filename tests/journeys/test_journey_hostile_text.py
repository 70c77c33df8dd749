"""Browser journey: user text that looks like Markdown or HTML reaches every page as text. A scenario
whose names hold Markdown images and links makes the browser fetch nothing but the app itself."""

import pytest

from app import available_pages
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario
from tests.conftest import page_url_path, settle
from tests.journey import new_page, no_error_boxes

pytestmark = pytest.mark.timeout(600)

# Loopback, but not the app: a rendered image or a followed link would show up as a request there.
IMG = "![img](http://127.0.0.2:9/a.png)"
LINK = "[click](http://127.0.0.2:9/b)"
HTML = "<img src=http://127.0.0.2:9/c.png>"


def hostile_scenario() -> Scenario:
    d = preset("cxl").to_dict()
    rename = {"gpu": IMG, "fpga": LINK}
    for dev in d["devices"]:
        dev["name"] = rename.get(dev["name"], dev["name"])
        dev["pool"] = HTML
    for link in d["links"]:
        link["a"], link["b"] = rename.get(link["a"], link["a"]), rename.get(link["b"], link["b"])
    d["name"] = f"**{LINK}**"
    d["description"] = IMG + " " + HTML
    return Scenario.from_dict({"format": "hetlab-scenario/1", "name": f"{IMG} {HTML}", "topology": d})


def test_markdown_and_html_in_names_are_shown_as_text_and_fetch_nothing(streamlit_server, browser):
    sc = hostile_scenario()
    pg = new_page(browser)
    foreign: list[str] = []
    pg.on("request", lambda r: None if r.url.startswith(streamlit_server) or r.url.startswith("data:")
          or r.url.startswith("blob:") else foreign.append(r.url))
    try:
        for file, _, _ in available_pages():
            pg.goto(streamlit_server + page_url_path(file) + "?s=" + sc.to_url_param())
            settle(pg)
            pg.wait_for_timeout(500)
            no_error_boxes(pg)
            links = pg.locator("[data-testid='stMain'] a[href^='http://127.0.0.2']")
            assert links.count() == 0, (file, [a.evaluate("e => e.parentElement.outerHTML")[:300]
                                               for a in links.all()])
            assert pg.locator("img[src^='http://127.0.0.2']").count() == 0, file
        assert not foreign, foreign
        # and the text is there, literally, where a name is shown
        pg.goto(streamlit_server + "/topology?s=" + sc.to_url_param())
        settle(pg)
        pg.locator("[data-testid='stSidebar']").get_by_text("Scenario:").wait_for(timeout=30_000)
        sidebar = pg.locator("[data-testid='stSidebar']").inner_text().replace("\u2060", "")  # the word joiner
        assert IMG in sidebar and HTML in sidebar, sidebar
        pg.goto(streamlit_server + "/allreduce?s=" + sc.to_url_param())
        settle(pg)
        main = pg.locator("[data-testid='stMain']").inner_text().replace("\u2060", "")
        assert IMG in main
    finally:
        pg.context.close()
