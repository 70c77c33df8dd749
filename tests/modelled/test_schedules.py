"""Pipeline schedules as action lists (lab.modelled.placement.order): GPipe's and 1F1B's lists equal the orders
in which torch's own ScheduleGPipe and Schedule1F1B run a stage's work (their ``_step_microbatches`` driven with a
stage that records its calls, over 2-4 stages and 1-8 micro-batches), 1F1B holds at most the textbook number of micro-batches in flight, both models follow it, and
its timeline on random chain plans equals an independent fixed-point reimplementation."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from torch.distributed.pipelining import schedules as torch_schedules

from lab.errors import LabError
from lab.modelled.placement import order
from lab.modelled.placement.order import Piece
from lab.modelled.placement.core_tasks import Machine
from lab.modelled.placement.cores import simulate as simulate_cores
from lab.modelled.placement.executor import Linear, StepCosts, tasks
from lab.modelled.placement.pipeline import simulate
from tests.modelled.test_pipeline_model import KIND_LETTER, _reference, _tasks

TORCH = {"gpipe": torch_schedules.ScheduleGPipe, "1f1b": torch_schedules.Schedule1F1B}


class _Recorder:
    """A pipeline stage that records what torch's schedule asks of it (no tensors, no messages)."""

    def __init__(self, index: int, log: list):
        self.stage_index, self.log = index, log

    def forward_one_chunk(self, mb, *args, **kwargs):
        self.log.append(order.Action(order.FORWARD, self.stage_index, mb))

    def backward_one_chunk(self, mb, **kwargs):
        self.log.append(order.Action(order.BACKWARD, self.stage_index, mb))

    def __getattr__(self, name):  # the receive and send ops: none; everything else does nothing
        if name.startswith("get_") and name.endswith("_ops"):
            return lambda *a, **k: []
        return lambda *a, **k: None


def torch_order(name: str, stages: int, micro: int) -> dict[int, list[order.Action]]:
    """Each stage's forwards and backwards, in the order torch's own schedule runs them: the class's
    ``_step_microbatches`` driven with a stage that records its calls (torch's waits and sends left out: the lab's
    processes wait on their receives)."""
    out = {}
    for k in range(stages):
        log: list = []
        me = SimpleNamespace(_stage=_Recorder(k, log), _n_microbatches=micro, _num_stages=stages, scale_grads=True,
                             _check_inputs=lambda a, kw, t, l: ([None] * micro, [{}] * micro),
                             **{f: (lambda *a, **kw: None) for f in ("_initialize_stage", "_maybe_compute_loss",
                                                                  "_maybe_get_loss", "_update_losses")})
        TORCH[name]._step_microbatches(me, [None] * micro, [{}] * micro, None, None)
        out[k] = log
    return out


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("micro", range(1, 9))
def test_the_lab_orders_are_torchs_own(name, stages, micro):
    if name == "1f1b" and micro < stages:  # torch's 1F1B asks for as many micro-batches as stages
        mine = [order.schedule(name, [k], stages, micro) for k in range(stages)]
        for k, actions in enumerate(mine):  # the lab's warm-up stops at the micro-batches there are
            assert sorted(map(repr, (a for a in actions if a.kind != order.OPTIMIZER))) == sorted(map(repr,
                [order.Action(order.FORWARD, k, m) for m in range(micro)]
                + [order.Action(order.BACKWARD, k, m) for m in range(micro)]))
        return
    theirs = torch_order(name, stages, micro)
    for k in range(stages):
        mine = order.schedule(name, [k], stages, micro)
        assert mine[-1] == order.Action(order.OPTIMIZER)
        assert list(mine[:-1]) == theirs[k], (k, mine, theirs[k])


def in_flight(actions) -> int:
    """The most micro-batches whose activations a process holds at once (forwarded, not yet backward)."""
    held = peak = 0
    for a in actions:
        held += (a.kind == order.FORWARD) - (a.kind == order.BACKWARD)
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize("stages,micro", [(2, 1), (2, 8), (3, 4), (4, 8), (4, 2)])
def test_1f1b_holds_at_most_the_pieces_from_here_to_the_end_and_gpipe_every_micro_batch(stages, micro):
    for k in range(stages):
        assert in_flight(order.schedule("1f1b", [k], stages, micro)) == min(stages - k, micro)
        assert in_flight(order.schedule("gpipe", [k], stages, micro)) == micro
    assert order.schedule("1f1b", [1], 3, 4, train=False) == order.gpipe([1], 4, train=False)


def test_a_plan_that_returns_to_a_device_is_refused_under_1f1b_with_what_to_change():
    with pytest.raises(LabError, match="1F1B runs one piece per device, and this plan gives a device 2 pieces"):
        order.schedule("1f1b", [0, 2], 3, 4)
    with pytest.raises(LabError, match="unknown schedule 'zb'"):
        order.schedule("zb", [0], 3, 4)


