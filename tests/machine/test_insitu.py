"""Calibrating the placement executor in place (lab.machine.insitu): the fit recovers terms planted in a
simulated machine, the synthetic plans are what they say, and one plan runs for real in the executor."""
from __future__ import annotations

import math

import pytest

from lab.errors import LabError
from lab.machine.calibrate import synthetic_profile
from lab.machine.insitu import (
    Case,
    Measured,
    calibration_topology,
    case_parts,
    case_pinning,
    fit_executor,
    layout,
    simulated_step,
    layout_procs,
    measure_case,
    probe_cases,
)
from lab.machine.plans import simulate_parts
from lab.machine.profile import ExecutorFit, MachineProfile

PLANTED = ExecutorFit(compute=1.3, call=40e-6, backward_call=40e-6, node=8e-6, loss=30e-6, send_fixed=25e-6,
                      send_per_byte=0.5e-9, recv_fixed=25e-6, recv_per_byte=0.5e-9, background_same=400e-6,
                      background_other=50e-6, wire_fixed=60e-6, wire_per_byte=2e-9, wake=30e-6, fit_error=0.0)


def _simulated_machine(cases, planted: ExecutorFit, cores: int = 2, cold=()) -> list[Measured]:
    """What the calibration plans would measure on a machine that is exactly the core model with ``planted`` (and
    the slow-down after idle time ``cold``)."""
    prof = synthetic_profile()
    out = []
    for case in cases:
        parts = case_parts(case, prof)
        pinned = case_pinning(case, parts, cores)
        sim = simulate_parts(parts, planted, cores=cores, pinned=pinned, node_by_node=case.node_by_node,
                             cold=cold)
        out.append(Measured(case, parts, pinned, sim.makespan, list(sim.cpu), list(sim.background), 0.0))
    return out


#: Enough plans to tell every term apart: one process (two networks, node by node), two and three processes,
#: partners on one core, and messages of two sizes (the MLP's and the encoder block's).
FEW = [Case(3, "one"), Case(12, "one"), Case(3, "one", node_by_node=True), Case(3, "chain2"), Case(3, "alt2"),
       Case(12, "alt2"), Case(12, "abc"), Case(3, "alt3", policy="turns")]


@pytest.mark.slow  # seconds of least squares over simulated executor runs
def test_the_fit_recovers_terms_planted_in_a_simulated_machine():
    measured = _simulated_machine(FEW, PLANTED)
    got = fit_executor(measured, cores=2, wire_per_byte=0.0)
    # What CPU clocks measure is linear in these: recovered to the planted value.
    for name in ("compute", "call", "backward_call", "node", "loss", "send_fixed", "send_per_byte", "recv_fixed",
                 "recv_per_byte", "background_same", "background_other"):
        assert getattr(got, name) == pytest.approx(getattr(PLANTED, name), rel=0.01), name
    # The wall-time terms are fitted through the model: its steps are the planted machine's within 1 %.
    assert got.fit_error < 0.01 and got.flags == ()
    for m in measured:
        assert simulated_step(m, got, 2) == pytest.approx(m.step, rel=0.01)
    # They trade off against each other (the wire's cost per message and per byte, on messages of two sizes, and
    # the wake-up), so a plan's step, not each term, is what these plans pin down: each is a real cost, no more.
    for name in ("wire_fixed", "wire_per_byte", "wake"):
        assert 0.0 <= getattr(got, name) <= 5 * getattr(PLANTED, name), name
    assert got.cases == len(measured) and got.procs == (1, 2, 3)


#: A slow-down after idle time as a calibration measures it (after 1 ms x1.2, after 10 ms x1.5).
COLD = ((1e-3, 1.2), (1e-2, 1.5))


@pytest.mark.slow  # seconds of least squares over simulated executor runs
def test_the_fit_takes_the_cold_starts_off_the_linear_terms():
    measured = _simulated_machine(FEW, PLANTED, cold=COLD)
    assert any(m.main != _simulated_machine([m.case], PLANTED)[0].main for m in measured)  # the plans pay for it
    got = fit_executor(measured, cores=2, wire_per_byte=0.0, cold=COLD)
    assert got.cold == COLD  # what predictions with these terms charge back
    for name in ("compute", "call", "node", "loss", "send_fixed"):
        assert getattr(got, name) == pytest.approx(getattr(PLANTED, name), rel=0.05), name
    # A fit blind to the cold starts books them as operators' or calls' costs.
    blind = fit_executor(measured, cores=2, wire_per_byte=0.0, cold=((0.0, 1.0),))  # no slow-down, no rounds
    assert blind.cold == ()
    assert max(abs(getattr(blind, n) / getattr(PLANTED, n) - 1) for n in ("compute", "call", "node", "loss")) > 0.1


@pytest.mark.slow  # seconds of least squares over simulated executor runs
def test_a_fit_that_cannot_see_a_term_says_so():
    # Two processes on two cores never share a core, and nothing runs node by node.
    cases = [Case(3, "chain2"), Case(3, "alt2"), Case(12, "aba"), Case(3, "one")]
    got = fit_executor(_simulated_machine(cases, PLANTED), cores=2, wire_per_byte=2e-9)
    assert got.background_same == 0.0 and got.node == 0.0
    assert any("one core" in f for f in got.flags) and any(f.startswith("node") for f in got.flags)


def test_the_synthetic_plans_are_their_layouts():
    ops = [f"o{i}" for i in range(12)]
    assert set(layout(ops, "one").values()) == {"host"}
    assert [layout(ops, "aba")[o] for o in ("o0", "o5", "o11")] == ["host", "gpu", "host"]
    assert [layout(ops, "alt3")[o] for o in ops[:4]] == ["host", "gpu", "fpga", "host"]
    assert len(set(layout(ops, "chain4").values())) == 4
    with pytest.raises(LabError, match="unknown layout"):
        layout(ops, "zigzag")
    prof = synthetic_profile()
    for case in probe_cases(nets=(3,)):
        parts = case_parts(case, prof)
        assert len(parts.devices) == layout_procs(case.layout)
    # Every device of the calibration cluster runs every operator class (any layout fits).
    topo = calibration_topology()
    assert all(set(d.throughput) == set(topo.devices[0].throughput) for d in topo.devices)


def test_a_profile_keeps_the_executor_terms():
    prof = synthetic_profile()
    with_ex = MachineProfile.from_json(MachineProfile(**{**prof.__dict__, "executor": PLANTED}).to_json())
    assert with_ex.executor == PLANTED
    assert MachineProfile.from_json(prof.to_json()).executor is None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_calibration_plan_runs_in_the_executor():
    m = measure_case(Case(3, "alt2"), synthetic_profile(), steps=6, warmup=2)
    assert len(m.main) == len(m.background) == 2
    assert m.step > 0 and all(c > 0 for c in m.main) and all(b >= 0 for b in m.background)
    assert math.isfinite(m.external) and m.external >= 0
