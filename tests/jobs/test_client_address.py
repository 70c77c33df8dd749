"""The address a browser's requests are counted by: the connection's own when a browser reaches the server, the
proxy's X-Forwarded-For entry only behind a declared proxy, one shared address for a proxy that gives none."""
from __future__ import annotations

import pytest

from lab.errors import LabError
from lab.jobs.access import NO_ADDRESS, UNDECLARED_PROXY, client_address
from lab.jobs.manager import JobManager

CASES = [
    # (peer, headers, behind a declared proxy) -> counted as
    (("10.0.0.5", {}, False), "10.0.0.5"),
    (("10.0.0.5", {"X-Forwarded-For": "1.2.3.4"}, False), "10.0.0.5"),  # a browser's own header changes nothing
    (("10.0.0.5", {"X-Forwarded-For": "1.2.3.4"}, True), "10.0.0.5"),  # nor behind a proxy, when it came direct
    ((None, {}, False), None),  # this machine
    ((None, {"X-Forwarded-For": "1.2.3.4"}, False), UNDECLARED_PROXY),  # nginx passing the browser's text on
    ((None, {"Via": "1.1 caddy"}, False), UNDECLARED_PROXY),
    ((None, {"x-real-ip": "1.2.3.4"}, False), UNDECLARED_PROXY),
    ((None, {"X-Forwarded-For": "9.9.9.9, 10.0.0.7"}, True), "10.0.0.7"),  # the proxy's entry is the last
    ((None, {"x-forwarded-for": " 10.0.0.8 "}, True), "10.0.0.8"),
    ((None, {}, True), NO_ADDRESS),  # a declared proxy that sends no address
    ((None, {"X-Forwarded-For": " , "}, True), NO_ADDRESS),
]


@pytest.mark.parametrize("args,expected", CASES)
def test_the_address_a_browser_is_counted_by(args, expected):
    assert client_address(*args) == expected


def test_nine_browsers_through_an_undeclared_proxy_count_as_one_address(lab_db, monkeypatch):
    """The probe: a proxy that passes the browser's X-Forwarded-For on let 8 of 9 browsers from one machine join
    where 6 may. Each browser writes its own header; the server counts them as one address."""
    monkeypatch.setenv("LAB_NEW_PER_CLIENT", "6")
    monkeypatch.setenv("LAB_NEW_EVERY_S", "600")
    monkeypatch.setenv("LAB_TEACHER_TOKEN", "Zq3-uV8_kP1wYt6Rb0sLm4")
    m = JobManager(lab_db, warm=False)
    m._start = lambda spec: None
    assert m.access.sign_in_teacher("teacher", "Zq3-uV8_kP1wYt6Rb0sLm4")
    code = m.classroom.open_class("teacher").code
    joined = 0
    for k in range(9):
        client = client_address(None, {"X-Forwarded-For": f"10.1.{k}.{k}"}, False)
        m.classroom.new_identity(f"b{k}", client)
        try:
            m.classroom.join_class(f"b{k}", code, f"Browser {k}", client)
            joined += 1
        except LabError as exc:
            assert "several" in str(exc)
    assert joined == 6
    with pytest.raises(LabError, match="sends no client address"):
        m.classroom.join_class("x", code, "Xavier", client_address(None, {}, True))
    m._closed = True
