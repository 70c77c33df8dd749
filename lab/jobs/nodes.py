"""The Ray cluster's nodes for the Jobs page: asked of a short-lived process (:mod:`lab.train.ray_nodes`) in the
background, at most every few seconds, so that a page is drawn from the last answer and never waits for Ray."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from lab.errors import first_line
from lab.settings import ROOT


class ClusterNodes:
    """The nodes of the Ray cluster at ``ray_address``: :meth:`latest` gives the last answer and asks again, in a
    thread of its own, once it is ``every_s`` old."""

    def __init__(self, ray_address: str, every_s: float = 15.0, timeout_s: float = 60.0):
        self.ray_address, self.every_s, self.timeout_s = ray_address, every_s, timeout_s
        self._lock = threading.Lock()
        self._rows: list[dict] | None = None
        self._error: str | None = None
        self._asked = -float("inf")  # when the last question went out (time.monotonic)
        self._answered: float | None = None  # when the last nodes came in
        self._asking: threading.Thread | None = None

    def latest(self) -> tuple[list[dict] | None, str | None, float | None]:
        """(the nodes, or None before the first answer; why the last question failed, or None; the answer's age in
        seconds, or None)."""
        with self._lock:
            if time.monotonic() - self._asked >= self.every_s and (self._asking is None or not self._asking.is_alive()):
                self._asked = time.monotonic()
                self._asking = threading.Thread(target=self._ask, daemon=True, name="lab-ray-nodes")
                self._asking.start()
            age = None if self._answered is None else time.monotonic() - self._answered
            return self._rows, self._error, age

    def wait(self, timeout_s: float) -> bool:
        """Wait for the question in flight; whether an answer (nodes or an error) is in."""
        t = self._asking
        if t is not None:
            t.join(timeout_s)
        return self._rows is not None or self._error is not None

    def _ask(self) -> None:
        try:
            done = subprocess.run([sys.executable, "-m", "lab.train.ray_nodes", self.ray_address], cwd=str(ROOT),
                                  capture_output=True, text=True, timeout=self.timeout_s)
            rows = json.loads(done.stdout) if done.returncode == 0 else None
            error = None if rows is not None else first_line(done.stderr or f"exit code {done.returncode}")
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            rows, error = None, first_line(str(exc)) or type(exc).__name__
        with self._lock:
            if rows is not None:
                self._rows, self._error, self._answered = rows, None, time.monotonic()
            else:
                self._error = error
