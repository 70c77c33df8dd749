"""Browser journeys on the Topology page: an edit made in the tables stays made on every page and
after visiting others; a refused edit stays as typed with its message beside its table; a device
added from the catalogue gets a free name and leaves no broken or ghost row."""

import re

import pytest

from tests.conftest import WAIT_MS, settle
from tests.journey import choose, nav, new_page, no_error_boxes

pytestmark = pytest.mark.timeout(300)

DEVICES, SWITCHES, LINKS = 0, 1, 2  # the three data editors, in page order
BANDWIDTH = 4  # the links table's columns: a, b, kind, bandwidth, latency (1-based, as the grid counts)


def open_topology(pg, base: str) -> None:
    pg.goto(base + "/topology")
    settle(pg)
    wait_for_tables(pg)


def wait_for_tables(pg) -> None:
    pg.locator("[data-testid='stDataFrameResizable']").nth(LINKS).wait_for(timeout=WAIT_MS)
    settle(pg)


def grid(pg, which: int):
    return pg.locator("[data-testid='stDataFrameResizable']").nth(which)


def cell(pg, which: int, row: int, col: int) -> str:
    """A cell's shown text, read from the grid's accessible table (row 0-based, col 1-based)."""
    return grid(pg, which).locator(f"td[id='glide-cell-{col}-{row}']").text_content().strip()


def column(pg, which: int, col: int) -> list[str]:
    """A column's shown texts, once the grid has drawn its cells (the table comes before its cells on a busy
    machine)."""
    cells = grid(pg, which).locator(f"td[id^='glide-cell-{col}-']")
    cells.first.wait_for(state="attached", timeout=WAIT_MS)
    return [t.strip() for t in cells.all_text_contents()]


SELECTED_COL = """([i, row]) => {
  const g = document.querySelectorAll("[data-testid='stDataFrameResizable']")[i];
  if (!g) return null;
  for (const td of g.querySelectorAll("td[aria-selected='true'][id^='glide-cell-']")) {
    const [c, r] = td.id.slice('glide-cell-'.length).split('-').map(Number);
    if (r === row) return c;
  }
  return null;
}"""


def selected_col(pg, which: int, row: int) -> int | None:
    """The column of ``row``'s selected cell in the grid, as its accessible table says (1-based), or None."""
    return pg.evaluate(SELECTED_COL, [which, row])


def select_cell(pg, which: int, row: int, col: int) -> bool:
    """Select a cell as a person does: click its row's first cell, then arrow keys to the column, looking at
    which cell is selected after each key (a busy grid may take a key before the click, or drop one, and a key
    counted blind can open the editor of another column)."""
    g = grid(pg, which)
    g.scroll_into_view_if_needed()
    g.locator(f"td[id='glide-cell-{col}-{row}']").wait_for(state="attached", timeout=WAIT_MS)
    pg.wait_for_timeout(500)
    g.click(position={"x": 60, "y": 35 * (row + 1) + 17})  # header row 35 px, rows 35 px; past the row marker
    for _ in range(4 * col):
        for _ in range(20):  # the selection shows within a few seconds, or the click was not taken
            now = selected_col(pg, which, row)
            if now is not None:
                break
            pg.wait_for_timeout(200)
        else:
            return False
        if now == col:
            return True
        pg.keyboard.press("ArrowRight" if now < col else "ArrowLeft")
        try:
            pg.wait_for_function(f"([i, row]) => ({SELECTED_COL})([i, row]) !== {now}", arg=[which, row],
                                 timeout=10_000)
        except Exception:
            pass  # the key was dropped: the selection is read again and the key pressed again
    return False


def type_into_cell(pg, which: int, row: int, col: int, text: str) -> None:
    """Select a cell as a person does (:func:`select_cell`), open its editor with Enter, replace the value and
    commit with Tab. On a busy machine the grid may not take the first click yet (its canvas still drawing):
    then the person tries again."""
    for _ in range(3):
        if not select_cell(pg, which, row, col):
            pg.keyboard.press("Escape")
            continue
        pg.keyboard.press("Enter")
        try:  # the cell's editor opens with its value in a focused field; keys typed before it opens are lost
            pg.wait_for_function("() => document.activeElement?.matches('#portal .gdg-input, #portal textarea')",
                                 timeout=10_000)
            pg.keyboard.press("ControlOrMeta+a")
            pg.keyboard.type(text)
            pg.wait_for_function("want => document.activeElement?.value === want", arg=text, timeout=10_000)
            # the field shows the text before the editor has taken it: a Tab at once closed the editor with the
            # old value (one commit in three, quiet), so the person pauses as they would
            pg.wait_for_timeout(500)
        except Exception:
            pg.keyboard.press("Escape")
            continue
        pg.keyboard.press("Tab")
        try:
            pg.wait_for_function(
                "([i, id, want]) => { const g = document.querySelectorAll(\"[data-testid='stDataFrameResizable']\")[i];"
                " const td = g && g.querySelector('td#' + id); return td && td.textContent.trim() === want; }",
                arg=[which, f"glide-cell-{col}-{row}", text], timeout=10_000)
            break
        except Exception:
            # A busy server may take longer than the wait to answer the edit and draw the new grid: when the cell
            # holds the text once the page settles, the edit landed, and typing it again would be a second edit
            # that changes nothing and wipes the first one's answer.
            settle(pg)
            wait_for_tables(pg)
            if cell(pg, which, row, col) == text:
                break
            pg.keyboard.press("Escape")
    else:
        raise AssertionError(f"the grid did not take {text!r} in row {row}, column {col} in three tries")
    settle(pg)
    wait_for_tables(pg)


