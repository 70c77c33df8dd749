"""One click submits once: the decision whether a session's submit goes ahead or is a repeat.

A person who clicks Run twice in quick succession (or clicks again because nothing seemed to
happen yet) means one run. Each session keeps a :class:`Token` of its last submit: what was
submitted (a fingerprint of the scenario and of the action), when, and the run ids it queued.
:func:`decide` refuses a submit with the same fingerprint while the last one is still being queued
(its first check can take seconds on a loaded server: it builds the model and the data), within
``window_s`` seconds of the moment the last one's runs were queued (a double click's second click
arrives after the first click's page, however long its submit took), or while one of that submit's
runs is still queued or starting (running but no step recorded yet). A different scenario, or the
same one once its run has really started, goes ahead.

Pure functions over plain values, apart from :func:`phases`, which reads the run store.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from lab.errors import LabError
from lab.scenario.document import Scenario

WINDOW_S = 5.0  # a repeat within this many seconds is a second click, not a second run
WAITING = ("queued", "starting")  # phases in which an identical submit is a repeat


@dataclass(frozen=True)
class Token:
    """A session's last submit: its fingerprint, its time (seconds, any monotonic clock: when it began
    while it is under way, when its runs were queued after) and the runs it queued (empty while the
    submit is under way)."""

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
    if not last.run_ids:  # the first click's submit is still under way, however long it takes
        return Decision(False, f"Already queued: a run with these settings is being queued (submitted {age:.1f} s ago).")
    waiting = [rid for rid in last.run_ids if (phases_of_last or {}).get(rid) in WAITING]
    if waiting:
        phase = (phases_of_last or {})[waiting[0]]
        return Decision(False, f"Already queued: run {waiting[0]} has these settings and is still {phase}.")
    if 0 <= age < window_s:
        return Decision(False, f"Already queued: run {last.run_ids[0]} with these settings was submitted {age:.1f} s "
                               "ago.")
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


class SubmitBook:
    """Every session's last submit (owner -> :class:`Token`), shared by the server's sessions.

    A page keeps one for the whole server rather than in a session's state: touching session state
    is where Streamlit stops a script for a newer click, and a double click must still find the
    first click's token and the runs it queued."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.tokens: dict[str, Token] = {}
        self.clock = clock

    def submit_once(self, owner: str, scenario: Scenario, action: str, store: Any,
                    submit: Callable[[], list]) -> tuple[list | None, str]:
        """Run ``submit()`` (which queues jobs and returns them) unless ``owner`` has just queued the
        same thing: (the jobs, "") or (None, why not)."""
        fp, now = fingerprint(scenario, action), self.clock()
        last = self.tokens.get(owner)
        decision = decide(last, fp, now, phases(store, last.run_ids) if last else {})
        if not decision.go:
            return None, decision.message
        self.tokens[owner] = Token(fp, now)  # before submitting: a click arriving meanwhile is a repeat
        try:
            jobs = submit()
        except BaseException:  # nothing was queued (an error, or the script run stopped): the same settings may
            # be tried again, and no page waits for this submit any longer
            if last is None:
                del self.tokens[owner]
            else:
                self.tokens[owner] = last
            raise
        # the window counts from here: a loaded server can take longer than the window to queue, and the
        # second click of a double click comes after that
        self.tokens[owner] = Token(fp, self.clock(), tuple(j.run_id for j in jobs))
        return jobs, ""

    def pending(self, owner: str) -> bool:
        """Whether ``owner``'s last submit is still under way in another script run (a double click:
        the first click's run queues the job while the second's draws the page, and polls until the
        run is in the store). However long the submit takes: a page that stopped polling before it ended
        would say "no runs" with a run queued."""
        tok = self.tokens.get(owner)
        return tok is not None and not tok.run_ids


__all__ = ["Token", "Decision", "SubmitBook", "fingerprint", "decide", "phases", "WINDOW_S"]
