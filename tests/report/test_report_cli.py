"""``python -m lab.report``: a page link becomes the same report the page's button makes, without a browser; a link
that names no page, or is not a link, gets one line and exit code 2, and no file."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlencode

import pytest

from lab.scenario.document import default_scenario
from lab.view import state as viewstate
from tests.conftest import ROOT
from tests.report.test_report_html import figures_of

pytestmark = pytest.mark.usefixtures("spawns")  # a process that runs the page headless


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.report", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)


def test_a_placement_link_becomes_its_report(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    sc = default_scenario()
    link = "http://localhost:8501/placement?" + urlencode(
        {"s": sc.to_url_param(), "v": viewstate.encode({"pl_model": "vit_small", "pl_strategy": "heft"}, sc)})
    out = tmp_path / "r.html"
    proc = cli("--link", link, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = out.read_text()
    assert "<dt>Model (pl_model)</dt><dd>vit_small</dd>" in page
    assert 'id="pl_gantt"' in page and "net_encoder_layers_encoder_layer_0_self_attention" in page
    figs = figures_of(page)
    assert figs and all(f["data"] for f in figs)
    assert "HEFT" in page


@pytest.mark.parametrize("link,says", [("http://localhost:8501/no-such-page?s=1", "names no page"),
                                       ("http://[::1", "not a link")])
def test_a_link_of_no_page_is_one_line_and_exit_2(tmp_path, link, says):
    out = tmp_path / "r.html"
    proc = cli("--link", link, "--out", str(out))
    assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("link", ["javascript:alert(1)", "JaVaScRiPt:alert(1)", "\x01javascript:alert(1)",
                                  " http://localhost:8501/placement", "data:text/html,x", "file:///etc/passwd",
                                  "http:///placement", "http://localhost:8501@evil.example/placement"], ids=ascii)
def test_a_link_that_is_not_an_http_page_address_is_one_line_exit_2_and_no_file(tmp_path, link):
    out = tmp_path / "r.html"
    proc = cli("--link", link, "--out", str(out))
    assert proc.returncode == 2, proc.stderr[-500:]
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("no report: ") and "Traceback" not in proc.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_out_file_that_cannot_be_written_is_one_line_and_exit_2(tmp_path):
    link = "http://localhost:8501/placement?s=1"
    (tmp_path / "a-file").write_text("x")
    for out, says in ((tmp_path / "missing" / "r.html", "does not exist"),
                      (tmp_path / "a-file" / "r.html", "does not exist"), (tmp_path, "is a folder")):
        proc = cli("--link", link, "--out", str(out))
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr[-500:]
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
