"""The modelled schedule of a placement run (lab.modelled.placement.pipeline): pieces on devices,
GPipe micro-batches, forward then backward then the optimizer, checked against hand-computed
times, the textbook GPipe time of a chain, and an independent fixed-point reimplementation."""

from __future__ import annotations

import ast
import math

import numpy as np
import pytest

from lab.errors import LabError
from lab.modelled.placement.order import Piece
from lab.modelled.placement.pipeline import gpipe_bound, simulate
from tests.conftest import ROOT


def no_link(src: str, dst: str, nbytes: float) -> float:
    return 0.0


def cut(specs, fwd, bwd) -> list[Piece]:
    """Pieces from ``(index, device, operators, inputs as (source, bytes), loss)`` and per-operator forward and
    backward seconds (a piece's backward is its operators' sum); a second tensor from the same source is its
    next output."""
    out = []
    for k, device, ops, inputs, loss in specs:
        seen: dict[int, int] = {}
        ins = []
        for src, nbytes in inputs:
            ins.append((src, seen.get(src, 0), nbytes))
            seen[src] = seen.get(src, 0) + 1
        out.append(Piece(k, device, tuple((o, fwd[o], 1.0) for o in ops), sum(bwd[o] for o in ops), tuple(ins), loss))
    return out


def _tasks(sched, kind: str) -> dict[tuple[int, int], tuple[float, float]]:
    """(piece, micro) -> (first start, last end) of the forward (with loss) or backward rows."""
    kinds = ("forward", "loss") if kind == "forward" else (kind,)
    out: dict[tuple[int, int], tuple[float, float]] = {}
    for r in sched.rows:
        if r["kind"] in kinds:
            key = (r["piece"], r["micro"])
            s, e = out.get(key, (math.inf, -math.inf))
            out[key] = (min(s, r["start"]), max(e, r["end"]))
    return out


def _chain2(link=no_link, m: int = 3, optimizer=None):
    pieces = cut([(0, "A", ("a",), (), False), (1, "B", ("b",), ((0, 500.0),), True)],
                 {"a": 1.0, "b": 1.0}, {"a": 2.0, "b": 2.0})
    return simulate(pieces, link, m, optimizer=optimizer)


def test_one_piece_on_one_device_runs_everything_back_to_back():
    pieces = cut([(0, "cpu", ("a", "b"), (), True)], {"a": 1.0, "b": 0.5}, {"a": 2.0, "b": 1.0})
    s = simulate(pieces, no_link, 3, optimizer={"cpu": 0.7})
    assert s.makespan == pytest.approx(3 * (1.5 + 3.0) + 0.7)
    assert s.micro_batches == 3
    assert [(r["kind"], r["op"], r["micro"]) for r in s.rows[:6]] == [
        ("forward", "a", 0), ("forward", "b", 0), ("forward", "a", 1), ("forward", "b", 1),
        ("forward", "a", 2), ("forward", "b", 2)]
    # Backward runs the piece as one call (as autograd does), micro-batch by micro-batch.
    assert [(r["kind"], r["op"], r["micro"], r["end"] - r["start"]) for r in s.rows[6:9]] == [
        ("backward", None, m, pytest.approx(3.0)) for m in range(3)]
    assert s.rows[-1] == {"device": "cpu", "piece": None, "micro": None, "kind": "optimizer", "op": None,
                          "start": pytest.approx(13.5), "end": pytest.approx(14.2)}
    assert s.busy() == {"cpu": pytest.approx(14.2)} and s.bubble() == pytest.approx(0.0)
    with_loss = simulate(pieces, no_link, 3, optimizer={"cpu": 0.7}, loss_time=0.25)
    assert with_loss.makespan == pytest.approx(14.2 + 3 * 0.25)
    assert [r["start"] for r in with_loss.rows if r["kind"] == "loss"] == pytest.approx([1.5, 3.25, 5.0])


