"""Processes on shared cores (lab.modelled.placement.cores) and the executor's task lists
(lab.modelled.placement.executor): cases with a known answer, the ideal pipeline model where every process
has its own core, and properties over random small plans."""
from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from lab.errors import LabError
from lab.modelled.placement import cores
from lab.modelled.placement.core_tasks import Cpu, Machine, Recv, Send, Sleep
from lab.modelled.placement.cores import share, simulate
from lab.modelled.placement.executor import Linear, StepCosts, tasks
from lab.modelled.placement.order import Piece
from lab.modelled.placement.pipeline import simulate as ideal


def test_one_process_without_messages_takes_the_sum_of_its_tasks():
    got = simulate([[Cpu(0.3), Cpu(0.2), Cpu(0.5)]], [0], Machine(cores=2))
    assert got.makespan == pytest.approx(1.0)
    assert got.cpu == [pytest.approx(1.0)]
    assert got.blocked == [pytest.approx(0.0)]


def test_two_processes_pinned_to_one_core_take_the_sum_of_their_demands():
    got = simulate([[Cpu(0.4), Cpu(0.6)], [Cpu(0.7)]], [1, 1], Machine(cores=2))
    assert got.makespan == pytest.approx(1.7)
    # Shared equally while both run: the shorter one ends at twice its demand.
    assert got.ends[1] == pytest.approx(1.4)


def test_two_processes_on_different_cores_run_side_by_side():
    got = simulate([[Cpu(0.4)], [Cpu(0.7)]], [0, 1], Machine(cores=2))
    assert got.makespan == pytest.approx(0.7)


def test_unpinned_processes_share_every_core():
    got = simulate([[Cpu(1.0)] for _ in range(3)], [None] * 3, Machine(cores=2))
    assert got.makespan == pytest.approx(1.5)
    # Pinned two and one on two cores: the pair takes twice as long.
    got = simulate([[Cpu(1.0)] for _ in range(3)], [0, 1, 0], Machine(cores=2))
    assert got.makespan == pytest.approx(2.0)
    assert got.ends[1] == pytest.approx(1.0)


def test_an_emulated_wait_takes_no_core():
    got = simulate([[Sleep(1.0)], [Cpu(1.0)]], [0, 0], Machine(cores=1))
    assert got.makespan == pytest.approx(1.0)
    assert got.blocked[0] == pytest.approx(1.0)
    # A wait is its seconds, however long the task before it took for sharing its core (2 s for 1 s of work).
    got = simulate([[Cpu(1.0), Sleep(2.0)], [Cpu(1.0)]], [0, 0], Machine(cores=1))
    assert got.ends[0] == pytest.approx(2.0 + 2.0)


def test_a_message_costs_sender_wire_and_receiver():
    got = simulate([[Cpu(1.0), Send("m", 1, cpu=0.1, wire=0.5)], [Recv("m", cpu=0.2), Cpu(0.3)]], [0, 1],
                   Machine(cores=2))
    assert got.ends[1] == pytest.approx(1.0 + 0.1 + 0.5 + 0.2 + 0.3)
    assert got.blocked[1] == pytest.approx(1.6)
    # The sender waits for its message to be taken before its step ends.
    assert got.ends[0] == pytest.approx(1.6)


def test_an_emulated_link_holds_the_receive_without_a_core():
    got = simulate([[Send("m", 1, wire=0.1, hold=2.0)], [Recv("m"), Cpu(1.0)], [Cpu(1.5)]], [0, 0, 0],
                   Machine(cores=1))
    # Process 2 runs alone while 1 holds for the link, then they share the core.
    assert got.ends[1] == pytest.approx(3.0)


def test_background_cpu_of_a_message_is_charged_by_core_sharing():
    m = Machine(cores=2, background_same=1.0, background_other=0.25)
    same = simulate([[Send("m", 1)], [Recv("m")]], [0, 0], m)
    other = simulate([[Send("m", 1)], [Recv("m")]], [0, 1], m)
    assert same.background == [pytest.approx(1.0), pytest.approx(1.0)]
    assert other.background == [pytest.approx(0.25), pytest.approx(0.25)]
    # Background work competes with the main thread on its core.
    got = simulate([[Send("m", 1), Cpu(1.0)], [Recv("m")]], [0, 1], m)
    assert got.ends[0] == pytest.approx(1.25)


