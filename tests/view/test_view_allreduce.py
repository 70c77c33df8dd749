"""lab.view.allreduce: the All-reduce page's tables, checked against the schedule and timing they come from."""

import pytest

from lab.modelled import collectives as C
from lab.scenario.catalogue import preset  # noqa: F401  (the cxl preset names four devices)
from lab.view import allreduce as tables


@pytest.fixture(scope="module")
def ring():
    topo = preset("cxl")
    return topo, topo.device_names[:4], None


def test_bytes_table_sums_what_the_schedule_sends_and_a_ring_sends_its_share(ring):
    topo, names, setup = ring
    nbytes = 4 << 20
    sched = C.build_schedule("ring", len(names), nbytes)
    t = tables.bytes_table(sched, nbytes)
    assert list(t["sent (B)"]) == list(sched.sent_bytes()) and list(t["received (B)"]) == list(sched.received_bytes())
    assert t["sent / S"].tolist() == pytest.approx([2 * (len(names) - 1) / len(names)] * len(names), rel=1e-6)
    assert "1.5 × S" in tables.ring_bytes_sentence(4)


def test_each_steps_messages_and_what_the_receiver_does(ring):
    _, names, _ = ring
    sched = C.build_schedule("ring", len(names), 1 << 20)
    for step in (1, len(sched.steps)):
        t = tables.transfers_table(sched, step)
        assert len(t) == len(sched.steps[step - 1].transfers)
        assert set(t["operation"]) <= {"add", "copy"}
        assert t["bytes (B)"].sum() == sum(x.nbytes for x in sched.steps[step - 1].transfers)
    assert set(tables.transfers_table(sched, 1)["operation"]) == {"add"}  # reduce-scatter first
    assert set(tables.transfers_table(sched, len(sched.steps))["operation"]) == {"copy"}  # all-gather last


def test_the_compute_table_round_trips_milliseconds_to_seconds():
    comp = {"a": 0.0015, "b": 0.25}
    t = tables.compute_table(["a", "b"], comp)
    assert t["compute (ms)"].tolist() == pytest.approx([1.5, 250.0])
    assert tables.compute_from_table(t) == pytest.approx(comp)
