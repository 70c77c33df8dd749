"""The class server's one command (``python -m lab.serve``, as the README gives it): beyond this machine only with
a strong teacher's token; and the app makes the same check when started another way."""
from __future__ import annotations

import os
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


def test_the_class_command_without_a_token_makes_a_strong_one_and_prints_it(monkeypatch, capsys):
    from lab import serve
    from lab.jobs.access import teacher_token_problem

    # a copy of the environment for this test: the command writes the token it makes into it
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "LAB_TEACHER_TOKEN"})
    ran = []
    monkeypatch.setattr(serve.os, "execv", lambda path, cmd: ran.append((cmd, dict(serve.os.environ))))
    assert serve.main(["--class", "--port", "8600"]) == 0
    (cmd, env), = ran
    token = env["LAB_TEACHER_TOKEN"]
    assert len(token) >= 32 and teacher_token_problem(token) is None
    assert cmd[cmd.index("--server.address") + 1] == CLASS_ADDRESS
    assert token in capsys.readouterr().err  # printed once, for the teacher at the terminal


@pytest.mark.parametrize("token", ["Password12345678", "Summer2026Summer", "Qwerty123456789!", "teacher-teacher-1"])
def test_the_class_command_refuses_a_common_password_with_the_reason(token, spawns):
    env = dict(os.environ, LAB_TEACHER_TOKEN=token)
    out = subprocess.run([sys.executable, "-m", "lab.serve", "--class", "--port", str(free_port())], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "refused" in out.stderr and "guesses" in out.stderr
    assert "Traceback" not in out.stderr and token not in out.stderr


def test_behind_a_proxy_the_server_listens_here_with_a_token_and_reads_the_proxys_address(monkeypatch, capsys):
    from lab import serve

    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items()
                                        if k not in ("LAB_TEACHER_TOKEN", "LAB_PROXY")})
    ran = []
    monkeypatch.setattr(serve.os, "execv", lambda path, cmd: ran.append((cmd, dict(serve.os.environ))))
    assert serve.main(["--behind-proxy"]) == 0
    (cmd, env), = ran
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert env["LAB_PROXY"] == "1" and len(env["LAB_TEACHER_TOKEN"]) >= 32
