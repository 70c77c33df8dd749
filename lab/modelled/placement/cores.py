"""Processes on shared cores: a discrete-event simulation of one step of several processes that compute,
send, receive and sleep on a machine with fewer cores than processes.

A placement run starts one process per device on a machine of a few cores; an ideal pipeline model
(:mod:`.pipeline`) gives every process a core of its own. Here the cores are the shared resource:

* **Processes and their tasks.** Each process runs its task list in order: :class:`Cpu` (work that needs a
  core), :class:`Sleep` (an emulated wait: takes no core), :class:`Send` (the sender's CPU, then the message
  leaves), :class:`Recv` (blocked until the message has arrived, then the receiver's CPU). A process ends when
  its last task is done and every message it sent has been received (the executor waits on its send handles at
  the end of the step).
* **Cores, processor sharing.** A process is pinned to one core or may run on any (``None``). At every moment
  the runnable entities share the cores max-min fairly: every entity gets the same rate, except where its own
  core is full with the entities pinned to it, or it can use no more than one core. A blocked or sleeping
  process takes no core. This is Linux's fair scheduler seen from far enough that its slices average out.
* **A message costs CPU, on its way too.** Besides the sender's and the receiver's CPU in their main threads,
  a message needs each process's *communication thread* (gloo's): it leaves only once the sender's thread has
  run ``background_other`` seconds for it (``background_same`` when both processes share their one core), and
  it is taken in only once the receiver's thread has run as long. A communication thread is an entity of its
  own on its process's cores, runnable while it has messages to handle, so on a core where the main thread
  computes it gets only its share: a message can wait for its own sender to compute.
* **The wire.** A message arrives ``wire`` seconds after it leaves; with emulation the receiver's receive
  returns no sooner than ``hold`` seconds after it left (the topology's link time: a wait, no CPU).
* **Waking up.** A process that becomes runnable (a message arrived, a sleep ended), or a communication thread
  that gets a message to handle, while its cores are busy waits ``wake`` seconds before it runs (the
  scheduler lets the running task finish its slice).
* **Other work** on the machine: ``external`` always-runnable entities that may run on any core (a fraction
  is allowed: 0.5 is half a core's worth of demand).

:func:`simulate` returns when each task ran (its rows), the step's length and each process's CPU and blocked
time. The simulation is exact for the fluid model: rates only change at events (a task's end, an arrival, a
wake-up), and between events every runnable entity progresses at its rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Hashable, Mapping, Sequence

from lab.errors import LabError
from lab.modelled.placement.pipeline import check_seconds

WHERE = "core model"
_EPS = 1e-12


@dataclass(frozen=True)
class Cpu:
    """``seconds`` of work on a dedicated core; ``row``: what to record of it (None: nothing)."""

    seconds: float
    row: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Sleep:
    """A wait that takes no core: ``seconds``, plus ``after`` times the wall time of the process's previous
    :class:`Cpu` task (the executor's emulated slowdown waits ``(s - 1)`` times what the operator just took)."""

    seconds: float = 0.0
    after: float = 0.0
    row: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Send:
    """Message ``key`` to process ``to``: ``cpu`` seconds of the sender's work, then it leaves; it arrives
    ``wire`` seconds later, and the receive returns no sooner than ``hold`` seconds after it left."""

    key: Hashable
    to: int
    cpu: float = 0.0
    wire: float = 0.0
    hold: float = 0.0
    row: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Recv:
    """Wait for message ``key``, then ``cpu`` seconds of the receiver's work (unpacking)."""

    key: Hashable
    cpu: float = 0.0
    row: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Machine:
    """The cores and what the processes pay for sharing them (seconds)."""

    cores: int = 2
    wake: float = 0.0
    background_same: float = 0.0
    background_other: float = 0.0
    external: float = 0.0


@dataclass
class CoreSchedule:
    """What :func:`simulate` found: ``rows`` (every recorded task: its row fields plus ``start``, ``end`` and
    ``rank``; messages as ``kind`` from the Send's row with ``start`` the departure and ``end`` when the
    receive returned), the step's length, and per process its CPU seconds (main thread and background) and the
    seconds it was blocked or asleep. A process ends when its last task is done, every message it sent was
    received and its background work is done (what is left of it would delay the next step)."""

    rows: list[dict]
    makespan: float
    cpu: list[float]
    background: list[float]
    blocked: list[float]
    ends: list[float] = field(default_factory=list)


def _sec(x: Any, what: str) -> float:
    return check_seconds(x, what, where=WHERE)


def share(entities: Sequence[tuple[float, float, int | None]], cores: int) -> list[float]:
    """Max-min fair rates (cores per entity) of runnable entities ``(weight, cap, core or None)`` on ``cores``
    cores: rates proportional to the weights, an entity's rate at most its cap, the entities pinned to one core
    together at most 1, all together at most ``cores``. Progressive filling: raise a common level until a
    constraint is tight, freeze the entities it binds, repeat."""
    rate = [0.0] * len(entities)
    active = [i for i, (w, _, _) in enumerate(entities) if w > 0]
    core_left = {c: 1.0 for c in range(cores)}
    pool_left = float(cores)
    while active:
        level, tight = math.inf, None
        for i in active:
            w, cap, _ = entities[i]
            if cap / w < level:
                level, tight = cap / w, ("entity", i)
        pinned: dict[int, float] = {}
        for i in active:
            c = entities[i][2]
            if c is not None:
                pinned[c] = pinned.get(c, 0.0) + entities[i][0]
        for c, w in pinned.items():
            if core_left.get(c, 0.0) / w < level:
                level, tight = core_left.get(c, 0.0) / w, ("core", c)
        total = sum(entities[i][0] for i in active)
        if pool_left / total < level:
            level, tight = pool_left / total, ("pool", None)
        level = max(level, 0.0)
        if tight[0] == "entity":
            frozen = [tight[1]]
        elif tight[0] == "core":
            frozen = [i for i in active if entities[i][2] == tight[1]]
        else:
            frozen = list(active)
        for i in frozen:
            w, cap, c = entities[i]
            rate[i] = min(cap, w * level)
            pool_left -= rate[i]
            if c is not None:
                core_left[c] = core_left.get(c, 0.0) - rate[i]
        if tight[0] == "core":
            core_left[tight[1]] = 0.0
        active = [i for i in active if i not in frozen]
    return rate


def _check(tasks: Sequence[Sequence[Any]], pinned: Sequence[int | None], machine: Machine) -> None:
    if not isinstance(machine, Machine):
        raise LabError("machine must be a Machine", where=WHERE)
    if isinstance(machine.cores, bool) or not isinstance(machine.cores, Integral) or machine.cores < 1:
        raise LabError(f"the machine needs at least one core (got {machine.cores!r})", where=WHERE)
    for name in ("wake", "background_same", "background_other", "external"):
        _sec(getattr(machine, name), name)
    if len(pinned) != len(tasks):
        raise LabError(f"{len(tasks)} processes but {len(pinned)} core choices", where=WHERE)
    for r, c in enumerate(pinned):
        if c is not None and (isinstance(c, bool) or not isinstance(c, Integral) or not 0 <= c < machine.cores):
            raise LabError(f"process {r} is pinned to core {c!r}; the machine has cores 0..{machine.cores - 1}",
                           where=WHERE)
    sends: dict[Hashable, int] = {}
    recvs: dict[Hashable, int] = {}
    for r, lst in enumerate(tasks):
        for t in lst:
            if isinstance(t, Cpu):
                _sec(t.seconds, f"process {r}: a task's seconds")
            elif isinstance(t, Sleep):
                _sec(t.seconds, f"process {r}: a sleep's seconds")
                _sec(t.after, f"process {r}: a sleep's factor")
            elif isinstance(t, Send):
                for name in ("cpu", "wire", "hold"):
                    _sec(getattr(t, name), f"process {r}: message {t.key!r}'s {name}")
                if isinstance(t.to, bool) or not isinstance(t.to, Integral) or not 0 <= t.to < len(tasks) or t.to == r:
                    raise LabError(f"process {r} sends message {t.key!r} to process {t.to!r}, which is not another "
                                   "process", where=WHERE)
                if t.key in sends:
                    raise LabError(f"message {t.key!r} is sent twice", where=WHERE)
                sends[t.key] = r
            elif isinstance(t, Recv):
                _sec(t.cpu, f"process {r}: message {t.key!r}'s cpu")
                if t.key in recvs:
                    raise LabError(f"message {t.key!r} is received twice", where=WHERE)
                recvs[t.key] = r
            else:
                raise LabError(f"process {r} has a task of unknown kind {type(t).__name__}", where=WHERE)
    for key, r in recvs.items():
        if key not in sends:
            raise LabError(f"process {r} waits for message {key!r}, which nobody sends", where=WHERE)
    for key, r in sends.items():
        if key not in recvs:
            raise LabError(f"process {r} sends message {key!r}, which nobody receives", where=WHERE)
    for t_list in tasks:
        for t in t_list:
            if isinstance(t, Send) and recvs[t.key] != t.to:
                raise LabError(f"message {t.key!r} goes to process {t.to} but process {recvs[t.key]} receives it",
                               where=WHERE)


def simulate(tasks: Sequence[Sequence[Any]], pinned: Sequence[int | None], machine: Machine) -> CoreSchedule:
    """One step of ``len(tasks)`` processes (process ``r`` runs ``tasks[r]`` in order, pinned to core
    ``pinned[r]`` or to none), from time 0 (the step's barrier) until every process has ended."""
    _check(tasks, pinned, machine)
    n = len(tasks)
    idx = [0] * n
    # phase[r]: ("run", kind, task) needs a core (kind cpu, send or unpack); ("sleep", until, task, why) takes
    # none (why: "sleep" an emulated wait, "hold" an emulated link); ("recv", task) waits for a message;
    # ("wake", until, resume, task) is runnable but not yet running; ("drain",) waits for its sends to be
    # received; ("done",).
    phase: list[tuple] = [("start",)] * n
    left = [0.0] * n
    began = [0.0] * n
    last_cpu_wall = [0.0] * n
    bg_left = [0.0] * n  # seconds left of the head of each process's communication queue
    comm: list[list[tuple[float, str, Hashable]]] = [[] for _ in range(n)]  # (seconds, "out" | "in", message)
    comm_from = [0.0] * n  # the communication thread runs from this time (a wake-up on a busy core)
    cpu_used, bg_used, blocked, ends = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    send_of = {t.key: (r, t) for r, lst in enumerate(tasks) for t in lst if isinstance(t, Send)}
    departed: dict[Hashable, float] = {}
    arrived: set = set()
    in_flight: dict[Hashable, float] = {}  # key -> arrival
    outstanding = [0] * n
    rows: list[dict] = []
    now = 0.0

    def record(row: Mapping | None, r: int, start: float, end: float, **extra) -> None:
        if row is not None:
            rows.append({**row, "rank": r, "start": start, "end": end, **extra})

    def busy_core(r: int, own_comm: bool = True) -> bool:
        """Whether other runnable work holds ``r``'s cores right now (so ``r`` waits to be scheduled)."""
        others = machine.external
        for q in range(n):
            if pinned[r] is not None and pinned[q] is not None and pinned[q] != pinned[r]:
                continue
            others += (phase[q][0] == "run" and q != r) + bool(comm[q] and not comm_from[q] > now
                                                               and (own_comm or q != r))
        return others >= (1 if pinned[r] is not None else machine.cores)

    def finish(r: int) -> None:
        """A process whose tasks are done ends once its sends are received and its background work is done."""
        if phase[r][0] == "drain" and outstanding[r] == 0 and not comm[r]:
            phase[r], ends[r] = ("done",), now

    def depart(r: int, t: Send) -> None:
        departed[t.key] = now
        outstanding[r] += 1
        queue(r, "out", t.key)

    def queue(r: int, way: str, key: Hashable) -> None:
        """Work for ``r``'s communication thread: the message leaves (``out``) or is taken in (``in``) once it
        has run; a thread with nothing to do that gets work on a busy core first waits to be scheduled."""
        s_, st = send_of[key]
        same = pinned[s_] is not None and pinned[s_] == pinned[st.to]
        bg = machine.background_same if same else machine.background_other
        if not comm[r]:
            comm_from[r] = math.nan  # decided once everything due now has happened (see the loop)
            bg_left[r] = bg
        comm[r].append((bg, way, key))

    def comm_done(r: int) -> None:
        """The head of ``r``'s communication queue has run."""
        _, way, key = comm[r].pop(0)
        if way == "out":
            in_flight[key] = now + send_of[key][1].wire
        else:
            arrived.add(key)
            to = send_of[key][1].to
            if phase[to][0] == "recv" and phase[to][1].key == key and matched(to, phase[to][1]):
                wake(to, "unpack", phase[to][1])
        bg_left[r] = comm[r][0][0] if comm[r] else 0.0

    def matched(r: int, t: Recv) -> bool:
        """Message ``t`` is in and ``r`` asked for it: the sender's handle completes. True when ``r`` goes
        straight on (False: it holds for the emulated link first)."""
        s, st = send_of[t.key]
        outstanding[s] -= 1
        finish(s)
        due = departed[t.key] + st.hold
        if due > now + _EPS:
            phase[r], began[r] = ("sleep", due, t, "hold"), now
            return False
        return True

    def unpack(r: int, t: Recv) -> bool:
        """The receive of ``t`` returns: record the message, start unpacking. True when that needs a core."""
        s, st = send_of[t.key]
        record(st.row, r, departed[t.key], now, src_rank=s)
        if t.cpu > 0:
            phase[r], left[r], began[r] = ("run", "unpack", t), float(t.cpu), now
            return True
        idx[r] += 1
        return False

    def advance(r: int) -> None:
        """Start process ``r``'s next tasks until it needs a core, waits, or ends."""
        while True:
            if idx[r] >= len(tasks[r]):
                phase[r] = ("drain",)
                finish(r)
                return
            t = tasks[r][idx[r]]
            if isinstance(t, Cpu):
                if t.seconds > 0:
                    phase[r], left[r], began[r] = ("run", "cpu", t), float(t.seconds), now
                    return
                record(t.row, r, now, now)
                last_cpu_wall[r] = 0.0
            elif isinstance(t, Sleep):
                wait = t.seconds + t.after * last_cpu_wall[r]
                if wait > 0:
                    phase[r], began[r] = ("sleep", now + wait, t, "sleep"), now
                    return
                record(t.row, r, now, now)
            elif isinstance(t, Send):
                if t.cpu > 0:
                    phase[r], left[r], began[r] = ("run", "send", t), float(t.cpu), now
                    return
                depart(r, t)
            else:  # Recv
                if t.key not in arrived:
                    phase[r], began[r] = ("recv", t), now
                    return
                if not matched(r, t) or unpack(r, t):
                    return
                continue
            idx[r] += 1

    def wake(r: int, resume: str, t: Any) -> None:
        """``r`` becomes runnable; on a busy core it first waits to be scheduled."""
        if machine.wake > 0 and busy_core(r):
            phase[r] = ("wake", now + machine.wake, resume, t)
        else:
            resume_now(r, resume, t)

    def resume_now(r: int, resume: str, t: Any) -> None:
        if resume == "unpack":
            if unpack(r, t):
                return
        advance(r)

    for r in range(n):
        advance(r)

    guard = 0
    while any(p[0] != "done" for p in phase):
        guard += 1
        if guard > 10_000_000:  # pragma: no cover - a bound, not a behaviour
            raise LabError("the simulation does not end", where=WHERE)
        for r in range(n):
            if comm[r] and math.isnan(comm_from[r]):
                # Its own main thread competes too, when it computes.
                busy = busy_core(r, own_comm=False) or phase[r][0] == "run"
                comm_from[r] = now + (machine.wake if machine.wake > 0 and bg_left[r] > 0 and busy else 0.0)
        ents: list[tuple[float, float, int | None]] = []
        who: list[tuple[str, int]] = []
        for r in range(n):
            if phase[r][0] == "run":
                ents.append((1.0, 1.0, pinned[r]))
                who.append(("main", r))
            if comm[r] and comm_from[r] <= now:
                ents.append((1.0, 1.0, pinned[r]))
                who.append(("bg", r))
        if machine.external > 0:
            ents.append((machine.external, machine.external, None))
            who.append(("ext", -1))
        rates = share(ents, machine.cores)
        nxt = math.inf
        for (kind, r), rate in zip(who, rates):
            if kind != "ext" and rate > 0:
                nxt = min(nxt, now + (left[r] if kind == "main" else bg_left[r]) / rate)
        for r in range(n):
            if phase[r][0] in ("sleep", "wake"):
                nxt = min(nxt, phase[r][1])
        for when in in_flight.values():
            nxt = min(nxt, when)
        for r in range(n):
            if comm[r] and comm_from[r] > now:
                nxt = min(nxt, comm_from[r])
        if not math.isfinite(nxt):
            stuck = [f"process {r} waits for message {phase[r][1].key!r}" for r in range(n) if phase[r][0] == "recv"]
            raise LabError("the processes wait for each other: " + "; ".join(stuck or ["no process can go on"]),
                           where=WHERE)
        dt = max(0.0, nxt - now)
        for (kind, r), rate in zip(who, rates):
            if kind == "main":
                left[r] -= rate * dt
                cpu_used[r] += rate * dt
            elif kind == "bg":
                bg_left[r] -= rate * dt
                bg_used[r] += rate * dt
        for r in range(n):
            if phase[r][0] in ("recv", "sleep", "drain"):
                blocked[r] += dt
        now = nxt
        tol = _EPS * max(1.0, now)
        for r in range(n):
            while comm[r] and comm_from[r] <= now + tol and bg_left[r] <= tol:
                comm_done(r)
        for key in [k for k, w in in_flight.items() if w <= now + tol]:
            del in_flight[key]
            queue(send_of[key][1].to, "in", key)
        for r in range(n):
            ph = phase[r]
            if ph[0] == "run" and left[r] <= tol:
                kind, t = ph[1], ph[2]
                if kind == "cpu":
                    record(t.row, r, began[r], now)
                    last_cpu_wall[r] = now - began[r]
                elif kind == "send":
                    depart(r, t)
                idx[r] += 1
                advance(r)
            elif ph[0] == "sleep" and ph[1] <= now + tol:
                if ph[3] == "sleep":
                    record(ph[2].row, r, began[r], now)
                    idx[r] += 1
                    wake(r, "advance", None)
                else:
                    wake(r, "unpack", ph[2])
            elif ph[0] == "wake" and ph[1] <= now + tol:
                resume_now(r, ph[2], ph[3])
        for r in range(n):
            finish(r)
    return CoreSchedule(rows=rows, makespan=max(ends) if ends else 0.0, cpu=cpu_used, background=bg_used,
                        blocked=blocked, ends=ends)


#: How a job's ranks take the cores: free (no pinning: the kernel moves every thread of every rank, a
#: process's communication threads included), in turns (rank r on core r mod cores, a core each while there are
#: enough), or partners apart (a core each while there are enough, then the ranks that exchange the most messages
#: on different cores). bench_pinning.py measured free fastest on a quiet machine.
RANK_POLICIES = ("turns", "partners", "free")
DEFAULT_RANK_POLICY = "free"


def rank_cores(n: int, cores: int, weights: Mapping[tuple[int, int], float] | None = None,
               policy: str = DEFAULT_RANK_POLICY) -> list[int | None]:
    """The core (0..cores-1) of each of ``n`` ranks, or None for a rank the kernel may move, by ``policy``
    (:data:`RANK_POLICIES`); ``weights``: messages per step between two ranks (``(a, b)`` with ``a < b``), which
    "partners" keeps off one core while every core holds at most ``ceil(n / cores)`` ranks."""
    if policy not in RANK_POLICIES:
        raise LabError(f"unknown rank policy {policy!r}; choose one of {list(RANK_POLICIES)}", where=WHERE)
    if policy == "free":
        return [None] * n
    if n <= cores:
        return list(range(n))
    turns = [r % cores for r in range(n)]
    if policy == "turns" or not weights:
        return turns
    cap = -(-n // cores)

    def cost(assign: Sequence[int]) -> float:
        return sum(w for (a, b), w in weights.items() if a < n and b < n and assign[a] == assign[b])

    best, best_cost = turns, cost(turns)
    if cores ** n <= 200_000:
        def walk(prefix: list[int], used: list[int]) -> None:
            nonlocal best, best_cost
            if len(prefix) == n:
                c = cost(prefix)
                if c < best_cost - 1e-12:
                    best, best_cost = list(prefix), c
                return
            # Cores are interchangeable: a rank opens at most one new core.
            for c in range(min(cores, max(prefix, default=-1) + 2)):
                if used[c] < cap:
                    prefix.append(c)
                    used[c] += 1
                    walk(prefix, used)
                    used[c] -= 1
                    prefix.pop()
        walk([], [0] * cores)
    return best


__all__ = ["Cpu", "Sleep", "Send", "Recv", "Machine", "CoreSchedule", "share", "simulate", "RANK_POLICIES",
           "DEFAULT_RANK_POLICY", "rank_cores"]
