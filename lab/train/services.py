"""What every rank of a job uses besides its training, whichever trainer it runs: its log, the scenario's injected
fault (and the heartbeat's move past start-up), the record of a restart, and rank 0's store writer thread, on which
the SQLite work overlaps the next steps."""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor

from lab import settings
from lab.train import resilience as rz


class RankServices:
    """The services of rank ``rank`` of run ``run_id`` (``store`` None: a rank that records nothing, as in a
    calibration's or a test's own process). ``launched``: the lab's launcher started it (its log is kept per rank;
    under torchrun the rank is silent)."""

    def __init__(self, run_id: str | None, store, rank: int, *, launched: bool):
        self.run_id, self.store, self.rank, self.launched = run_id, store, rank, launched
        self.flush_every = max(1, settings.integer("LAB_FLUSH_EVERY"))  # steps between measurement gathers
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []

    @property
    def recording(self) -> bool:
        """This rank has a run to record into."""
        return self.store is not None and self.run_id is not None

    def log(self, text: str) -> None:
        """One line of this rank's log."""
        if self.launched:
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} rank {self.rank}: {text}\n")
            sys.stderr.flush()

    def fault(self, training, step: int, start_step: int) -> None:
        """The scenario's injected fault at ``step`` (first attempt only; lab.train.resilience.inject)."""
        if step == start_step + 1:
            rz.poke()  # past start-up: from now on the (shorter) heartbeat timeouts apply

        def record(detail: dict) -> None:
            if self.recording:
                self.store.job_records.add_event(self.run_id, "fault", attempt=rz.attempt(), step=step, worker=self.rank,
                                     detail=detail)
            self.log(f"injecting fault {detail['kind']!r} at step {step}")

        rz.inject(training, self.rank, step, record)

    def restarted(self, step: int, detail: dict) -> None:
        """Rank 0 of a restarted attempt: the rows after ``step`` (the attempt's start) go, and the restart is
        an event of the run."""
        if self.rank == 0 and self.recording:
            gone = self.store.discard_after(self.run_id, step)
            self.store.job_records.add_event(self.run_id, "restart", attempt=rz.attempt(), step=step,
                                 detail=dict(detail, discarded_rows=gone,
                                             launcher="lab" if self.launched else "torchrun"))

    def write(self, fn, *args) -> None:
        """Run a store write on the writer thread; a failed earlier write is raised here."""
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lab-store")
        for f in [f for f in self._pending if f.done()]:
            self._pending.remove(f)
            f.result()
        self._pending.append(self._writer.submit(fn, *args))

    def commit(self) -> None:
        """Wait for every queued write (and raise the first error); the writer thread stays."""
        for f in self._pending:
            f.result()
        self._pending.clear()

    def drain(self) -> None:
        """Wait for every queued write (and raise the first error) and end the writer thread."""
        self.commit()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
