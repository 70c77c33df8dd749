"""Hostile input: the scenario loader, the link decoder and the command line's --set accept or raise
LabError, nothing else, for numbers that overflow, text that is not text, and sizes beyond the caps."""

import argparse
import base64
import json
import subprocess
import sys
import unicodedata
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.errors import LabError
from lab.scenario.catalogue import preset
from lab.scenario.document import TRAINING_FIELDS, Scenario, default_scenario
from lab.scenario.topology import MAX_DEVICES, check_text
from lab.train.cli import apply_overrides

BASE = default_scenario().to_dict()
FIELDS = sorted(TRAINING_FIELDS)
NUMBERS = st.one_of(
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e308", "1" + "0" * 400, "9" * 5000,
                     "-0", "0.0", "1e-400", "2.5", "3"]),
    st.integers(-10**30, 10**30).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr))
TEXT = st.one_of(st.text(max_size=30), st.sampled_from(["\ud800", "\udfff", "\u200b", "\u202eabc", "\u2066x", "\x00",
                                                          "a\nb", " ", "![i](http://127.0.0.2/x)", "x" * 300,
                                                          "e\u0301", "\ufeff\u2060", "a\u200db"]))
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


@pytest.mark.slow  # seconds of arithmetic, no process
@SETTINGS
@given(NUMBERS, st.sampled_from([f"training.{f}" for f in FIELDS] + ["memory", "bandwidth", "throughput"]))
def test_loader_numbers(raw, where):
    accepts_or_lab_error(Scenario.from_json, with_number(raw, where))


@pytest.mark.slow  # seconds of arithmetic, no process
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
    # whatever loads can be encoded for the page and the store, looks like a name, and is composed (NFC)
    sc.to_json().encode("utf-8")
    t = sc.topology
    for name in (sc.name, t.name, t.description, *(d.name for d in t.devices), *(d.pool for d in t.devices),
                 *(s.name for s in t.switches)):
        name.encode("utf-8")
        assert unicodedata.is_normalized("NFC", name)
        assert not any(0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069 for c in name)
    for d in t.devices:
        assert d.name.strip()


def _param(raw: bytes) -> str:
    return base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")


@pytest.mark.slow  # seconds of arithmetic, no process
@SETTINGS
@given(st.one_of(st.text(max_size=200), st.binary(max_size=300).map(_param),
                 st.tuples(NUMBERS, st.sampled_from([f"training.{f}" for f in FIELDS] + ["memory"]))
                 .map(lambda t: _param(with_number(*t).encode()))))
def test_url_decoder(param):
    accepts_or_lab_error(Scenario.from_url_param, param)


def _args(items):
    return argparse.Namespace(set=items, workers=None, steps=None, optimizer=None, sync=None, model=None,
                              dataset=None, lr=None, allreduce_impl=None, batch_size=None, seed=None, emulate=None)


@pytest.mark.slow  # seconds of arithmetic, no process
@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(FIELDS + ["nope", ""]), st.one_of(NUMBERS, TEXT)), min_size=1, max_size=3))
def test_command_line_set(items):
    from lab.train import cli

    args = _args([f"{k}={v}" for k, v in items])
    for k in cli.SHORTCUTS:
        setattr(args, k, None)
    accepts_or_lab_error(apply_overrides, default_scenario(), args)


def test_command_line_bad_number_exits_2_with_one_line(spawns):
    for value in ("Infinity", "NaN", "1e999", "9" * 300):
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


def test_names_are_kept_in_composed_form():
    doc = preset("two-pools").to_dict()
    old = doc["devices"][0]["name"]
    doc["devices"][0]["name"] = "gpu-e\u0301"  # a letter plus a combining accent
    for link in doc["links"]:
        for end in "ab":
            if link[end] == old:
                link[end] = "gpu-\u00e9"  # the same name typed as one character
    sc = Scenario.from_dict({"topology": doc, "training": {"worker_devices": ["gpu-e\u0301"]}})
    assert sc.topology.devices[0].name == "gpu-\u00e9" and sc.training.worker_devices == ("gpu-\u00e9",)
    # the two spellings are one name, so a second device spelled the other way is a duplicate
    doc["devices"][1]["name"] = "gpu-\u00e9"
    with pytest.raises(LabError, match="duplicate name"):
        Scenario.from_dict({"topology": doc})


def test_an_edited_topology_checks_its_own_name_and_description():
    topo = preset("cxl")
    for changes in ({"name": "\u202egpu"}, {"name": "\u200b"}, {"description": "a\x1bb"}, {"name": "x" * 65}):
        with pytest.raises(LabError):
            topo.replace(**changes).validate()
    assert topo.replace(description="two lines\nof text").validate()


def test_a_huge_value_is_quoted_briefly():
    for doc in ({"topology": preset("cxl").to_dict(), "training": {"model": "m" * 100_000}},
                {"topology": {**preset("cxl").to_dict(), "z" * 100_000: 1}},
                {"topology": preset("cxl").to_dict(), "training": {"steps": "9" * 100_000}}):
        with pytest.raises(LabError) as exc:
            Scenario.from_json(json.dumps(doc))
        assert len(str(exc.value)) < 600, str(exc.value)[:200]


def test_caps_are_checked_before_the_devices_are_read():
    devs = [{"name": "same"}] * (MAX_DEVICES + 1)  # invalid devices: the count is refused first
    with pytest.raises(LabError, match="at most 256"):
        Scenario.from_json(json.dumps({"devices": devs, "links": []}))
    with pytest.raises(LabError, match="at most 1,024"):
        Scenario.from_json(json.dumps({"devices": [], "links": [{}] * 1025}))


def test_a_huge_scenario_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from lab.scenario.document import MAX_SCENARIO_BYTES
    from lab.train import cli

    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_SCENARIO_BYTES + 1)  # sparse: the size is there, the bytes need not be

    def no_open(*a, **k):
        raise AssertionError("the file was opened")

    monkeypatch.setattr(cli, "open", no_open, raising=False)
    with pytest.raises(LabError, match="bytes; at most"):
        cli.load_scenario(str(big))
    with pytest.raises(LabError, match="cannot read"):
        cli.load_scenario(str(tmp_path / "missing.json"))
