"""Watching a job's ranks: each rank's heartbeat file and error file, whether a rank hung or froze, and the root
cause of an attempt's end (not the "connection closed" its peers see afterwards)."""
from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lab import processes, settings
from lab.store.runs import RunStore
from lab.train.resilience import read_heartbeat

POLL_S = 0.05
CAUSE_GRACE_S = 2.0  # how long a failure that only follows another's waits for that other to be seen failing
BEATS_TO_STORE_S = 1.0

log = logging.getLogger("lab.train")


def heartbeat_timeout() -> float:
    return settings.number("LAB_HEARTBEAT_TIMEOUT")


def start_timeout() -> float:
    return settings.number("LAB_START_TIMEOUT")


def frozen_timeout() -> float:
    return settings.number("LAB_FROZEN_TIMEOUT")


def fresh_s() -> float:
    """A heartbeat file rewritten within this many seconds counts as fresh (its process runs)."""
    return max(1.0, 5 * settings.number("LAB_HEARTBEAT_EVERY"))


@dataclass(frozen=True)
class Failure:
    """Why an attempt ended: which rank, what kind, the message, and whether retrying can help."""

    rank: int | None
    kind: str  # error | killed | lost | exited | hung | frozen | port-taken
    error: str
    step: int | None = None
    retryable: bool = True
    last_beat: float | None = None


def watch_ranks(procs: list[subprocess.Popen], tmp: Path, store: RunStore | None = None, run_id: str | None = None,
           attempt: int = 0, logs: Path | None = None) -> Failure | None:
    """Wait until every worker exits 0 (None) or one fails or hangs (a :class:`Failure`)."""

    started = time.time()
    stored = 0.0
    secondary_since: float | None = None  # when a worker first failed with nothing but a consequence of another
    unrecorded: str | None = None  # the store's last failure, said once
    while True:
        codes = [p.poll() for p in procs]
        if all(c == 0 for c in codes):
            return None
        beats = [read_heartbeat(tmp / f"rank{r}.hb") for r in range(len(procs))]
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            # A peer of a killed worker sees its connection reset while the kernel still tears the killed one
            # down (a large process takes a while to become a zombie), and can write its error and exit first:
            # while every failure is such a consequence, the live workers get a moment to be seen ending.
            secondary_since = secondary_since or time.time()
            if (None in codes and time.time() - secondary_since < CAUSE_GRACE_S
                    and not any(_a_cause(procs[r], read_error(tmp, r)) for r in failed)):
                time.sleep(POLL_S)
                continue
            return root_cause(procs, failed, tmp, beats, logs)
        now = time.time()
        hung = stuck(procs, beats, now, started)
        if hung is not None:
            return hung
        if store is not None and now - stored >= BEATS_TO_STORE_S:
            stored = now
            try:
                store.job_records.set_heartbeats(run_id, [dict(worker=r, attempt=attempt, pid=(b or {}).get("pid", p.pid),
                                                   step=(b or {}).get("step"), phase=(b or {}).get("phase"),
                                                   t=(b or {}).get("t"), progress_t=(b or {}).get("progress_t"))
                                              for r, (p, b) in enumerate(zip(procs, beats))])
                store.job_records.beat_launcher(run_id, now)
            except Exception as exc:  # noqa: BLE001 - monitoring must not end the job
                why = f"{type(exc).__name__}: {exc}"
                if why != unrecorded:  # said once while the same failure repeats, not every poll
                    log.warning("heartbeats of run %s could not be stored: %s", run_id, why)
                unrecorded = why
            else:
                unrecorded = None
        time.sleep(POLL_S)