def random_plan(rng, n: int, device_of, max_skips) -> list[Piece]:
    """``n`` pieces, piece ``k`` on ``device_of(k)``, each reading the piece before it and up to ``max_skips(k)``
    earlier ones drawn at random (skip inputs), with random forward and backward costs."""
    pieces = []
    for k in range(n):
        srcs = sorted({k - 1, *rng.choice(k, size=int(rng.integers(0, max_skips(k) + 1)), replace=True)}) if k else []
        fwd, bwd = float(rng.uniform(0.1, 2.0)), float(rng.uniform(0.1, 3.0))
        pieces.append(Piece(k, device_of(k), ((f"o{k}", fwd, 1.0),), bwd,
                            tuple((int(s), 0, float(rng.uniform(0, 1e6))) for s in srcs), loss=k == n - 1))
    return pieces


def check_against_reference(pieces, m_count: int, name: str, lists: dict) -> None:
    """The model of ``name`` on the plan runs to the end, equals the fixed-point reference given each device's list
    of actions ``lists``, and runs each device's list in its order."""

    def link(a, b, nbytes):
        return 0.0 if a == b else 1e-3 + nbytes * 1e-7

    s = simulate(pieces, link, m_count, schedule=name)
    ref = {t: x for t, x in _reference(pieces, link, m_count, {}, 0.0, lists).items() if t[0] != "O"}
    got = {(letter, *k): x for kind, letter in KIND_LETTER.items() for k, x in _tasks(s, kind).items()}
    assert got.keys() == ref.keys()
    for t in ref:
        assert got[t] == pytest.approx(ref[t], abs=1e-9), t
    for d, acts in lists.items():
        rows = [r for r in s.rows if r["device"] == d and r["kind"] not in ("activation", "gradient", "loss")]
        assert order.actions_in(rows) == list(acts)
    # the model of the executor on shared cores takes the same lists to the end (its deadlock check passes)
    lists_ = tasks(pieces, list(lists), m_count, StepCosts(wire=Linear(1e-4)), schedule=name)
    done = simulate_cores(lists_, list(range(len(lists))), Machine(cores=len(lists)))
    for r, d in enumerate(lists):
        assert order.actions_in([x for x in done.rows if x["device"] == d and x["kind"] not in (
            "activation", "gradient", "loss", "emulated")]) == list(lists[d])


@pytest.mark.parametrize("seed", range(12))
def test_1f1b_on_random_chain_plans_runs_to_the_end_and_matches_the_reference(seed):
    # one piece per device, each reading from one or more earlier pieces (skips included): the plans a cut of
    # a traced model makes when no device is visited twice
    rng = np.random.default_rng(seed)
    n, m_count = int(rng.integers(2, 5)), int(rng.integers(1, 7))
    pieces = random_plan(rng, n, lambda k: f"D{k}", lambda k: k)
    check_against_reference(pieces, m_count, "1f1b",
                            {p.device: order.schedule("1f1b", [p.index], n, m_count) for p in pieces})


