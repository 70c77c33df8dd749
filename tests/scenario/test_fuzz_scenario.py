"""Property-based fuzzing of everything a user can upload: every document either loads or raises
the lab's own LabError, never anything else (about a thousand generated documents)."""

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.errors import LabError
from lab.scenario.catalogue import PRESETS, preset
from lab.scenario.document import Scenario, default_scenario
from lab.scenario.topology import Topology

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


def load(text, must_load: bool = False) -> bool:
    """Load ``text``: True when it loaded (and passed the checks below), False when it was refused
    with a LabError (an allowed answer unless ``must_load``); anything else fails."""
    try:
        sc = Scenario.from_json(text)
    except LabError:
        if must_load:
            raise
        return False
    # Whatever loads must be fully valid: it round-trips and every route is computable.
    assert Scenario.from_json(sc.to_json()) == sc
    names = sc.topology.device_names
    assert all(math.isfinite(sc.topology.transfer_time(names[0], b, 1e6)) for b in names)
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(json_values)
def test_arbitrary_json_documents(doc):
    load(json.dumps(doc))


PATHS = st.sampled_from([
    ("topology", "devices", 0, "memory"), ("topology", "devices", 0, "throughput", "matmul"),
    ("topology", "devices", 1, "name"), ("topology", "devices", 0, "type"), ("topology", "links", 0, "a"),
    ("topology", "links", 0, "bandwidth"), ("topology", "links", 1, "latency"), ("topology", "links", 0, "kind"),
    ("topology", "switches", 0, "name"), ("topology", "name"), ("training", "workers"), ("training", "lr"),
    ("training", "optimizer"), ("training", "worker_devices"), ("training", "compression", "ratio"),
    ("training", "compression"), ("topology", "links"), ("topology", "devices"), ("name",), ("format",),
])


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(list(PRESETS)), st.lists(st.tuples(PATHS, json_values), min_size=1, max_size=3))
def test_mutated_valid_scenarios(name, edits):
    doc = Scenario(name, preset(name)).to_dict()
    for path, value in edits:
        node = doc
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    load(json.dumps(doc))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=300))
def test_arbitrary_bytes(raw):
    load(raw)
    try:
        Topology.from_json(raw)
    except LabError:
        pass


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=200))
def test_arbitrary_url_params(s):
    try:
        Scenario.from_url_param(s)
    except LabError:
        pass


def test_default_scenario_survives_the_loader():
    assert load(default_scenario().to_json(), must_load=True)


def test_a_mutation_that_keeps_the_document_valid_loads_and_one_that_breaks_it_is_refused():
    # The fuzz tests above accept a refusal as an answer; this one checks that both answers happen
    # and that a document that loads goes through the round-trip and route checks.
    for name in PRESETS:
        doc = Scenario(name, preset(name)).to_dict()
        doc["topology"]["links"][0]["bandwidth"] = 2.5
        assert load(json.dumps(doc)) is True, name
        doc["topology"]["links"][0]["bandwidth"] = -1
        assert load(json.dumps(doc)) is False, name


def test_deeply_nested_json_is_a_lab_error():
    import pytest

    for text in ["[" * 100_000, '{"a":' * 50_000]:
        with pytest.raises(LabError):
            Scenario.from_json(text)
