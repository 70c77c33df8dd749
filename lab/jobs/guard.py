"""One click submits once: the decision whether a session's submit goes ahead or is a repeat.

A person who clicks Run twice in quick succession (or clicks again because nothing seemed to
happen yet) means one run. Each session keeps a :class:`Token` of its last submit: what was
submitted (a fingerprint of the scenario and of the action), when, and the run ids it queued.
:func:`decide` refuses a submit with the same fingerprint within ``window_s`` seconds of the
last one, or while one of that submit's runs is still queued or starting (running but no step
recorded yet). A different scenario, or the same one once its run has really started, goes ahead.

Pure functions over plain values, apart from :func:`phases`, which reads the run store.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from lab.errors import LabError
from lab.scenario.document import Scenario

WINDOW_S = 5.0  # a repeat within this many seconds is a second click, not a second run
WAITING = ("queued", "starting")  # phases in which an identical submit is a repeat


@dataclass(frozen=True)
class Token:
    """A session's last submit: its fingerprint, its time (seconds, any monotonic clock) and the
    runs it queued (empty while the submit is under way)."""

    fingerprint: str
    at: float
    run_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    go: bool
    message: str = ""


def fingerprint(scenario: Scenario, action: str = "run") -> str:
    """The same scenario and action give the same fingerprint; any change of a setting changes it."""
    raw = f"{action}\n{scenario.to_json(indent=None)}".encode()
    return hashlib.sha256(raw).hexdigest()[:24]


def decide(last: Token | None, fp: str, now: float, phases_of_last: Mapping[str, str] | None = None,
           window_s: float = WINDOW_S) -> Decision:
    """Whether a submit with fingerprint ``fp`` at time ``now`` goes ahead, given the session's
    ``last`` token and the phase of each of its runs (run id -> "queued", "starting", "running",
    "finished" or "gone"; see :func:`phases`)."""
    if last is None or last.fingerprint != fp:
        return Decision(True)
    age = now - last.at
    waiting = [rid for rid in last.run_ids if (phases_of_last or {}).get(rid) in WAITING]
    if waiting:
        phase = (phases_of_last or {})[waiting[0]]
        return Decision(False, f"Already queued: run {waiting[0]} has these settings and is still {phase}.")
    if 0 <= age < window_s:
        which = f"run {last.run_ids[0]}" if last.run_ids else "a run"
        return Decision(False, f"Already queued: {which} with these settings was submitted {age:.1f} s ago.")
    return Decision(True)


def phases(store: Any, run_ids: Iterable[str]) -> dict[str, str]:
    """run id -> "queued", "starting" (running, no step recorded yet), "running", "finished" or "gone"
    (deleted), read from a :class:`lab.store.runs.RunStore`."""

    out = {}
    for rid in run_ids:
        try:
            status = store.status(rid)
        except LabError:
            out[rid] = "gone"
            continue
        if status == "queued":
            out[rid] = "queued"
        elif status == "running":
            out[rid] = "starting" if store.progress(rid) == 0 else "running"
        else:
            out[rid] = "finished"
    return out


__all__ = ["Token", "Decision", "fingerprint", "decide", "phases", "WINDOW_S"]
