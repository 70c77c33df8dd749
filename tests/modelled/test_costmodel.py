"""lab.modelled.costmodel: the datasheet model behind the one cost-model interface equals the
datasheet's own formulas, and the placement and balancing read whichever model they are given."""

import math

import pytest

from lab.modelled import placement as pl
from lab.modelled.balance import per_sample_times
from lab.modelled.costmodel import DATASHEET, CostModel, catalogue_slowdown, fastest_throughput
from lab.modelled.datasheet import LinkCost, compute_table
from lab.modelled.opgraph import trace
from lab.scenario.catalogue import preset
from lab.scenario.topology import Device, Topology


@pytest.fixture(scope="module")
def mlp():
    return trace("mlp", 32)


def test_datasheet_model_is_the_datasheet(mlp):
    topo = preset("cxl")
    speed = {topo.device_names[0]: 0.5}
    want = compute_table(mlp, topo, speed)
    got = DATASHEET.compute_table(mlp, topo, speed)
    assert got.keys() == want.keys()
    for op in want:
        for dev, s in want[op].items():
            assert got[op][dev] == pytest.approx(s, rel=1e-12) or (math.isinf(s) and math.isinf(got[op][dev]))
    link = DATASHEET.link_cost(topo)
    a, b = topo.device_names[:2]
    assert isinstance(link, LinkCost) and link(a, b, 1e6) == pytest.approx(topo.transfer_time(a, b, 1e6))


def test_slowdown_against_the_fastest_device():
    topo = Topology("t", (Device("fast", "gpu", throughput={"matmul": 4e12}),
                          Device("slow", "cpu", throughput={"matmul": 1e12, "elementwise": 1e10})), ())
    assert fastest_throughput(topo, "matmul") == 4e12 and fastest_throughput(topo, "conv") == 0.0
    assert catalogue_slowdown(topo, topo.device("slow"), "matmul") == 4.0
    assert catalogue_slowdown(topo, topo.device("fast"), "matmul") == 1.0
    assert math.isinf(catalogue_slowdown(topo, topo.device("fast"), "elementwise"))


class Doubled(CostModel):
    """A model twice as slow as the datasheet everywhere: what a placement must follow."""
    name, label, pass_ = "doubled", "doubled", "forward pass"

    def op_seconds(self, op, device, topology):
        return 2 * DATASHEET.op_seconds(op, device, topology)

    def describe(self):
        return "twice the datasheet"


def test_placement_and_balancing_read_the_model_they_are_given(mlp):
    topo = preset("cxl")
    base = pl.TaskGraph.from_model(mlp, topo)
    slow = pl.TaskGraph.from_model(mlp, topo, model=Doubled())
    assert slow.C == pytest.approx(2 * base.C)  # inf stays inf
    assert slow.transfer == base.transfer
    s_base = pl.run_strategy("greedy_eft", base)
    s_slow = pl.run_strategy("greedy_eft", slow)
    assert s_slow.makespan > s_base.makespan
    ps, ps2 = per_sample_times(mlp, topo), per_sample_times(mlp, topo, model=Doubled())
    assert ps.keys() == ps2.keys() and all(ps2[d] == pytest.approx(2 * ps[d]) for d in ps)
