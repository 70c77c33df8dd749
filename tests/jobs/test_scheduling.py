"""lab.modelled.scheduling and lab.jobs.slots: resource groups from the topology, the task-level design's two placement policies, the fair
queue, and the what-if simulation (checked by hand-worked schedules, invariants over random job
sets, and a brute-force replay)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from lab.errors import LabError
from lab.jobs.slots import SlotBook, local_groups
from lab.modelled.scheduling import (
    Group,
    JobRequest,
    compare_policies,
    fair_order,
    place,
    resource_groups,
    simulate,
)
from lab.scenario.catalogue import preset
from lab.scenario.document import default_scenario
from lab.train.launcher import parse_job


def groups(**sizes):
    return [Group(name, "gpu", tuple(f"{name}/d{i}" for i in range(n))) for name, n in sizes.items()]


# ----- groups ----------------------------------------------------------------------------------
def test_resource_groups_hold_one_hardware_type_each():
    topo = preset("gpu-npu")
    gs = resource_groups(topo)
    assert [(g.name, g.type, g.size) for g in gs] == [("control:cpu", "cpu", 1), ("gpu-group:gpu", "gpu", 4),
                                                     ("npu-group:npu", "npu", 4)]
    names = [d.split("/", 1)[1] for g in gs for d in g.devices]
    assert sorted(names) == sorted(topo.device_names)  # every device in exactly one group
    assert gs[1].speed == 19.5e12 and gs[2].speed == 64e12
    # one pool with five device types: five groups; the FPGA has no matmul kernel (speed 0)
    cxl = resource_groups(preset("cxl"))
    assert [g.type for g in cxl] == ["cpu", "gpu", "fpga", "asic", "dpu"]
    assert {g.type: g.speed for g in cxl}["fpga"] == 0.0
    two = resource_groups(preset("two-pools"))
    assert len(two) == 10 and {g.pool for g in two} == {"pool0", "pool1"}


def test_local_groups_one_per_core():
    gs = local_groups([0, 3], slots_per_cpu=3)
    assert [g.name for g in gs] == ["cpu0", "cpu3"] and all(g.size == 3 for g in gs)
    assert local_groups([0, 1])[0].size == 3  # default: ceil(5 / 2) slots, room for 4 workers + a server
    with pytest.raises(LabError):
        local_groups([0], slots_per_cpu=0)


# ----- placing one job -------------------------------------------------------------------------
def test_uniform_spreads_over_every_group_with_room():
    assert place(3, {"a": 4, "b": 4}, "uniform") == {"a": 2, "b": 1}
    assert place(4, {"a": 1, "b": 4, "c": 0}, "uniform") == {"a": 1, "b": 3}
    assert place(5, {"a": 2, "b": 2}, "uniform") is None


def test_resource_state_takes_the_largest_free_group_that_holds_the_job():
    assert place(2, {"a": 2, "b": 3}, "resource_state") == {"b": 2}
    assert place(2, {"a": 3, "b": 3}, "resource_state") == {"a": 2}  # ties: the first
    assert place(4, {"a": 3, "b": 2}, "resource_state") is None  # 5 free in total, but no group holds 4


@settings(max_examples=200, deadline=None)
@given(hst.lists(hst.integers(0, 6), min_size=1, max_size=6), hst.integers(1, 12))
def test_placements_against_brute_force(free_list, tasks):
    free = {f"g{i}": n for i, n in enumerate(free_list)}
    u = place(tasks, free, "uniform")
    if sum(free_list) < tasks:
        assert u is None
    else:
        assert sum(u.values()) == tasks and all(0 < u[g] <= free[g] for g in u)
        # the most even placement: brute force the smallest possible maximum load
        best = min(max(c) for c in itertools.product(*[range(n + 1) for n in free_list]) if sum(c) == tasks)
        assert max(u.values()) == best
    r = place(tasks, free, "resource_state")
    fits = [g for g, n in free.items() if n >= tasks]
    if not fits:
        assert r is None
    else:
        (g, k), = r.items()
        assert k == tasks and free[g] == max(free.values())


def test_fair_order_is_round_robin_over_owners():
    jobs = [JobRequest(n, 1, owner=n[0], duration=1) for n in ["A1", "A2", "A3", "B1", "C1", "C2"]]
    assert [j.name for j in fair_order(jobs)] == ["A1", "B1", "C1", "A2", "C2", "A3"]
    assert [j.name for j in fair_order(jobs, after="A")] == ["B1", "C1", "A1", "C2", "A2", "A3"]
    assert fair_order([]) == []
    # the owner served last has nothing left: the turn still passes on round the ring, not back to A
    rest = [j for j in jobs if j.name != "B1"]
    assert [j.name for j in fair_order(rest, after="B", ring=["A", "B", "C"])] == ["C1", "A1", "C2", "A2", "A3"]
    assert [j.name for j in fair_order(rest, after="B")] == ["A1", "C1", "A2", "C2", "A3"]  # B unknown: no ring


def test_a_greedy_owner_does_not_get_every_other_turn():
    """o0 queues four jobs before o1, o2, o3 queue one each: o0, o1, o2, o3, then o0's others."""
    gs = groups(g=1)
    jobs = [JobRequest(f"o0-{k}", 1, "o0", submit=0.0, duration=1) for k in range(4)]
    jobs += [JobRequest(f"o{o}", 1, f"o{o}", submit=0.1 * o, duration=1) for o in (1, 2, 3)]
    order = [a.owner for a in simulate(gs, jobs, "uniform").allocations]
    assert order == ["o0", "o1", "o2", "o3", "o0", "o0", "o0"]


