"""Browser journey for a design review of one's own network: upload an ONNX file on Placement, find it in the model
box, pin one of its operators to the FPGA, run the plan for real, download the view as a report and read the report
in a fresh browser that may reach no address but the file. A second student uploads a broken file beside the first
and is told why, as text, while the first student's model stays."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import WAIT_MS, settle
from tests.journey import download, new_page, no_error_boxes
from tests.journeys.test_journey_plan_run import metric_exact, pin_and_set_steps, read_report_offline, wait_until_done
from tests.scenario.test_onnx_models import exported

pytestmark = pytest.mark.timeout(420)

STEPS = 4


def upload(pg, path) -> None:
    pg.get_by_text("Bring your own network (an ONNX file)").first.click()
    pg.locator("[data-testid='stFileUploaderDropzoneInput']").first.set_input_files(str(path))
    settle(pg)


def test_an_uploaded_network_is_pinned_run_and_reported(streamlit_server, browser, tmp_path):
    model = tmp_path / "review-net.onnx"
    model.write_bytes(exported("cnn")[1])
    broken = tmp_path / "**broken** <img src=x onerror=alert(1)>.onnx"
    broken.write_bytes(model.read_bytes()[:2000])
    pg = new_page(browser)
    other = new_page(browser, browser.new_context(viewport={"width": 1400, "height": 900}))
    try:
        pg.goto(streamlit_server + "/placement")
        settle(pg)
        upload(pg, model)
        pg.get_by_text(re.compile(r"review-net\.onnx: \d+ ONNX operators")).first.wait_for(timeout=WAIT_MS)
        # the note comes before the model box in the same run: wait for the box's own update
        expect(pg.get_by_role("combobox", name="Model", exact=True).first).to_have_value(
            re.compile(r"^review-net\.onnx \(ONNX"), timeout=WAIT_MS)
        pin_and_set_steps(pg, "net_conv1_conv", "fpga", STEPS)

        # a second student's broken file is refused with its name as text; the first student's view is unchanged
        other.goto(streamlit_server + "/placement")
        settle(other)
        upload(other, broken)
        refusal = other.get_by_text(re.compile(r"\*\*broken\*\* <img src=x onerror=alert\(1\)>\.onnx'?: is not "
                                               r"(an ONNX model|a valid)")).first
        refusal.wait_for(timeout=WAIT_MS)
        assert other.locator("[data-testid='stAlertContentError'] img, [data-testid='stAlertContentError'] strong"
                             ).count() == 0  # no markup from the name
        no_error_boxes(other)

        pg.get_by_role("button", name="Run this plan").click()
        settle(pg)
        status = wait_until_done(pg, tmp_path / "onnx-run.png")
        assert status.startswith("done"), status
        assert metric_exact(pg, "Step, measured (median)")
        report = tmp_path / "onnx-report.html"
        download(pg, "Download this view as a report", report)
        no_error_boxes(pg)
    finally:
        pg.context.close()
        other.context.close()
    text = report.read_text()
    assert "net_conv1_conv" in text and "review-net.onnx" in text
    read_report_offline(browser, report, None, {"Model (pl_model)": re.compile(r"onnx-[0-9a-f]{12}"),
                                                "training.pins": '{"net_conv1_conv": "fpga"}'})
