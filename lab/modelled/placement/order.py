"""The order in which one process of a placement run does its work in a step: a list of actions, as data.

One list drives all three: the executor that runs the step for real
(:class:`lab.train.placement_run.PlacementTrainer`), the ideal pipeline model (:mod:`.pipeline`) and the
model of the executor on shared cores (:mod:`.executor`). So the modelled and the measured Gantt chart
can differ in costs, never in order (torch's ``pipelining`` works the same way: a schedule is a list of
actions per stage that its runtime executes).

Four schedules, each a function of a process's pieces (a process the plan gives no piece only steps its optimiser):

* GPipe's: the process's pieces forward by ascending index, each for micro-batches ``0..M-1``; then backward
  by descending index, micro-batches ``0..M-1`` each; then the optimiser. Every dependency between pieces
  points from a smaller index forward and from a larger index backward, so a process never waits for work
  that comes later in its own list, and no set of lists built this way can deadlock.
* 1F1B's (one forward, one backward), for plans with one piece per process: piece ``k`` of ``S`` runs
  ``min(S - 1 - k, M)`` forwards first, then one forward and one backward in turn, then the backwards left,
  then the optimiser: it holds the activations of at most ``S - k`` micro-batches where GPipe holds ``M``.
  The order is torch's ``Schedule1F1B`` (a test reads torch's own order and compares). The lists follow the
  time slots of the textbook chain, in which a piece's forward of micro-batch ``m`` comes after the forward
  of every smaller piece and its backward after the backward of every larger one: any plan whose messages go
  from a smaller piece forward (every cut of a traced model) fits those slots, so it cannot deadlock either.
* Interleaved 1F1B's (Narayanan et al. 2021), for plans whose stretches go round the devices in turn (piece ``k``
  on the device of rank ``k mod P``, ``v`` pieces per device): a longer warm-up of forwards over the process's
  pieces, ``per_round`` micro-batches of one piece before the next, then one forward and one backward in turn,
  then the backwards left. The order is torch's ``ScheduleInterleaved1F1B`` (its ``_get_1f1b_rank_ops`` without
  the empty slots that align its ranks in time: the lab's processes wait on their receives instead); a test
  reads torch's own lists and compares, and the models check every plan's lists for a wait that never ends.
* Zero bubble's (Qi et al. 2024: ZB-H1 on a chain, its interleaved form on a plan that goes round the devices):
  each backward split into the gradient of the piece's inputs (``backward_input``), which the piece before waits
  for, and the gradient of its weights (``backward_weight``), which nobody waits for; a shorter warm-up than
  1F1B's, then a forward and an input gradient in turn, each weight gradient ``rank`` input gradients later, the
  rest at the end, where the bubble was. The order is torch's ``ScheduleInterleavedZeroBubble``, read the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple

from lab.errors import LabError

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
# The zero-bubble schedule splits a backward in two: the gradient of the piece's inputs, which the piece before waits
# for, and the gradient of its weights, which no other piece waits for and so fills the bubbles.
BACKWARD_INPUT, BACKWARD_WEIGHT = "backward_input", "backward_weight"
#: The kinds of action that compute a backward (whole, or one of its two halves).
BACKWARDS = (BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT)


class Message(NamedTuple):
    """A tensor one process sends another in a step, named alike by the executor that sends it for real (its gloo
    tag), the model of the executor on shared cores and the deadlock check: a piece's output going forward to a
    reader on another process, or the gradient of it coming back."""

    way: str  # FORWARD (the activation) or BACKWARD (its gradient)
    piece: int  # the piece whose output it is
    output: int  # which of that piece's outputs
    micro: int
    reader: int  # the process of the reading piece: it receives the activation and sends its gradient back

    @property
    def tag(self) -> int:
        """gloo's tag for the message between its two processes: unique per piece (16 outputs each), way and
        micro-batch (at most 256)."""
        return ((self.piece * 16 + self.output) * 2 + (self.way == BACKWARD)) * 256 + self.micro


@dataclass(frozen=True)
class Piece:
    """A maximal run of consecutive operators on one device: the one piece type of the models of a step (the ideal
    pipeline and the executor on shared cores); the executor's own cut piece extends it with its module.

    ``forward``: ``(operator, seconds, emulated factor)`` per operator for one micro-batch, in order;
    ``backward``: seconds of its backward for one micro-batch (one call, as autograd runs it), ``backward_scale``
    its emulated factor; ``inputs``: ``(source piece, output index, bytes for one micro-batch)`` per tensor read
    from an earlier piece (the model's input is not listed); ``loss``: the piece makes the model's output.
    """

    index: int
    device: str
    forward: tuple[tuple[str | None, float, float], ...]
    backward: float = 0.0
    inputs: tuple[tuple[int, int, float], ...] = ()
    loss: bool = False
    backward_scale: float = 1.0
    # The share of the backward that computes the weights' gradient, which the zero-bubble schedule runs apart from
    # the input's: half by default (a layer's weight gradient takes as many FLOPs as its input's), none for a piece
    # without weights.
    weight_share: float = 0.5

    @property
    def ops(self) -> tuple[str | None, ...]:
        """The piece's operators, in order."""
        return tuple(op for op, _, _ in self.forward)

    def backward_parts(self) -> tuple[float, float]:
        """Seconds of its input gradient and of its weight gradient (each times the emulated factor), as the
        zero-bubble schedule runs them: a piece that reads only the model's input has no input to take a gradient
        of, so its whole backward is the weights' (torch's pipelining does the same on its first stage)."""
        total = self.backward * self.backward_scale
        weight = total if not self.inputs else total * self.weight_share
        return total - weight, weight


@dataclass(frozen=True)
class Action:
    """One unit of a process's step: a piece's forward or backward for one micro-batch, or the optimiser
    (no piece, no micro-batch)."""

    kind: str
    piece: int | None = None
    micro: int | None = None


def gpipe(pieces: Iterable[int], micro_batches: int, train: bool = True) -> tuple[Action, ...]:
    """One process's actions for a step over its pieces (their indices): forward only, micro-batch after
    micro-batch, when ``train`` is off (an evaluation)."""
    ks, micro = sorted(pieces), range(int(micro_batches))
    actions = [Action(FORWARD, k, m) for k in ks for m in micro]
    if train:
        actions += [Action(BACKWARD, k, m) for k in reversed(ks) for m in micro]
        actions.append(Action(OPTIMIZER))
    return tuple(actions)


def one_f_one_b(piece: int, pieces: int, micro_batches: int, train: bool = True) -> tuple[Action, ...]:
    """The actions of the process holding piece ``piece`` of ``pieces`` (one piece per process) for a step of
    ``micro_batches``; forward only when ``train`` is off (an evaluation has no backward to interleave)."""
    M = int(micro_batches)
    if not train:
        return gpipe([piece], M, train=False)
    warm = min(pieces - 1 - piece, M)
    actions = [Action(FORWARD, piece, m) for m in range(warm)]
    for m in range(M - warm):  # the steady state: the next forward, then the oldest backward
        actions += [Action(FORWARD, piece, warm + m), Action(BACKWARD, piece, m)]
    actions += [Action(BACKWARD, piece, m) for m in range(M - warm, M)]
    actions.append(Action(OPTIMIZER))
    return tuple(actions)


def interleaved_1f1b(rank: int, devices: int, local: int, micro_batches: int,
                     train: bool = True) -> tuple[Action, ...]:
    """The actions of the process of rank ``rank`` of ``devices``, holding pieces ``rank, rank + devices, ...``
    (``local`` of them), for a step of ``micro_batches``; forward only when ``train`` is off."""
    P, v, M = int(devices), int(local), int(micro_batches)
    mine = [rank + j * P for j in range(v)]
    if not train:
        return gpipe(mine, M, train=False)
    per_round = _per_round("interleaved 1F1B", P, M)
    warmup = min((v - 1) * per_round + 2 * (P - 1 - rank), M * v)
    steady = M * v - warmup

    def fwd_piece(op: int) -> int:
        return ((op // per_round) % v) * P + rank

    def bwd_piece(op: int) -> int:
        return (v - 1 - ((op - warmup) // per_round) % v) * P + rank

    fwd_next: dict[int, int] = {}
    bwd_next: dict[int, int] = {}

    def take(counter: dict[int, int], k: int) -> int:
        counter[k] = counter.get(k, 0) + 1
        return counter[k] - 1

    actions: list[Action] = []
    for op in range(warmup + steady + warmup):
        if op < warmup + steady:
            k = fwd_piece(op)
            actions.append(Action(FORWARD, k, take(fwd_next, k)))
        if op >= warmup:
            k = bwd_piece(op)
            actions.append(Action(BACKWARD, k, take(bwd_next, k)))
    actions.append(Action(OPTIMIZER))
    return tuple(actions)


def zero_bubble(rank: int, devices: int, local: int, micro_batches: int, train: bool = True) -> tuple[Action, ...]:
    """The actions of the process of rank ``rank`` of ``devices``, holding pieces ``rank, rank + devices, ...``
    (``local`` of them; one for a chain), for a step of ``micro_batches`` under the zero-bubble schedule (Qi et al.
    2024, ZB-H1; interleaved when ``local`` > 1): a shorter warm-up than 1F1B's, then one forward and one input
    gradient in turn, each weight gradient ``rank`` input gradients later, and the weight gradients left at the
    end, where the bubble was. Forward only when ``train`` is off."""
    P, v, M = int(devices), int(local), int(micro_batches)
    mine = [rank + j * P for j in range(v)]
    if not train:
        return gpipe(mine, M, train=False)
    per_round = _per_round("zero bubble", P, M)
    warmup = min((v - 1) * per_round + (P - 1 - rank), M * v)
    steady = M * v - warmup

    def fwd_piece(op: int) -> int:
        return ((op // per_round) % v) * P + rank

    def bwd_piece(op: int) -> int:
        return (v - 1 - ((op - warmup) // per_round) % v) * P + rank

    fwd_next: dict[int, int] = {}
    bwd_next: dict[int, int] = {}
    weight_next: dict[int, int] = {}
    backward_ops: list[int] = []

    def take(counter: dict[int, int], k: int) -> int:
        counter[k] = counter.get(k, 0) + 1
        return counter[k] - 1

    actions: list[Action] = []

    def weight_gradient(of_op: int) -> None:
        k = bwd_piece(of_op)
        actions.append(Action(BACKWARD_WEIGHT, k, take(weight_next, k)))

    weights = 0  # input gradients whose weight gradient is in the list
    for op in range(warmup + steady + warmup):
        if op < warmup + steady:
            k = fwd_piece(op)
            actions.append(Action(FORWARD, k, take(fwd_next, k)))
        if op >= warmup:
            k = bwd_piece(op)
            actions.append(Action(BACKWARD_INPUT, k, take(bwd_next, k)))
            backward_ops.append(op)
            if op - warmup >= rank:  # the weight gradient of the oldest input gradient still without one
                weight_gradient(backward_ops[weights])
                weights += 1
    for op in backward_ops[weights:]:
        weight_gradient(op)
    actions.append(Action(OPTIMIZER))
    return tuple(actions)


def _per_round(name: str, P: int, M: int) -> int:
    """How many micro-batches a process takes through one of its pieces before the next (torch's rounds)."""
    rounds = max(1, M // P)
    if M % rounds:
        raise LabError(f"{name} takes the micro-batches in rounds of {M // rounds} per piece, so their "
                       f"number must be a multiple of {rounds} (got {M}): choose {rounds * (M // rounds)} or "
                       f"{rounds * (M // rounds + 1)}", where="training.micro_batches")
    return M // rounds


def schedule(name: str, mine: Iterable[int], pieces: int, micro_batches: int,
             train: bool = True) -> tuple[Action, ...]:
    """One process's actions under schedule ``name`` (:data:`lab.scenario.names.PIPELINE_SCHEDULES`), given its pieces
    ``mine`` among ``pieces``."""
    mine = sorted(mine)
    if not mine and name in ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"):
        # a process the plan gives no piece (a balancing run starts one per device of the cluster) only steps its
        # optimiser, under any schedule
        return (Action(OPTIMIZER),) if train else ()
    if name == "gpipe":
        return gpipe(mine, micro_batches, train)
    if name == "1f1b":
        if len(mine) != 1:
            raise LabError(f"1F1B runs one piece per device, and this plan gives a device {len(mine)} pieces (it "
                           "returns to a device after leaving it): pin the operators so that each device holds one "
                           "stretch of the model, or use GPipe", where="training.schedule")
        return one_f_one_b(mine[0], pieces, micro_batches, train)
    if name == "interleaved_1f1b":
        v = len(mine)
        P = pieces // v if v else 0
        if v < 2 or pieces % v or mine[0] >= P or mine != [mine[0] + j * P for j in range(v)]:
            raise LabError(f"interleaved 1F1B runs plans whose stretches go round the devices in turn, each device "
                           f"holding two or more (the k-th stretch on the (k mod devices)-th device), and this plan gives "
                           f"a device {v} of its {pieces} pieces ({', '.join(map(str, mine[:6]))}): choose the even rounds "
                           "strategy (without pins), pin the operators so that the model goes round the devices at "
                           "least twice, or use GPipe or 1F1B",
                           where="training.schedule")
        return interleaved_1f1b(mine[0], P, v, micro_batches, train)
    if name == "zero_bubble":
        v = len(mine)
        P = pieces // v if v else 0
        if not v or pieces % v or mine[0] >= P or mine != [mine[0] + j * P for j in range(v)]:
            raise LabError(f"the zero-bubble schedule runs a chain with one stretch per device, or stretches that go "
                           f"round the devices in turn (the k-th stretch on the (k mod devices)-th device), and this "
                           f"plan gives a device {v} of its {pieces} pieces ({', '.join(map(str, mine[:6]))}): pin the "
                           "operators so that each device holds one stretch or the model goes round the devices, "
                           "choose the even rounds strategy, or use GPipe", where="training.schedule")
        return zero_bubble(mine[0], P, v, micro_batches, train)
    raise LabError(f"unknown schedule {name!r}", where="training.schedule")


def actions_in(rows: Iterable[dict]) -> list[Action]:
    """The actions a timeline of one process shows, in the order of its rows (the executor's recorded events,
    or a model's rows): each forward, backward and optimiser row names its action, and the rows of one
    action (a piece's operators) stand together. Loss, emulated waits and transfers belong to an action
    already named."""
    out: list[Action] = []
    for r in rows:
        if r["kind"] == OPTIMIZER:
            a = Action(OPTIMIZER)
        elif r["kind"] in (FORWARD, *BACKWARDS):
            a = Action(r["kind"], int(r["piece"]), int(r["micro"]))
        else:
            continue
        if not out or out[-1] != a:
            out.append(a)
    return out
