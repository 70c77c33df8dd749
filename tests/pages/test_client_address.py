"""ui.identity.client: the address a browser's new identities and seats are counted against (lab.jobs.classroom)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import streamlit as st

from lab.jobs.access import NO_ADDRESS, UNDECLARED_PROXY
from ui.identity import client


@pytest.mark.parametrize("ip,headers,proxy,want", [
    ("10.0.0.5", {"X-Forwarded-For": "1.2.3.4"}, "", "10.0.0.5"),  # a browser on the network: its own address
    (None, {}, "", None),  # a browser on this machine is not bounded
    (None, {"X-Forwarded-For": "6.6.6.6, 10.0.0.7"}, "1", "10.0.0.7"),  # behind a declared proxy: its last entry
    (None, {"X-Forwarded-For": "6.6.6.6, 10.0.0.7"}, "", UNDECLARED_PROXY),  # nobody declared it: one address
    (None, {"X-Forwarded-For": " "}, "1", NO_ADDRESS),
])
def test_the_client_is_the_connections_address_or_the_one_a_declared_proxy_added(monkeypatch, ip, headers, proxy,
                                                                                  want):
    monkeypatch.setenv("LAB_PROXY", proxy)
    monkeypatch.setattr(st, "context", SimpleNamespace(ip_address=ip, headers=headers))
    assert client() == want


def test_no_server_behind_the_run_is_no_client(monkeypatch):
    class NoRuntime:
        @property
        def ip_address(self):
            raise RuntimeError("no runtime")

    monkeypatch.setattr(st, "context", NoRuntime())
    assert client() is None
