"""Shared test helpers."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab_db(tmp_path, monkeypatch):
    """A fresh run store for the test, passed to child processes through LAB_DB."""
    path = tmp_path / "runs.db"
    monkeypatch.setenv("LAB_DB", str(path))
    return path


def app_test(page: str | None = None, timeout: float = 60):
    """An AppTest of app.py, switched to ``page`` (e.g. "pages/topology.py") and run once."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=timeout)
    at.run()
    if page:
        at.switch_page(page)
        at.run()
    return at


def assert_no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert not errors, errors