def test_a_message_waits_for_its_communication_threads():
    m = Machine(cores=2, background_other=0.25)
    # The sender computes on its core: its communication thread gets half of it, so the message leaves at 0.5;
    # the receiver's thread takes it in alone, 0.25 later.
    got = simulate([[Send("m", 1), Cpu(1.0)], [Recv("m")]], [0, 1], m)
    assert got.ends[1] == pytest.approx(0.75)
    # On a busy core a thread with new work first waits to be scheduled.
    got = simulate([[Send("m", 1), Cpu(1.0)], [Recv("m")]], [0, 1], Machine(cores=2, background_other=0.25, wake=0.1))
    assert got.ends[1] == pytest.approx(0.1 + 0.5 + 0.25)


def test_waking_on_a_busy_core_costs_the_wake_up_delay():
    m = Machine(cores=1, wake=0.05)
    got = simulate([[Sleep(1.0), Cpu(0.1)], [Cpu(2.0)]], [0, 0], m)
    assert got.ends[0] == pytest.approx(1.05 + 0.2)
    quiet = simulate([[Sleep(1.0), Cpu(0.1)], [Cpu(0.5)]], [0, 0], m)
    assert quiet.ends[0] == pytest.approx(1.1)


def test_work_after_idle_time_takes_the_cold_factor_of_that_idle_time():
    m = Machine(cores=1, cold=((0.01, 1.5), (0.03, 3.0)))
    assert [m.cold_factor(w) for w in (0.0, 0.005, 0.01, 0.02, 0.03, 1.0)] == pytest.approx(
        [1.0, 1.25, 1.5, 2.25, 3.0, 3.0])
    # Back to back: no idle time, no slow-down; after a 20 ms sleep, 2.25 times its seconds.
    got = simulate([[Cpu(0.1), Cpu(0.1), Sleep(0.02), Cpu(0.1)]], [0], m)
    assert got.makespan == pytest.approx(0.2 + 0.02 + 0.225)
    assert got.cpu == [pytest.approx(0.2 + 0.225)]
    assert got.cold == [pytest.approx(0.125)]
    # The idle time runs from the process's last computation, a wait for a message included: process 1 waits
    # 0.5 s for its message and then computes 3 times its seconds; sending is not computing.
    got = simulate([[Cpu(0.5), Send("a", 1)], [Recv("a"), Cpu(0.1)]], [0, None], replace(m, cores=2))
    assert got.ends[1] == pytest.approx(0.5 + 0.3)
    # An emulated wait does not scale what the cold start added (the executor's multiplies the warm time).
    got = simulate([[Sleep(0.03), Cpu(0.1), Sleep(0.1)]], [0], m)
    assert got.makespan == pytest.approx(0.03 + 0.3 + 0.1)


def test_a_cold_slow_down_must_be_pairs_of_idle_time_and_a_factor_of_at_least_one():
    for bad in (((0.01, 0.5),), ((0.01, math.inf),), ((-1.0, 2.0),), ("fast",), ((0.01,),)):
        with pytest.raises(LabError, match="cold slow-down"):
            simulate([[Cpu(1.0)]], [0], Machine(cold=bad))


def test_other_work_on_the_machine_takes_its_share():
    got = simulate([[Cpu(1.0)]], [None], Machine(cores=1, external=1.0))
    assert got.makespan == pytest.approx(2.0)
    got = simulate([[Cpu(1.0)]], [None], Machine(cores=2, external=1.0))
    assert got.makespan == pytest.approx(1.0)


def test_fair_shares_respect_pins_caps_and_the_pool():
    assert share([(1, 1, 0), (1, 1, 0), (1, 1, 1)], 2) == pytest.approx([0.5, 0.5, 1.0])
    # An unpinned entity takes what the pinned ones leave.
    assert share([(1, 1, 0), (1, 1, 0), (1, 1, None)], 2) == pytest.approx([0.5, 0.5, 1.0])
    assert share([(1, 1, None)] * 4, 2) == pytest.approx([0.5] * 4)
    assert share([(0.5, 0.5, None), (1, 1, 0)], 1) == pytest.approx([1 / 3, 2 / 3])


def test_bad_task_lists_get_a_clear_message():
    with pytest.raises(LabError, match="nobody sends"):
        simulate([[Recv("x")]], [0], Machine())
    with pytest.raises(LabError, match="nobody receives"):
        simulate([[Send("x", 1)], []], [0, 0], Machine())
    with pytest.raises(LabError, match="wait for each other"):
        simulate([[Recv("a"), Send("b", 1)], [Recv("b"), Send("a", 0)]], [0, 1], Machine())
    with pytest.raises(LabError, match="finite"):
        simulate([[Cpu(math.inf)]], [0], Machine())
    with pytest.raises(LabError, match="cores 0..1"):
        simulate([[Cpu(1.0)]], [5], Machine(cores=2))