def test_a_two_piece_chain_matches_hand_computed_times_and_the_gpipe_bound():
    s = _chain2(optimizer={"A": 0.5, "B": 0.5})
    f, b = _tasks(s, "forward"), _tasks(s, "backward")
    assert [f[(0, m)] for m in range(3)] == [(0, 1), (1, 2), (2, 3)]
    assert [f[(1, m)] for m in range(3)] == [(1, 2), (2, 3), (3, 4)]
    assert [b[(1, m)] for m in range(3)] == [(4, 6), (6, 8), (8, 10)]
    # A's backward of micro-batch m waits for B's backward of m: 6, 8, 10.
    assert [b[(0, m)] for m in range(3)] == [(6, 8), (8, 10), (10, 12)]
    assert s.makespan == pytest.approx(12.5)
    assert f[(1, 2)][1] == gpipe_bound([1.0, 1.0], 3) == 4.0
    assert s.busy() == {"A": pytest.approx(9.5), "B": pytest.approx(9.5)}
    assert s.idle() == {"A": pytest.approx(3.0), "B": pytest.approx(3.0)}
    assert s.bubble() == pytest.approx(6.0 / 25.0)
    # A free link still crosses devices: one zero-length row per tensor, micro-batch and direction.
    moves = [(r["kind"], r["start"], r["end"]) for r in s.rows if r["kind"] in ("activation", "gradient")]
    assert moves == [("activation", t, t) for t in (1, 2, 3)] + [("gradient", t, t) for t in (6, 8, 10)]


@pytest.mark.parametrize("times,m", [([1.0, 3.0, 2.0], 4), ([2.5, 0.5, 0.5, 1.0], 3), ([1.0], 5)])
def test_the_forward_phase_of_any_chain_on_distinct_devices_is_the_gpipe_bound(times, m):
    names = [f"o{i}" for i in range(len(times))]
    pieces = cut([(i, f"d{i}", (names[i],), ((i - 1, 8.0),) if i else (), i == len(times) - 1)
                  for i in range(len(times))], dict(zip(names, times)), dict.fromkeys(names, 0.0))
    s = simulate(pieces, no_link, m)
    assert _tasks(s, "forward")[(len(times) - 1, m - 1)][1] == pytest.approx(gpipe_bound(times, m))


def test_link_delays_shift_arrival_exactly_in_each_direction():
    # 500 bytes take 1 s from A to B and 1.5 s back: the gradient uses the reverse route.
    rate = {("A", "B"): 1.0 / 500, ("B", "A"): 1.5 / 500}
    s = _chain2(link=lambda src, dst, n: rate[(src, dst)] * n)
    f, b = _tasks(s, "forward"), _tasks(s, "backward")
    assert [f[(1, m)] for m in range(3)] == [(2, 3), (3, 4), (4, 5)]
    assert [b[(1, m)] for m in range(3)] == [(5, 7), (7, 9), (9, 11)]
    assert [b[(0, m)] for m in range(3)] == [(8.5, 10.5), (10.5, 12.5), (12.5, 14.5)]
    assert s.makespan == pytest.approx(14.5)
    act = [r for r in s.rows if r["kind"] == "activation"]
    grad = [r for r in s.rows if r["kind"] == "gradient"]
    assert [(r["start"], r["end"]) for r in act] == [(1, 2), (2, 3), (3, 4)]
    assert [(r["start"], r["end"]) for r in grad] == [(7, 8.5), (9, 10.5), (11, 12.5)]
    assert act[0] == {"kind": "activation", "src": "A", "dst": "B", "piece": 1, "from_piece": 0, "micro": 0,
                      "bytes": 500.0, "start": 1.0, "end": 2.0, "device": "B", "op": None}
    assert (grad[0]["src"], grad[0]["dst"], grad[0]["piece"], grad[0]["from_piece"]) == ("B", "A", 0, 1)


def test_a_device_runs_its_first_piece_for_every_micro_batch_before_its_later_piece():
    def link(src, dst, n):
        assert src != dst, "a link between a device and itself is never asked for"
        return 0.0

    # A -> B -> A, and piece 2 also reads piece 0's output on A (the same process: free).
    times = {"a": 1.0, "b": 2.0, "c": 1.0}
    pieces = cut([(0, "A", ("a",), (), False), (1, "B", ("b",), ((0, 1.0),), False),
                  (2, "A", ("c",), ((1, 1.0), (0, 1e9)), True)], times, times)
    s = simulate(pieces, link, 2)
    f, b = _tasks(s, "forward"), _tasks(s, "backward")
    assert [f[k] for k in [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]] == [
        (0, 1), (1, 2), (1, 3), (3, 5), (3, 4), (5, 6)]
    assert [b[k] for k in [(2, 0), (2, 1), (1, 0), (1, 1), (0, 0), (0, 1)]] == [
        (6, 7), (7, 8), (7, 9), (9, 11), (9, 10), (11, 12)]
    on_a = sorted((r["start"], r["piece"], r["micro"]) for r in s.rows if r["device"] == "A"
                  and r["kind"] == "forward")
    assert [(p, m) for _, p, m in on_a] == [(0, 0), (0, 1), (2, 0), (2, 1)]
    assert s.makespan == pytest.approx(12.0)
    assert {(r["from_piece"], r["piece"]) for r in s.rows if r["kind"] in ("activation", "gradient")} == {
        (0, 1), (1, 2), (2, 1), (1, 0)}


