"""Student tokens are issued and signed by the server: a value it did not issue is a new visitor; its key lives in
the data folder, so a restart keeps every student, and another server's tokens are not its own."""
from __future__ import annotations

import os
import stat

from lab.jobs import access


def _restart() -> None:
    access._keys.clear()  # a new server process reads the key again


def test_a_restarted_server_knows_its_students_and_another_server_does_not(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_DATA", str(tmp_path / "one"))
    t = access.new_token()
    key = tmp_path / "one" / access.KEY_FILE
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and len(key.read_bytes()) == 32
    _restart()
    assert access.valid_token(t)
    monkeypatch.setenv("LAB_DATA", str(tmp_path / "two"))
    assert not access.valid_token(t)  # another server's key
    assert access.valid_token(access.new_token())


def test_a_damaged_key_is_a_clear_message(tmp_path, monkeypatch):
    import pytest

    from lab.errors import LabError

    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    (tmp_path / access.KEY_FILE).write_bytes(b"short")
    _restart()
    with pytest.raises(LabError, match="damaged: delete it"):
        access.new_token()
    _restart()
