"""The Jobs page's model: its opening, the fault drill, the teacher's sign-in and limits, the live job list and
one job's details, as sections. What a session does here (start a drill, stop, release, sign in, set the
limits) goes through the job manager, whose owner checks (:mod:`lab.jobs.access`) decide who may."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lab.jobs.access import teacher_token
from lab.jobs.limits import Limits
from lab.jobs.manager import JobManager
from lab.modelled.scheduling import POLICY_LABELS
from lab.store.runs import ACTIVE, FINISHED
from lab.train.watch import heartbeat_timeout
from lab.view.jobs.detail import (BEATS_CAPTION, EVENT_COLUMNS, error_line, heartbeat_ages, rank_nodes,
                                  read_only_line, released_line, event_table, stopped_by)
from lab.view.jobs.table import (JOB_COLUMNS, alarm_lines, has_active, job_labels, log_tails, overview,
                                 recent_failures, shown_times, slot_timeline)
from lab.view.section import Notice, Section

MISSING = "—"  # what an empty cell of a table shows (a job not started yet has no start time)
LIMITS_INTRO = ("**What one job may ask of this server** (until it restarts; new jobs over a limit are refused, a "
                "job running past the time is stopped)")
TEACHER_LINE = "Teacher: you see and manage every session's jobs."
WRONG_TOKEN = "That is not the teacher's token."
RELEASE_HELP = "Kill anything left of the job, delete its intermediate checkpoints (final.pt and logs stay)"
DRILL = "Watch a failure: start a job with an injected fault"


def intro(measured: str) -> str:
    """The Jobs page's opening: a job's lifecycle (``measured``: the page's badge)."""
    return ("Every training job goes through the task-level design's lifecycle: **submitted** → **parsed** into a "
            "task manager (the launcher), a parameter server where the sync mode has one, and compute workers → "
            "**scheduled** onto resource groups (here: this machine's CPU cores, a few worker slots each) → "
            "**started** → data **split and shipped** → **running**, watched through per-worker heartbeats → "
            "**ended** → resources **released**. A worker that dies or hangs raises an **alarm**; the job then "
            "fails, or (policy *recover*) **restarts** from its last checkpoint without that worker. Everything in "
            f"the job list is {measured} from the run store.")


def queue_rules(jm: JobManager) -> str:
    """How the job manager queues and where it places: this machine's slots, or a Ray cluster."""
    where = ("ranks placed by the Ray cluster, which starts a job once all its ranks fit" if jm.ray_address else
             f"placement policy {POLICY_LABELS[jm.policy]}; {jm.book.total} worker slots on "
             f"{len(jm.book.groups)} core(s)")
    return (f"Queue: fair across sessions (round-robin by session, in order within one); at most {jm.capacity} "
            f"job(s) at a time; {where}.")


def slot_words(jm: JobManager) -> str:
    """What a job's slots are: this machine's, or the Ray cluster's."""
    return "slots on the Ray cluster" if jm.ray_address else "local worker slots"


NODES_CAPTION = ("The Ray cluster's nodes as Ray reports them ({age}): a node with no CPUs (the head) runs no rank; "
                 "a rank that stands for a device of a kind a node declares lands on such a node. Warm ranks: rank "
                 "processes with torch loaded, ready for the next job (one per CPU; a job takes one per rank and "
                 "gives it back when it ends clean). A node Ray lost stays listed, not alive, and its jobs' lost ranks "
                 "are alarms in their events below.")


def cluster_nodes(jm: JobManager) -> list[Section]:
    """The Ray cluster's nodes (none on one machine), from the last answer Ray gave; a page never waits for it."""
    if jm.nodes is None:
        return []
    rows, error, age = jm.nodes.latest()
    notices = (Notice("The Ray cluster did not say which nodes it has: " + error, "warning", ":material/lan:"),) \
        if error else ()
    if rows is None:
        return [Section("jobs_nodes", "Nodes of the Ray cluster", level="subheader", notices=notices,
                        caption=None if error else "Asking the Ray cluster which nodes it has…")]
    return [Section("jobs_nodes", "Nodes of the Ray cluster", level="subheader", notices=notices, table=rows,
                    kind="measured", caption=NODES_CAPTION.format(age=f"{age:.0f} s ago" if age is not None else "now"))]


def fault_drill(sc: Any, kind: str, worker: int, at_step: int, policy: str, checkpoint_every: int) -> tuple:
    """The scenario of a fault drill (at least 2 workers, long enough to pass the fault) and its run's name."""
    tr = sc.training
    drill = tr.replace(workers=drill_workers(sc), steps=max(tr.steps, at_step + 10), fault=kind, fault_worker=worker,
                       fault_step=at_step, fault_policy=policy, checkpoint_every=checkpoint_every)
    return sc.replace(training=drill), f"{sc.name} · {kind} worker {worker} at step {at_step}"


def drill_workers(sc: Any) -> int:
    """How many workers a fault drill of the scenario runs: its own, at least 2 (one to fail, one to go on)."""
    return max(2, sc.training.workers)


def has_teacher() -> bool:
    """Whether this server has a teacher (LAB_TEACHER_TOKEN is set)."""
    return bool(teacher_token())


@dataclass(frozen=True)
class Board:
    """The live job list: its sections, the jobs to pick from (id -> label), and whether any is active."""

    sections: list[Section]
    labels: dict[str, str] = field(default_factory=dict)
    active: bool = False


@dataclass(frozen=True)
class Job:
    """One job's details: its heading, its name (text), whether this session may stop and release it, the
    read-only line when it may not, who stopped it, its sections, and its workers' log tails."""

    title: str
    name: str
    manageable: bool
    active: bool
    finished: bool
    read_only: str
    stopped: str
    sections: list[Section]
    tails: dict[str, str]


@dataclass(frozen=True)
class Desk:
    """One session at the Jobs page: the server's one job manager, this session's owner id and its browser's address
    (None: this machine), by which wrong teacher tokens are slowed."""

    jm: JobManager
    owner: str | None
    client: str | None = None

    @property
    def teacher(self) -> bool:
        return self.jm.access.is_teacher(self.owner)

    def opening(self) -> list[Section]:
        """The queue's rules, and the job manager's failures when they keep coming back. Runs whose launcher
        died without a word become interrupted first."""
        self.jm.sweep()
        failing = recent_failures(self.jm.failures)
        return [Section("jobs_rules", caption=queue_rules(self.jm))] + ([Section("jobs_failing", notices=(Notice(
            "The job manager keeps failing (its log has the tracebacks): " + failing, "error", ":material/error:"),))]
            if failing else []) + cluster_nodes(self.jm)

    # ----- what a session does here
    def start_drill(self, sc: Any, kind: str, worker: int, at_step: int, policy: str, checkpoint_every: int) -> str:
        """Submit a fault drill for this session; its run id."""
        drill, name = fault_drill(sc, kind, worker, at_step, policy, checkpoint_every)
        return self.jm.submit(drill, name=name, owner=self.owner).run_id

    def sign_in(self, claim: str) -> bool:
        return self.jm.access.sign_in_teacher(self.owner, claim, self.client)

    def sign_out(self) -> None:
        self.jm.access.roster.sign_out(self.owner)

    def limits(self) -> dict[str, Any]:
        """The server's limits as the teacher's form shows them (by control key)."""
        lim = self.jm.access.limits
        return {"jobs_max_steps": lim.max_steps, "jobs_max_s": float(lim.max_seconds), "jobs_max_procs": lim.max_procs}

    def set_limits(self, steps: int, seconds: float, procs: int) -> None:
        self.jm.access.set_limits(self.owner, Limits(int(steps), float(seconds), int(procs)))

    def stop(self, run_id: str) -> None:
        self.jm.stop(run_id, self.owner)

    def release(self, run_id: str) -> str:
        """Release a finished job: what it ended and removed, in one line."""
        return released_line(self.jm.release(run_id, self.owner))

    # ----- what it shows
    def polling(self, everyone: bool) -> bool:
        """Whether a job in this view is queued or running: the page polls only then."""
        return has_active(self.jm.store, self.owner, everyone)

    def board(self, everyone: bool) -> Board:
        """The job list of this session (the whole class's with ``everyone``; the teacher sees owner ids)."""
        self.jm.sweep()
        store, teacher = self.jm.store, self.teacher
        table = overview(store, self.jm, self.owner, everyone=everyone, show_ids=teacher)
        if table.empty:
            return Board([Section("jobs_none", notices=(Notice(
                "No jobs yet: start one on the Training page." if everyone else "No jobs of yours yet: start one "
                "on the Training page (the switch above shows the whole class's)."),))])
        active = table.status.isin(ACTIVE)
        notices = [Notice(f"Your job {r.id} is number {int(r.queue)} in the queue.", "info", ":material/hourglass_top:")
                   for r in table[(table.owner == "you") & table.queue.notna()].itertuples()]
        notices += [Notice(f"Alarm, job {rid}, attempt {attempt}: {summary} → {action}", "error",
                           ":material/notifications_active:")
                    for rid, attempt, summary, action in alarm_lines(store.job_records.events(list(table.id[active])))]
        slots = slot_words(self.jm)
        sections = [Section("jobs", notices=tuple(notices), table=shown_times(table).to_dict("records"),
                            columns=JOB_COLUMNS, missing=MISSING, kind="measured",
                            caption="Times are wall-clock (UTC) from the run store; 'waited' is submission to start, "
                                    f"'ran' start to end; resources are the {slots} the job manager gave it.")]
        rows, _ = slot_timeline(store, list(table.id[:20]))
        if rows:
            sections.append(Section("jobs_timeline", chart="jobs.timeline_figure", kind="measured", chart_input=dict(
                rows=rows, title=f"Which job held which of the {slots}, when",
                x_title="time since the first job shown was scheduled (s)"),
                caption="From each job's 'scheduled' and 'released' events."))
        return Board(sections, job_labels(table), bool(active.any()))

    def job(self, run_id: str) -> Job:
        """One job's details as this session sees them."""
        store, teacher = self.jm.store, self.teacher
        run = store.get_run(run_id)
        info, sections = run["info"], []
        if run["error"]:
            sections.append(Section("jobs_error", notices=(Notice(
                error_line(run, self.owner, teacher), "warning" if run["status"] == "stopped" else "error"),)))
        ev = store.job_records.events(run_id)
        if len(ev):
            sections.append(Section(
                "jobs_stage", chart="jobs.events_figure", chart_input=dict(events=ev.to_dict("records"),
                                                                           labels={run_id: run_id}),
                table=event_table(ev, self.owner, teacher).to_dict("records"), columns=EVENT_COLUMNS,
                missing=MISSING, kind="measured",
                caption="Lifecycle events as the job manager, the launcher and rank 0 recorded them."))
            where = rank_nodes(ev)
            if len(where):
                sections.append(Section("jobs_rank_nodes", table=where.to_dict("records"), kind="measured",
                                        caption="Which node of the Ray cluster ran which rank (node: Ray's node id)."))
        beats = store.job_records.heartbeats(run_id)
        if run["status"] == "running" and len(beats):
            workers, ages, phases = heartbeat_ages(beats)
            sections.append(Section("jobs_beats", chart="jobs.heartbeat_figure", kind="measured", caption=BEATS_CAPTION,
                                    chart_input=dict(workers=workers, ages=ages, phases=phases,
                                                     timeout=heartbeat_timeout())))
        tails = {who: text or "(empty)" for who, text in log_tails(self.jm, run_id).items()}
        if tails:
            sections.append(Section("jobs_logs", text="**Log tail per worker**"))
        return Job(f"Job {run_id}", f"Name: {run['name']}", self.jm.access.may_manage(info.get("owner"), self.owner),
                   run["status"] in ACTIVE, run["status"] in FINISHED, read_only_line(info.get("owner")),
                   "Stopped by: " + stopped_by(info["stopped_by"], self.owner, teacher) if info.get("stopped_by")
                   else "", sections, tails)


__all__ = ["Board", "DRILL", "Desk", "Job", "LIMITS_INTRO", "MISSING", "RELEASE_HELP", "TEACHER_LINE", "WRONG_TOKEN",
           "drill_workers", "fault_drill", "has_teacher", "intro", "queue_rules", "slot_words"]