@pytest.mark.parametrize("b_back,start0", [(2.0, 8.0), (4.0, 9.0)])
def test_in_a_diamond_the_first_piece_waits_for_both_gradients(b_back, start0):
    fwd = {"x": 1.0, "l": 2.0, "r": 1.0, "y": 1.0}
    bwd = {"x": 1.0, "l": b_back, "r": 3.0, "y": 1.0}
    pieces = cut([(0, "A", ("x",), (), False), (1, "B", ("l",), ((0, 1.0),), False), (2, "C", ("r",), ((0, 1.0),), False),
                  (3, "A", ("y",), ((1, 1.0), (2, 1.0)), True)], fwd, bwd)
    s = simulate(pieces, no_link, 1)
    f, b = _tasks(s, "forward"), _tasks(s, "backward")
    assert f[(3, 0)] == (3, 4)  # waits for the slower branch, B (ends at 3), not C (ends at 2)
    assert b[(3, 0)] == (4, 5) and b[(1, 0)] == (5, 5 + b_back) and b[(2, 0)] == (5, 8)
    assert b[(0, 0)] == (start0, start0 + 1)
    assert s.makespan == pytest.approx(start0 + 1)


KIND_LETTER = {"forward": "F", "backward": "B", "backward_input": "I", "backward_weight": "W"}


def _reference(pieces, link, m_count, opt, loss_time, lists=None):
    """Every task's (start, end) by fixed-point iteration over explicit dependency lists; each device's tasks in
    GPipe's order written out here, or in the order of its list of actions ``lists[device]``. Lists with split
    backwards (zero bubble) have an input gradient "I" where the others have "B" (the gradient chain runs through
    it) and a weight gradient "W" after it."""
    dev = [p.device for p in pieces]
    split = lists is not None and any(a.kind == "backward_input" for acts in lists.values() for a in acts)
    back = "I" if split else "B"
    dur, deps, order = {}, {}, {d: [] for d in dev}
    for p in pieces:
        for m in range(m_count):
            dur[("F", p.index, m)] = sum(t * x for _, t, x in p.forward) + (loss_time if p.loss else 0.0)
            deps[("F", p.index, m)] = [(("F", s, m), 0.0 if dev[s] == p.device else link(dev[s], p.device, n))
                                       for s, _, n in p.inputs]
            deps[(back, p.index, m)] = [(("F", p.index, m), 0.0)]
            if split:  # an input gradient is nothing on a piece with no input from another piece; all is W's
                total = p.backward * p.backward_scale
                dur[("W", p.index, m)] = total * (p.weight_share if p.inputs else 1.0)
                dur[("I", p.index, m)] = total - dur[("W", p.index, m)]
                deps[("W", p.index, m)] = [(("I", p.index, m), 0.0)]
            else:
                dur[("B", p.index, m)] = p.backward * p.backward_scale
    for p in pieces:
        for s, _, n in p.inputs:
            for m in range(m_count):
                delay = 0.0 if dev[s] == p.device else link(p.device, dev[s], n)
                deps[(back, s, m)].append(((back, p.index, m), delay))
    for d in order:
        mine = [p.index for p in pieces if p.device == d]
        order[d] = ([("F", k, m) for k in mine for m in range(m_count)]
                    + [("B", k, m) for k in reversed(mine) for m in range(m_count)] + [("O", d)])
        if lists is not None:
            order[d] = [(KIND_LETTER[a.kind], a.piece, a.micro) if a.piece is not None else ("O", d)
                        for a in lists[d]]
        dur[("O", d)] = opt.get(d, 0.0)
        deps[("O", d)] = []
        for prev, task in zip(order[d], order[d][1:]):
            deps[task].append((prev, 0.0))
    start = dict.fromkeys(dur, 0.0)
    for _ in range(len(dur) + 2):
        new = {t: max([0.0] + [start[u] + dur[u] + delay for u, delay in deps[t]]) for t in dur}
        if new == start:
            return {t: (start[t], start[t] + dur[t]) for t in dur}
        start = new
    raise AssertionError("the reference did not converge")