# ----- the executor's task lists ------------------------------------------------------------------

def _chain(S: int, t_fwd: float, t_bwd: float) -> list[Piece]:
    return [Piece(i, f"d{i}", ((f"op{i}", t_fwd, 1.0),), t_bwd, ((i - 1, 0, 100.0),) if i else (), loss=i == S - 1)
            for i in range(S)]


@pytest.mark.parametrize("S,M", [(2, 1), (3, 4), (4, 8)])
def test_a_chain_of_equal_stages_has_the_textbook_bubble(S, M):
    t = 0.01
    lists = tasks(_chain(S, t, 0.0), [f"d{i}" for i in range(S)], M, StepCosts())
    assert simulate(lists, list(range(S)), Machine(cores=S)).makespan == pytest.approx((M + S - 1) * t)
    lists = tasks(_chain(S, t, 2 * t), [f"d{i}" for i in range(S)], M, StepCosts())
    assert simulate(lists, list(range(S)), Machine(cores=S)).makespan == pytest.approx((M + S - 1) * 3 * t)


def test_the_executor_sends_each_tensor_once_per_process_and_micro_batch():
    # Piece 0 on A feeds pieces 1 (B) and 2 (B) with one tensor, and piece 2 reads piece 1 too.
    st = [Piece(0, "A", (("a", 1.0, 1.0),), 1.0),
          Piece(1, "B", (("b", 1.0, 1.0),), 1.0, ((0, 0, 8.0),)),
          Piece(2, "A", (("c", 1.0, 1.0),), 1.0, ((1, 0, 8.0),)),
          Piece(3, "B", (("d", 1.0, 1.0),), 1.0, ((0, 0, 8.0), (2, 0, 8.0)), loss=True)]
    lists = tasks(st, ["A", "B"], 2, StepCosts())
    sends = [t for lst in lists for t in lst if isinstance(t, Send)]
    recvs = [t for lst in lists for t in lst if isinstance(t, Recv)]
    # Forward: 0->B, 1->A, 2->B per micro; backward: the same three back.
    assert len(sends) == len(recvs) == 12
    assert simulate(lists, [0, 1], Machine(cores=2)).makespan > 0


def _random_plan(rng: random.Random, n_pieces: int, n_dev: int) -> tuple[list[Piece], list[str]]:
    devs = [f"d{k}" for k in range(n_dev)]
    st = []
    for i in range(n_pieces):
        dev = devs[i % n_dev] if i < n_dev else rng.choice(devs)
        ins = tuple(sorted({(j, 0, float(rng.randint(1, 9) * 100)) for j in rng.sample(range(i), min(i, 2))},
                           key=lambda x: x[0]))
        # One byte count per output: a piece's output has one size.
        st.append(Piece(i, dev, tuple((f"o{i}_{k}", rng.uniform(1e-4, 2e-3), 1.0) for k in range(rng.randint(1, 3))),
                        rng.uniform(1e-4, 4e-3), ins, loss=i == n_pieces - 1))
    sizes = {}
    st = [replace(s, inputs=tuple((a, b, sizes.setdefault(a, c)) for a, b, c in s.inputs)) for s in st]
    return st, devs


