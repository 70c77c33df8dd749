"""Scheduling jobs onto resource groups (the task-level design): pure functions, no processes.

A *resource group* holds devices of one hardware type (the task-level design: CPU, GPU, NPU, ... groups). A job
asks for ``tasks`` devices (its compute workers, plus one for the parameter server when its sync
mode uses one). Two placement policies, as in the task-level design:

* ``uniform``: spread the job's tasks evenly over every group that has a free device (one task per
  group in turn, in the groups' order), so no group carries more than its share.
* ``resource_state``: look at the free resources and put the whole job on the group with the most
  free devices that can hold it (largest first); a job no single group can hold waits.

Several queued jobs are dispatched in a *fair* order: round-robin over their owners (one browser
session = one owner), first come first served within an owner. A job that does not fit now is
passed over and later jobs that fit may start (first fit), so a small job never waits behind a
large one; the price is that a large job can wait long on a busy cluster.

The same :func:`place` and :func:`fair_order` serve twice: the job manager
(:class:`lab.jobs.manager.JobManager`) places real worker processes on this machine's cores
(:mod:`lab.jobs.slots`), and :func:`simulate` plays a what-if on a topology's groups
(:func:`resource_groups`), where each job's duration is *modelled*.

Units: seconds, FLOP, FLOP/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from lab.errors import LabError
from lab.scenario.groups import Group, resource_groups

POLICIES = ("uniform", "resource_state")
POLICY_LABELS = {"uniform": "uniform (spread over every group with free devices)",
                 "resource_state": "resource-state (whole job on the largest free group that holds it)"}


@dataclass(frozen=True)
class JobRequest:
    """A job waiting to be scheduled. Give either ``duration`` (seconds, whatever the devices) or
    ``work`` (FLOP; the modelled duration is work / (tasks x the slowest assigned device's speed),
    synchronous data parallelism being as fast as its slowest member)."""

    name: str
    tasks: int
    owner: str = "-"
    submit: float = 0.0
    duration: float | None = None
    work: float | None = None
    type: str | None = None  # only groups of this hardware type (None: any)

    def check(self) -> "JobRequest":
        where = f"job {self.name!r}"
        if not isinstance(self.tasks, int) or isinstance(self.tasks, bool) or self.tasks < 1:
            raise LabError(f"needs at least one task (got {self.tasks!r})", where=where)
        if not (isinstance(self.submit, (int, float)) and math.isfinite(self.submit) and self.submit >= 0):
            raise LabError(f"submit time must be a finite number of seconds >= 0 (got {self.submit!r})", where=where)
        if self.duration is None and self.work is None:
            raise LabError("give a duration (s) or an amount of work (FLOP)", where=where)
        for what, v in (("duration (s)", self.duration), ("work (FLOP)", self.work)):
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise LabError(f"{what} must be a positive finite number (got {v!r})", where=where)
        return self


@dataclass(frozen=True)
class Allocation:
    job: str
    owner: str
    devices: tuple[str, ...]
    groups: Mapping[str, int]  # group -> tasks placed there
    submit: float
    start: float
    end: float

    @property
    def wait(self) -> float:
        return self.start - self.submit


@dataclass(frozen=True)
class JobSchedule:
    policy: str
    allocations: tuple[Allocation, ...]
    unplaceable: tuple[str, ...] = ()  # jobs no empty cluster could hold under this policy
    devices: tuple[str, ...] = ()

    @property
    def makespan(self) -> float:
        return max((a.end for a in self.allocations), default=0.0)

    @property
    def mean_wait(self) -> float:
        return sum(a.wait for a in self.allocations) / len(self.allocations) if self.allocations else 0.0

    @property
    def utilisation(self) -> float:
        """Busy device-seconds over (devices x makespan)."""
        span = self.makespan
        if span <= 0 or not self.devices:
            return 0.0
        busy = sum((a.end - a.start) * len(a.devices) for a in self.allocations)
        return busy / (len(self.devices) * span)

    def rows(self) -> list[dict]:
        """One row per (job, device) for a timeline: job, owner, resource, group, start, end."""
        out = []
        for a in self.allocations:
            for d in a.devices:
                out.append({"job": a.job, "owner": a.owner, "resource": d, "start": a.start, "end": a.end,
                            "group": next((g for g in a.groups if d.startswith(g + "/")), "")})
        return out


# ----- placing one job -------------------------------------------------------------------------
def place(tasks: int, free: Mapping[str, int], policy: str = "uniform") -> dict[str, int] | None:
    """Where ``tasks`` go given ``free`` devices per eligible group (in the groups' order); None
    when they do not fit now. ``uniform``: one task per group with a free device, in turn;
    ``resource_state``: all on the group with the most free devices that can hold them."""
    if policy not in POLICIES:
        raise LabError(f"unknown policy {policy!r}; choose one of {list(POLICIES)}", where="scheduling")
    if tasks < 1:
        raise LabError(f"a job needs at least one task (got {tasks})", where="scheduling")
    avail = {g: int(n) for g, n in free.items() if n > 0}
    if policy == "resource_state":
        best = None
        for g, n in avail.items():  # the first of equally large groups wins (stable)
            if n >= tasks and (best is None or n > avail[best]):
                best = g
        return None if best is None else {best: tasks}
    if sum(avail.values()) < tasks:
        return None
    out: dict[str, int] = {}
    left = dict(avail)
    k = tasks
    while k:
        for g in avail:
            if k and left[g] > 0:
                out[g] = out.get(g, 0) + 1
                left[g] -= 1
                k -= 1
    return out


def fair_order(items: Sequence, owner_of=lambda j: j.owner, after: str | None = None,
               ring: Sequence[str] | None = None) -> list:
    """Round-robin over owners, first in first out within an owner. The owners take turns in the
    order of ``ring`` (every owner ever seen, in order of first arrival; default: the order their
    first item appears here), starting with the one after ``after`` (the owner served last), even
    when ``after`` has nothing left in the queue."""
    queues: dict[str, list] = {}
    for it in items:
        queues.setdefault(owner_of(it), []).append(it)
    base = list(dict.fromkeys(ring or ()))
    base += [o for o in queues if o not in base]
    if after in base:
        i = base.index(after) + 1
        base = base[i:] + base[:i]
    owners = [o for o in base if o in queues]
    out = []
    depth = 0
    while len(out) < len(items):
        for o in owners:
            if depth < len(queues[o]):
                out.append(queues[o][depth])
        depth += 1
    return out


# ----- the what-if -----------------------------------------------------------------------------
def duration_on(job: JobRequest, groups: Mapping[str, Group], where: Mapping[str, int]) -> float:
    """Modelled seconds of ``job`` on the placement ``where`` (or its fixed duration)."""
    if job.duration is not None:
        return float(job.duration)
    slowest = min(groups[g].speed for g in where)
    return float(job.work) / (job.tasks * slowest)


def simulate(groups: Sequence[Group], jobs: Sequence[JobRequest], policy: str = "uniform",
             max_running: int | None = None) -> JobSchedule:
    """Play the queue: at every arrival or completion, start queued jobs in fair order wherever
    they fit (see :func:`place`), until none fits. Jobs that could not run even on the empty
    cluster are listed in ``unplaceable``."""
    if policy not in POLICIES:
        raise LabError(f"unknown policy {policy!r}; choose one of {list(POLICIES)}", where="scheduling")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise LabError("job names must be unique", where="scheduling")
    byname = {g.name: g for g in groups}
    if len(byname) != len(groups):
        raise LabError("group names must be unique", where="scheduling")
    jobs = [j.check() for j in jobs]

    def eligible(j: JobRequest) -> list[str]:
        return [g.name for g in groups if g.speed > 0 and (j.type is None or g.type == j.type)]

    empty = {g.name: g.size for g in groups}
    unplaceable = [j.name for j in jobs if place(j.tasks, {g: empty[g] for g in eligible(j)}, policy) is None]
    pending = sorted((j for j in jobs if j.name not in unplaceable), key=lambda j: j.submit)
    free_dev = {g.name: list(g.devices) for g in groups}
    running: list[tuple[float, JobRequest, dict[str, list[str]]]] = []
    queue: list[JobRequest] = []
    out: list[Allocation] = []
    now, last_owner = 0.0, None
    ring: list[str] = []
    while pending or queue or running:
        while pending and pending[0].submit <= now + 1e-12:
            queue.append(pending.pop(0))
            if queue[-1].owner not in ring:
                ring.append(queue[-1].owner)
        started = True
        while started and queue:
            started = False
            if max_running is not None and len(running) >= max_running:
                break
            for j in fair_order(queue, after=last_owner, ring=ring):
                el = eligible(j)
                where = place(j.tasks, {g: len(free_dev[g]) for g in el}, policy)
                if where is None:
                    continue
                held = {g: [free_dev[g].pop(0) for _ in range(k)] for g, k in where.items()}
                end = now + duration_on(j, byname, where)
                running.append((end, j, held))
                out.append(Allocation(j.name, j.owner, tuple(d for ds in held.values() for d in ds), dict(where),
                                      j.submit, now, end))
                queue.remove(j)
                last_owner = j.owner
                started = True
                break
        nxt = [e for e, _, _ in running] + ([pending[0].submit] if pending else [])
        if not nxt:
            break  # only jobs that cannot start are left (cannot happen: unplaceable ones were removed)
        now = max(now, min(nxt))
        for item in [r for r in running if r[0] <= now + 1e-12]:
            running.remove(item)
            for g, ds in item[2].items():
                free_dev[g].extend(ds)
                free_dev[g].sort(key=lambda d, g=g: byname[g].devices.index(d))
    all_devices = tuple(d for g in groups if g.speed > 0 for d in g.devices)
    return JobSchedule(policy, tuple(sorted(out, key=lambda a: (a.start, a.job))), tuple(unplaceable), all_devices)


def compare_policies(groups: Sequence[Group], jobs: Sequence[JobRequest],
                     max_running: int | None = None) -> dict[str, JobSchedule]:
    return {p: simulate(groups, jobs, p, max_running) for p in POLICIES}


__all__ = ["Group", "JobRequest", "Allocation", "JobSchedule", "POLICIES", "POLICY_LABELS", "resource_groups",
           "place", "fair_order", "simulate", "compare_policies", "duration_on"]
