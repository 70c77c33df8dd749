"""Hostile input: the scenario loader, the link decoder and the command line's --set accept or raise
LabError, nothing else, for numbers that overflow, text that is not text, and sizes beyond the caps."""

import argparse
import base64
import json
import subprocess
import sys
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.catalogue import preset
from lab.errors import LabError
from lab.scenario import TRAINING_FIELDS, Scenario, default_scenario
from lab.topology import MAX_DEVICES, check_text
from lab.train.__main__ import apply_overrides

BASE = default_scenario().to_dict()
FIELDS = sorted(TRAINING_FIELDS)
NUMBERS = st.one_of(
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e308", "1" + "0" * 400, "9" * 5000,
                     "-0", "0.0", "1e-400", "2.5", "3"]),
    st.integers(-10**30, 10**30).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr))
TEXT = st.one_of(st.text(max_size=30), st.sampled_from(["\ud800", "\udfff", "\u200b", "\u202eabc", "\u2066x", "\x00",
                                                          "a\nb", " ", "![i](http://127.0.0.2/x)", "x" * 300]))
SETTINGS = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def accepts_or_lab_error(fn, *args) -> None:
    try:
        fn(*args)
    except LabError:
        pass


def with_number(raw: str, where: str) -> str:
    """The default scenario's JSON with ``raw`` (JSON source text) put at ``where``."""
    doc = json.loads(json.dumps(BASE))
    marker = "__N__"
    if where.startswith("training."):
        doc["training"][where.split(".", 1)[1]] = marker
    elif where == "memory":
        doc["topology"]["devices"][0]["memory"] = marker
    elif where == "bandwidth":
        doc["topology"]["links"][0]["bandwidth"] = marker
    else:
        doc["topology"]["devices"][0]["throughput"]["matmul"] = marker
    return json.dumps(doc).replace(f'"{marker}"', raw)


@SETTINGS
@given(NUMBERS, st.sampled_from([f"training.{f}" for f in FIELDS] + ["memory", "bandwidth", "throughput"]))
def test_loader_numbers(raw, where):
    accepts_or_lab_error(Scenario.from_json, with_number(raw, where))


@SETTINGS
@given(TEXT, st.sampled_from(["device", "pool", "switch", "topology", "scenario", "description"]))
def test_loader_text(text, where):
    doc = json.loads(json.dumps({**BASE, "topology": preset("two-pools").to_dict()}))
    t = doc["topology"]
    if where == "device":
        old = t["devices"][0]["name"]
        t["devices"][0]["name"] = text
        for link in t["links"]:
            link["a"] = text if link["a"] == old else link["a"]
            link["b"] = text if link["b"] == old else link["b"]
    elif where == "pool":
        t["devices"][1]["pool"] = text
    elif where == "switch":
        old = t["switches"][0]["name"]
        t["switches"][0]["name"] = text
        for link in t["links"]:
            link["a"] = text if link["a"] == old else link["a"]
            link["b"] = text if link["b"] == old else link["b"]
    elif where == "topology":
        t["name"] = text
    elif where == "scenario":
        doc["name"] = text
    else:
        t["description"] = text
    try:
        raw = json.dumps(doc)
    except UnicodeEncodeError:
        return
    try:
        sc = Scenario.from_json(raw)
    except LabError:
        return
    # whatever loads can be encoded for the page and the store, and looks like a name
    sc.to_json().encode("utf-8")
    for d in sc.topology.devices:
        d.name.encode("utf-8")
        assert d.name.strip()


def _param(raw: bytes) -> str:
    return base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")


@SETTINGS
@given(st.one_of(st.text(max_size=200), st.binary(max_size=300).map(_param),
                 st.tuples(NUMBERS, st.sampled_from([f"training.{f}" for f in FIELDS] + ["memory"]))
                 .map(lambda t: _param(with_number(*t).encode()))))
def test_url_decoder(param):
    accepts_or_lab_error(Scenario.from_url_param, param)


def _args(items):
    return argparse.Namespace(set=items, workers=None, steps=None, optimizer=None, sync=None, model=None,
                              dataset=None, lr=None, allreduce_impl=None, batch_size=None, seed=None, emulate=None)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(FIELDS + ["nope", ""]), st.one_of(NUMBERS, TEXT)), min_size=1, max_size=3))
def test_command_line_set(items):
    from lab.train import __main__ as cli

    args = _args([f"{k}={v}" for k, v in items])
    for k in cli.SHORTCUTS:
        setattr(args, k, None)
    accepts_or_lab_error(apply_overrides, default_scenario(), args)


def test_command_line_bad_number_exits_2_with_one_line():
    for value in ("Infinity", "1e999", "9" * 300):
        p = subprocess.run([sys.executable, "-m", "lab.train", "--set", f"steps={value}"], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 2, (value, p.stderr)
        err = p.stderr.strip()
        assert err.count("\n") == 0 and "Traceback" not in err, err
        assert err.startswith("lab.train: training.steps:") and "lab.train: lab.train" not in err, err


def test_names_that_are_not_text_or_are_invisible_are_refused():
    for bad in ("\ud800", "\u200b\u200d", "\u202egpu", "a\x07", " \u2060 ", ""):
        with pytest.raises(LabError):
            check_text(bad, "device")
    assert check_text("![img](x) <b>", "device") == "![img](x) <b>"  # pages show it as text
    assert check_text("line one\nline two", "d", multiline=True)


def test_a_topology_beyond_the_caps_is_refused_before_any_route():
    devs = [{"name": f"d{i}", "type": "cpu", "memory": 1e9, "throughput": {"matmul": 1e9}}
            for i in range(MAX_DEVICES + 1)]
    links = [{"a": f"d{i}", "b": "s", "kind": "ethernet", "bandwidth": 1e9, "latency": 0}
             for i in range(MAX_DEVICES + 1)]
    with pytest.raises(LabError, match="at most 256"):
        Scenario.from_json(json.dumps({"name": "star", "devices": devs, "switches": [{"name": "s"}], "links": links}))