def edit_until(pg, which: int, row: int, col: int, text: str, answer: str) -> None:
    """Type into a cell until the page answers with ``answer``. A busy grid may drop the keys, or the
    answer may come after the first wait: then the person types it again, as they would."""
    for attempt in range(3):
        type_into_cell(pg, which, row, col, text)
        try:
            pg.get_by_text(answer).first.wait_for(timeout=WAIT_MS)
            break
        except Exception:
            # The cell holds the text without the answer: the edit landed unannounced, which typing again
            # (an edit that changes nothing) cannot repair or hide.
            if attempt == 2 or cell(pg, which, row, col) == text:
                raise
    settle(pg)


def route_line(pg) -> str:
    return pg.locator("[data-testid='stMarkdown']").filter(has_text=re.compile(r"^Route ")).first.inner_text()


def slowest_link(pg) -> str:
    return pg.locator("[data-testid='stMarkdown']").filter(has_text="Slowest link").first.inner_text()


def alerts(pg) -> list[str]:
    return pg.locator("[data-testid='stAlert']").all_inner_texts()


def sidebar(pg) -> str:
    return pg.locator("[data-testid='stSidebarUserContent']").inner_text()


def test_a_link_edit_stays_on_every_page_after_visiting_others(streamlit_server, browser):
    pg = new_page(browser)
    try:
        open_topology(pg, streamlit_server)
        assert cell(pg, LINKS, 1, 1) == "gpu" and cell(pg, LINKS, 1, 2) == "cxl-switch"
        before = cell(pg, LINKS, 1, BANDWIDTH)
        edit_until(pg, LINKS, 1, BANDWIDTH, "8", "Edit applied")
        assert before != "8"
        assert cell(pg, LINKS, 1, BANDWIDTH) == "8"
        assert any("Edit applied" in a for a in alerts(pg))
        # the default route runs host -> cxl-switch -> gpu, so the edited link is its bottleneck
        assert "bottleneck 8 GB/s on link gpu–cxl-switch" in route_line(pg)

        nav(pg, "All-reduce")
        assert "8 GB/s" in slowest_link(pg), slowest_link(pg)
        nav(pg, "Placement")
        nav(pg, "Topology")
        wait_for_tables(pg)
        assert cell(pg, LINKS, 1, BANDWIDTH) == "8"
        assert "bottleneck 8 GB/s on link gpu–cxl-switch" in route_line(pg)
        assert not any("Edit applied" in a for a in alerts(pg)), alerts(pg)  # nothing was edited on arrival
        nav(pg, "All-reduce")
        assert "8 GB/s" in slowest_link(pg), slowest_link(pg)
        no_error_boxes(pg)
    finally:
        pg.context.close()


def test_a_refused_edit_stays_as_typed_with_its_message_beside_its_table(streamlit_server, browser):
    pg = new_page(browser)
    try:
        open_topology(pg, streamlit_server)
        route = route_line(pg)
        edit_until(pg, LINKS, 1, BANDWIDTH, "-5", "This edit is not applied")
        message = [a for a in alerts(pg) if "not applied" in a]
        assert message and "links row 2 (gpu–cxl-switch)" in message[0] and "got -5 GB/s" in message[0], alerts(pg)
        assert "bandwidth (GB/s each way)" in message[0]
        box = pg.locator("[data-testid='stAlert']").filter(has_text="not applied").first.bounding_box()
        table = grid(pg, LINKS).bounding_box()
        assert box["y"] + box["height"] <= table["y"] + 1 and table["y"] - (box["y"] + box["height"]) < 120
        assert cell(pg, LINKS, 1, BANDWIDTH) == "-5"
        assert route_line(pg) == route  # every page keeps the last valid topology

        nav(pg, "Placement")
        nav(pg, "Topology")
        wait_for_tables(pg)
        assert cell(pg, LINKS, 1, BANDWIDTH) == "-5"
        assert any("got -5 GB/s" in a for a in alerts(pg)), alerts(pg)

        pg.get_by_role("button", name="Discard this edit").click()
        settle(pg)
        wait_for_tables(pg)
        assert cell(pg, LINKS, 1, BANDWIDTH) == "64"
        assert not any("not applied" in a for a in alerts(pg))
        no_error_boxes(pg)
    finally:
        pg.context.close()