# ----- the what-if -----------------------------------------------------------------------------
def test_hand_worked_schedules():
    gs = groups(gpu=2, npu=2)
    jobs = [JobRequest("J1", 2, "A", duration=10), JobRequest("J2", 2, "B", duration=10),
            JobRequest("J3", 3, "C", duration=5)]
    rs = simulate(gs, jobs, "resource_state")
    assert rs.unplaceable == ("J3",)  # no single group holds 3
    assert {a.job: (a.start, a.end, a.groups) for a in rs.allocations} == {
        "J1": (0, 10, {"gpu": 2}), "J2": (0, 10, {"npu": 2})}
    un = simulate(gs, jobs, "uniform")
    got = {a.job: (a.start, a.end, dict(a.groups)) for a in un.allocations}
    assert got == {"J1": (0, 10, {"gpu": 1, "npu": 1}), "J2": (0, 10, {"gpu": 1, "npu": 1}),
                   "J3": (10, 15, {"gpu": 2, "npu": 1})}
    assert un.makespan == 15 and un.mean_wait == pytest.approx(10 / 3)
    assert un.utilisation == pytest.approx((2 * 10 * 2 + 5 * 3) / (4 * 15))


def test_work_runs_at_the_slowest_devices_pace():
    gs = [Group("cpu", "cpu", ("cpu/a",), speed=2e12), Group("gpu", "gpu", ("gpu/a", "gpu/b"), speed=20e12)]
    job = [JobRequest("J", 2, work=40e12)]
    # uniform puts one task on the CPU: 40e12 / (2 x 2e12) = 10 s; resource-state keeps it on the GPUs: 1 s
    s = compare_policies(gs, job)
    assert s["uniform"].allocations[0].end == pytest.approx(10.0)
    assert s["resource_state"].allocations[0].end == pytest.approx(1.0)
    typed = simulate(gs, [JobRequest("J", 1, work=2e12, type="cpu")], "resource_state")
    assert typed.allocations[0].devices == ("cpu/a",) and typed.makespan == pytest.approx(1.0)


def test_a_fair_queue_interleaves_owners_and_a_small_job_passes_a_large_one():
    gs = groups(g=2)
    jobs = [JobRequest(f"A{i}", 2, "A", duration=1) for i in range(3)] + [JobRequest("B0", 2, "B", duration=1)]
    order = [a.job for a in simulate(gs, jobs, "uniform").allocations]
    assert order == ["A0", "B0", "A1", "A2"]
    # first fit: a 1-task job starts beside a running 1-task job while a 2-task job waits
    jobs = [JobRequest("small1", 1, "A", duration=4), JobRequest("big", 2, "B", duration=1),
            JobRequest("small2", 1, "C", duration=1)]
    s = {a.job: a.start for a in simulate(gs, jobs, "uniform").allocations}
    assert s == {"small1": 0, "small2": 0, "big": 4}


@settings(max_examples=60, deadline=None)
@given(hst.lists(hst.tuples(hst.integers(1, 5), hst.sampled_from("ABC"), hst.integers(0, 20), hst.integers(1, 9)),
                 min_size=1, max_size=12),
       hst.sampled_from(["uniform", "resource_state"]), hst.sampled_from([None, 1, 2]))
