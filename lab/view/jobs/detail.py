"""One job's details as the Jobs page lists them: its lifecycle events, which node ran which rank, its workers'
heartbeats, and who stopped or released it. An owner id reads as "you" to its owner, as itself to the teacher,
and as "another student" to everyone else."""
from __future__ import annotations

import time
from typing import Any, Mapping

from lab.jobs.access import ANONYMOUS, TEACHER
from lab.jobs.actions import LIMIT

_DETAIL_KEYS = ("summary", "action", "policy", "groups", "rank_cpus", "world", "workers", "shard_sizes", "status",
                "worker_processes_left", "from_checkpoint", "exact", "kind", "by", "owner")
#: Who else stops a job besides its owner: the teacher, the lab shutting down, and the time limit.
_NOT_AN_OWNER = (TEACHER, "shutdown", LIMIT)


def owner_word(who: Any, viewer: str | None, show_ids: bool = True) -> str:
    """An owner id as the person looking at it reads it: "you" for their own, the id itself with ``show_ids``
    (the teacher), "another student" otherwise; no owner, or a script's, stays as it is."""
    if who is None or who == ANONYMOUS:
        return "-" if who is None else str(who)
    if viewer is not None and str(who) == str(viewer):
        return "you"
    return str(who) if show_ids else "another student"


def event_summary(detail: dict, viewer: str | None = None, show_ids: bool = True, event: str | None = None) -> str:
    """A lifecycle event's detail in one line: the keys a person reads, at most 300 characters. The owner (and,
    in a ``stop`` event, the owner who stopped it) as :func:`owner_word` reads them to ``viewer``."""
    shown = dict(detail)
    if "owner" in shown:
        shown["owner"] = owner_word(shown["owner"], viewer, show_ids)
    if event == "stop" and shown.get("by") not in (None, *_NOT_AN_OWNER):
        shown["by"] = owner_word(shown["by"], viewer, show_ids)
    return "; ".join(f"{k}: {shown[k]}" for k in _DETAIL_KEYS
                     if k in detail and detail[k] not in (None, "", [], {}))[:300]


def event_table(events, viewer: str | None = None, show_ids: bool = True):
    """A job's lifecycle events as the Jobs page lists them: seconds since it was submitted, attempt,
    step, worker and the detail in one line (owners as ``viewer`` reads them, see :func:`event_summary`)."""
    import pandas as pd

    t0 = events.t.iloc[0] if len(events) else 0.0
    return pd.DataFrame({"event": events.event, "time since submitted (s)": events.t - t0, "attempt": events.attempt,
                         "step": events.step, "worker": events.worker,
                         "detail": [event_summary(d, viewer, show_ids, s) for d, s in zip(events.detail, events.event)]})


def rank_nodes(events):
    """Which cluster node ran which rank, per attempt, from the ``started`` events of a job whose ranks
    ran on a Ray cluster (an empty table for a job on this machine)."""
    import pandas as pd

    rows = [{"attempt": int(a or 0), "rank": n["rank"], "node": str(n["node"])[:12], "address": n["ip"],
             "host": n["host"], "pid": n["pid"]}
            for a, s, d in zip(events.attempt, events.event, events.detail)
            if s == "started" and isinstance(d, dict) for n in d.get("nodes") or ()]
    return pd.DataFrame(rows, columns=["attempt", "rank", "node", "address", "host", "pid"])


def heartbeat_ages(beats, now: float | None = None) -> tuple[list[int], list[float], list[str]]:
    """(workers, seconds since each one's step last moved, phases) from the run store's heartbeats;
    a worker whose step never moved counts 0 s."""
    import pandas as pd

    now = time.time() if now is None else now
    moved = pd.to_numeric(beats.progress_t, errors="coerce").fillna(now)
    return list(beats.worker), list(now - moved), list(beats.phase.fillna(""))


def stopped_by(by: str, owner: str | None, show_ids: bool = True) -> str:
    """Who stopped a job, as the person looking at it reads it (another session by its id only with
    ``show_ids``: the teacher)."""
    if by == TEACHER:
        return "the teacher"
    word = owner_word(by, owner, show_ids)
    return f"session {word}" if word == str(by) else word


def error_line(run: Mapping[str, Any], viewer: str | None, show_ids: bool) -> str:
    """The first line of a run's error, where "stopped by session <id>" names the session as
    :func:`stopped_by` does."""
    line = (run.get("error") or "").splitlines()[0] if run.get("error") else ""
    by = (run.get("info") or {}).get("stopped_by")
    if by and by not in _NOT_AN_OWNER:
        line = line.replace(f"session {by}", stopped_by(by, viewer, show_ids))
    return line


def released_line(done: Mapping[str, Any]) -> str:
    return (f"Released: {len(done['killed'])} process(es) ended, "
            f"{done['checkpoint_files_removed']} checkpoint file(s) removed.")


def read_only_line(run_owner: str | None) -> str:
    return (":material/visibility: Read-only: this job belongs to "
            + ("the command line" if run_owner is None else "another session")
            + "; only its own session or the teacher can stop or release it.")


EVENT_COLUMNS = {"time since submitted (s)": {"kind": "number", "format": "%.2f"}}

BEATS_CAPTION = ("comm: waiting for its peers (not blamed); busy: computing. A busy worker past the line is declared "
                 "hung; one whose heartbeat file stops changing, frozen.")

__all__ = ["BEATS_CAPTION", "EVENT_COLUMNS", "error_line", "heartbeat_ages", "owner_word", "rank_nodes",
           "read_only_line", "released_line", "event_summary", "event_table", "stopped_by"]