def test_adding_a_device_with_a_taken_name_proposes_a_free_one_and_leaves_no_ghost_row(streamlit_server, browser):
    pg = new_page(browser)
    try:
        open_topology(pg, streamlit_server)
        names = column(pg, DEVICES, 1)
        assert "fpga" in names and "5 devices" in sidebar(pg)

        pg.get_by_text("Add a device from the catalogue").click()
        choose(pg, "type", "fpga")
        name_box = pg.get_by_role("textbox", name="name")
        # a loaded server may still be proposing the name for the type chosen before: what a person reads settles
        pg.wait_for_function("el => el.value.startsWith('fpga')", arg=name_box.element_handle(), timeout=WAIT_MS)
        proposed = name_box.input_value()
        assert proposed.startswith("fpga") and proposed not in names, proposed

        name_box.fill("fpga")  # a taken name, typed on purpose
        name_box.press("Enter")
        settle(pg)
        pg.get_by_role("button", name="Add", exact=True).click()
        pg.get_by_text("Nothing was added").wait_for(timeout=WAIT_MS)
        settle(pg)
        refusal = [a for a in alerts(pg) if "Nothing was added" in a]
        assert refusal and "already exists" in refusal[0] and proposed in refusal[0], alerts(pg)
        assert column(pg, DEVICES, 1) == names  # nothing added, no broken row

        name_box = pg.get_by_role("textbox", name="name")
        name_box.fill(proposed)
        name_box.press("Enter")
        settle(pg)
        pg.get_by_role("button", name="Add", exact=True).click()
        pg.get_by_text(f"Added “{proposed}”").wait_for(timeout=WAIT_MS)
        settle(pg)
        wait_for_tables(pg)
        assert column(pg, DEVICES, 1) == names + [proposed]
        assert not any("Nothing was added" in a or "not applied" in a for a in alerts(pg)), alerts(pg)
        assert "6 devices" in sidebar(pg)

        nav(pg, "Placement")
        nav(pg, "Topology")
        wait_for_tables(pg)
        assert column(pg, DEVICES, 1) == names + [proposed]  # no ghost row, no row brought back
        assert not any("not applied" in a or "Nothing was added" in a for a in alerts(pg)), alerts(pg)
        assert "6 devices" in sidebar(pg)
        no_error_boxes(pg)
    finally:
        pg.context.close()


def test_after_load_preset_the_catalogue_popover_offers_a_device_that_can_be_added(streamlit_server, browser):
    """Load preset, then Add a device from the catalogue: the popover shows the type its caption describes, a free
    name and the link kind's catalogue numbers, its Add button within the window, and Add adds the device (it once
    showed type cpu beside an A100's caption, an empty name and 0 GB/s, and Add failed)."""
    pg = new_page(browser, browser.new_context(viewport={"width": 1024, "height": 768}))
    try:
        open_topology(pg, streamlit_server)
        choose(pg, "Preset", "(2) the same devices on PCIe (through the host)")
        pg.get_by_role("button", name="Load preset").click()
        settle(pg)
        wait_for_tables(pg)
        names = column(pg, DEVICES, 1)
        pg.get_by_text("Add a device from the catalogue").click()
        settle(pg)
        kind = pg.get_by_role("combobox", name="type", exact=True).first.input_value()
        popover = pg.locator("[data-testid='stPopoverBody']").first
        text = popover.inner_text()
        assert kind == "gpu" and "A100" in text, (kind, text[:300])
        name = pg.get_by_role("textbox", name="name").input_value()
        assert name.startswith("gpu") and name not in names, name
        bw = float(pg.get_by_label("bandwidth (GB/s each way)").input_value())
        assert bw > 0, bw
        add = pg.get_by_role("button", name="Add", exact=True)
        add.scroll_into_view_if_needed()  # the popover scrolls within the window, as a person scrolls it
        box, body = add.bounding_box(), popover.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 768, (box, body)  # within reach
        assert body["y"] + body["height"] <= 768, body
        add.click()
        pg.get_by_text(f"Added “{name}”").wait_for(timeout=WAIT_MS)
        settle(pg)
        wait_for_tables(pg)
        assert column(pg, DEVICES, 1) == names + [name]
        no_error_boxes(pg)
    finally:
        pg.context.close()
