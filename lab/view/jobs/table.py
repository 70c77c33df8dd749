"""Plain data for the Jobs and Training pages: the job table, where a job is on its way to training,
whether anything is active, the slot timeline and log tails."""
from __future__ import annotations

import time
from typing import Any, Iterable, Mapping, Sequence

from lab.errors import LabError
from lab.jobs.access import TEACHER
from lab.jobs.manager import JobManager
from lab.modelled.scheduling import POLICY_LABELS, Group, JobRequest, compare_policies
from lab.processes import tail_text
from lab.scenario.names import OPTIMIZER_LABELS, OPTIMIZER_SHORT
from lab.store.runs import ACTIVE, RunStore


def overview(store: RunStore, jm: JobManager | None = None, owner: str | None = None, limit: int = 50,
             everyone: bool = False, show_ids: bool = False):
    """One row per job (newest first): status, last stage, owner (you / another session / the
    command line; with ``show_ids`` the other session's id), place in the queue, resources,
    restarts, alarms, and times (Unix seconds). With an ``owner``, only that session's jobs unless
    ``everyone`` (the whole class, for reading; the teacher's view)."""
    import pandas as pd

    runs = store.list_runs(owner=None if everyone or owner is None else owner).head(limit)
    cols = ["id", "name", "owner", "status", "stage", "queue", "resources", "attempt", "restarts", "alarms",
            "submitted", "start", "end", "queued_s", "ran_s"]
    if runs.empty:
        return pd.DataFrame(columns=cols)
    stages = store.stages(list(runs.id))
    by_run = {rid: g for rid, g in stages.groupby("run_id")} if len(stages) else {}
    rows = []
    for r in runs.itertuples():
        ev = by_run.get(r.id)
        info_owner = r.owner
        who = ("you" if owner is not None and info_owner == owner else
               "command line" if info_owner is None else
               f"session {info_owner}" if show_ids else "another session")
        sched = ev[ev.stage == "scheduled"] if ev is not None else None
        started = ev[ev.stage == "started"] if ev is not None else None
        res = ""
        if sched is not None and len(sched):
            d = sched.detail.iloc[-1]
            res = ", ".join(f"{g}: {n} slot{'s' if n != 1 else ''}" for g, n in d.get("groups", {}).items())
        elif started is not None and len(started):
            res = f"{started.detail.iloc[-1].get('world', '?')} process(es), not pinned"
        pos = jm.queue_position(r.id) if jm is not None and r.status == "queued" else None
        start, end = r.start, r.end
        rows.append({
            "id": r.id, "name": r.name, "owner": who, "status": r.status,
            "stage": ev.stage.iloc[-1] if ev is not None else "submitted", "queue": pos, "resources": res,
            "attempt": int(ev.attempt.max()) if ev is not None else 0,
            "restarts": int((ev.stage == "restart").sum()) if ev is not None else 0,
            "alarms": int((ev.stage == "alarm").sum()) if ev is not None else 0,
            "submitted": r.created, "start": start, "end": end,
            "queued_s": (start - r.created) if start == start and start is not None else None,
            "ran_s": (end - start) if end == end and end is not None and start == start and start is not None else None,
        })
    return pd.DataFrame(rows, columns=cols)


def recent_failures(failures, now: float | None = None, within_s: float = 300.0, least: int = 3) -> str:
    """What the job manager's scheduler and sweeper caught lately, in one line for the Jobs page: the newest of
    ``failures`` ((time, text) pairs) when at least ``least`` fell within the last ``within_s`` seconds (a
    failure that keeps coming back, not a passing one); "" otherwise."""
    now = time.time() if now is None else now
    recent = [(t, text) for t, text in failures if now - t <= within_s]
    if len(recent) < least:
        return ""
    return f"{len(recent)} errors in the last {within_s / 60:.0f} minutes; the newest: {recent[-1][1][:300]}"


