"""lab.figures.style: the units and escaping every figure shares."""

import math

import pytest

from lab.figures import jobs, placement, topology
from lab.figures.style import bytes_unit, esc, fmt_bytes, fmt_rate, fmt_seconds, time_unit


@pytest.mark.parametrize("seconds, expected", [(2.5, "2.5 s"), (0.0123, "12.3 ms"), (4.56e-6, "4.56 µs"),
                                               (7e-9, "7 ns"), (0.0, "0 s"), (math.inf, "∞"), (-0.002, "-2 ms")])
def test_seconds_read_in_the_unit_that_fits(seconds, expected):
    assert fmt_seconds(seconds) == expected


@pytest.mark.parametrize("rate, expected", [(25e9, "25 GB/s"), (1.5e12, "1.5 TB/s"), (999.0, "999 B/s"),
                                            (3e6, "3 MB/s"), (math.inf, "∞")])
def test_rates_read_in_the_unit_that_fits(rate, expected):
    assert fmt_rate(rate) == expected


def test_units_scale_the_value_into_one_to_a_thousand():
    for x in (3.2, 4e-2, 5e-5, 6e-8, 7e3):
        scale, _ = time_unit(x)
        assert 1 <= x * scale < 1000 or scale == 1.0
    for n in (12, 3_400, 5_600_000, 7.8e9):
        scale, unit = bytes_unit(n)
        assert 1 <= n * scale < 1000, (n, unit)
    assert time_unit(math.nan) == (1e9, "ns") and bytes_unit(math.inf) == (1.0, "B")
    assert fmt_bytes(2_500_000) == "2.5 MB" and fmt_bytes(math.inf) == "unlimited"


def test_user_text_is_escaped_and_every_figure_module_uses_the_same_helpers():
    assert esc("<b>gpu & co</b>") == "&lt;b&gt;gpu &amp; co&lt;/b&gt;"
    assert esc(42) == "42"
    assert jobs.esc is esc and placement.esc is esc and topology.esc is esc
    assert topology.fmt_seconds is fmt_seconds and topology.fmt_rate is fmt_rate
    assert placement.time_unit is time_unit


def test_the_topology_title_counts_in_the_number_each_noun_takes():
    from lab.figures.topology import network_figure
    from lab.scenario.catalogue import preset
    from lab.scenario.units import counted

    topo = preset("edge")
    title = network_figure(topo).layout.title.text
    assert f"{len(topo.devices)} devices" in title and f"{len(topo.links)} links" in title
    assert ("1 switch," in title) == (len(topo.switches) == 1) and "1 switches" not in title
    assert [counted(n, "switch", "switches") for n in (0, 1, 2)] == ["0 switches", "1 switch", "2 switches"]
