"""Where a job is on its way to training, in words the Jobs and Training pages show: its place in the queue,
what holds the server and for how long, and its phase from launcher to steps."""
from __future__ import annotations

from lab.store.runs import RunStore


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
    of N (also once it ended). Read from the run's status, events, heartbeats and metrics."""
    run = st.get_run(run_id)
    status = run["status"]
    tr = run["scenario"].get("training", {})
    steps = int(tr.get("steps") or 0)
    if status == "queued":
        return f"queued, number {queue_position} in the queue" if queue_position else "queued"
    done = st.progress(run_id)
    if status != "running" or done > 0:
        return f"step {done} of {steps}"
    events = st.job_records.events(run_id)
    attempt = int(events.attempt.max()) if len(events) and events.attempt.notna().any() else 0
    seen = set(events[events.attempt.fillna(0) >= attempt].event) if len(events) else set()
    if "running" in seen or "data" in seen:  # the group is formed and the data split
        return "first step"
    if "started" not in seen:
        return "starting the launcher"
    world = int(tr.get("workers") or 1) + (1 if tr.get("sync") == "param_server" else 0)
    beats = st.job_records.heartbeats(run_id)
    ready = int((beats.attempt.fillna(0) >= attempt).sum()) if len(beats) else 0
    if ready < world:
        return f"starting workers ({ready} of {world} ready)"
    return "joining the group"


__all__ = ["queue_line", "seconds_left", "seconds_per_step", "start_phase"]
