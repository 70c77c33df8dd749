"""Browser journey: the README's class-server command with a teacher's token; a browser reaches the lab through
it, and the app started beyond this machine without a token shows the refusal and nothing of the lab."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from lab.settings import ROOT
from tests.conftest import WAIT_MS, free_port, settle
from tests.journey import heading, new_page, no_error_boxes

pytestmark = pytest.mark.timeout(300)
STRONG = "Zq3-uV8_kP1wYt6Rb0sLm4"


def _serve(args: list[str], env: dict, tmp_path):
    port = free_port()
    env = dict(env, LAB_DB=str(tmp_path / "runs.db"), LAB_DATA=str(tmp_path), LAB_WARM="0")
    proc = subprocess.Popen(args + ["--server.port" if args[1] == "-m" and args[2] == "streamlit" else "--port",
                                    str(port)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        try:
            with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return proc, base
        except OSError:
            time.sleep(0.3)
    raise AssertionError("the server did not become healthy")


def _stop(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except ProcessLookupError:
        pass


def test_the_class_command_with_a_token_serves_the_lab_to_a_browser(browser, tmp_path):
    proc, base = _serve([sys.executable, "-m", "lab.serve", "--class"], dict(os.environ, LAB_TEACHER_TOKEN=STRONG),
                        tmp_path)
    try:
        pg = new_page(browser)
        pg.goto(base)
        settle(pg)
        heading(pg, "Heterogeneous distributed training lab")
        no_error_boxes(pg)
    finally:
        _stop(proc)


def test_the_app_started_beyond_this_machine_without_a_token_shows_only_the_refusal(browser, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LAB_TEACHER_TOKEN"}
    proc, base = _serve([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
                         "--server.address", "0.0.0.0"], env, tmp_path)
    try:
        pg = new_page(browser)
        pg.goto(base)
        settle(pg)
        text = pg.locator("[data-testid='stAlert']").first.inner_text(timeout=WAIT_MS)
        assert "not open" in text and "LAB_TEACHER_TOKEN" in text
        assert pg.get_by_role("heading", name="Heterogeneous distributed training lab").count() == 0
    finally:
        _stop(proc)
