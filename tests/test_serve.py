"""The class server's one command (``python -m lab.serve``, as the README gives it): beyond this machine only with
a strong teacher's token; and the app makes the same check when started another way."""
from __future__ import annotations

import subprocess
import sys

import pytest

from lab.serve import CLASS_ADDRESS, LOCAL, command, refusal
from lab.settings import ROOT
from tests.conftest import free_port

STRONG = "Zq3-uV8_kP1wYt6Rb0sLm4"


@pytest.mark.parametrize("address", LOCAL)
def test_this_machine_alone_needs_no_teacher(address):
    assert refusal(address, "") is None and refusal(address, STRONG) is None


@pytest.mark.parametrize("address", [CLASS_ADDRESS, "192.168.1.20", "::"])
def test_beyond_this_machine_a_strong_token_is_required(address):
    assert "LAB_TEACHER_TOKEN" in refusal(address, "") and "secrets.token_urlsafe" in refusal(address, "")
    assert "characters" in refusal(address, "short-Tok3n")
    assert refusal(address, STRONG) is None


def test_a_weak_token_is_refused_even_on_this_machine():
    assert "at least 16" in refusal("localhost", "s3cret")


def test_the_command_runs_the_app_on_the_address_and_port():
    cmd = command("0.0.0.0", 8600)
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"] and cmd[4] == str(ROOT / "app.py")
    assert cmd[cmd.index("--server.address") + 1] == "0.0.0.0" and cmd[cmd.index("--server.port") + 1] == "8600"


def test_the_class_command_without_a_token_exits_with_the_reason(spawns):
    env = {k: v for k, v in __import__("os").environ.items() if k != "LAB_TEACHER_TOKEN"}
    out = subprocess.run([sys.executable, "-m", "lab.serve", "--class", "--port", str(free_port())], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "refused" in out.stderr and "LAB_TEACHER_TOKEN" in out.stderr
    assert "Traceback" not in out.stderr
