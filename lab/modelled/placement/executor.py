"""The lab's placement executor as task lists: what each process of a placement run does in one step, in
the executor's own order, for the core model (:mod:`.cores`) to run on shared cores.

The order is the one list of actions (:func:`.order.schedule`) that
:class:`lab.train.placement_run.PlacementTrainer` runs and the ideal pipeline model (:mod:`.pipeline`) follows on
a core per process:

* **Forward**, the process's pieces by ascending index, each for micro-batches ``0..M-1``: receive every
  input that another process produced (once per tensor and micro-batch, unpacking it), call the piece (a
  per-call cost, then its operators; emulated, each operator is followed by a wait of ``s - 1`` times its
  warm time, as the executor measures it), send each output once to every other process that reads it, and
  on the loss piece compute the loss.
* **Backward**, its pieces by descending index, micro-batches ``0..M-1``: receive the gradient of every
  output another process read, run the piece's backward (a per-call cost, then its operators'; emulated,
  a wait of ``s - 1`` times its warm time, ``s`` weighted by the forward times), and send the gradient of
  every input that came from another process once the last local piece reading it is done. Under the
  zero-bubble schedule a backward is two tasks: the input's gradient, which receives and sends as a whole
  backward does, and later the weights' gradient, which only computes (:meth:`.order.Piece.backward_parts`).
* **The optimiser** of the process's parameters; then the process waits until every message it sent has
  been received.

A message costs the sender ``send`` (packing, the time stamp, ``isend``), the receiver ``recv`` (unpacking),
and ``wire`` on the way; with emulation the receive returns no sooner than the topology's link time after the
message left. The background CPU of communication threads is the machine's (:class:`.core_tasks.Machine`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from lab.errors import LabError
from lab.modelled.placement.core_tasks import Cpu, Recv, Send, Sleep
from lab.modelled.placement.order import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Message, Piece
from lab.modelled.placement.order import schedule as order_of

WHERE = "executor model"


@dataclass(frozen=True)
class Linear:
    """``fixed + per_byte x bytes`` seconds."""

    fixed: float = 0.0
    per_byte: float = 0.0

    def __call__(self, nbytes: float) -> float:
        return self.fixed + self.per_byte * nbytes


@dataclass(frozen=True)
class StepCosts:
    """The costs of the executor's own work around the operators (seconds)."""

    call: float = 0.0  # one forward call of a piece
    node: float = 0.0  # per operator when the piece runs node by node (emulated or timed)
    backward_call: float = 0.0  # one backward call of a piece
    loss: float = 0.0  # the loss of one micro-batch
    send: Linear = field(default_factory=Linear)  # the sender's CPU of one message
    recv: Linear = field(default_factory=Linear)  # the receiver's CPU of one message
    wire: Linear = field(default_factory=Linear)  # from departure to arrival, no CPU


