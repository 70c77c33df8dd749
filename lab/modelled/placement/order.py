"""The order in which one process of a placement run does its work in a step: a list of actions, as data.

One list drives all three: the executor that runs the step for real
(:class:`lab.train.placement_run.PlacementTrainer`), the ideal pipeline model (:mod:`.pipeline`) and the
model of the executor on shared cores (:mod:`.executor`). So the modelled and the measured Gantt chart
can differ in costs, never in order (torch's ``pipelining`` works the same way: a schedule is a list of
actions per stage that its runtime executes).

The order is GPipe's: the process's pieces forward by ascending index, each for micro-batches
``0..M-1``; then backward by descending index, micro-batches ``0..M-1`` each; then the optimiser.
Every dependency between pieces points from a smaller index forward and from a larger index backward,
so a process never waits for work that comes later in its own list, and no set of lists built this way
can deadlock.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"


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


def actions_in(rows: Iterable[dict]) -> list[Action]:
    """The actions a timeline of one process shows, in the order of its rows (the executor's recorded events,
    or a model's rows): each forward, backward and optimiser row names its action, and the rows of one
    action (a piece's operators) stand together. Loss, emulated waits and transfers belong to an action
    already named."""
    out: list[Action] = []
    for r in rows:
        if r["kind"] == OPTIMIZER:
            a = Action(OPTIMIZER)
        elif r["kind"] in (FORWARD, BACKWARD):
            a = Action(r["kind"], int(r["piece"]), int(r["micro"]))
        else:
            continue
        if not out or out[-1] != a:
            out.append(a)
    return out