@pytest.mark.parametrize("seed", range(20))
def test_random_plans_match_an_independent_fixed_point_reimplementation(seed):
    rng = np.random.default_rng(seed)
    n_pieces, m_count = int(rng.integers(1, 7)), int(rng.integers(1, 5))
    devices = ["A", "B", "C"]
    specs, fwd, bwd = [], {}, {}
    loss_at = int(rng.integers(n_pieces))
    for k in range(n_pieces):
        ops = tuple(f"p{k}o{j}" for j in range(int(rng.integers(1, 4))))
        for o in ops:
            fwd[o] = float(rng.choice([0.0, rng.uniform(0.1, 2.0)], p=[0.1, 0.9]))
            bwd[o] = float(rng.uniform(0.0, 3.0))
        srcs = rng.choice(k, size=int(rng.integers(0, min(k, 3) + 1)), replace=False) if k else []
        inputs = tuple((int(s), float(rng.uniform(0, 1e6))) for s in srcs)
        if k and rng.random() < 0.3:  # a second tensor from the same piece
            inputs += ((int(rng.integers(k)), float(rng.uniform(0, 1e6))),)
        specs.append((k, str(rng.choice(devices)), ops, inputs, k == loss_at))
    pieces = cut(specs, fwd, bwd)
    lat = {(a, b): float(rng.uniform(0, 0.5)) for a in devices for b in devices}
    bw = {(a, b): float(rng.uniform(1e5, 1e7)) for a in devices for b in devices}

    def link(a, b, n):
        return lat[(a, b)] + n / bw[(a, b)]

    opt = {d: float(rng.uniform(0, 1)) for d in devices if rng.random() < 0.7}
    loss_time = float(rng.choice([0.0, 0.4]))
    s = simulate(pieces, link, m_count, optimizer=opt, loss_time=loss_time)
    ref = _reference(pieces, link, m_count, opt, loss_time)
    got = {("F", *k): v for k, v in _tasks(s, "forward").items()}
    got |= {("B", *k): v for k, v in _tasks(s, "backward").items()}
    got |= {("O", r["device"]): (r["start"], r["end"]) for r in s.rows if r["kind"] == "optimizer"}
    assert got.keys() == ref.keys()
    for t in ref:
        assert got[t] == pytest.approx(ref[t], abs=1e-9), t
    assert s.makespan == pytest.approx(max(e for _, e in ref.values()), abs=1e-9)
    # A forward task's operators run back to back, each once per micro-batch; a backward is one call per piece.
    compute = [r for r in s.rows if r["kind"] in ("forward", "backward")]
    assert len(compute) == m_count * (len(fwd) + len(pieces))
    crossing = sum(p.device != pieces[src].device for p in pieces for src, _, _ in p.inputs)
    assert len([r for r in s.rows if r["kind"] in ("activation", "gradient")]) == 2 * m_count * crossing
    busy = s.busy()
    for d in busy:
        assert busy[d] == pytest.approx(sum(e - st for t, (st, e) in ref.items()
                                            if (t[0] == "O" and t[1] == d)
                                            or (t[0] != "O" and pieces[t[1]].device == d)), abs=1e-9)
    assert 0.0 <= s.bubble() < 1.0


def _piece(k: int, device: str, op: str = "", *, inputs=(), loss=False, fwd=1.0, bwd=1.0, scale=1.0) -> Piece:
    return Piece(k, device, ((op or "ab"[k % 2], fwd, scale),), bwd, inputs, loss)


P = [_piece(0, "A"), _piece(1, "B", inputs=((0, 0, 4.0),), loss=True)]


