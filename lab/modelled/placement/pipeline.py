"""The modelled schedule of one training step of a placement run: pieces, micro-batches, GPipe.

A placement run cuts a model's operators into *pieces*: maximal runs of consecutive operators (in
topological order) placed on the same device. One process per device runs its pieces; a batch is
split into ``M`` micro-batches that are pipelined GPipe-style. :func:`simulate` predicts when every
operator of one step runs, in the same order as the lab's executor, so the measured and the
modelled Gantt chart can share one time axis.

**The executor's order**, which this model runs: every device works through the same list of actions
as the executor, :func:`.order.gpipe`. Forward: its pieces by ascending index and, for each piece,
micro-batches ``0..M-1`` ("piece-major", as GPipe). Backward: its pieces by *descending* index,
micro-batches ``0..M-1`` each. Then the device's optimizer step.

* A forward task ``(k, m)`` runs the piece's operators back to back and starts when the device is
  free and every input has arrived: the producer's forward ``(src, m)`` finish plus the link time
  of that tensor (nothing when the producer is on the same device, which is the same process).
  The loss piece adds ``loss_time`` at the end of its forward task.
* A backward task ``(k, m)`` runs the piece's backward (one call, as autograd runs it) and starts when
  the device is free, its own forward ``(k, m)`` has finished, and the gradient of every tensor that a
  later piece read from ``k`` has come back: that reader's backward ``(c, m)`` finish plus the link time
  from the reader's device, for the same bytes.
* Under the zero-bubble schedule a backward is two tasks: the input gradient (``backward_input``), which waits
  and sends as a whole backward does, and the weight gradient (``backward_weight``), which waits only for its own
  input gradient (:meth:`.order.Piece.backward_parts` splits the time).
* Links have no contention and a send never blocks the sender (the executor's sends are
  asynchronous); only the receiver waits.

Each device takes the next action of its list once what it waits for on other devices is done. Because
a device's forward tasks are ordered by ``(piece, micro)``, its backward tasks by ``(-piece, micro)``,
and every dependency points to a smaller key in that order, the lists always finish.

:func:`gpipe_bound` is the textbook forward time of a chain of stages without links, the reference
the tests hold a chain against.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Callable, Mapping, Sequence

from lab.errors import LabError
from lab.modelled.placement.order import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Action, Piece
from lab.modelled.placement.order import schedule as order_of

WHERE = "pipeline model"


@dataclass(frozen=True)
class PipelineSchedule:
    """The modelled rows of one step (compute and cross-device transfers) and its length.

    Compute rows: ``{"device", "piece", "micro", "kind", "op", "start", "end"}`` with ``kind`` one of
    ``forward``, ``backward`` (or its halves ``backward_input`` and ``backward_weight``), ``loss``, ``optimizer``
    (the last two with ``op`` None, the optimizer
    with ``piece`` and ``micro`` None). Transfer rows (``kind`` ``activation`` or ``gradient``) add
    ``src``, ``dst``, ``from_piece`` (the sender) and ``bytes``; ``piece`` and ``device`` are the
    receiver, ``start`` the sender's finish and ``end`` the arrival.
    """

    rows: list[dict]
    makespan: float
    micro_batches: int

    def busy(self) -> dict[str, float]:
        """Seconds of compute per device (forward, backward, loss and optimizer rows)."""
        out: dict[str, float] = {}
        for r in self.rows:
            if r["kind"] not in _TRANSFERS:
                out[r["device"]] = out.get(r["device"], 0.0) + r["end"] - r["start"]
        return out

    def idle(self) -> dict[str, float]:
        """Seconds per device in the step where it computes nothing (waiting counts as idle)."""
        return {d: max(0.0, self.makespan - b) for d, b in self.busy().items()}

    def bubble(self) -> float:
        """The idle fraction of all device-time (devices with pieces, over the whole step)."""
        idle = self.idle()
        total = self.makespan * len(idle)
        return sum(idle.values()) / total if total > 0 else 0.0


_TRANSFERS = ("activation", "gradient")


def is_transfer(row: Mapping[str, Any]) -> bool:
    """Whether a recorded row is a message in flight (an activation or a gradient), not device time."""
    return row.get("kind") in _TRANSFERS


def lanes(devices: Sequence[str], *row_sets: Sequence[Mapping[str, Any]]) -> list[str]:
    """``devices`` in their order, then any device a row names that ``devices`` lacks (its time is not lost)."""
    seen = dict.fromkeys(devices)
    for rows in row_sets:
        for r in rows:
            for key in ("device", "src", "dst"):
                if r.get(key) is not None:
                    seen.setdefault(r[key])
    return list(seen)


def bubble_share(rows: Sequence[Mapping[str, Any]], devices: Sequence[str]) -> float:
    """The pipeline's bubble in a step's rows: the share of device time (the span from the first start to the last
    end, times the devices) in which a device computes nothing (emulated waits count as computing: the emulated
    device is busy). nan without rows."""
    comp = [r for r in rows if not is_transfer(r)]
    if not comp or not devices:
        return math.nan
    span = max(r["end"] for r in comp) - min(r["start"] for r in comp)
    if span <= 0:
        return math.nan
    busy = {d: 0.0 for d in devices}
    for r in comp:
        if r.get("device") in busy:
            busy[r["device"]] += r["end"] - r["start"]
    return sum(max(0.0, span - b) for b in busy.values()) / (span * len(devices))


def check_seconds(x: Any, what: str, where: str = WHERE) -> float:
    """``x`` as seconds: a finite number >= 0, else a :class:`LabError` naming ``what``."""
    if isinstance(x, bool) or not isinstance(x, Real):
        raise LabError(f"{what} must be a number (got {x!r})", where=where)
    x = float(x)
    if not math.isfinite(x) or x < 0:
        raise LabError(f"{what} must be a finite number >= 0 (got {x})", where=where)
    return x


_seconds = check_seconds


def _micro(m: Any) -> int:
    if isinstance(m, bool) or not isinstance(m, Integral) or m < 1:
        raise LabError(f"micro_batches must be an integer >= 1 (got {m!r})", where=WHERE)
    return int(m)


def _check(pieces: list[Piece]) -> None:
    if not pieces:
        raise LabError("there are no pieces; a plan needs at least one", where=WHERE)
    seen: dict[str, int] = {}
    for i, p in enumerate(pieces):
        if not isinstance(p, Piece):
            raise LabError(f"pieces[{i}] must be a Piece (got {type(p).__name__})", where=WHERE)
        if p.index != i:
            raise LabError(f"pieces[{i}] has index {p.index!r}; pieces must be indexed 0..{len(pieces) - 1} "
                           "in list order", where=WHERE)
        if not isinstance(p.device, str) or not p.device:
            raise LabError(f"piece {i} has no device name (got {p.device!r})", where=WHERE)
        if not p.forward:
            raise LabError(f"piece {i} has no operators", where=WHERE)
        for op, sec, scale in p.forward:
            if op in seen:
                raise LabError(f"operator {op!r} is in piece {seen[op]} and in piece {i}; each operator "
                               "belongs to one piece", where=WHERE)
            seen[op] = i
            _seconds(sec, f"forward time of operator {op!r}")
            _factor(scale, f"emulated factor of operator {op!r}")
        _seconds(p.backward, f"backward time of piece {i}")
        _factor(p.backward_scale, f"emulated factor of piece {i}'s backward")
        if not 0.0 <= _seconds(p.weight_share, f"weight share of piece {i}'s backward") <= 1.0:
            raise LabError(f"the weight share of piece {i}'s backward must be between 0 and 1 (got {p.weight_share})",
                           where=WHERE)
        for entry in p.inputs:
            if not (isinstance(entry, tuple) and len(entry) == 3):
                raise LabError(f"piece {i}: each input must be (source piece, output, bytes) (got {entry!r})",
                               where=WHERE)
            src, _, nbytes = entry
            if isinstance(src, bool) or not isinstance(src, Integral) or not 0 <= src < i:
                raise LabError(f"piece {i} reads from piece {src!r}; a piece reads only from an earlier piece "
                               f"(0..{i - 1})", where=WHERE)
            _seconds(nbytes, f"bytes of the tensor piece {i} reads from piece {src}")
    losses = [p.index for p in pieces if p.loss]
    if len(losses) != 1:
        raise LabError(f"exactly one piece must compute the loss (found {len(losses)}: {losses})", where=WHERE)


def _factor(x: Any, what: str) -> float:
    # a device may be faster than the catalogue's (a slowdown below 1), never infinitely so
    x = _seconds(x, what)
    if x <= 0.0:
        raise LabError(f"{what} must be above 0 (got {x})", where=WHERE)
    return x


def simulate(pieces: Sequence[Piece], link: Callable[[str, str, float], float], micro_batches: int,
             optimizer: Mapping[str, float] | None = None, loss_time: float = 0.0,
             schedule: str = "gpipe") -> PipelineSchedule:
    """The modelled schedule of one step (see the module doc for the order and the rules).

    Each piece's operators take their forward seconds times their emulated factor, its backward its seconds
    times its factor (the device is busy while it emulates); ``link(src_device, dst_device, nbytes)``: seconds
    of a tensor between two different devices; ``optimizer[device]``: seconds of that device's optimizer step
    (0 when missing).
    """
    m_count = _micro(micro_batches)
    pieces = list(pieces)
    _check(pieces)
    if not callable(link):
        raise LabError("link must be a function (src_device, dst_device, nbytes) -> seconds", where=WHERE)
    loss_time = _seconds(loss_time, "loss_time")
    if optimizer is not None and not isinstance(optimizer, Mapping):
        raise LabError("optimizer must be a mapping {device: seconds}", where=WHERE)
    opt = {d: _seconds(s, f"optimizer time of {d!r}") for d, s in (optimizer or {}).items()}
    dev = [p.device for p in pieces]
    # Every micro-batch sends the same bytes over the same route: ask ``link`` once per route and size.
    link_memo: dict[tuple[str, str, float], float] = {}

    def hop(a: str, b: str, nbytes: float) -> float:
        # Same device is the same process: the tensor is already there.
        if a == b:
            return 0.0
        key = (a, b, float(nbytes))
        if key not in link_memo:
            link_memo[key] = _seconds(link(a, b, float(nbytes)), f"link({a!r}, {b!r}, {nbytes})")
        return link_memo[key]

    # grads[k]: (reader c, bytes) for every tensor a later piece reads from k; its gradient comes back.
    grads: list[list[tuple[int, float]]] = [[] for _ in pieces]
    for p in pieces:
        for src, _, nbytes in p.inputs:
            grads[src].append((p.index, float(nbytes)))

    rows: list[dict] = []
    free = dict.fromkeys(dev, 0.0)
    fwd_end: list[list[float | None]] = [[None] * m_count for _ in pieces]
    bwd_end: list[list[float | None]] = [[None] * m_count for _ in pieces]

    def transfer(kind: str, sender: int, receiver: int, m: int, nbytes: float, start: float, end: float) -> None:
        rows.append({"kind": kind, "src": dev[sender], "dst": dev[receiver], "piece": receiver,
                     "from_piece": sender, "micro": m, "bytes": nbytes, "start": start, "end": end,
                     "device": dev[receiver], "op": None})

    def compute(d: str, k: int | None, m: int | None, kind: str, op: str | None, start: float,
                seconds: float) -> float:
        rows.append({"device": d, "piece": k, "micro": m, "kind": kind, "op": op, "start": start,
                     "end": start + seconds})
        return start + seconds

    def forward_task(k: int, m: int) -> bool:
        p = pieces[k]
        if any(fwd_end[src][m] is None for src, _, _ in p.inputs):
            return False
        start = free[p.device]
        for src, _, nbytes in p.inputs:
            sent = fwd_end[src][m]
            arrive = sent + hop(dev[src], p.device, nbytes)
            if dev[src] != p.device:
                transfer("activation", src, k, m, float(nbytes), sent, arrive)
            start = max(start, arrive)
        t = start
        for op, sec, scale in p.forward:
            t = compute(p.device, k, m, "forward", op, t, float(sec) * float(scale))
        if p.loss and loss_time > 0:
            t = compute(p.device, k, m, "loss", None, t, loss_time)
        fwd_end[k][m] = free[p.device] = t
        return True

    def backward_task(k: int, m: int, kind: str = BACKWARD) -> bool:
        # A whole backward, or the input gradient of a split one: either sends the gradients the pieces before wait
        # for.
        p = pieces[k]
        if any(bwd_end[c][m] is None for c, _ in grads[k]):
            return False
        start = max(free[p.device], fwd_end[k][m])
        for c, nbytes in grads[k]:
            sent = bwd_end[c][m]
            arrive = sent + hop(dev[c], p.device, nbytes)
            if dev[c] != p.device:
                transfer("gradient", c, k, m, nbytes, sent, arrive)
            start = max(start, arrive)
        seconds = float(p.backward) * float(p.backward_scale) if kind == BACKWARD else p.backward_parts()[0]
        t = compute(p.device, k, m, kind, None, start, seconds)
        bwd_end[k][m] = free[p.device] = t
        return True

    def weight_task(k: int, m: int) -> bool:
        # after its own input gradient, on the same device (its list puts it later); no other piece waits for it
        p = pieces[k]
        free[p.device] = compute(p.device, k, m, BACKWARD_WEIGHT, None, max(free[p.device], bwd_end[k][m]),
                                 p.backward_parts()[1])
        return True

    def run(d: str, a: Action) -> bool:
        if a.kind == FORWARD:
            return forward_task(a.piece, a.micro)
        if a.kind in (BACKWARD, BACKWARD_INPUT):
            return backward_task(a.piece, a.micro, a.kind)
        if a.kind == BACKWARD_WEIGHT:
            return weight_task(a.piece, a.micro)
        free[d] = compute(d, None, None, "optimizer", None, free[d], opt.get(d, 0.0))
        return True

    # Every device works through its own list of actions (the executor's); an action runs once what it
    # waits for on other devices has run. The lists cannot deadlock (see :mod:`.order`); the check
    # guards against a list that breaks that rule.
    todo = {d: deque(order_of(schedule, [p.index for p in pieces if p.device == d], len(pieces), m_count))
            for d in free}
    while any(todo.values()):
        moved = False
        for d, actions in todo.items():
            while actions and run(d, actions[0]):
                actions.popleft()
                moved = True
        if not moved:
            raise LabError("the pipeline's order waits for itself", where=WHERE)
    return PipelineSchedule(rows=rows, makespan=max(free.values()), micro_batches=m_count)


def gpipe_bound(stage_times: Sequence[float], micro_batches: int) -> float:
    """The textbook GPipe forward time of a chain of stages on distinct devices without links:
    ``sum(stage_times) + (M - 1) * max(stage_times)`` (the slowest stage sets the pace)."""
    m_count = _micro(micro_batches)
    times = [_seconds(s, f"stage time {i}") for i, s in enumerate(stage_times)]
    if not times:
        raise LabError("stage_times is empty; a chain needs at least one stage", where=WHERE)
    return sum(times) + (m_count - 1) * max(times)