def torch_interleaved(devices: int, local: int, micro: int) -> dict[int, list[order.Action]]:
    """Each rank's actions as torch's ScheduleInterleaved1F1B computes them (its ``_calculate_single_rank_operations``
    on the fields its constructor sets), the empty slots that align ranks in time left out."""
    rounds = max(1, micro // devices)
    out = {}
    for rank in range(devices):
        me = SimpleNamespace(n_local_stages=local, pp_group_size=devices, _n_microbatches=micro,
                             microbatches_per_round=micro // rounds)
        kinds = {torch_schedules._ComputationType.FORWARD: order.FORWARD,
                 torch_schedules._ComputationType.FULL_BACKWARD: order.BACKWARD}
        out[rank] = [order.Action(kinds[a.computation_type], a.stage_index, a.microbatch_index)
                     for a in torch_schedules.ScheduleInterleaved1F1B._calculate_single_rank_operations(me, rank)
                     if a is not None]
    return out


@pytest.mark.parametrize("devices", [2, 3, 4])
@pytest.mark.parametrize("local", [2, 3])
@pytest.mark.parametrize("micro", range(1, 9))
def test_interleaved_1f1b_is_torchs_own_order(devices, local, micro):
    rounds = max(1, micro // devices)
    pieces = devices * local
    if micro % rounds:  # torch's constructor refuses these micro-batch counts; the lab says which counts it takes
        with pytest.raises(LabError, match="must be a multiple of"):
            order.schedule("interleaved_1f1b", list(range(0, pieces, devices)), pieces, micro)
        return
    theirs = torch_interleaved(devices, local, micro)
    for rank in range(devices):
        mine = order.schedule("interleaved_1f1b", list(range(rank, pieces, devices)), pieces, micro)
        assert mine[-1] == order.Action(order.OPTIMIZER)
        assert list(mine[:-1]) == theirs[rank], rank
        # every micro-batch of every piece forward once and backward once
        assert sorted(map(repr, mine[:-1])) == sorted(map(repr, [order.Action(kind, k, m) for kind in (
            order.FORWARD, order.BACKWARD) for k in range(rank, pieces, devices) for m in range(micro)]))


def test_a_plan_that_does_not_go_round_the_devices_is_refused_under_interleaved_1f1b():
    with pytest.raises(LabError, match="go round the devices in turn"):
        order.schedule("interleaved_1f1b", [0], 3, 4)  # one stretch per device: 1F1B's plan
    with pytest.raises(LabError, match="go round the devices in turn"):
        order.schedule("interleaved_1f1b", [0, 1], 4, 4)  # two stretches side by side


@pytest.mark.parametrize("seed", range(12))
def test_interleaved_1f1b_on_random_looped_plans_runs_to_the_end_and_matches_the_reference(seed):
    # pieces go round P devices v times; each reads the piece before it and maybe an earlier one (a skip)
    rng = np.random.default_rng(seed)
    P, v = int(rng.integers(2, 4)), int(rng.integers(2, 4))
    n = P * v
    m_count = int(rng.choice([m for m in range(1, 9) if m % max(1, m // P) == 0]))
    pieces = random_plan(rng, n, lambda k: f"D{k % P}", lambda k: 1)
    check_against_reference(pieces, m_count, "interleaved_1f1b", {
        f"D{r}": order.schedule("interleaved_1f1b", list(range(r, n, P)), n, m_count) for r in range(P)})


def torch_zero_bubble(devices: int, local: int, micro: int) -> dict[int, list[order.Action]]:
    """Each rank's actions as torch's ScheduleInterleavedZeroBubble computes them (its
    ``_calculate_single_rank_operations`` on the fields its constructor sets), the empty slots left out."""
    rounds = max(1, micro // devices)
    kinds = {torch_schedules._ComputationType.FORWARD: order.FORWARD,
             torch_schedules._ComputationType.BACKWARD_INPUT: order.BACKWARD_INPUT,
             torch_schedules._ComputationType.BACKWARD_WEIGHT: order.BACKWARD_WEIGHT}
    out = {}
    for rank in range(devices):
        me = SimpleNamespace(n_local_stages=local, pp_group_size=devices, _n_microbatches=micro,
                             microbatches_per_round=micro // rounds)
        out[rank] = [order.Action(kinds[a.computation_type], a.stage_index, a.microbatch_index)
                     for a in torch_schedules.ScheduleInterleavedZeroBubble._calculate_single_rank_operations(me, rank)
                     if a is not None]
    return out


@pytest.mark.parametrize("devices", [2, 3, 4])
@pytest.mark.parametrize("local", [1, 2])
@pytest.mark.parametrize("micro", range(1, 9))
def test_zero_bubble_is_torchs_own_order(devices, local, micro):
    rounds = max(1, micro // devices)
    pieces = devices * local
    if micro % rounds:  # torch's constructor refuses these micro-batch counts; the lab says which counts it takes
        with pytest.raises(LabError, match="zero bubble takes the micro-batches in rounds"):
            order.schedule("zero_bubble", list(range(0, pieces, devices)), pieces, micro)
        return
    theirs = torch_zero_bubble(devices, local, micro)
    for rank in range(devices):
        mine = order.schedule("zero_bubble", list(range(rank, pieces, devices)), pieces, micro)
        assert mine[-1] == order.Action(order.OPTIMIZER)
        assert list(mine[:-1]) == theirs[rank], rank
        # every micro-batch of every piece: one forward, one input gradient, then one weight gradient
        assert sorted(map(repr, mine[:-1])) == sorted(map(repr, [order.Action(kind, k, m) for kind in (
            order.FORWARD, order.BACKWARD_INPUT, order.BACKWARD_WEIGHT) for k in range(rank, pieces, devices)
            for m in range(micro)]))
        for a in mine:
            if a.kind == order.BACKWARD_WEIGHT:
                assert mine.index(order.Action(order.BACKWARD_INPUT, a.piece, a.micro)) < mine.index(a)


def test_a_plan_that_neither_chains_nor_goes_round_is_refused_under_zero_bubble():
    with pytest.raises(LabError, match="the zero-bubble schedule runs a chain with one stretch per device"):
        order.schedule("zero_bubble", [0, 1], 4, 4)  # two stretches side by side
    assert order.schedule("zero_bubble", [1], 3, 4, train=False) == order.gpipe([1], 4, train=False)


@pytest.mark.parametrize("seed", range(12))
def test_zero_bubble_on_random_chain_and_looped_plans_runs_to_the_end_and_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    P, v = int(rng.integers(2, 4)), int(rng.integers(1, 3))
    n = P * v
    m_count = int(rng.choice([m for m in range(1, 9) if m % max(1, m // P) == 0]))
    pieces = random_plan(rng, n, lambda k: f"D{k % P}", lambda k: 1)
    pieces = [replace(p, weight_share=float(rng.uniform(0.0, 1.0))) for p in pieces]
    check_against_reference(pieces, m_count, "zero_bubble", {
        f"D{r}": order.schedule("zero_bubble", list(range(r, n, P)), n, m_count) for r in range(P)})
