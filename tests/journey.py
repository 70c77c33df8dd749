"""Helpers for the browser journeys: drive Streamlit's widgets in headless Chromium as a person does."""

from __future__ import annotations

import re

from tests.conftest import WAIT_MS, settle


def new_page(browser, context=None):
    """A page at 1400x900 that records page errors in ``page.errors``."""
    ctx = context or browser.new_context(viewport={"width": 1400, "height": 900})
    ctx.set_default_timeout(WAIT_MS)
    ctx.set_default_navigation_timeout(WAIT_MS)
    pg = ctx.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    return pg


def heading(pg, name: str, timeout_ms: int = WAIT_MS) -> None:
    """Wait for a heading the page's script writes, then for that run of the script to end, so that what the page
    draws after the heading is there to read (a busy server can show the heading seconds before the buttons below
    it, and can say it is not running before the run that writes the heading has begun)."""
    pg.get_by_role("heading", name=name).first.wait_for(timeout=timeout_ms)
    settle(pg)


def open_link(browser, url: str, title: str):
    """``url`` opened in a fresh browser, as the person it was sent to would, once its page's heading ``title``
    shows and the page is drawn."""
    fresh = new_page(browser)
    fresh.goto(url)
    settle(fresh)
    heading(fresh, title)
    return fresh


def no_error_boxes(pg) -> None:
    boxes = pg.locator("[data-testid='stException']").all_inner_texts()
    assert not boxes, boxes
    assert not pg.errors, pg.errors


def choose(pg, label: str, option: str) -> None:
    """Pick ``option`` in the selectbox labelled ``label``, clicking the box again when the first click only
    took the focus (from a widget used just before), as a person clicks again."""
    box = pg.get_by_role("combobox", name=label, exact=True).first
    item = pg.get_by_role("option", name=option, exact=True)
    for _ in range(3):
        box.click()
        try:
            item.wait_for(timeout=5_000)
            break
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: the list did not open
            settle(pg)
    item.click()
    settle(pg)


def selected(pg, label: str) -> str:
    return pg.get_by_role("combobox", name=label, exact=True).first.input_value()


def _range(pg, label: str):
    """The range input of a slider (its accessible name repeats the label, so match the attribute)."""
    return pg.locator(f"input[type='range'][aria-label={label!r}]").first


def slider_value(pg, label: str) -> str:
    """The shown value of the slider (or select slider) labelled ``label``."""
    thumb = _range(pg, label)
    return thumb.get_attribute("aria-valuetext") or thumb.input_value()


def slide(pg, label: str, presses: int) -> None:
    """Move the slider labelled ``label`` by ``presses`` steps with the arrow keys (negative: left), as a
    person would: the first press shows how far one step goes; when the app's rerun swallowed a press (a
    busy machine), the ones missing are pressed again until the slider shows where it should be."""
    key = "ArrowRight" if presses > 0 else "ArrowLeft"

    def now() -> float:
        return float(_range(pg, label).input_value())

    def press(n: int) -> None:
        _range(pg, label).focus()
        for _ in range(n):
            pg.keyboard.press(key)
        pg.wait_for_timeout(400)  # the slider sends its value after the key presses settle
        settle(pg)

    if not presses:
        return
    start = now()
    press(1)
    step = abs(now() - start)
    if step == 0 or abs(presses) == 1:
        return  # at its end already, or done
    target = start + step * presses
    press(abs(presses) - 1)
    for _ in range(5):
        missing = round(abs(target - now()) / step)
        if missing == 0:
            return
        press(missing)


def radio(pg, label: str, option: str) -> None:
    group = pg.locator("[data-testid='stRadio']").filter(has_text=label).first
    group.get_by_text(option, exact=True).click()
    settle(pg)


def nav(pg, title: str) -> None:
    """Go to another page through the sidebar, as a person does (the session stays)."""
    pg.locator("[data-testid='stSidebarNav']").get_by_text(title, exact=True).click()
    settle(pg)


def metric(pg, label: str) -> str:
    m = pg.locator("[data-testid='stMetric']").filter(has_text=label).first
    return m.locator("[data-testid='stMetricValue']").inner_text().strip()


def take_link(pg) -> str:
    """Click the sidebar's link button and return the address it puts in the bar."""
    pg.get_by_role("button", name="Put this view in the page link").click()
    pg.wait_for_function("() => window.location.search.includes('v=')", timeout=WAIT_MS)
    settle(pg)
    return pg.url


def type_number(pg, label: str, value: int) -> None:
    box = pg.get_by_label(label, exact=True).first
    box.fill(str(value))
    box.press("Enter")
    settle(pg)


def wait_for_run(pg, timeout_ms: int = 120_000) -> None:
    """Wait until the page shows a "Run <id>" heading: the run a click started is in the store.

    A click reaches the server over the websocket; on a busy machine the page can still read as
    settled before the run it starts is written, so journeys wait for what the person sees.
    """
    try:
        pg.get_by_role("heading", name=re.compile(r"^Run \S+")).first.wait_for(timeout=timeout_ms)
    except Exception as e:  # noqa: BLE001 - playwright's TimeoutError: say what the page shows instead
        raise AssertionError(f"no run heading after {timeout_ms / 1000:.0f} s; the page shows:\n"
                             + pg.locator("[data-testid='stMain']").inner_text()) from e
    settle(pg)


def download(pg, button: str, path, timeout_ms: int = 60_000) -> None:
    """Click the download button named ``button`` and save what it sends at ``path``. A rerun of the page between
    the click and the fetch (a busy machine) can cancel the browser's download; a person clicks again, so this
    does too, at most three times."""
    for attempt in range(3):
        with pg.expect_download(timeout=timeout_ms) as got:
            pg.get_by_role("button", name=button).click()
        try:
            got.value.save_as(path)
            return
        except Exception:  # noqa: BLE001 - playwright's Error "canceled": click again
            if attempt == 2:
                raise
            settle(pg)
