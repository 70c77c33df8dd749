"""This machine's cores as the job manager's slots: one resource group per core the lab may use,
which slots each running job holds, and which core each rank of a placed job gets. Where a job goes
is decided by the placement policies of :mod:`lab.modelled.scheduling`, the same ones its what-if plays."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from lab import settings
from lab.errors import LabError
from lab.scenario.groups import Group

# ----- groups ----------------------------------------------------------------------------------
def local_groups(cpus: Iterable[int] | None = None, slots_per_cpu: int | None = None) -> list[Group]:
    """This machine as resource groups: one group per CPU core the lab may use ("cpu0", "cpu1", ...)
    with ``slots_per_cpu`` worker slots each (default: enough for the largest job, 4 workers and a
    parameter server, on an empty machine: ceil(5 / cores), at least 2)."""
    cpus = sorted(settings.job_cpus() if cpus is None else cpus)
    if not cpus:
        raise LabError("no CPU to run jobs on", where="scheduling")
    if slots_per_cpu is None:
        slots_per_cpu = (settings.integer("LAB_SLOTS_PER_CPU") or max(2, math.ceil(5 / len(cpus))))
    if slots_per_cpu < 1:
        raise LabError(f"slots per CPU must be at least 1 (got {slots_per_cpu})", where="scheduling")
    return [Group(f"cpu{c}", "cpu", tuple(f"cpu{c}/slot{k}" for k in range(slots_per_cpu)), "local")
            for c in cpus]


def cluster_group(jobs: int, procs_per_job: int) -> Group:
    """A Ray cluster as one group: room for ``jobs`` jobs of ``procs_per_job`` processes at once; where each
    rank runs is Ray's to decide (:mod:`lab.train.ray_ranks`), and its ranks get no core of this machine."""
    return Group("ray", "cluster", tuple(f"ray/slot{k}" for k in range(max(1, jobs * procs_per_job))), "ray")


def cpu_of(group: str) -> int | None:
    """The core number of a local group name ("cpu3" -> 3)."""
    if group.startswith("cpu") and group[3:].isdigit():
        return int(group[3:])
    return None


@dataclass
class SlotBook:
    """Which local slots are held by which job (the JobManager's real bookkeeping)."""

    groups: list[Group]
    held: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # job -> group -> devices

    def free(self, shared: Iterable[str] = ()) -> dict[str, int]:
        """Free slots per group; the slots of the jobs in ``shared`` (jobs that yield) count as free."""
        shared = set(shared)
        used: dict[str, int] = {}
        for job, where in self.held.items():
            if job in shared:
                continue
            for g, ds in where.items():
                used[g] = used.get(g, 0) + len(ds)
        return {g.name: g.size - used.get(g.name, 0) for g in self.groups}

    @property
    def total(self) -> int:
        return sum(g.size for g in self.groups)

    def take(self, job: str, where: Mapping[str, int], shared: Iterable[str] = ()) -> dict[str, list[str]]:
        """Hold slots for ``job``; the slots of the jobs in ``shared`` (jobs that yield) may be held twice."""
        shared = set(shared)
        used = {d for j, w in self.held.items() if j not in shared for ds in w.values() for d in ds}
        got = {}
        for g in self.groups:
            k = where.get(g.name, 0)
            if k:
                ds = [d for d in g.devices if d not in used][:k]
                if len(ds) < k:
                    raise LabError(f"group {g.name} has only {len(ds)} free slot(s), {k} asked", where="scheduling")
                got[g.name] = ds
        self.held[job] = got
        return got

    def release(self, job: str) -> dict[str, list[str]]:
        return self.held.pop(job, {})


def rank_cpus(held: dict[str, list[str]], tasks: int) -> list[int]:
    """Rank k -> core: the placement's groups taken in turn (rank 0 on the first group, ...)."""
    turns = []
    left = {g: len(ds) for g, ds in held.items()}
    while len(turns) < tasks and any(left.values()):
        for g in held:
            if left[g] and len(turns) < tasks:
                turns.append(g)
                left[g] -= 1
    return [c for c in (cpu_of(g) for g in turns) if c is not None]


__all__ = ["local_groups", "cluster_group", "cpu_of", "SlotBook", "rank_cpus"]