def stuck(procs, beats, now: float, started: float) -> Failure | None:
    """A worker that froze (its heartbeat file not rewritten for LAB_FROZEN_TIMEOUT s; before the
    first step LAB_START_TIMEOUT) or hangs (it still beats, but its step has not moved for
    LAB_HEARTBEAT_TIMEOUT s while it is busy, i.e. not waiting for its peers). Workers waiting for
    their peers are not blamed, except when every live worker waits and none moves (a deadlock).
    A stale file alone (a process starved of CPU on a loaded machine) only counts once it is older
    than the frozen timeout, so load does not cause false alarms."""
    hb, st, fz, fresh = heartbeat_timeout(), start_timeout(), frozen_timeout(), fresh_s()
    live = [r for r, p in enumerate(procs) if p.poll() is None and (beats[r] or {}).get("phase") != "exiting"]
    culprits, stalled_comm, frozen = [], [], set()
    for r in live:
        b = beats[r]
        if b is None:
            if now - started > st:
                culprits.append(r)
            continue
        # The first step and a kernel being compiled are start-up work: both get the start timeout.
        first = b.get("step", 0) == 0 or b.get("phase") == "compile"
        if now - b["t"] > (st if first else fz):
            culprits.append(r)
            frozen.add(r)
            continue
        if now - b["t"] > fresh or now - b["progress_t"] <= (st if first else hb):
            continue
        if b.get("phase") != "comm":
            culprits.append(r)
        else:
            stalled_comm.append(r)
    if not culprits:
        if not live or len(stalled_comm) < len(live):
            return None
        culprits = stalled_comm  # everyone waits for everyone
    r = culprits[0]
    b = beats[r]
    if b is None:
        return Failure(r, "hung", f"worker {r} (pid {procs[r].pid}) sent no heartbeat within {st:g} s of its start",
                       0, True, None)
    waiting = [k for k in live if k != r and beats[k] and beats[k].get("phase") == "comm"]
    if r in frozen:
        text = (f"worker {r} (pid {procs[r].pid}) froze at step {b['step']}: its heartbeat stopped "
                f"{now - b['t']:.1f} s ago (timeout {fz if b.get('step') else st:g} s)")
        kind = "frozen"
    else:
        text = (f"worker {r} (pid {procs[r].pid}) hangs at step {b['step']}"
                + (f" in {b['where']}()" if b.get("where") else "")
                + f": no progress for {now - b['progress_t']:.1f} s (heartbeat timeout {hb:g} s)")
        kind = "hung" if b.get("phase") != "comm" else "deadlock"
    if waiting:
        text += f"; worker(s) {', '.join(map(str, waiting))} wait for it"
    return Failure(r, kind, text, b.get("step"), True, b.get("t"))


def read_error(tmp: Path, rank: int) -> dict | None:
    try:
        return json.loads((tmp / f"rank{rank}.err").read_text())
    except (OSError, ValueError):
        return None


def _a_cause(proc, error: dict | None) -> bool:
    """Whether a failed worker is a root cause: its own error, or killed without one (its peers' errors about a
    closed connection or a timeout are consequences)."""
    return bool(error and not error.get("secondary")) or (proc.returncode is not None and proc.returncode < 0
                                                          and not error)


def root_cause(procs, failed: list[int], tmp: Path, beats: list | None = None, logs: Path | None = None) -> Failure:
    beats = beats or [None] * len(procs)
    errors = {r: read_error(tmp, r) for r in failed}
    texts = " ".join((e or {}).get("summary", "") + (e or {}).get("traceback", "") for e in errors.values())
    if ("address already in use" in texts.lower() or "EADDRINUSE" in texts) and \
            all((e or {}).get("step", 0) == 0 for e in errors.values()):
        return Failure(None, "port-taken", "the rendezvous port was taken", 0, True)
    primary = [r for r in failed if errors[r] and not errors[r].get("secondary")]
    killed = [r for r in failed if procs[r].returncode < 0 and not errors[r]]
    lost = [r for r in killed if getattr(procs[r], "lost", None)]  # a rank on a Ray node that left the cluster
    if lost:
        r = lost[0]
        return Failure(r, "lost", f"worker {r} was lost: {procs[r].lost}", (beats[r] or {}).get("step"), True,
                       (beats[r] or {}).get("t"))
    if not primary and not killed:  # only "peer closed / timed out": blame a live worker that hangs
        now = time.time()
        busy = [r for r, p in enumerate(procs) if p.poll() is None and beats[r]
                and beats[r].get("phase") != "comm"]
        if busy:
            r = busy[0]
            b = beats[r]
            return Failure(r, "hung", f"worker {r} (pid {procs[r].pid}) hangs at step {b['step']}: its peers gave up "
                           f"waiting for it after {now - b['progress_t']:.1f} s ({errors[failed[0]]['summary']})",
                           b.get("step"), True, b.get("t"))
    for group in (primary, killed, [r for r in failed if errors[r]], failed):
        if group:
            r = group[0]
            break
    e, code = errors[r], procs[r].returncode
    last = (beats[r] or {}).get("t")
    step = (e or {}).get("step", (beats[r] or {}).get("step"))
    if e:
        return Failure(r, "error", e["summary"], step, e.get("type") != "LabError", last)
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return Failure(r, "killed", f"worker {r} (pid {procs[r].pid}) was killed by signal {name}", step, True, last)
    tail = " ".join(processes.last_lines((logs or tmp) / f"rank{r}.log", 1))[-500:]
    return Failure(r, "exited", f"worker {r} (pid {procs[r].pid}) exited with code {code}" + (f": {tail}" if tail else ""),
                   step, True, last)


def copy_logs(logs: Path, log, attempt: int) -> None:
    for f in sorted(logs.glob("rank*.log")):
        text = processes.tail_text(f).split(f"attempt {attempt}:")[-1].strip()
        if text:
            print(f"----- {f.stem} (attempt {attempt}) -----\n{text[-4000:]}", file=log)
