"""User text reaches every page as text (AppTest): names that hold Markdown images and links, HTML or a
bare address come out of every Markdown-rendering element escaped (ui.plain), whether a page shows
them itself, quotes them in a refusal (ui.guarded), or takes them from a link (?s=, ?v=, ?l=)."""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

import ui
from app import available_pages
from lab.view import state as viewstate
from tests.conftest import app_test, assert_no_exception
from tests.pages.hostile import (ANCHOR, BAD_PIN, GOOD_PIN, HTML, IMG, OP, OUTSIDE, REFUSED_RUN, hostile_dict,
                                 hostile_scenario, url_param)

PAGES = [f for f, _, _ in available_pages()]
# What Markdown would turn into a live link or image: an address, or a tag whose "<" is not escaped.
LIVE = re.compile(rf"http://{re.escape(OUTSIDE)}|(?<!\\)<\s*(a|img)\b", re.IGNORECASE)


def markdown_shown(at) -> list[str]:
    """Every text of the page that Streamlit renders as Markdown: prose, captions, headings, messages,
    and the labels, help and radio options of widgets, expanders, tabs and metrics. (Selectbox and
    multiselect options and table cells are drawn as text, so they are left out.)"""
    out = []
    for kind in ("markdown", "caption", "title", "header", "subheader", "info", "success", "warning", "error",
                 "toast"):
        out += [str(e.value) for e in getattr(at, kind)]
    for kind in ("expander", "tabs", "metric", "selectbox", "multiselect", "radio", "slider", "select_slider",
                 "number_input", "checkbox", "toggle", "button", "text_input"):
        for w in getattr(at, kind):
            out += [str(getattr(w, "label", "") or ""), str(getattr(w, "help", "") or "")]
            if kind == "radio":
                out += [str(o) for o in w.options]
    return out


def assert_as_text(texts: list[str], *expected: str) -> None:
    """No text holds a live address or tag, and each of ``expected`` is in one of them, escaped."""
    live = [t for t in texts if LIVE.search(t)]
    assert not live, live
    for name in expected:
        assert any(ui.plain(name) in t for t in texts), (name, texts)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_shows_hostile_names_as_text(page, lab_db, spawns):
    at = app_test(page, timeout=180, query={"s": hostile_scenario(pins=GOOD_PIN).to_url_param()})
    assert_no_exception(at)
    assert_as_text(markdown_shown(at), IMG, HTML)  # at least the sidebar's scenario name


def test_guarded_shows_a_refusal_and_an_unexpected_error_as_text(spawns):
    def script():
        import ui
        from lab.errors import LabError

        with ui.guarded("a step"):
            raise LabError("refused ![img](http://127.0.0.2:9/a.png)", where="pins")
        with ui.guarded("another step"):
            raise RuntimeError("<img src=http://127.0.0.2:9/c.png>")

    at = AppTest.from_function(script).run()
    assert not at.exception
    shown = [e.value for e in at.error]
    assert len(shown) == 2, shown
    assert_as_text(shown, IMG, HTML, "Something went wrong in another step: RuntimeError: ")


def test_a_refused_pin_quotes_its_names_as_text(lab_db, spawns):
    at = app_test("pages/placement.py", timeout=180, query={"s": hostile_scenario(pins=BAD_PIN).to_url_param()})
    assert_no_exception(at)  # the pin is left out of the plan, with a notice that quotes it
    refusal = [w.value for w in at.warning]
    assert refusal and "is pinned to" in refusal[0], refusal
    assert_as_text(markdown_shown(at), OP, ANCHOR)
    assert any(ui.plain(OP) in e for e in refusal)


def test_a_refused_run_quotes_its_devices_as_text(lab_db, spawns):
    at = app_test("pages/training.py", timeout=180, query={"s": hostile_scenario(**REFUSED_RUN).to_url_param()})
    assert_no_exception(at)
    at.button(key="train_run").click().run(timeout=180)
    assert not at.exception
    refusal = [e.value for e in at.error]
    assert refusal and "matmul" in refusal[0], refusal  # the ASIC has no matmul kernel
    assert ui.plain(ANCHOR) in refusal[0]
    assert_as_text(markdown_shown(at))


def test_a_view_value_from_a_link_is_quoted_as_text_in_its_notice(lab_db, spawns):
    at = app_test("pages/placement.py", timeout=180, query={
        "s": hostile_scenario().to_url_param(), "v": viewstate.encode({"pl_why": IMG})})
    assert_no_exception(at)
    notices = [i.value for i in at.info if "operator explained" in i.value]
    assert len(notices) == 1 and ui.plain(IMG) in notices[0], [i.value for i in at.info]
    assert_as_text(markdown_shown(at))


def test_an_unknown_lesson_in_a_link_gets_a_one_line_notice_as_text(spawns):
    at = app_test(timeout=180, query={"l": IMG})  # the link's first page: the notice is shown there, once
    assert_no_exception(at)
    notices = [i.value for i in at.info if "does not exist" in i.value]
    assert len(notices) == 1, [i.value for i in at.info]
    assert notices[0].startswith(ui.plain("The lesson in this link (" + IMG + ") does not exist;"))
    assert "\n" not in notices[0]
    assert_as_text(markdown_shown(at))
    assert "l" not in at.query_params  # nor is the lesson carried on in the page's link
    at.switch_page("pages/allreduce.py").run()  # the notice is for the link: it is not shown again
    assert not [i.value for i in at.info if "does not exist" in i.value]


def test_an_unreadable_scenario_link_quotes_the_names_it_refuses_as_text(spawns):
    broken = hostile_dict(worker_devices=[OP])  # a worker on a device the topology does not have
    at = app_test(timeout=180, query={"s": url_param(broken)})  # the link's first page
    assert not at.exception
    warnings = [w.value for w in at.warning if "could not be read" in w.value]
    assert len(warnings) == 1 and ui.plain(OP) in warnings[0], [w.value for w in at.warning]
    assert_as_text(markdown_shown(at))


def test_a_link_naming_an_unknown_control_quotes_it_as_text(spawns):
    at = app_test(timeout=180, query={"v": url_param({IMG: 1, "pl_model": HTML})})  # the link's form of a view
    assert_no_exception(at)
    notices = [i.value for i in at.info if i.value.startswith("From the link:")]
    assert len(notices) == 2, [i.value for i in at.info]
    assert ui.plain(IMG) in notices[0] and ui.plain(HTML) in notices[1], notices
    assert_as_text(markdown_shown(at))
