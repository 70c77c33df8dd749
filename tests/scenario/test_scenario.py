import json

import pytest

from lab.errors import LabError
from lab.scenario.catalogue import PRESETS, preset
from lab.scenario.document import (
    COMPRESSION_FIELDS,
    TRAINING_FIELDS,
    Scenario,
    Training,
    default_scenario,
)
from lab.view.topology_tables import from_tables, to_tables, transfer_comparison
from tests.conftest import ROOT

ASSETS = ROOT / "assets"


def test_default_round_trips_json_and_url():
    sc = default_scenario()
    assert Scenario.from_json(sc.to_json()) == sc
    assert Scenario.from_url_param(sc.to_url_param()) == sc


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_round_trips_through_the_url(name):
    sc = Scenario(name=name, topology=preset(name),
                  training=Training(optimizer="maxadabelief", workers=4, lr=0.01, emulate=True,
                                    worker_devices=tuple(preset(name).device_names[:2])))
    param = sc.to_url_param()
    assert all(c.isalnum() or c in "-_" for c in param)
    assert Scenario.from_url_param(param) == sc


def test_training_defaults_come_from_the_table():
    t = Training()
    for k, setting in TRAINING_FIELDS.items():
        assert getattr(t, k) == setting.default
    for k, setting in COMPRESSION_FIELDS.items():
        assert getattr(t.compression, k) == setting.default


@pytest.mark.parametrize("field,value,words", [
    ("optimizer", "sgd", "not allowed"),
    ("workers", 9, "at most 4"),
    ("workers", 2.5, "whole number"),
    ("lr", -1.0, "at least 0"),
    ("lr", "fast", "must be a number"),
    ("emulate", "yes", "true or false"),
    ("colour", 1, "unknown field"),
])
def test_bad_training_fields(field, value, words):
    d = default_scenario().to_dict()
    d["training"][field] = value
    with pytest.raises(LabError) as info:
        Scenario.from_dict(d)
    assert words in str(info.value)
    assert "training" in str(info.value)


def test_bad_compression_field():
    d = default_scenario().to_dict()
    d["training"]["compression"]["kind"] = "zip"
    with pytest.raises(LabError, match="compression.kind"):
        Scenario.from_dict(d)


def test_worker_devices_must_exist():
    d = default_scenario().to_dict()
    d["training"]["worker_devices"] = ["gpu", "warp-drive"]
    with pytest.raises(LabError, match="warp-drive"):
        Scenario.from_dict(d)


def test_training_replace_checks_values():
    t = Training().replace(optimizer="adabelief", workers=3)
    assert (t.optimizer, t.workers) == ("adabelief", 3)
    with pytest.raises(LabError):
        Training().replace(workers=0)


def test_bare_topology_file_loads_as_scenario():
    topo = preset("edge")
    sc = Scenario.from_json(topo.to_json())
    assert sc.topology == topo and sc.training == Training()


def test_damaged_and_oversized_inputs():
    with pytest.raises(LabError):
        Scenario.from_url_param("not-a-scenario!!")
    with pytest.raises(LabError):
        Scenario.from_json("x" * 3_000_000)
    with pytest.raises(LabError, match="format"):
        Scenario.from_dict({"format": "other/2", "topology": preset("cxl").to_dict()})


@pytest.mark.parametrize("path", sorted(ASSETS.glob("*.json")), ids=lambda p: p.name)
def test_example_files_in_assets_load(path):
    sc = Scenario.from_json(path.read_text())
    assert sc.topology.devices


def test_assets_exist():
    assert len(list(ASSETS.glob("*.json"))) >= 3


# ---- tables -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(PRESETS))
def test_tables_round_trip(name):
    t = preset(name)
    d, l, s = to_tables(t)
    back = from_tables(t.name, d, l, s, t.description)
    assert [x.name for x in back.devices] == [x.name for x in t.devices]
    for x, y in zip(back.devices, t.devices):
        assert x.memory == pytest.approx(y.memory)
        assert x.throughput.keys() == y.throughput.keys()
        for k in x.throughput:
            assert x.throughput[k] == pytest.approx(y.throughput[k])
    for x, y in zip(back.links, t.links):
        assert (x.a, x.b, x.kind) == (y.a, y.b, y.kind)
        assert x.bandwidth == pytest.approx(y.bandwidth)
        assert x.latency == pytest.approx(y.latency)


def test_table_errors_name_the_row():
    d, l, s = to_tables(preset("cxl"))
    l.loc[2, "bandwidth_GBps"] = -4
    with pytest.raises(LabError, match="links\\[2\\]|must be positive"):
        from_tables("x", d, l, s)
    d, l, s = to_tables(preset("cxl"))
    d.loc[1, "memory_GB"] = None
    with pytest.raises(LabError, match="row 2"):
        from_tables("x", d, l, s)
    d, l, s = to_tables(preset("cxl"))
    l["bandwidth_GBps"] = l["bandwidth_GBps"].astype(object)
    l.loc[0, "bandwidth_GBps"] = "lots"
    with pytest.raises(LabError, match="must be a number"):
        from_tables("x", d, l, s)


def test_blank_editor_rows_are_ignored():
    d, l, s = to_tables(preset("pcie"))
    d.loc[len(d)] = [None] * len(d.columns)
    assert len(from_tables("x", d, l, s).devices) == 5


def test_empty_throughput_cell_removes_the_kernel():
    d, l, s = to_tables(preset("pcie"))
    d.loc[d.name == "gpu", "conv_TFLOPs"] = None
    t = from_tables("x", d, l, s)
    assert "conv" not in t.device("gpu").kernels


def test_cxl_vs_pcie_comparison_table():
    df = transfer_comparison({"cxl": preset("cxl"), "pcie": preset("pcie")}, 1e6)
    pairs = df.pair.unique()
    assert len(pairs) == 10  # 5 devices, unordered pairs
    g2f = df[df.pair == "gpu→fpga"].set_index("topology")
    assert g2f.loc["pcie", "hops"] == 2 and "host" in g2f.loc["pcie", "route"]
    assert g2f.loc["cxl", "time_s"] < g2f.loc["pcie", "time_s"]
    assert json.loads(preset("cxl").to_json())["name"] == "cxl"