def test_schedules_never_double_book_a_device(spec, policy, max_running):
    gs = groups(a=3, b=2, c=4)
    jobs = [JobRequest(f"j{i}", t, o, submit=s, duration=d) for i, (t, o, s, d) in enumerate(spec)]
    sch = simulate(gs, jobs, policy, max_running)
    placed = {a.job for a in sch.allocations}
    assert placed | set(sch.unplaceable) == {j.name for j in jobs} and not placed & set(sch.unplaceable)
    byname = {j.name: j for j in jobs}
    for a in sch.allocations:
        j = byname[a.job]
        assert a.start >= j.submit and a.end == pytest.approx(a.start + j.duration)
        assert len(a.devices) == len(set(a.devices)) == j.tasks
        if policy == "resource_state":
            assert len(a.groups) == 1
    # brute-force replay: at every start time, no device is held twice and max_running holds
    for t in {a.start for a in sch.allocations}:
        live = [a for a in sch.allocations if a.start <= t < a.end]
        held = [d for a in live for d in a.devices]
        assert len(held) == len(set(held))
        if max_running:
            assert len(live) <= max_running
    # work-conserving: a job never waits while the empty cluster... at its submit time, if nothing
    # runs and nothing else waits, it starts at once
    for a in sch.allocations:
        others = [b for b in sch.allocations if b is not a and b.start < a.start + 1e-9 and b.end > byname[a.job].submit]
        if not others:
            assert a.start == pytest.approx(byname[a.job].submit)


def test_bad_inputs_are_lab_errors():
    gs = groups(g=2)
    with pytest.raises(LabError, match="unknown policy"):
        simulate(gs, [], "random")
    with pytest.raises(LabError, match="unique"):
        simulate(gs, [JobRequest("x", 1, duration=1), JobRequest("x", 1, duration=1)])
    with pytest.raises(LabError, match="duration"):
        simulate(gs, [JobRequest("x", 1)])
    with pytest.raises(LabError, match="positive"):
        simulate(gs, [JobRequest("x", 1, duration=float("nan"))])
    with pytest.raises(LabError, match="at least one task"):
        simulate(gs, [JobRequest("x", 0, duration=1)])


def test_slot_book_takes_and_releases():
    book = SlotBook(local_groups([0, 1], slots_per_cpu=2))
    assert book.free() == {"cpu0": 2, "cpu1": 2} and book.total == 4
    got = book.take("r1", place(3, book.free(), "uniform"))
    assert got == {"cpu0": ["cpu0/slot0", "cpu0/slot1"], "cpu1": ["cpu1/slot0"]}
    assert book.free() == {"cpu0": 0, "cpu1": 1}
    assert place(2, book.free(), "uniform") is None
    book.release("r1")
    assert book.free() == {"cpu0": 2, "cpu1": 2}


def test_parse_job_defines_the_roles():
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(sync="param_server", workers=2,
                                                 worker_devices=("gpu", "fpga", "host")))
    d = parse_job(sc)
    assert d["tasks"] == 3 and d["parameter_server"] == 2
    assert [r["role"] for r in d["roles"]] == ["task manager", "compute worker", "compute worker", "parameter server"]
    assert [r["group"] for r in d["roles"][1:]] == ["pool0:gpu", "pool0:fpga", "pool0:cpu"]
    assert len(d["resource_groups"]) == 5


def test_the_cluster_gets_jobs_in_the_queues_order_and_no_job_waits_there_behind_later_ones(tmp_path, monkeypatch):
    from lab.jobs.manager import JobManager
    from lab.jobs.running import CLUSTER_PATIENCE_S

    monkeypatch.setenv("LAB_RAY_WAITING", "2")
    monkeypatch.setenv("LAB_RAY_JOBS", "5")
    jm = JobManager(tmp_path / "runs.db", warm=False, ray_address="auto")
    assert jm.capacity == 5 and jm.book.total >= 5
    sc = default_scenario()
    a, b = (jm.store.create_run(sc, status="running") for _ in range(2))
    jm.jobs.handles = {a: object(), b: object()}
    jm.jobs.since = {a: 100.0, b: 101.0}

    def behind(now):
        return jm.jobs.cluster_is_behind(jm.store, now, 2)

    assert behind(102.0)  # two handed over, neither started: the window is full
    jm.store.job_records.add_event(a, "started")
    assert not behind(102.0)  # one of them started: one more may go
    assert not behind(101.0 + CLUSTER_PATIENCE_S - 0.5)
    assert behind(101.0 + CLUSTER_PATIENCE_S + 0.5)  # b waited too long: the rest wait for it
    jm.store.job_records.add_event(b, "started")
    assert not behind(1000.0)
    here = JobManager(tmp_path / "runs.db", warm=False, ray_address="")
    assert here.book.free() == {g.name: g.size for g in local_groups()}  # this machine's cores, as before
