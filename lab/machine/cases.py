"""What the calibration runs: the calibration networks, the cycle kinds and cases, and the pinning of a rank to the core the job manager would give it."""
from __future__ import annotations

import os
from typing import Sequence

from lab import settings
from lab.scenario import models
from lab.scenario.names import Sharing

CALIBRATION_MAX_PROCS = 4


#: Calibration networks: (model class name in lab.scenario.models, constructor keyword arguments). None of
#: them is a preset (MLP 128-64, CNN 8/16 channels, ResNet 16 channels x 3 blocks, encoder 32/64).
CALIBRATION_NETS: tuple[tuple[str, dict], ...] = (
    ("MLP", {"hidden": (32,)}),
    ("MLP", {"hidden": (96,)}),
    ("MLP", {"hidden": (256,)}),
    ("MLP", {"hidden": (96, 48)}),
    ("MLP", {"hidden": (192, 96, 48)}),
    ("MLP", {"hidden": (48, 48, 48, 48)}),
    ("CNN", {"channels": (4, 8)}),
    ("CNN", {"channels": (12, 24)}),
    ("CNN", {"channels": (16, 32)}),
    ("SmallResNet", {"channels": 8, "blocks": 1}),
    ("SmallResNet", {"channels": 12, "blocks": 2}),
    ("EncoderBlock", {"d_model": 16, "d_ff": 32}),
    ("EncoderBlock", {"d_model": 48, "d_ff": 96}),
)


CALIBRATION_BATCHES = (16, 64)


def build_calibration_net(cls_name: str, kwargs: dict, seed: int = 0):
    import torch

    gen = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return getattr(models, cls_name)(in_features=64, classes=10, **kwargs)
    finally:
        torch.random.set_rng_state(gen)


#: Collectives timed in the cycles: (label, sharing method or None for a dense all-reduce, impl).
CYCLE_KINDS = (("gloo", None, "gloo"), ("ring", None, "ring"), (Sharing.SPARSE_ALLGATHER, Sharing.SPARSE_ALLGATHER, None),
               (Sharing.SPARSE_RING, Sharing.SPARSE_RING, None), ("dense", Sharing.DENSE, None))


CYCLE_RATIO = 0.01  # Group-TopK ratio of the compressed cycles


#: Training-like cycles with N processes: collective label -> (calibration network, batch) cases.
CYCLE_CASES: dict[str, tuple[tuple[int, int], ...]] = {
    "gloo": ((0, 16), (3, 16), (7, 16), (12, 16)),
    "ring": ((3, 16),),
    Sharing.SPARSE_ALLGATHER: ((3, 16), (7, 16)),
    Sharing.SPARSE_RING: ((3, 16),),
    "dense": ((3, 16),),
}


CYCLE_REPEAT = 150  # cycles (or job steps) per case: a steady state, as in a run (short bursts after a barrier run slow);


# 150 rather than 50: short calibrations disagree with each other more than with the runs they
# predict (docs/calibrating.md has the measurements)
CALIBRATION_REPEAT = 30


def cycle_cases(nets: Sequence[int] | None = None) -> list[tuple[str, int, int]]:
    """(collective label, network, batch) of the cycles; with ``nets``, only cases of those networks
    (each collective keeps at least one case, on the first of ``nets``)."""
    out = []
    for label, cases in CYCLE_CASES.items():
        sel = [c for c in cases if nets is None or c[0] in nets] or ([(nets[0], 16)] if nets else list(cases[:1]))
        out += [(label, n, b) for n, b in sel]
    return out


def rank_cpu(rank: int) -> int | None:
    """The core the lab's job manager gives a job's rank ``rank`` on an idle machine (the uniform placement
    policy: ranks take the job cores, :func:`lab.settings.job_cpus`, in turn; :mod:`lab.jobs.manager`)."""
    cpus = settings.job_cpus()
    return cpus[rank % len(cpus)] if cpus else None


def pin_rank(rank: int) -> None:
    """Pin this process to :func:`rank_cpu` (as the job manager pins a job's ranks), when
    ``LAB_CALIBRATION_PIN`` is not "0"."""
    if settings.raw("LAB_CALIBRATION_PIN") == "0":
        return
    cpu = rank_cpu(rank)
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:  # pragma: no cover - not allowed here
            pass
