"""A link's view part is outside data: nesting, huge values and keys twice give a short notice, never an
exception; the pins the Placement page shows are names the scenario checked."""

import base64
import json
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.errors import MAX_MESSAGE, LabError
from lab.scenario.document import Training, default_scenario
from lab.view.placement import changed_pins, pins_line
from lab.view.state import VIEW, decode

KEYS = sorted(k for k, c in VIEW.items() if not c.prefix)


def link(raw: str) -> str:
    return base64.urlsafe_b64encode(zlib.compress(raw.encode(), 9)).decode().rstrip("=")


def nested(depth: int, kind: str) -> str:
    return ("[" * depth + "1" + "]" * depth) if kind == "list" else ('{"a":' * depth + "1" + "}" * depth)


def test_a_value_nested_almost_a_thousand_deep_is_a_notice():
    values, notices = decode(link('{"pg_opts": ' + nested(985, "list") + "}"))
    assert values == {} and len(notices) == 1
    assert "nested more than 32 levels" in notices[0] and len(notices[0]) <= MAX_MESSAGE + 100


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KEYS), st.integers(1, 1200), st.sampled_from(["list", "object"]))
def test_any_nesting_in_any_control_gives_short_notices(key, depth, kind):
    values, notices = decode(link(json.dumps({key: "__V__"}).replace('"__V__"', nested(depth, kind))))
    assert all(len(n) <= MAX_MESSAGE + 100 for n in notices), [n[:100] for n in notices]


@pytest.mark.parametrize("key", ["ar_devices", "cmp_runs", "pg_opts", "topo_from", "ar_n"])
def test_a_huge_value_is_quoted_briefly_in_its_notice(key):
    values, notices = decode(link(json.dumps({key: ["x" * 50] * 20_000})))
    assert key not in values and len(notices) == 1 and len(notices[0]) <= MAX_MESSAGE + 100, notices[0][:200]


def test_a_key_twice_in_the_view_is_a_notice():
    values, notices = decode(link('{"ar_n": 3, "ar_n": 5}'))
    assert values == {} and len(notices) == 1 and "appears twice" in notices[0]


def test_pins_from_the_placement_buttons_go_through_the_name_check():
    pins = changed_pins({}, "pin", "fc1", "gpu")
    assert Training().replace(pins=pins).pins == (("fc1", "gpu"),)
    for bad in ("\ud800", "fc\u202e1", "\u3164"):
        with pytest.raises(LabError):
            Training().replace(pins=changed_pins(pins, "pin", bad, "gpu"))
    with pytest.raises(LabError, match="looks like 'fc1'"):
        Training().replace(pins=changed_pins(pins, "pin", "FC1", "host"))
    sc = default_scenario()
    line = pins_line(dict(sc.training.replace(pins=pins).pins))
    assert "fc1 → gpu" in line and line.encode("utf-8")


def test_a_number_too_large_for_a_float_is_a_notice():
    values, notices = decode(link('{"ar_bw": 1' + "0" * 400 + "}"))
    assert values == {} and len(notices) == 1 and "too large" in notices[0]


@pytest.mark.parametrize("name", ["x" * 1000, "\u202egpu", "g\x00", "\u3164"])
def test_the_name_in_a_per_device_key_is_checked_as_a_name(name):
    values, notices = decode(link(json.dumps({"pl_slow_" + name: 2.0, "pl_slow_gpu": 3.0})))
    assert values == {"pl_slow_gpu": 3.0} and len(notices) == 1 and len(notices[0]) <= MAX_MESSAGE + 100


def test_a_view_with_more_entries_than_the_lab_has_controls_is_refused_whole():
    values, notices = decode(link(json.dumps({f"pl_slow_d{i}": 2.0 for i in range(1000)})))
    assert values == {} and len(notices) == 1 and "1,000 entries" in notices[0]
