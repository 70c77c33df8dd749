"""One process's account of one step, the same record for both trainers.

Each process fills one :class:`StepRecord` per step; the records are gathered as rows of floats (a
tensor per process) and read back by name, so the data-parallel trainer, the placement executor, the
in-situ probe, the balancing loop and the stored metrics read the same field by the same word. A
trainer that does not take a field leaves it NaN.
"""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple

NAN = math.nan


class StepRecord(NamedTuple):
    step: float
    loss: float  # this process's loss (NaN where it computes none: a placement stage without the loss)
    compute: float  # seconds of its own computing, emulated extra time left out
    comm: float  # seconds in sends, receives and collectives, emulated extra time left out
    emul_compute: float  # seconds of emulated extra computing (a slower device's waits)
    emul_comm: float  # seconds of emulated extra link time
    start: float  # when the step began, on the run's clock (NaN: data parallel does not take it)
    ready: float  # when its own work was done and it began to wait for its peers (NaN: placement)
    end: float  # when the step ended, on the run's clock
    sent: float  # bytes sent
    recv: float  # bytes received
    samples: float  # training samples this process went through
    compress: float  # seconds compressing gradients
    main_cpu: float = NAN  # CPU seconds of its main thread (NaN where not taken)
    other_cpu: float = NAN  # CPU seconds of its other threads (communication, intra-op)

    @classmethod
    def of(cls, row: Iterable[float]) -> "StepRecord":
        """A record from a gathered row of floats."""
        return cls(*row)


FIELDS = StepRecord._fields
INDEX = {k: i for i, k in enumerate(FIELDS)}

__all__ = ["StepRecord", "FIELDS", "INDEX"]
