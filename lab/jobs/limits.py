"""What one job may ask of the class server: steps, seconds of running, processes. The defaults come from
``LAB_JOB_MAX_STEPS``, ``LAB_JOB_MAX_S`` and ``LAB_JOB_MAX_PROCS``; the teacher changes them on the Jobs page
while the server runs. A job over a limit is refused when it is submitted (steps, processes), or stopped when
it has run for longer than allowed (seconds)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from lab import settings
from lab.errors import LabError

MAX_STEPS = 100_000  # what the Scenario allows at all
MAX_PROCS = 64


@dataclass(frozen=True)
class Limits:
    max_steps: int
    max_seconds: float  # 0: no limit
    max_procs: int

    @staticmethod
    def from_settings() -> "Limits":
        return Limits(settings.integer("LAB_JOB_MAX_STEPS"), settings.number("LAB_JOB_MAX_S"),
                      settings.integer("LAB_JOB_MAX_PROCS")).checked()

    def checked(self) -> "Limits":
        """These limits, or a LabError saying which is not a sensible number."""
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or not 1 <= self.max_steps <= MAX_STEPS:
            raise LabError(f"the most steps of a job must be a whole number from 1 to {MAX_STEPS:,} "
                           f"(got {self.max_steps!r})", where="job limits")
        if not isinstance(self.max_seconds, (int, float)) or not math.isfinite(self.max_seconds) or self.max_seconds < 0:
            raise LabError(f"a job's time limit must be a number of seconds, 0 for none (got {self.max_seconds!r})",
                           where="job limits")
        if isinstance(self.max_procs, bool) or not isinstance(self.max_procs, int) or not 1 <= self.max_procs <= MAX_PROCS:
            raise LabError(f"the most processes of a job must be a whole number from 1 to {MAX_PROCS} "
                           f"(got {self.max_procs!r})", where="job limits")
        return self

    def check(self, steps: int, procs: int) -> None:
        """A LabError naming the limit a job of ``steps`` steps and ``procs`` processes is over, if any."""
        if steps > self.max_steps:
            raise LabError(f"the job asks for {steps:,} steps; on this server a job may run at most "
                           f"{self.max_steps:,} (the teacher sets it)", where="training.steps")
        if procs > self.max_procs:
            raise LabError(f"the job starts {procs} processes; on this server a job may start at most "
                           f"{self.max_procs} (the teacher sets it)", where="training.workers")

    def over_time(self, seconds: float) -> bool:
        return self.max_seconds > 0 and seconds > self.max_seconds


__all__ = ["Limits"]