def has_active(store: RunStore, owner: str | None = None, everyone: bool = False) -> bool:
    """Whether a job in this view (the session's own, or everyone's) is queued or running: pages
    poll the store only then."""
    return bool(len(store.list_runs(statuses=ACTIVE, owner=None if everyone else owner)))


def slot_timeline(store: RunStore, run_ids: Iterable[str], now: float | None = None) -> tuple[list[dict], float]:
    """Which job held which local slot when: rows (job, label, resource, start, end in seconds since
    the earliest 'scheduled' event) from each run's scheduled and released stages; a job still
    holding its slots ends at ``now``. Returns (rows, t0)."""
    now = time.time() if now is None else now
    st = store.stages(list(run_ids))
    if st.empty:
        return [], now
    names = {}
    spans = []
    for rid, ev in st.groupby("run_id"):
        sched = ev[ev.stage == "scheduled"]
        if sched.empty:
            continue
        t_start = float(sched.t.iloc[-1])
        rel = ev[(ev.stage == "released") & (ev.t >= t_start)]
        rel = rel[[d.get("by") != "launcher" for d in rel.detail]] if len(rel) else rel
        t_end = float(rel.t.iloc[0]) if len(rel) else now
        if rid not in names:
            try:
                names[rid] = store.get_run(rid)["name"]
            except LabError:
                names[rid] = rid
        for g, slots in sched.detail.iloc[-1].get("slots", {}).items():
            for s in slots:
                spans.append((rid, s, t_start, t_end))
    if not spans:
        return [], now
    t0 = min(s[2] for s in spans)
    return [{"job": rid, "label": f"{names[rid]} ({rid})", "resource": s, "start": a - t0, "end": b - t0}
            for rid, s, a, b in spans], t0


def log_tails(jm: JobManager, run_id: str, max_bytes: int = 3000) -> dict[str, str]:
    """The end of each worker's log and of the launcher's log."""

    out = {f"rank {k}": tail_text(p, max_bytes) for k, p in jm.worker_logs(run_id).items()}
    launcher = tail_text(jm.log_path(run_id), max_bytes)
    if launcher:
        out["launcher"] = launcher
    return out


