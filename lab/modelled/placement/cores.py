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
* **Cold cores.** Work that starts after its process computed nothing for a while (it slept, waited for a
  message) is slower by the machine's measured ``cold`` factor of that idle time: other processes ran meanwhile,
  and its data and code left the caches. An emulated wait does not scale what the cold start added: the executor's
  wait is the device's slow-down times the task's warm time, and so is the model's.
* **Other work** on the machine: ``external`` always-runnable entities that may run on any core (a fraction
  is allowed: 0.5 is half a core's worth of demand).

:func:`simulate` returns when each task ran (its rows), the step's length and each process's CPU and blocked
time. The simulation is exact for the fluid model: rates only change at events (a task's end, an arrival, a
wake-up), and between events every runnable entity progresses at its rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Sequence

from lab.errors import LabError
from lab.modelled.placement.core_tasks import WHERE, CoreSchedule, Cpu, Machine, Recv, Send, Sleep, check_tasks

_EPS = 1e-12


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


@dataclass
class Proc:
    """One process of the simulation: where it is in its task list, what it does now, its communication thread's
    queue, and what it used.

    ``state`` is one of: ``run`` (needs a core; ``what`` is ``cpu``, ``send`` or ``unpack``), ``sleep`` (takes
    none until ``until``; ``what`` is ``sleep``, an emulated wait, or ``hold``, an emulated link), ``recv``
    (waits for its task's message), ``wake`` (runnable at ``until``, then resumes by ``what``: ``advance`` or
    ``unpack``), ``drain`` (its tasks are done; it waits for its sends to be received), ``done``."""

    tasks: Sequence[Any]
    core: int | None
    idx: int = 0
    state: str = "start"
    what: str = ""
    task: Any = None
    until: float = 0.0
    left: float = 0.0  # run: seconds of work left
    began: float = 0.0
    computed: float = 0.0  # when its last Cpu task ended (the step's barrier at first): a cold core's idle time
    cold: float = 0.0  # the seconds of work its cold starts added
    comm: list = field(default_factory=list)  # its communication thread's queue: (seconds, "out" | "in", key)
    comm_left: float = 0.0  # seconds left of the head of that queue
    comm_from: float = 0.0  # the thread runs from this time (a wake-up on a busy core); nan: not decided yet
    outstanding: int = 0  # its sends not yet received
    cpu: float = 0.0
    background: float = 0.0
    blocked: float = 0.0
    end: float = 0.0

    def to(self, state: str, what: str = "", task: Any = None, until: float = 0.0) -> None:
        self.state, self.what, self.task, self.until = state, what, task, until


class CoreSimulation:
    """One step of processes on shared cores (:func:`simulate`): the processes' state, the messages on their way,
    and the clock. :meth:`run` goes from event to event until every process has ended."""

    def __init__(self, tasks: Sequence[Sequence[Any]], pinned: Sequence[int | None], machine: Machine):
        check_tasks(tasks, pinned, machine)
        self.machine = machine
        self.procs = [Proc(lst, core) for lst, core in zip(tasks, pinned)]
        self.send_of = {t.key: (r, t) for r, lst in enumerate(tasks) for t in lst if isinstance(t, Send)}
        self.departed: dict[Hashable, float] = {}
        self.arrived: set = set()
        self.in_flight: dict[Hashable, float] = {}  # key -> arrival
        self.rows: list[dict] = []
        self.now = 0.0

    def record(self, row: Mapping | None, r: int, start: float, end: float, **extra) -> None:
        if row is not None:
            self.rows.append({**row, "rank": r, "start": start, "end": end, **extra})

    def busy_core(self, r: int, own_comm: bool = True) -> bool:
        """Whether other runnable work holds ``r``'s cores right now (so ``r`` waits to be scheduled)."""
        me = self.procs[r]
        others = self.machine.external
        for q, p in enumerate(self.procs):
            if me.core is not None and p.core is not None and p.core != me.core:
                continue
            others += (p.state == "run" and q != r) + bool(p.comm and not p.comm_from > self.now
                                                           and (own_comm or q != r))
        return others >= (1 if me.core is not None else self.machine.cores)

    def finish(self, r: int) -> None:
        """A process whose tasks are done ends once its sends are received and its background work is done."""
        p = self.procs[r]
        if p.state == "drain" and p.outstanding == 0 and not p.comm:
            p.to("done")
            p.end = self.now

    def depart(self, r: int, t: Send) -> None:
        self.departed[t.key] = self.now
        self.procs[r].outstanding += 1
        self.queue(r, "out", t.key)

    def queue(self, r: int, way: str, key: Hashable) -> None:
        """Work for ``r``'s communication thread: the message leaves (``out``) or is taken in (``in``) once it
        has run; a thread with nothing to do that gets work on a busy core first waits to be scheduled."""
        s_, st = self.send_of[key]
        same = self.procs[s_].core is not None and self.procs[s_].core == self.procs[st.to].core
        bg = self.machine.background_same if same else self.machine.background_other
        p = self.procs[r]
        if not p.comm:
            p.comm_from = math.nan  # decided once everything due now has happened (see run)
            p.comm_left = bg
        p.comm.append((bg, way, key))

    def comm_done(self, r: int) -> None:
        """The head of ``r``'s communication queue has run."""
        p = self.procs[r]
        _, way, key = p.comm.pop(0)
        if way == "out":
            self.in_flight[key] = self.now + self.send_of[key][1].wire
        else:
            self.arrived.add(key)
            to = self.procs[self.send_of[key][1].to]
            if to.state == "recv" and to.task.key == key and self.matched(self.send_of[key][1].to, to.task):
                self.wake(self.send_of[key][1].to, "unpack", to.task)
        p.comm_left = p.comm[0][0] if p.comm else 0.0

    def matched(self, r: int, t: Recv) -> bool:
        """Message ``t`` is in and ``r`` asked for it: the sender's handle completes. True when ``r`` goes
        straight on (False: it holds for the emulated link first)."""
        s, st = self.send_of[t.key]
        self.procs[s].outstanding -= 1
        self.finish(s)
        due = self.departed[t.key] + st.hold
        if due > self.now + _EPS:
            self.procs[r].to("sleep", "hold", t, due)
            self.procs[r].began = self.now
            return False
        return True

    def unpack(self, r: int, t: Recv) -> bool:
        """The receive of ``t`` returns: record the message, start unpacking. True when that needs a core."""
        p = self.procs[r]
        s, st = self.send_of[t.key]
        self.record(st.row, r, self.departed[t.key], self.now, src_rank=s)
        if t.cpu > 0:
            p.to("run", "unpack", t)
            p.left, p.began = float(t.cpu), self.now
            return True
        p.idx += 1
        return False

    def advance(self, r: int) -> None:
        """Start process ``r``'s next tasks until it needs a core, waits, or ends."""
        p, now = self.procs[r], self.now
        while True:
            if p.idx >= len(p.tasks):
                p.to("drain")
                self.finish(r)
                return
            t = p.tasks[p.idx]
            if isinstance(t, Cpu):
                if t.seconds > 0:
                    p.to("run", "cpu", t)
                    extra = float(t.seconds) * (self.machine.cold_factor(now - p.computed) - 1.0)
                    p.left, p.began = float(t.seconds) + extra, now
                    p.cold += extra
                    return
                self.record(t.row, r, now, now)
            elif isinstance(t, Sleep):
                if t.seconds > 0:
                    p.to("sleep", "sleep", t, now + t.seconds)
                    p.began = now
                    return
                self.record(t.row, r, now, now)
            elif isinstance(t, Send):
                if t.cpu > 0:
                    p.to("run", "send", t)
                    p.left, p.began = float(t.cpu), now
                    return
                self.depart(r, t)
            else:  # Recv
                if t.key not in self.arrived:
                    p.to("recv", task=t)
                    p.began = now
                    return
                if not self.matched(r, t) or self.unpack(r, t):
                    return
                continue
            p.idx += 1

    def wake(self, r: int, resume: str, t: Any) -> None:
        """``r`` becomes runnable; on a busy core it first waits to be scheduled."""
        if self.machine.wake > 0 and self.busy_core(r):
            self.procs[r].to("wake", resume, t, self.now + self.machine.wake)
        else:
            self.resume_now(r, resume, t)

    def resume_now(self, r: int, resume: str, t: Any) -> None:
        if resume == "unpack" and self.unpack(r, t):
            return
        self.advance(r)

    def rates(self) -> tuple[list[tuple[str, int]], list[float]]:
        """Who runs now (a process's main thread, its communication thread, the machine's other work) and at
        what share of the cores."""
        for r, p in enumerate(self.procs):
            if p.comm and math.isnan(p.comm_from):
                # Its own main thread competes too, when it computes.
                busy = self.busy_core(r, own_comm=False) or p.state == "run"
                p.comm_from = self.now + (self.machine.wake if self.machine.wake > 0 and p.comm_left > 0 and busy
                                          else 0.0)
        ents: list[tuple[float, float, int | None]] = []
        who: list[tuple[str, int]] = []
        for r, p in enumerate(self.procs):
            if p.state == "run":
                ents.append((1.0, 1.0, p.core))
                who.append(("main", r))
            if p.comm and p.comm_from <= self.now:
                ents.append((1.0, 1.0, p.core))
                who.append(("bg", r))
        if self.machine.external > 0:
            ents.append((self.machine.external, self.machine.external, None))
            who.append(("ext", -1))
        return who, share(ents, self.machine.cores)

    def next_event(self, who: list[tuple[str, int]], rates: list[float]) -> float:
        """When the next task ends, sleep or wake-up is due, message arrives or communication thread runs."""
        nxt = math.inf
        for (kind, r), rate in zip(who, rates):
            if kind != "ext" and rate > 0:
                p = self.procs[r]
                nxt = min(nxt, self.now + (p.left if kind == "main" else p.comm_left) / rate)
        for p in self.procs:
            if p.state in ("sleep", "wake"):
                nxt = min(nxt, p.until)
        for when in self.in_flight.values():
            nxt = min(nxt, when)
        for p in self.procs:
            if p.comm and p.comm_from > self.now:
                nxt = min(nxt, p.comm_from)
        if not math.isfinite(nxt):
            stuck = [f"process {r} waits for message {p.task.key!r}" for r, p in enumerate(self.procs)
                     if p.state == "recv"]
            raise LabError("the processes wait for each other: " + "; ".join(stuck or ["no process can go on"]),
                           where=WHERE)
        return nxt

    def progress(self, who: list[tuple[str, int]], rates: list[float], dt: float) -> None:
        """Every runnable entity works ``dt`` seconds at its rate; blocked processes wait as long."""
        for (kind, r), rate in zip(who, rates):
            p = self.procs[r] if kind != "ext" else None
            if kind == "main":
                p.left -= rate * dt
                p.cpu += rate * dt
            elif kind == "bg":
                p.comm_left -= rate * dt
                p.background += rate * dt
        for p in self.procs:
            if p.state in ("recv", "sleep", "drain"):
                p.blocked += dt

    def happen(self) -> None:
        """Everything due now: communication done, messages arrived, tasks, sleeps and wake-ups ended."""
        now = self.now
        tol = _EPS * max(1.0, now)
        for r, p in enumerate(self.procs):
            while p.comm and p.comm_from <= now + tol and p.comm_left <= tol:
                self.comm_done(r)
        for key in [k for k, w in self.in_flight.items() if w <= now + tol]:
            del self.in_flight[key]
            self.queue(self.send_of[key][1].to, "in", key)
        for r, p in enumerate(self.procs):
            if p.state == "run" and p.left <= tol:
                if p.what == "cpu":
                    self.record(p.task.row, r, p.began, now)
                    p.computed = now
                elif p.what == "send":
                    self.depart(r, p.task)
                p.idx += 1
                self.advance(r)
            elif p.state == "sleep" and p.until <= now + tol:
                if p.what == "sleep":
                    self.record(p.task.row, r, p.began, now)
                    p.idx += 1
                    self.wake(r, "advance", None)
                else:
                    self.wake(r, "unpack", p.task)
            elif p.state == "wake" and p.until <= now + tol:
                self.resume_now(r, p.what, p.task)
        for r in range(len(self.procs)):
            self.finish(r)

    def start(self) -> None:
        """Time 0, the step's barrier: every process starts its first tasks (once)."""
        for r, p in enumerate(self.procs):
            if p.state == "start":
                self.advance(r)

    def run(self) -> CoreSchedule:
        self.start()
        guard = 0
        while any(p.state != "done" for p in self.procs):
            guard += 1
            if guard > 10_000_000:  # pragma: no cover - a bound, not a behaviour
                raise LabError("the simulation does not end", where=WHERE)
            who, rates = self.rates()
            nxt = self.next_event(who, rates)
            self.progress(who, rates, max(0.0, nxt - self.now))
            self.now = nxt
            self.happen()
        ends = [p.end for p in self.procs]
        return CoreSchedule(rows=self.rows, makespan=max(ends) if ends else 0.0, cpu=[p.cpu for p in self.procs],
                            background=[p.background for p in self.procs], blocked=[p.blocked for p in self.procs],
                            ends=ends, cold=[p.cold for p in self.procs])


def simulate(tasks: Sequence[Sequence[Any]], pinned: Sequence[int | None], machine: Machine) -> CoreSchedule:
    """One step of ``len(tasks)`` processes (process ``r`` runs ``tasks[r]`` in order, pinned to core
    ``pinned[r]`` or to none), from time 0 (the step's barrier) until every process has ended."""
    return CoreSimulation(tasks, pinned, machine).run()


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


__all__ = ["CoreSimulation", "share", "simulate", "RANK_POLICIES", "DEFAULT_RANK_POLICY", "rank_cores"]