@pytest.mark.parametrize("kwargs,message", [
    ({"micro_batches": 0}, "micro_batches must be an integer >= 1 (got 0)"),
    ({"micro_batches": 2.5}, "micro_batches must be an integer >= 1"),
    ({"micro_batches": True}, "micro_batches must be an integer >= 1"),
    ({"pieces": []}, "there are no pieces"),
    ({"pieces": [P[0], _piece(2, "B", loss=True)]}, "pieces[1] has index 2"),
    ({"pieces": [P[0], ("b", 1.0)]}, "pieces[1] must be a Piece (got tuple)"),
    ({"pieces": [_piece(0, "A", inputs=((1, 0, 4.0),)), _piece(1, "B", loss=True)]},
     "piece 0 reads from piece 1; a piece reads only from an earlier piece"),
    ({"pieces": [P[0], _piece(1, "B", inputs=((1, 0, 4.0),), loss=True)]}, "piece 1 reads from piece 1"),
    ({"pieces": [P[0], _piece(1, "B", inputs=((0, 4.0),), loss=True)]}, "each input must be (source piece, output, bytes)"),
    ({"pieces": [P[0], _piece(1, "B")]}, "exactly one piece must compute the loss (found 0"),
    ({"pieces": [_piece(0, "A", loss=True), P[1]]}, "exactly one piece must compute the loss (found 2"),
    ({"pieces": [P[0], _piece(1, "B", "a", loss=True)]}, "operator 'a' is in piece 0 and in piece 1"),
    ({"pieces": [Piece(0, "A", (), 1.0, loss=True)]}, "piece 0 has no operators"),
    ({"pieces": [_piece(0, "A", fwd=-1.0), P[1]]}, "forward time of operator 'a' must be a finite number >= 0"),
    ({"pieces": [_piece(0, "A", fwd=math.nan), P[1]]}, "forward time of operator 'a' must be a finite number >= 0"),
    ({"pieces": [_piece(0, "A", bwd=math.inf), P[1]]}, "backward time of piece 0 must be a finite number >= 0"),
    ({"pieces": [_piece(0, "A", scale=0.0), P[1]]}, "emulated factor of operator 'a' must be above 0"),
    ({"link": lambda a, b, n: -1.0}, "link('A', 'B', 4.0) must be a finite number >= 0"),
    ({"optimizer": {"A": "fast"}}, "optimizer time of 'A' must be a number (got 'fast')"),
    ({"loss_time": -0.1}, "loss_time must be a finite number >= 0"),
])
def test_bad_input_is_refused_with_a_message_that_says_what_is_wrong(kwargs, message):
    args = {"pieces": P, "link": no_link, "micro_batches": 2} | kwargs
    with pytest.raises(LabError) as e:
        simulate(**args)
    assert message in str(e.value)
    assert str(e.value).startswith("pipeline model: ")


def test_an_emulated_factor_stretches_each_operator_and_the_backward_in_the_ideal_model():
    # An operator three times slower than its device's measured time, and a backward twice: the device is busy for
    # the emulated time (it waits while the slower device would compute).
    pieces = [Piece(0, "A", (("a", 1.0, 3.0), ("b", 0.5, 1.0)), 2.0, loss=True, backward_scale=2.0)]
    s = simulate(pieces, no_link, 2)
    assert [(r["kind"], r["end"] - r["start"]) for r in s.rows if r["micro"] == 0] == [
        ("forward", pytest.approx(3.0)), ("forward", pytest.approx(0.5)), ("backward", pytest.approx(4.0))]
    assert s.makespan == pytest.approx(2 * (3.5 + 4.0))


def test_gpipe_bound_and_its_input_checks():
    assert gpipe_bound([1.0, 3.0, 2.0], 4) == 15.0
    assert gpipe_bound([2.0], 1) == 2.0
    with pytest.raises(LabError, match="stage_times is empty"):
        gpipe_bound([], 2)
    with pytest.raises(LabError, match="micro_batches must be an integer >= 1"):
        gpipe_bound([1.0], 0)


def test_the_module_imports_only_the_standard_library_numpy_lab_errors_and_the_order():
    tree = ast.parse((ROOT / "lab/modelled/placement/pipeline.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= {"__future__", "collections", "math", "dataclasses", "numbers", "typing", "numpy", "lab.errors",
                     "lab.modelled.placement.order"}, names


def test_both_models_follow_the_one_order_of_actions_on_every_device():
    # A plan that returns to a device (A, B, A, C, B) with a skip input: every device's rows, in both the
    # ideal model and the executor model, are its list of actions.
    from lab.modelled.placement import order
    from lab.modelled.placement.core_tasks import Cpu
    from lab.modelled.placement.executor import StepCosts, tasks

    devs = ["A", "B", "A", "C", "B"]
    fwd = {f"o{k}": 0.1 * (k + 1) for k in range(5)}
    pieces = cut([(k, d, (f"o{k}",), ((k - 1, 100.0),) * (k > 0) + ((0, 50.0),) * (k == 3), k == 4)
                  for k, d in enumerate(devs)], fwd, {o: 2 * t for o, t in fwd.items()})
    s = simulate(pieces, lambda a, b, n: n * 1e-3, 3)
    lists = tasks(pieces, ["A", "B", "C"], 3, StepCosts())  # the executor model takes the same pieces
    for r, d in enumerate(["A", "B", "C"]):
        want = list(order.gpipe([k for k, x in enumerate(devs) if x == d], 3))
        assert order.actions_in([x for x in s.rows if x["device"] == d and x["kind"] not in ("activation",
                                                                                             "gradient")]) == want
        assert order.actions_in([t.row for t in lists[r] if isinstance(t, Cpu)]) == want
    assert order.gpipe([2, 0], 2, train=False) == (order.Action("forward", 0, 0), order.Action("forward", 0, 1),
                                                   order.Action("forward", 2, 0), order.Action("forward", 2, 1))