def seconds_per_step(st: RunStore, run: dict) -> float | None:
    """What one step of a run like ``run`` (same model, parallelism, workers) took on this server: the median
    over its 20 newest finished runs of wall time per step; None before there is one."""
    tr = run["scenario"].get("training", {})
    runs = st.list_runs(statuses=("done",))
    same = runs[(runs.model == tr.get("model")) & (runs.workers == tr.get("workers"))
                & (runs.parallel == tr.get("parallel", "data"))].head(20)
    per = [(r.end - r.start) / r.steps for r in same.itertuples() if r.steps and r.end and r.start and r.end > r.start]
    return float(sorted(per)[len(per) // 2]) if per else None


def seconds_left(st: RunStore, run_id: str, elapsed: float | None = None) -> float | None:
    """How long a queued or running run still needs: its steps left at the pace it runs (once it has run some)
    or at the pace of runs like it; None when nothing tells."""
    run = st.get_run(run_id)
    steps = int(run["scenario"].get("training", {}).get("steps") or 0)
    done = st.progress(run_id) if run["status"] == "running" else 0
    if done > 0 and elapsed:
        return elapsed / done * max(0, steps - done)
    per = seconds_per_step(st, run)
    return None if per is None else per * max(0, steps - done)


def _dur(s: float) -> str:
    return f"{int(s // 60)} min {int(s % 60)} s" if s >= 60 else f"{s:.0f} s"


def queue_line(st: RunStore, info: dict) -> str:
    """Where a queued job stands, in words: its place, what holds the server (another student's job, or yours,
    for how long, whether it yields), and when this job should start, from the jobs ahead."""
    ahead = info["ahead"]
    parts = [f"number {info['position']} in the queue"
             + (f", behind {len(ahead)} queued job{'s' if len(ahead) != 1 else ''}"
                + (f" ({sum(a['yours'] for a in ahead)} of them yours)" if any(a["yours"] for a in ahead) else "")
                if ahead else "")]
    for r in info["running"]:
        left = seconds_left(st, r["run_id"], r["elapsed"])
        parts.append(("your own job" if r["yours"] else "another student's job") + f" runs ({_dur(r['elapsed'])} in"
                     + (f", about {_dur(left)} left" if left is not None else "") + ")"
                     + (" and yields: it runs at the lowest priority" if r["yielded"] else ""))
    free = len([r for r in info["running"] if not r["yielded"]]) < info["capacity"]
    if not ahead and not info["student_running"] and not free:
        parts.append(f"a job that has run {info['slice_s']:g} s yields to yours, so yours starts beside it within "
                     f"about {info['slice_s']:g} s")
    else:
        waits = [seconds_left(st, a["run_id"]) for a in ahead]
        if ahead and all(w is not None for w in waits):
            parts.append(f"the jobs ahead need about {_dur(sum(waits) / max(1, info['capacity']))}")
    return "; ".join(parts) + "."


def start_phase(st: RunStore, run_id: str, queue_position: int | None = None) -> str:
    """Where a job is on its way to training, in one line a page can show: queued behind N jobs,
    starting the launcher, starting workers (k of N ready), joining the group, first step, or step k
    of N (also once it ended). Read from the run's status, stages, heartbeats and metrics."""
    run = st.get_run(run_id)
    status = run["status"]
    tr = run["scenario"].get("training", {})
    steps = int(tr.get("steps") or 0)
    if status == "queued":
        return f"queued, number {queue_position} in the queue" if queue_position else "queued"
    done = st.progress(run_id)
    if status != "running" or done > 0:
        return f"step {done} of {steps}"
    stages = st.stages(run_id)
    attempt = int(stages.attempt.max()) if len(stages) and stages.attempt.notna().any() else 0
    seen = set(stages[stages.attempt.fillna(0) >= attempt].stage) if len(stages) else set()
    if "running" in seen or "data" in seen:  # the group is formed and the data split
        return "first step"
    if "started" not in seen:
        return "starting the launcher"
    world = int(tr.get("workers") or 1) + (1 if tr.get("sync") == "param_server" else 0)
    beats = st.heartbeats(run_id)
    ready = int((beats.attempt.fillna(0) >= attempt).sum()) if len(beats) else 0
    if ready < world:
        return f"starting workers ({ready} of {world} ready)"
    return "joining the group"


# ----- one job's details ------------------------------------------------------------------------
_DETAIL_KEYS = ("summary", "action", "policy", "groups", "rank_cpus", "world", "workers", "shard_sizes", "status",
                "worker_processes_left", "from_checkpoint", "exact", "kind", "by", "owner")


def stage_summary(detail: dict) -> str:
    """A lifecycle event's detail in one line: the keys a person reads, at most 300 characters."""
    return "; ".join(f"{k}: {detail[k]}" for k in _DETAIL_KEYS
                     if k in detail and detail[k] not in (None, "", [], {}))[:300]


def stage_table(stages):
    """A job's lifecycle events as the Jobs page lists them: seconds since it was submitted, attempt,
    step, worker and the detail in one line."""
    import pandas as pd

    t0 = stages.t.iloc[0] if len(stages) else 0.0
    return pd.DataFrame({"stage": stages.stage, "time since submitted (s)": stages.t - t0, "attempt": stages.attempt,
                         "step": stages.step, "worker": stages.worker,
                         "detail": [stage_summary(d) for d in stages.detail]})


def rank_nodes(stages):
    """Which cluster node ran which rank, per attempt, from the ``started`` stages of a job whose ranks
    ran on a Ray cluster (an empty table for a job on this machine)."""
    import pandas as pd

    rows = [{"attempt": int(a or 0), "rank": n["rank"], "node": str(n["node"])[:12], "address": n["ip"],
             "host": n["host"], "pid": n["pid"]}
            for a, s, d in zip(stages.attempt, stages.stage, stages.detail)
            if s == "started" and isinstance(d, dict) for n in d.get("nodes") or ()]
    return pd.DataFrame(rows, columns=["attempt", "rank", "node", "address", "host", "pid"])


def heartbeat_ages(beats, now: float | None = None) -> tuple[list[int], list[float], list[str]]:
    """(workers, seconds since each one's step last moved, phases) from the run store's heartbeats;
    a worker whose step never moved counts 0 s."""
    import pandas as pd

    now = time.time() if now is None else now
    moved = pd.to_numeric(beats.progress_t, errors="coerce").fillna(now)
    return list(beats.worker), list(now - moved), list(beats.phase.fillna(""))


def stopped_by(by: str, owner: str | None) -> str:
    """Who stopped a job, as the person looking at it reads it."""
    return "the teacher" if by == TEACHER else "you" if by == owner else f"session {by}"


# ----- the what-if of the two scheduling policies --------------------------------------------------
#: The what-if's starting jobs: three owners, one of them submitting late.
WHATIF_JOBS = {"job": ["A-1", "A-2", "B-1", "C-1", "B-2", "C-2"], "owner": list("AABCBC"),
               "tasks": [4, 2, 3, 1, 4, 2], "work (PFLOP)": [2.0, 1.0, 1.5, 0.3, 2.0, 0.5],
               "submit (s)": [0.0, 0.0, 0.0, 5.0, 10.0, 20.0], "type": ["any"] * 6}


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


def shown_times(table):
    """The job table with its Unix-second columns as UTC datetimes, for display."""
    import pandas as pd

    return table.assign(**{c: pd.to_datetime(table[c], unit="s") for c in ("submitted", "start", "end")})


def job_labels(table) -> dict[str, str]:
    """run id -> "id · status · owner · name", the Jobs page's choice of job."""
    return {r.id: f"{r.id} · {r.status} · {r.owner} · {r.name}" for r in table.itertuples()}


# ----- one training run, as the Training page shows it ----------------------------------------------
def worker_labels(info: dict, workers: Iterable[int]) -> dict[int, str]:
    """worker -> "worker 1 (gpu)" from a run's info (the devices its workers stood for), and the
    parameter server's rank named as such."""
    devs = info.get("devices") or []
    labels = {int(w): f"worker {int(w)}" + (f" ({devs[int(w)]})" if int(w) < len(devs) else "") for w in workers}
    if info.get("server_rank") is not None:
        labels[info["server_rank"]] = "parameter server"
    return labels


def run_totals(job, per_worker) -> dict:
    """A run's wall time so far (s), its throughput over its last 20 measured steps (samples/s, None
    before any) and the megabytes all workers sent, from the run store's job and worker metrics."""
    thr = job.samples_per_s.dropna()
    return {"wall_s": float(job.wall.max()), "samples_per_s": float(thr.tail(20).mean()) if len(thr) else None,
            "sent_mb": float(per_worker.bytes_sent.sum() / 1e6)}


def run_to_watch(runs, wanted: str | None) -> str:
    """The run the Training page follows: the one asked for while it is in ``runs`` (this session's,
    newest first), else the newest running one, else the newest."""
    if wanted in set(runs.id):
        return wanted
    running = runs[runs.status == "running"]
    return (running if len(running) else runs).id.iloc[0]


def progress_line(store: RunStore, run: dict, queue_position: int | None = None) -> str:
    """The Training page's progress line for a stored run: its status and where it is (queued behind
    N, starting workers, step k of N), its optimiser, workers and sync mode, and whether it emulates."""
    tr = run["scenario"]["training"]
    return (f"{run['status']}: {start_phase(store, run['id'], queue_position)} · "
            f"{OPTIMIZER_LABELS.get(tr['optimizer'])}, {tr['workers']} workers, {tr['sync']}"
            + (" · emulated devices and links" if tr["emulate"] else " · plain local processes"))


def default_device(names: list[str], chosen: list[str], i: int) -> int:
    """Which of the topology's ``names`` worker ``i`` stands for by default: the one chosen before
    while the topology still has it, else a GPU, else the first device (an index into ``names``)."""
    if i < len(chosen) and chosen[i] in names:
        return names.index(chosen[i])
    return names.index("gpu") if "gpu" in names else 0


def compression_conflict(training) -> str:
    """Why the training settings cannot compress ("" when they can): compression needs the
    gradient all-reduce sync mode."""
    if training.compression.kind != "none" and training.sync != "allreduce":
        return ("Compression works with the sync mode gradient all-reduce only: set Compressor to none or "
                "Sync mode to gradient all-reduce.")
    return ""


def bytes_note(info: dict) -> str:
    """Where a run's byte counts come from, for the caption under its time split."""
    kind = info.get("bytes_kind", "measured")
    how = ("counted by the lab ring / parameter server" if info.get("bytes_kind") == "measured"
           else "what a ring all-reduce sends; gloo does not count")
    return f"Bytes are {kind} ({how})."


def run_label(r, owner: str | None = None) -> str:
    """How a picker names a stored run: its name, its optimiser where the name does not say it, its
    status, its id, and whose it is when it is not ``owner``'s."""
    named = OPTIMIZER_SHORT.get(r.optimizer, "?") in str(r.name)  # names from a comparison say it
    opt = "" if named else f" · {OPTIMIZER_LABELS.get(r.optimizer, r.optimizer)}"
    whose = "" if owner is None or r.owner == owner else (
        " · command line" if r.owner is None else " · another session's (read-only)")
    return f"{r.name}{opt} · {r.status} · {r.id}{whose}"


def run_picker(store: RunStore, owner: str | None, everyone: bool = False, keep: Iterable[str] = (),
               statuses: Iterable[str] | None = None):
    """The stored runs a picker offers (newest first) and their labels: ``owner``'s own, the whole
    class's with ``everyone`` (to read), and the runs in ``keep`` whoever's they are (a link names
    them, so the view it reproduces stays whole)."""
    runs = store.list_runs(statuses=statuses)
    keep = set(keep)
    if owner is not None and not everyone:
        runs = runs[(runs.owner == owner) | runs.id.isin(keep)]
    return runs, {r.id: run_label(r, owner) for r in runs.itertuples()}


# ----- the Jobs page's words and small decisions ---------------------------------------------------
def fault_drill(sc: Any, kind: str, worker: int, at_step: int, policy: str, checkpoint_every: int) -> tuple:
    """The scenario of a fault drill (at least 2 workers, long enough to pass the fault) and its run's name."""
    tr = sc.training
    workers = max(2, tr.workers)
    drill = tr.replace(workers=workers, steps=max(tr.steps, at_step + 10), fault=kind, fault_worker=worker,
                       fault_step=at_step, fault_policy=policy, checkpoint_every=checkpoint_every)
    return sc.replace(training=drill), f"{sc.name} · {kind} worker {worker} at step {at_step}"


def alarm_lines(stages: Any) -> list[tuple[Any, str, str]]:
    """(run id, attempt, summary, action) of every alarm among ``stages``, for the page to show as errors."""
    return [(a.run_id, a.attempt, a.detail.get("summary", ""), a.detail.get("action", ""))
            for a in stages[stages.stage == "alarm"].itertuples()]


def released_line(done: Mapping[str, Any]) -> str:
    return (f"Released: {len(done['killed'])} process(es) ended, "
            f"{done['checkpoint_files_removed']} checkpoint file(s) removed.")


def read_only_line(run_owner: str | None) -> str:
    return (":material/visibility: Read-only: this job belongs to "
            + ("the command line" if run_owner is None else "another session")
            + "; only its own session or the teacher can stop or release it.")


def whatif(groups: Sequence[Any], edited: Any, max_running: int) -> tuple[dict, list[str]]:
    """The what-if's schedules under every policy for the page's job table, and the devices they use."""
    schedules = compare_policies(groups, whatif_requests(edited), max_running or None)
    return schedules, [d for g in groups if g.speed > 0 for d in g.devices]



# ----- what the Jobs page says --------------------------------------------------------------------
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
    where = ("ranks placed by the Ray cluster, which starts a job once all its ranks fit" if jm.cluster else
             f"placement policy {POLICY_LABELS[jm.policy]}; {jm.book.total} worker slots on "
             f"{len(jm.book.groups)} core(s)")
    return (f"Queue: fair across sessions (round-robin by session, in order within one); at most {jm.capacity} "
            f"job(s) at a time; {where}.")


def slot_words(jm: JobManager) -> str:
    """What a job's slots are: this machine's, or the Ray cluster's."""
    return "slots on the Ray cluster" if jm.cluster else "local worker slots"


#: The job table's columns as the Jobs page formats them.
JOB_COLUMNS = {
    "queue": {"kind": "number", "label": "queue (place)", "format": "%d"},
    "queued_s": {"kind": "number", "label": "waited (s)", "format": "%.1f"},
    "ran_s": {"kind": "number", "label": "ran (s)", "format": "%.1f"},
    "submitted": {"kind": "datetime", "label": "submitted (UTC)", "format": "HH:mm:ss"},
    "start": {"kind": "datetime", "label": "start (UTC)", "format": "HH:mm:ss"},
    "end": {"kind": "datetime", "label": "end (UTC)", "format": "HH:mm:ss"},
    "restarts": {"kind": "number", "label": "restarts (count)"},
    "alarms": {"kind": "number", "label": "alarms (count)"},
}
STAGE_COLUMNS = {"time since submitted (s)": {"kind": "number", "format": "%.2f"}}

BEATS_CAPTION = ("comm: waiting for its peers (not blamed); busy: computing. A busy worker past the line is declared "
                 "hung; one whose heartbeat file stops changing, frozen.")


def whatif_intro(modelled: str) -> str:
    return ("The task-level design's two policies, played on the resource groups (one hardware type each) of a "
            "topology. A job needs *tasks* devices and an amount of *work*; it runs as fast as its slowest device "
            "(synchronous data parallelism): duration = work / (tasks × slowest device's matmul FLOP/s). "
            f"Everything here is {modelled}.")


WHATIF_CAPTION = ("Jobs start in fair order (round-robin over owners) wherever they fit now; a job that does not fit "
                  "is passed over. Uniform spreads a job over groups of different speeds, so it runs at the slowest "
                  "group's pace; resource-state keeps it in one group but cannot start a job larger than every group.")


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

#: Which code a run executes: the Training page says it, so a wall-time comparison compares what it names.
IMPLEMENTATIONS = ("Which code runs: the optimisers are the lab's own Adam, AdaBelief and Max-AdaBelief, each one "
                   "multi-tensor update over all parameters (`torch._foreach_*` operations, as torch's foreach Adam), "
                   "checked step by step against `torch.optim.Adam` and adabelief-pytorch. With *Fused optimiser* on, the "
                   "same maths is one pass over each parameter, compiled by `torch.compile` at the first step (as "
                   "torch's fused Adam is one hand-written pass), within float32 rounding of the multi-tensor "
                   "results (tested), not bit for bit. Group-TopK, top-k, random-k and FP16 are the lab's own "
                   "compressors, their payloads sent by the lab's ring or all-gather; PowerSGD and the FP16 and BF16 "
                   "all-reduces are the arithmetic of torch's DDP hooks (`powerSGD_hook`, `fp16_compress_hook`, "
                   "`bf16_compress_hook`) on the lab's ring, checked against DDP with those hooks. The README's "
                   "`bench_optim` row gives the optimisers' time per step beside torch's Adam in its three forms.")
