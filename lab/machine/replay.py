"""Replaying a recorded step of a placement run through the core model, with the run's own measured task times.

A prediction can miss for two reasons: its schedule is wrong (who waits for whom, in which order), or its costs
are. A replay separates them, as trace-replay simulators do (Lumos, dPRO): it takes one recorded step of a run
(:meth:`lab.store.job_records.JobRecords.plan_events`), gives every process its tasks in the order they ran, each with the
time it measured (forward operators, the loss, backward passes, the optimiser; emulated waits as waits), and
every message the delivery time it measured (from when it was sent, or when its receiver asked for it if that was
later, to when the receive returned, less its emulated wait), on a core per process. What the replay leaves out
is everything between those tasks: the executor's own glue and the time a process spent descheduled outside a
task. So the replay close to the measurement says the schedule is right and the tasks' times explain the step;
far below it says the time went between the tasks (contention, per-call costs outside the timed spans).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from lab.errors import LabError
from lab.modelled.placement.core_tasks import CoreSchedule, Cpu, Machine, Recv, Send, Sleep
from lab.modelled.placement.cores import simulate
from lab.modelled.placement.order import BACKWARD, FORWARD, Message

COMPUTE = ("forward", "backward", "backward_input", "backward_weight", "loss", "optimizer")
TRANSFERS = ("activation", "gradient")


def _num(v: Any) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def message_of(row: Mapping[str, Any], devices: Sequence[str]) -> Message | None:
    """The name the executor and its model give the recorded message ``row`` (process ``r`` holding
    ``devices[r]``): its way, the piece whose output it is, that output, the micro-batch and the reader's process
    (the receiver of an activation, the sender of a gradient). None for a step recorded before the messages carried
    their sender piece and output."""
    fwd = row.get("kind") == "activation"
    producer = _num(row.get("from_piece") if fwd else row.get("piece"))
    output, micro = _num(row.get("output")), _num(row.get("micro"))
    reader = row.get("dst") if fwd else row.get("src")
    if not all(math.isfinite(x) for x in (producer, output, micro)) or reader not in devices:
        return None
    return Message(FORWARD if fwd else BACKWARD, int(producer), int(output), int(micro), list(devices).index(reader))


def replay(rows: Sequence[Mapping[str, Any]], devices: Sequence[str]) -> CoreSchedule:
    """The core model's step of the recorded ``rows`` of one step (each with ``rank``, ``kind``, ``start``,
    ``end`` and, for a transfer, ``src``, ``dst``, ``called``, ``wait``), process ``r`` holding ``devices[r]``,
    every process on a core of its own."""
    rank_of = {d: r for r, d in enumerate(devices)}
    n = len(devices)
    items: list[list[tuple[float, int, Any]]] = [[] for _ in range(n)]
    for i, row in enumerate(rows):
        kind = row.get("kind")
        start, end = _num(row.get("start")), _num(row.get("end"))
        if not (math.isfinite(start) and math.isfinite(end)):
            continue
        r = int(row.get("rank", -1))
        if kind in COMPUTE or kind == "emulated":
            if not 0 <= r < n:
                raise LabError(f"a recorded task names process {r}; the run has {n}", where="replay")
            keep = {k: row.get(k) for k in ("device", "piece", "micro", "kind", "op")}
            task = Cpu(max(0.0, end - start), keep) if kind != "emulated" else Sleep(max(0.0, end - start), row=keep)
            items[r].append((start, 1, task))
        elif kind in TRANSFERS:
            src, dst = row.get("src"), row.get("dst")
            if src not in rank_of or dst not in rank_of:
                raise LabError(f"a recorded message goes from {src!r} to {dst!r}, which are not both devices of the "
                               "run", where="replay")
            s, d = rank_of[src], rank_of[dst]
            called = _num(row.get("called"))
            wait = max(0.0, _num(row.get("wait")) if math.isfinite(_num(row.get("wait"))) else 0.0)
            asked = called if math.isfinite(called) else start
            delivery = max(0.0, (end - wait) - max(start, asked))
            key = message_of(row, devices) or ("msg", i)  # an older record's message is as unique by its row
            keep = {k: row.get(k) for k in ("kind", "src", "dst", "piece", "micro", "bytes", "device", "op")}
            items[s].append((start, 0, Send(key, d, wire=delivery, row=keep)))
            # The receive is asked for at its call; it comes before any task that starts after that.
            items[d].append((asked, 0, Recv(key)))
            if wait > 0:
                items[d].append((asked, 0.5, Sleep(wait)))
    lists = []
    for r in range(n):
        items[r].sort(key=lambda x: (x[0], x[1]))
        lists.append([t for _, _, t in items[r]])
    return simulate(lists, list(range(n)), Machine(cores=max(1, n)))


def replay_error(rows: Sequence[Mapping[str, Any]], devices: Sequence[str]) -> tuple[CoreSchedule, float, float]:
    """The replay of one recorded step, that step's measured length (first task's start to last task's end),
    and the replay's error against it (measured / replayed - 1)."""
    sched = replay(rows, devices)
    spans = [(_num(r.get("start")), _num(r.get("end"))) for r in rows if r.get("kind") in COMPUTE + ("emulated",)]
    spans = [(a, b) for a, b in spans if math.isfinite(a) and math.isfinite(b)]
    measured = (max(b for _, b in spans) - min(a for a, _ in spans)) if spans else math.nan
    err = measured / sched.makespan - 1.0 if sched.makespan > 0 and math.isfinite(measured) else math.nan
    return sched, measured, err


__all__ = ["message_of", "replay", "replay_error"]
