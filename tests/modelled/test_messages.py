"""The one name of a message between the processes of a placement step (lab.modelled.placement.order.Message): its
gloo tag tells every message of a step apart, and the model of the executor sends and receives each message it
names exactly once, between the processes the name says."""
from __future__ import annotations

import itertools
import random

import pytest

from lab.modelled.placement.core_tasks import Recv, Send
from lab.modelled.placement.executor import StepCosts, tasks
from lab.modelled.placement.order import BACKWARD, FORWARD, Message, Piece


def test_every_message_of_a_step_has_its_own_tag():
    names = [Message(way, piece, out, micro, reader=0) for way, piece, out, micro in
             itertools.product((FORWARD, BACKWARD), range(6), range(16), range(256))]
    assert len({m.tag for m in names}) == len(names)
    assert all(0 <= m.tag < 2 ** 31 for m in names)  # gloo's tag is a 32-bit int


def random_plan(rng: random.Random, n: int, devices: list[str]) -> list[Piece]:
    """``n`` pieces, each reading one to three earlier pieces' outputs (the first reads the model's input), on
    random devices."""
    out = []
    for i in range(n):
        srcs = sorted(rng.sample(range(i), min(i, rng.randint(1, 3)))) if i else []
        inputs = tuple((s, rng.randint(0, 1), 64.0) for s in srcs)
        out.append(Piece(i, rng.choice(devices), (("op", 1e-3, 1.0),), 1e-3, inputs, loss=i == n - 1))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_the_model_sends_and_receives_each_named_message_once_between_the_processes_it_names(seed):
    rng = random.Random(seed)
    devices = ["A", "B", "C"][:rng.randint(2, 3)]
    pieces = random_plan(rng, rng.randint(2, 6), devices)
    used = sorted({p.device for p in pieces}, key=devices.index)
    rank = {d: r for r, d in enumerate(used)}
    lists = tasks(pieces, used, rng.randint(1, 3), StepCosts())
    sent = {t.key: (r, t.to) for r, lst in enumerate(lists) for t in lst if isinstance(t, Send)}
    got = {t.key: r for r, lst in enumerate(lists) for t in lst if isinstance(t, Recv)}
    assert len(sent) == sum(isinstance(t, Send) for lst in lists for t in lst)  # no message sent twice
    assert len(got) == sum(isinstance(t, Recv) for lst in lists for t in lst)
    assert set(sent) == set(got) and all(sent[k][1] == got[k] for k in sent)
    for msg, (src, dst) in sent.items():
        assert isinstance(msg, Message)
        producer = rank[pieces[msg.piece].device]
        # Forward the activation goes from the producing piece's process to the reader; backward its gradient
        # comes back from the reader.
        assert (src, dst) == ((producer, msg.reader) if msg.way == FORWARD else (msg.reader, producer))
        assert src != dst
    # Every output read on another device crosses once per micro-batch each way.
    crossing = {(p.index, o, rank[d]) for p in pieces for q in pieces for (s, o, _) in q.inputs
                if s == p.index and (d := q.device) != p.device}
    assert {(m.piece, m.output, m.reader) for m in sent if m.way == FORWARD} == crossing
    assert {(m.piece, m.output, m.reader) for m in sent if m.way == BACKWARD} == crossing
