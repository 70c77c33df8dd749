"""The job list: one row per job, whether any is active, what the job manager keeps failing at, which job held
which slot when, and each worker's log tail."""
from __future__ import annotations

import time
from typing import Any, Iterable

from lab.errors import LabError
from lab.jobs.manager import JobManager
from lab.processes import tail_text
from lab.store.runs import ACTIVE, RunStore


def overview(store: RunStore, jm: JobManager | None = None, owner: str | None = None, limit: int = 50,
             everyone: bool = False, show_ids: bool = False):
    """One row per job (newest first): status, last event, owner (you / another session / the
    command line; with ``show_ids``, the teacher's view, the name a student joined the class under, else the other
    session's id), place in the queue, resources,
    restarts, alarms, and times (Unix seconds). With an ``owner``, only that session's jobs unless
    ``everyone`` (the whole class, for reading; the teacher's view)."""
    import pandas as pd

    runs = store.list_runs(owner=None if everyone or owner is None else owner).head(limit)
    cols = ["id", "name", "owner", "status", "event", "queue", "resources", "attempt", "restarts", "alarms",
            "submitted", "start", "end", "queued_s", "ran_s"]
    if runs.empty:
        return pd.DataFrame(columns=cols)
    events = store.job_records.events(list(runs.id))
    by_run = {rid: g for rid, g in events.groupby("run_id")} if len(events) else {}
    rows = []
    names = store.class_book.seats() if show_ids else {}
    order = jm.queued() if jm is not None else []  # a queued job's place: 1 = next
    for r in runs.itertuples():
        ev = by_run.get(r.id)
        info_owner = r.owner
        who = ("you" if owner is not None and info_owner == owner else
               "command line" if info_owner is None else
               names.get(info_owner) or f"session {info_owner}" if show_ids else "another session")
        sched = ev[ev.event == "scheduled"] if ev is not None else None
        started = ev[ev.event == "started"] if ev is not None else None
        res = ""
        if sched is not None and len(sched):
            d = sched.detail.iloc[-1]
            res = ", ".join(f"{g}: {n} slot{'s' if n != 1 else ''}" for g, n in d.get("groups", {}).items())
        elif started is not None and len(started):
            res = f"{started.detail.iloc[-1].get('world', '?')} process(es), not pinned"
        pos = order.index(r.id) + 1 if r.id in order and r.status == "queued" else None
        start, end = r.start, r.end
        rows.append({
            "id": r.id, "name": r.name, "owner": who, "status": r.status,
            "event": ev.event.iloc[-1] if ev is not None else "submitted", "queue": pos, "resources": res,
            "attempt": int(ev.attempt.max()) if ev is not None else 0,
            "restarts": int((ev.event == "restart").sum()) if ev is not None else 0,
            "alarms": int((ev.event == "alarm").sum()) if ev is not None else 0,
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
    the earliest 'scheduled' event) from each run's scheduled and released events; a job still
    holding its slots ends at ``now``. Returns (rows, t0)."""
    now = time.time() if now is None else now
    st = store.job_records.events(list(run_ids))
    if st.empty:
        return [], now
    names = {}
    spans = []
    for rid, ev in st.groupby("run_id"):
        sched = ev[ev.event == "scheduled"]
        if sched.empty:
            continue
        t_start = float(sched.t.iloc[-1])
        rel = ev[(ev.event == "released") & (ev.t >= t_start)]
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

    out = {f"rank {k}": tail_text(p, max_bytes) for k, p in jm.launcher.worker_logs(run_id).items()}
    launcher = tail_text(jm.launcher.log_path(run_id), max_bytes)
    if launcher:
        out["launcher"] = launcher
    return out


def shown_times(table):
    """The job table with its Unix-second columns as UTC datetimes, for display."""
    import pandas as pd

    return table.assign(**{c: pd.to_datetime(table[c], unit="s") for c in ("submitted", "start", "end")})


def job_labels(table) -> dict[str, str]:
    """run id -> "id · status · owner · name", the Jobs page's choice of job."""
    return {r.id: f"{r.id} · {r.status} · {r.owner} · {r.name}" for r in table.itertuples()}


def alarm_lines(events: Any) -> list[tuple[Any, str, str]]:
    """(run id, attempt, summary, action) of every alarm among ``events``, for the page to show as errors."""
    return [(a.run_id, a.attempt, a.detail.get("summary", ""), a.detail.get("action", ""))
            for a in events[events.event == "alarm"].itertuples()]


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

__all__ = ["JOB_COLUMNS", "alarm_lines", "has_active", "job_labels", "log_tails", "overview", "recent_failures",
           "shown_times", "slot_timeline"]
