"""What the simulation of processes on shared cores (:mod:`lab.modelled.placement.cores`) is given and gives
back: each process's tasks (:class:`Cpu`, :class:`Sleep`, :class:`Send`, :class:`Recv`), the :class:`Machine`,
the checks a task list passes before it is simulated, and the :class:`CoreSchedule` found."""
from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Hashable, Mapping, Sequence

from lab.errors import LabError
from lab.modelled.placement.pipeline import check_seconds

WHERE = "core model"


@dataclass(frozen=True)
class Cpu:
    """``seconds`` of work on a dedicated core; ``row``: what to record of it (None: nothing)."""

    seconds: float
    row: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Sleep:
    """A wait that takes no core: ``seconds`` (an emulated device's extra time, a link's hold)."""

    seconds: float = 0.0
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
    """The cores and what the processes pay for sharing them (seconds). ``cold``: ((idle seconds, factor),
    ...), the measured slow-down of work that starts after its process computed nothing for that long (its data
    and code left the caches meanwhile); a :class:`Cpu` task takes its seconds times the factor of its process's
    idle time before it, interpolated, flat beyond the last point. Empty: no slow-down."""

    cores: int = 2
    wake: float = 0.0
    background_same: float = 0.0
    background_other: float = 0.0
    external: float = 0.0
    cold: tuple = ()

    def cold_factor(self, idle: float) -> float:
        """The factor of work after ``idle`` seconds without computing (1 below the first point's idle time
        interpolated from 1 at no idle time)."""
        pts = sorted(self.cold)
        if not pts or idle <= 0:
            return 1.0
        xs, ys = [0.0] + [float(w) for w, _ in pts], [1.0] + [float(f) for _, f in pts]
        if idle >= xs[-1]:
            return ys[-1]
        i = next(k for k in range(1, len(xs)) if idle < xs[k])
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (idle - xs[i - 1]) / (xs[i] - xs[i - 1])


@dataclass
class CoreSchedule:
    """What :func:`simulate` found: ``rows`` (every recorded task: its row fields plus ``start``, ``end`` and
    ``rank``; messages as ``kind`` from the Send's row with ``start`` the departure and ``end`` when the
    receive returned), the step's length, and per process its CPU seconds (main thread and background) and the
    seconds it was blocked or asleep (and of its CPU, what its cold starts added). A process ends when its last task is done, every message it sent was
    received and its background work is done (what is left of it would delay the next step)."""

    rows: list[dict]
    makespan: float
    cpu: list[float]
    background: list[float]
    blocked: list[float]
    ends: list[float] = field(default_factory=list)
    cold: list[float] = field(default_factory=list)  # per process: the seconds of work its cold starts added


def _sec(x: Any, what: str) -> float:
    return check_seconds(x, what, where=WHERE)


def check_tasks(tasks: Sequence[Sequence[Any]], pinned: Sequence[int | None], machine: Machine) -> None:
    if not isinstance(machine, Machine):
        raise LabError("machine must be a Machine", where=WHERE)
    if isinstance(machine.cores, bool) or not isinstance(machine.cores, Integral) or machine.cores < 1:
        raise LabError(f"the machine needs at least one core (got {machine.cores!r})", where=WHERE)
    for name in ("wake", "background_same", "background_other", "external"):
        _sec(getattr(machine, name), name)
    try:
        points = [(float(w), float(f)) for w, f in machine.cold]
    except (TypeError, ValueError):
        raise LabError(f"the cold slow-down must be pairs of (idle seconds, factor), got {machine.cold!r}",
                       where=WHERE) from None
    for w, f in points:
        _sec(w, "a cold slow-down's idle time")
        if not (f >= 1.0 and f < float("inf")):
            raise LabError(f"a cold slow-down's factor must be a finite number of at least 1, got {f!r}", where=WHERE)
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
