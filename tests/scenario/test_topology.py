import copy
import itertools
import json
import math

import networkx as nx
import pytest

from lab.errors import LabError
from lab.scenario.catalogue import PRESETS, preset
from lab.scenario.topology import Device, Link, Switch, Topology

FLOPS = {"matmul": 1e12}


def tiny() -> Topology:
    """a --10 GB/s, 1us-- s --2 GB/s, 5us-- b ; a --1 GB/s, 1us-- b (direct but slower)."""
    devs = (Device("a", "gpu", throughput=FLOPS), Device("b", "cpu", throughput=FLOPS))
    links = (Link("a", "s", "pcie", 10e9, 1e-6), Link("s", "b", "pcie", 2e9, 5e-6), Link("a", "b", "ethernet", 1e9, 1e-6))
    return Topology("tiny", devs, links, (Switch("s"),)).validate()


def brute_force_route(topo: Topology, a: str, b: str):
    """Widest simple path, then lowest latency, then fewest hops, by enumeration."""
    g = topo.graph
    best = None
    for nodes in nx.all_simple_paths(g, a, b):
        links = [g[u][v]["link"] for u, v in zip(nodes, nodes[1:])]
        key = (-min(l.bandwidth for l in links), sum(l.latency for l in links), len(links))
        if best is None or key < best[0]:
            best = (key, tuple(nodes))
    return best


def test_route_takes_widest_path_and_times_it():
    t = tiny()
    p = t.path("a", "b")
    assert p.nodes == ("a", "s", "b")
    assert p.bottleneck == 2e9
    assert p.latency == pytest.approx(6e-6)
    assert p.hops == 2
    assert p.slowest_link.b == "b"
    assert t.transfer_time("a", "b", 4e9) == pytest.approx(6e-6 + 2.0)
    assert t.transfer_time("a", "a", 1e9) == 0.0


@pytest.mark.parametrize("name", list(PRESETS))
def test_routes_match_brute_force_on_every_preset(name):
    t = preset(name)
    nodes = list(t.graph.nodes)
    for a, b in itertools.permutations(nodes[:7], 2):
        key, _ = brute_force_route(t, a, b)
        p = t.path(a, b)
        assert (-p.bottleneck, p.latency, p.hops) == pytest.approx(key)


def test_path_matrix_is_symmetric_and_consistent():
    t = preset("two-pools")
    m = t.path_matrix(1e6)
    n = len(m["names"])
    for i in range(n):
        assert m["time"][i][i] == 0
        for j in range(n):
            assert m["time"][i][j] == pytest.approx(m["time"][j][i])
            if i != j:
                assert m["time"][i][j] == pytest.approx(m["latency"][i][j] + 1e6 / m["bottleneck"][i][j])


def test_pcie_goes_through_the_host_and_cxl_does_not():
    pcie, cxl = preset("pcie"), preset("cxl")
    assert "host" in pcie.path("gpu", "fpga").nodes
    assert "host" not in cxl.path("gpu", "fpga").nodes
    assert cxl.transfer_time("gpu", "fpga", 1e8) < pcie.transfer_time("gpu", "fpga", 1e8)


def test_two_pools_cross_pool_uses_switch_not_upi():
    t = preset("two-pools")
    p = t.path("p0-gpu", "p1-gpu")
    assert "fabric" in p.nodes
    assert t.path("p0-host", "p1-host").links[0].kind in ("upi", "cxl", "switch")


def test_edge_preset_is_100_mbit():
    t = preset("edge")
    assert t.path("edge0", "edge1").bottleneck == pytest.approx(100e6 / 8)
    assert len(t.devices) == 8


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_valid_and_round_trip(name):
    t = preset(name)
    assert t.validate() is t
    back = Topology.from_json(t.to_json())
    assert back == t
    assert back.to_dict() == t.to_dict()
    assert all(d.kernels for d in t.devices)


# ---- validation: every rule with a bad file ------------------------------------------------------

def good_dict() -> dict:
    return copy.deepcopy(tiny().to_dict())