@settings(max_examples=40, deadline=None)
@given(hst.integers(0, 10_000), hst.integers(2, 6), hst.integers(1, 4), hst.integers(1, 4), hst.integers(1, 3))
def test_with_a_core_per_process_and_free_messages_it_is_the_ideal_pipeline(seed, n_pieces, n_dev, M, wire_us):
    rng = random.Random(seed)
    st, devs = _random_plan(rng, n_pieces, min(n_dev, n_pieces))
    used = list(dict.fromkeys(s.device for s in st))
    wire = wire_us * 1e-4
    lists = tasks(st, used, M, StepCosts(wire=Linear(wire)), optimizer={d: 1e-3 for d in used})
    got = simulate(lists, list(range(len(used))), Machine(cores=len(used)))
    want = ideal(st, lambda a, b, n: wire, M, optimizer={d: 1e-3 for d in used})  # the same pieces
    assert got.makespan == pytest.approx(want.makespan, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(hst.integers(0, 10_000), hst.integers(2, 6), hst.integers(2, 4), hst.integers(1, 4), hst.integers(1, 3),
       hst.booleans())
def test_the_step_is_at_least_its_critical_path_and_its_cpu_over_the_cores(seed, n_pieces, n_dev, M, n_cores,
                                                                          pin):
    rng = random.Random(seed)
    st, devs = _random_plan(rng, n_pieces, min(n_dev, n_pieces))
    used = list(dict.fromkeys(s.device for s in st))
    costs = StepCosts(call=1e-4, send=Linear(5e-5, 1e-8), recv=Linear(5e-5, 1e-8), wire=Linear(1e-4, 1e-9))
    lists = tasks(st, used, M, costs)
    machine = Machine(cores=n_cores, wake=rng.choice([0.0, 5e-5]), background_same=rng.choice([0.0, 1e-4]),
                      background_other=rng.choice([0.0, 2e-5]))
    got = simulate(lists, [r % n_cores for r in range(len(used))] if pin else [None] * len(used), machine)
    # The same lists on a core each, with no background work and no wake-ups: the critical path.
    free = simulate(lists, list(range(len(used))), Machine(cores=len(used)))
    total_cpu = sum(got.cpu) + sum(got.background)
    assert got.makespan >= free.makespan * (1 - 1e-9)
    assert got.makespan >= total_cpu / n_cores * (1 - 1e-9)
    # Every main-thread task ran in full.
    demand = sum(t.seconds if isinstance(t, Cpu) else t.cpu for lst in lists for t in lst
                 if isinstance(t, (Cpu, Send, Recv)))
    assert sum(got.cpu) == pytest.approx(demand, rel=1e-6)


def test_the_module_has_no_processes_and_no_torch():
    import ast
    import inspect

    for mod in (cores, __import__("lab.modelled.placement.executor", fromlist=["x"])):
        names = {a.name.split(".")[0] for n in ast.walk(ast.parse(inspect.getsource(mod)))
                 if isinstance(n, (ast.Import, ast.ImportFrom)) for a in getattr(n, "names", [])}
        mods = {n.module.split(".")[0] for n in ast.walk(ast.parse(inspect.getsource(mod)))
                if isinstance(n, ast.ImportFrom) and n.module}
        assert not ({"torch", "multiprocessing", "subprocess"} & (names | mods))


def test_ranks_take_the_cores_by_policy():
    from lab.modelled.placement.cores import DEFAULT_RANK_POLICY, rank_cores

    w = {(0, 1): 10, (1, 2): 10, (0, 2): 1}
    assert rank_cores(3, 2, w, "turns") == [0, 1, 0]
    # Partners apart: 0 and 2 exchange the least, so they share a core.
    assert rank_cores(3, 2, w, "partners") == [0, 1, 0]
    assert rank_cores(3, 2, {(0, 2): 10, (0, 1): 1}, "partners") == [0, 1, 1]
    # Brute force over balanced assignments: what shares a core is the least traffic there is.
    got = rank_cores(4, 2, {(0, 1): 5, (2, 3): 5, (0, 2): 1, (1, 3): 1}, "partners")
    assert got[0] != got[1] and got[2] != got[3] and sorted(got) == [0, 0, 1, 1]
    assert rank_cores(2, 2, w, "partners") == [0, 1]
    assert rank_cores(3, 2, w, "free") == [None, None, None] == rank_cores(3, 2, w)
    assert DEFAULT_RANK_POLICY == "free"
    with pytest.raises(LabError, match="unknown rank policy"):
        rank_cores(3, 2, w, "random")


def test_each_process_of_the_simulation_says_what_it_does_by_name():
    """The simulation's state per process is named: a process computing is ``run``/``cpu``, one waiting for a
    message is ``recv`` on that message, one whose tasks are done waits in ``drain`` for its send to be taken."""
    from lab.modelled.placement.cores import CoreSimulation

    tasks = [[Cpu(0.5), Send("m", 1, cpu=0.0, wire=0.25)], [Recv("m", cpu=0.125), Cpu(1.0)]]
    sim = CoreSimulation(tasks, [None, None], Machine(cores=2))
    sim.start()
    a, b = sim.procs
    assert (a.state, a.what, a.left) == ("run", "cpu", 0.5) and (b.state, b.task.key) == ("recv", "m")
    out = sim.run()
    # the message leaves at 0.5 and is in at 0.75 (the sender ends then), is unpacked by 0.875, then 1 s of work
    assert [p.state for p in sim.procs] == ["done", "done"] and out.ends == [0.75, 1.875]
    assert out.blocked == [0.25, 0.75] and out.cpu == [0.5, 1.125]