def tasks(pieces: Sequence[Piece], devices: Sequence[str], micro_batches: int, costs: StepCosts,
          optimizer: Mapping[str, float] | None = None,
          link: Callable[[str, str, float], float] | None = None, node_by_node: bool = False,
          schedule: str = "gpipe") -> list[list]:
    """Each process's task list (process ``r`` holds ``devices[r]``) for one training step. ``link`` (emulation):
    the topology's seconds for a tensor between two devices; ``node_by_node``: the pieces run through the
    timing interpreter (the executor does when it emulates or records a timeline)."""
    pieces = list(pieces)
    rank = {d: r for r, d in enumerate(devices)}
    for s in pieces:
        if s.device not in rank:
            raise LabError(f"piece {s.index} is on {s.device!r}, which no process holds", where=WHERE)
    if len(set(devices)) != len(devices):
        raise LabError("two processes hold the same device", where=WHERE)
    if [s.index for s in pieces] != list(range(len(pieces))):
        raise LabError("pieces must be indexed 0..n-1 in list order", where=WHERE)
    M = int(micro_batches)
    if M < 1:
        raise LabError("micro_batches must be at least 1", where=WHERE)
    # readers[(piece, out)] -> the reading pieces in ascending order; bytes of each output.
    readers: dict[tuple[int, int], list[int]] = {}
    size: dict[tuple[int, int], float] = {}
    for s in pieces:
        for src, out, nbytes in s.inputs:
            if not 0 <= src < s.index:
                raise LabError(f"piece {s.index} reads piece {src}; pieces read only earlier pieces", where=WHERE)
            readers.setdefault((src, out), []).append(s.index)
            size[(src, out)] = float(nbytes)
    outputs = {s.index: sorted({o for (k, o) in readers if k == s.index}) for s in pieces}
    # The executor sends an output in the order its readers first appear.
    order = {k: [key for key in readers if key[0] == k] for k in range(len(pieces))}
    dev = [s.device for s in pieces]
    lists: list[list] = [[] for _ in devices]

    def hold(a: str, b: str, nbytes: float) -> float:
        return float(link(a, b, nbytes)) if link is not None else 0.0

    def send(r: int, key: Message, to_dev: str, nbytes: float, row: dict) -> None:
        lists[r].append(Send(key, rank[to_dev], cpu=costs.send(nbytes), wire=costs.wire(nbytes),
                             hold=hold(devices[r], to_dev, nbytes), row=row))

    def forward(r: int, d: str, s: Piece, m: int, got: set) -> None:
        out = lists[r]
        for src, o, _ in s.inputs:
            if dev[src] != d and (src, o, m) not in got:
                got.add((src, o, m))
                out.append(Recv(Message(FORWARD, src, o, m, r), cpu=costs.recv(size[(src, o)])))
        for j, (op, sec, scale) in enumerate(s.forward):
            warm = sec + (costs.node if node_by_node else 0.0)  # as the executor times an operator
            out.append(Cpu(warm + (costs.call if j == 0 else 0.0),
                           {"device": d, "piece": s.index, "micro": m, "kind": "forward", "op": op}))
            if scale > 1.0:  # the executor's emulated wait: the slow-down times the operator's warm time
                out.append(Sleep((scale - 1.0) * warm, row={"device": d, "piece": s.index, "micro": m,
                                                            "kind": "emulated", "op": op}))
        for key in order[s.index]:
            for rd in dict.fromkeys(dev[k] for k in readers[key]):
                if rd != d:
                    first = min(k for k in readers[key] if dev[k] == rd)
                    send(r, Message(FORWARD, key[0], key[1], m, rank[rd]), rd, size[key],
                         {"kind": "activation", "src": d, "dst": rd, "piece": first, "from_piece": s.index,
                          "micro": m, "bytes": size[key], "device": rd, "op": None})
        if s.loss:
            out.append(Cpu(costs.loss, {"device": d, "piece": s.index, "micro": m, "kind": "loss", "op": None}))

    def computed(r: int, d: str, s: Piece, m: int, seconds: float, kind: str) -> None:
        lists[r].append(Cpu(seconds + costs.backward_call, {"device": d, "piece": s.index, "micro": m, "kind": kind,
                                                           "op": None}))
        if s.backward_scale > 1.0:
            lists[r].append(Sleep((s.backward_scale - 1.0) * (seconds + costs.backward_call),
                                  row={"device": d, "piece": s.index, "micro": m, "kind": "emulated", "op": None}))

    def backward(r: int, d: str, s: Piece, m: int, last_reader: dict, kind: str = BACKWARD) -> None:
        # a whole backward, or a split one's input gradient: both receive and send the gradients
        out = lists[r]
        for o in outputs[s.index]:
            for rd in dict.fromkeys(dev[k] for k in readers[(s.index, o)]):
                if rd != d:
                    out.append(Recv(Message(BACKWARD, s.index, o, m, rank[rd]), cpu=costs.recv(size[(s.index, o)])))
        # the CPU of a split half: its emulated share over the factor (the factor's wait comes after it)
        computed(r, d, s, m, s.backward if kind == BACKWARD else s.backward_parts()[0] / s.backward_scale, kind)
        sent = set()
        for src, o, _ in s.inputs:
            if dev[src] != d and last_reader[(src, o)] == s.index and (src, o) not in sent:
                sent.add((src, o))
                send(r, Message(BACKWARD, src, o, m, r), dev[src], size[(src, o)],
                     {"kind": "gradient", "src": d, "dst": dev[src], "piece": src, "from_piece": s.index,
                      "micro": m, "bytes": size[(src, o)], "device": dev[src], "op": None})

    for r, d in enumerate(devices):
        mine = [s for s in pieces if s.device == d]
        got: set = set()  # a tensor is received once per process and micro-batch, whichever piece reads it
        # A gradient goes back once the last local piece reading the tensor (the smallest index) is done.
        last_reader: dict[tuple[int, int], int] = {}
        for s in mine:
            for src, o, _ in s.inputs:
                if dev[src] != d:
                    last_reader[(src, o)] = min(last_reader.get((src, o), s.index), s.index)
        for a in order_of(schedule, [s.index for s in mine], len(pieces), M):
            if a.kind == FORWARD:
                forward(r, d, pieces[a.piece], a.micro, got)
            elif a.kind in (BACKWARD, BACKWARD_INPUT):
                backward(r, d, pieces[a.piece], a.micro, last_reader, a.kind)
            elif a.kind == BACKWARD_WEIGHT:
                s = pieces[a.piece]
                computed(r, d, s, a.micro, s.backward_parts()[1] / s.backward_scale, BACKWARD_WEIGHT)
            else:
                lists[r].append(Cpu((optimizer or {}).get(d, 0.0), {"device": d, "piece": None, "micro": None,
                                                                    "kind": "optimizer", "op": None}))
    return lists


def messages(pieces: Sequence[Piece], devices: Sequence[str], micro_batches: int,
             schedule: str = "gpipe") -> dict[tuple[int, int], int]:
    """Messages per step between each pair of ranks (the smaller rank first)."""
    out: dict[tuple[int, int], int] = {}
    for r, lst in enumerate(tasks(pieces, devices, micro_batches, StepCosts(), schedule=schedule)):
        for t in lst:
            if isinstance(t, Send):
                key = (min(r, t.to), max(r, t.to))
                out[key] = out.get(key, 0) + 1
    return out


__all__ = ["Linear", "StepCosts", "tasks", "messages"]
