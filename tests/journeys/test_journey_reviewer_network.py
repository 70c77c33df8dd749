"""Browser journey for a design reviewer's own network, made outside the lab: depthwise-separable convolutions with
batch norm (its statistics reached through the export's ONNX Identity nodes), a residual addition, layer norm and
GELU. Upload it on Placement, pin its middle batch norm to the ASIC (which runs no convolution, so the plan cuts the
network across two devices), run the plan for real, see the recorded step drawn and download the view as a
self-contained report that names the file."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import WAIT_MS, settle
from tests.journey import download, new_page, no_error_boxes
from tests.journeys.test_journey_onnx import upload
from tests.journeys.test_journey_plan_run import gantt_text, pin_and_set_steps, wait_until_done
from tests.scenario.reviewer_net import exported

pytestmark = pytest.mark.timeout(420)

OP = "net_dw_dw_1_batch_normalization"  # reads its running statistics through Identity nodes


def test_a_reviewers_network_with_batch_norm_runs_cut_across_two_devices(streamlit_server, browser, tmp_path):
    model = tmp_path / "reviewer-net.onnx"
    model.write_bytes(exported()[1])
    pg = new_page(browser)
    try:
        pg.goto(streamlit_server + "/placement")
        settle(pg)
        upload(pg, model)
        pg.get_by_text(re.compile(r"reviewer-net\.onnx: \d+ ONNX operators")).first.wait_for(timeout=WAIT_MS)
        expect(pg.get_by_role("combobox", name="Model", exact=True).first).to_have_value(
            re.compile(r"^reviewer-net\.onnx \(ONNX"), timeout=WAIT_MS)  # chosen: the box updates after the note
        pin_and_set_steps(pg, OP, "asic", 5)  # its convolutions cannot run there: a cut
        assert pg.get_by_text("The plan below leaves this pin out").count() == 0  # the pin holds

        pg.get_by_role("button", name="Run this plan").click()
        settle(pg)
        status = wait_until_done(pg, tmp_path / "reviewer-run.png")  # fails, with a screenshot, unless done
        drawn = set(gantt_text(pg).splitlines())  # the measured Gantt, drawn, with a row per device
        assert "asic" in drawn and drawn & {"host", "gpu", "fpga"}, drawn
        pg.get_by_text("Top: what the processes recorded").first.wait_for(timeout=WAIT_MS)
        assert "failed" not in pg.locator("[data-testid='stMain']").inner_text(), status

        report = tmp_path / "reviewer-report.html"
        download(pg, "Download this view as a report", report)
        no_error_boxes(pg)
    finally:
        pg.context.close()
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and "reviewer-net.onnx" in html and OP in html
    assert not re.search(r"<(script|link|img)\b[^>]*\b(src|href)=[\"']?(https?:)?//", html, re.I)  # nothing fetched
