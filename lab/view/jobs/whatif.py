"""The Jobs page's what-if: several jobs played under the task-level design's two scheduling policies on the
resource groups of a topology (modelled), from a job table the student edits."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from lab.modelled.scheduling import POLICIES, POLICY_LABELS, Group, JobRequest, compare_policies, resource_groups
from lab.scenario.catalogue import PRESET_LABELS, preset
from lab.view.section import Notice, Section

#: The what-if's starting jobs: three owners, one of them submitting late.
WHATIF_JOBS = {"job": ["A-1", "A-2", "B-1", "C-1", "B-2", "C-2"], "owner": list("AABCBC"),
               "tasks": [4, 2, 3, 1, 4, 2], "work (PFLOP)": [2.0, 1.0, 1.5, 0.3, 2.0, 0.5],
               "submit (s)": [0.0, 0.0, 0.0, 5.0, 10.0, 20.0], "type": ["any"] * 6}
HEADER = "What if: several jobs on a topology's resource groups"
WHATIF_CAPTION = ("Jobs start in fair order (round-robin over owners) wherever they fit now; a job that does not fit "
                  "is passed over. Uniform spreads a job over groups of different speeds, so it runs at the slowest "
                  "group's pace; resource-state keeps it in one group but cannot start a job larger than every group.")


def whatif_intro(modelled: str) -> str:
    return ("The task-level design's two policies, played on the resource groups (one hardware type each) of a "
            "topology. A job needs *tasks* devices and an amount of *work*; it runs as fast as its slowest device "
            "(synchronous data parallelism: every device trains on its share of each batch and waits for the others): "
            "duration = work / (tasks × slowest device's matmul FLOP/s); the makespan is the time from the first job's "
            "start to the last job's end. "
            f"Everything here is {modelled}.")


def topology_label(key: str) -> str:
    """How the what-if's choice of topology names ``key``: the scenario's own, or a preset."""
    return "the scenario's topology" if key == "scenario" else PRESET_LABELS[key]


def whatif_start():
    """The job table the what-if's editor starts from."""
    import pandas as pd

    return pd.DataFrame(WHATIF_JOBS)


def group_table(groups: Iterable[Group]):
    """A topology's resource groups as the what-if lists them."""
    import pandas as pd

    groups = list(groups)
    return pd.DataFrame({"group": [g.name for g in groups], "hardware type": [g.type for g in groups],
                         "devices (count)": [g.size for g in groups],
                         "matmul per device (TFLOP/s)": [g.speed / 1e12 for g in groups]})


def whatif_requests(table) -> list[JobRequest]:
    """The what-if's edited job table as job requests; rows missing a name, tasks, work or submit time
    are left out (a row being typed)."""
    return [JobRequest(str(r["job"]), int(r["tasks"]), str(r["owner"]), float(r["submit (s)"]),
                       work=float(r["work (PFLOP)"]) * 1e15, type=None if r["type"] in (None, "any") else r["type"])
            for r in table.dropna(subset=["job", "tasks", "work (PFLOP)", "submit (s)"]).to_dict("records")]


def whatif(groups: Sequence[Any], edited: Any, max_running: int) -> tuple[dict, list[str]]:
    """The what-if's schedules under every policy for the page's job table, and the devices they use."""
    schedules = compare_policies(groups, whatif_requests(edited), max_running or None)
    return schedules, [d for g in groups if g.speed > 0 for d in g.devices]


def whatif_columns(types: Sequence[str]) -> dict:
    """The what-if's editable job table: its columns' bounds, and the device types a job may ask for."""
    return {"tasks": {"kind": "number", "label": "tasks (devices)", "min": 1, "max": 64, "step": 1},
            "work (PFLOP)": {"kind": "number", "min": 0.001, "max": 1e6},
            "submit (s)": {"kind": "number", "min": 0.0, "max": 1e6},
            "type": {"kind": "select", "label": "device type", "options": list(types)}}


def whatif_metrics(schedule) -> list[tuple[str, str]]:
    """A policy's simulated schedule in three numbers, as the what-if shows them."""
    return [("Makespan (s)", f"{schedule.makespan:.1f}"), ("Mean wait in the queue (s)", f"{schedule.mean_wait:.1f}"),
            ("Device utilisation (%)", f"{100 * schedule.utilisation:.0f}")]


@dataclass(frozen=True)
class Policy:
    """One policy's column of the what-if: its timeline, its three numbers (stacked under it), and what
    could never start."""

    chart: Section
    metrics: list[tuple[str, str]]
    after: Section


@dataclass(frozen=True)
class WhatIf:
    """The what-if on one topology's resource groups."""

    groups: tuple[Group, ...]

    @property
    def table(self) -> Section:
        return Section("jobs_groups", table=group_table(self.groups).to_dict("records"))

    @property
    def columns(self) -> dict:
        """The editor's columns, with the device types of these groups."""
        return whatif_columns(["any"] + sorted({g.type for g in self.groups}))

    def policies(self, edited: Any, max_running: int) -> list[Policy]:
        """Every policy's schedule of the ``edited`` job table, ``max_running`` jobs at most at once (0: no
        limit)."""
        schedules, devices = whatif(self.groups, edited, max_running)
        out = []
        for p in POLICIES:
            s = schedules[p]
            never = (Notice("Too large for this policy even on the empty groups (never start): "
                            + ", ".join(s.unplaceable), "warning"),) if s.unplaceable else ()
            out.append(Policy(Section(f"jobs_sim_{p}", chart="jobs.timeline_figure", kind="modelled", chart_input=dict(
                rows=s.rows(), title=POLICY_LABELS[p], resources=devices, x_title="simulated time (s)")),
                whatif_metrics(s), Section(f"jobs_sim_{p}_never", notices=never)))
        return out


def what_if(sc: Any, which: str) -> WhatIf:
    """The what-if on the scenario's topology (``which`` "scenario") or on a preset's."""
    return WhatIf(tuple(resource_groups(sc.topology if which == "scenario" else preset(which))))


__all__ = ["HEADER", "Policy", "WHATIF_CAPTION", "WHATIF_JOBS", "WhatIf", "group_table", "topology_label", "what_if",
           "whatif", "whatif_columns", "whatif_intro", "whatif_metrics", "whatif_requests", "whatif_start"]