def mutate(fn):
    d = good_dict()
    fn(d)
    return d


BAD = {
    "unknown top-level field": (lambda d: d.update(colour="red"), "unknown field"),
    "unknown device field": (lambda d: d["devices"][0].update(speed=1), "unknown field"),
    "unknown link field": (lambda d: d["links"][0].update(weight=1), "unknown field"),
    "missing endpoint": (lambda d: d["links"][0].update(b="nowhere"), "'nowhere' is not a device"),
    "duplicate device name": (lambda d: d["devices"][1].update(name="a"), "duplicate name"),
    "switch named like a device": (lambda d: d["switches"][0].update(name="a"), "duplicate name"),
    "zero bandwidth": (lambda d: d["links"][0].update(bandwidth=0), "must be positive"),
    "negative bandwidth": (lambda d: d["links"][1].update(bandwidth=-5e9), "must be positive"),
    "negative latency": (lambda d: d["links"][0].update(latency=-1e-6), "must not be negative"),
    "zero memory": (lambda d: d["devices"][0].update(memory=0), "must be positive"),
    "infinite bandwidth": (lambda d: d["links"][0].update(bandwidth=float("inf")), "must be finite"),
    "nan memory": (lambda d: d["devices"][0].update(memory=float("nan")), "must be finite"),
    "nan throughput": (lambda d: d["devices"][0]["throughput"].update(conv=float("nan")), "must be finite"),
    "no kernels": (lambda d: d["devices"][0].update(throughput={}), "has no kernels"),
    "unknown op class": (lambda d: d["devices"][0]["throughput"].update(fft=1e9), "unknown operator class"),
    "unknown type": (lambda d: d["devices"][0].update(type="quantum"), "unknown type"),
    "unknown link kind": (lambda d: d["links"][0].update(kind="carrier-pigeon"), "unknown kind"),
    "self link": (lambda d: d["links"][0].update(b="a"), "two different nodes"),
    "duplicate link": (lambda d: d["links"].append(dict(d["links"][0])), "duplicate link"),
    "disconnected": (lambda d: d["devices"].append({"name": "c", "type": "gpu", "throughput": {"matmul": 1}}),
                     "disconnected"),
    "string bandwidth": (lambda d: d["links"][0].update(bandwidth="fast"), "must be a number"),
    "bool memory": (lambda d: d["devices"][0].update(memory=True), "must be a number"),
    "empty name": (lambda d: d["devices"][0].update(name=""), "non-empty"),
    "devices not a list": (lambda d: d.update(devices={"a": 1}), "must be a list"),
    "no devices": (lambda d: d.update(devices=[], links=[], switches=[]), "at least one device"),
    "missing links": (lambda d: d.pop("links"), "missing field"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_every_validation_rule_gives_a_clear_lab_error(case):
    fn, words = BAD[case]
    with pytest.raises(LabError) as info:
        Topology.from_json(json.dumps(mutate(fn), allow_nan=True))
    assert words in str(info.value)


def test_error_names_the_item():
    with pytest.raises(LabError) as info:
        Topology.from_dict(mutate(lambda d: d["links"][1].update(bandwidth=-1)))
    assert "links[1]" in str(info.value) or "'s'" in str(info.value)
    with pytest.raises(LabError) as info:
        Topology.from_dict(mutate(lambda d: d["devices"][1].update(memory=-3)))
    assert "'b'" in str(info.value)


def test_malformed_json_is_a_lab_error():
    for text in ["{", "[1, 2]", "null", '"x"', b"\xff\xfe"]:
        with pytest.raises(LabError):
            Topology.from_json(text)


def test_lab_error_is_a_value_error():
    assert issubclass(LabError, ValueError)


def test_single_device_topology_is_valid():
    t = Topology("one", (Device("solo", "cpu", throughput=FLOPS),), ()).validate()
    assert t.path("solo", "solo").hops == 0
    assert math.isinf(t.path_matrix(1)["bottleneck"][0][0])
