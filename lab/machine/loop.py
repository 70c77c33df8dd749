"""The N-process terms of the machine profile, measured in the training job's own loop.

:func:`lab.machine.calibrate.calibrate` measures the N-process costs (compute slow-down, collectives in
context, idle jitter, the rest of the step) in *training-like cycles*: a harness that imitates a
step. This module measures the same quantities in the job's real loop instead: N spawned processes
run :class:`lab.train.trainer.Trainer` -- the code of every real run, metrics and store writes
included -- on the *calibration networks* (never the preset models a prediction is judged on), one
short job per cycle case, and return rows in the layout :func:`lab.machine.fit.fit_cycles` reads.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Sequence

from lab.train.trainer import Trainer
from lab.comm.spawn import init_worker, run_local
from lab.errors import LabError
from lab.machine.cases import (
    CALIBRATION_NETS,
    CYCLE_KINDS,
    CYCLE_RATIO,
    build_calibration_net,
    pin_rank,
)
from lab.machine.fidelity import measured_step
from lab.scenario.document import Compression, default_scenario
from lab.store.runs import RunStore
from lab.modelled.collectives.ring import allgather_steps, ring_steps
from lab.scenario.names import Sharing

#: steps per calibration job; the first quarter (at most 10) is the warm-up left out
LOOP_STEPS = 150
LOOP_BATCH = 16


def case_scenario(label: str, workers: int, steps: int = LOOP_STEPS, batch: int = LOOP_BATCH):
    """The Scenario of one cycle case ``label`` (a :data:`lab.machine.cases.CYCLE_KINDS` label)."""

    kinds = {k[0]: k for k in CYCLE_KINDS}
    if label not in kinds:
        raise LabError(f"unknown cycle case {label!r}; choose one of {list(kinds)}", where="calibration")
    _, method, impl = kinds[label]
    sc = default_scenario()
    comp = (Compression() if method is None else
            Compression(kind="group_topk", ratio=CYCLE_RATIO, group_size=1024, sharing=method))
    tr = sc.training.replace(workers=workers, steps=steps, batch_size=batch, optimizer="adam", sync="allreduce",
                             allreduce_impl=impl or "gloo", compression=comp, eval_every=steps, emulate=False,
                             checkpoint_every=0)
    return sc.replace(name=f"calibration {label}", training=tr)


def _loop_worker(rank: int, world: int, port: int, cases: list, steps: int, db: str) -> None:
    """One rank: for every (label, net) case, the job's Trainer on that calibration network."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # as a job's workers

    pin_rank(rank)  # on the core the job manager would give this rank
    # each rank's log goes to a file beside the store, as the launcher keeps a job's logs per rank
    sys.stderr = open(Path(db).parent / f"rank{rank}.log", "a", buffering=1)  # noqa: SIM115 - until the process ends
    init_worker(rank, world, port, timeout_s=120.0)
    store = RunStore(db, data=Path(db).parent)  # the jobs' checkpoints and logs stay in the temporary folder
    try:
        for label, net in cases:
            cls_name, kwargs = CALIBRATION_NETS[net]
            sc = case_scenario(label, world, steps)
            rid = [store.create_run(sc, name=f"{label} net{net}", status="running") if rank == 0 else None]
            dist.broadcast_object_list(rid, src=0)
            trainer = Trainer(sc, rank, world, rid[0], store, launched=True,
                                model_builder=lambda *a, _c=cls_name, _k=kwargs, seed=0, **kw:
                                build_calibration_net(_c, _k, seed))
            trainer.setup()
            trainer.run()
            dist.barrier()
            if rank == 0:
                store.set_status(rid[0], "done", only_from=("running",))
    finally:
        dist.destroy_process_group()


def measure_loop(procs: int, cases: Sequence[tuple[str, int]], steps: int = LOOP_STEPS,
                 timeout: float = 600.0) -> list[dict]:
    """Run every (label, calibration network) case as a short job of ``procs`` workers in the job's
    own loop; one row per case for :func:`lab.machine.fit.fit_cycles` (medians after the warm-up)."""

    if not 1 <= procs <= 4:
        raise LabError(f"the loop calibration runs 1 to 4 processes (got {procs})", where="calibration")
    with tempfile.TemporaryDirectory(prefix="lab-calib-loop-") as tmp:
        db = str(Path(tmp) / "runs.db")
        try:
            run_local(_loop_worker, procs, (list(cases), steps, db), timeout_s=timeout)
        except RuntimeError as exc:
            raise LabError(f"the loop calibration with {procs} processes failed: {exc}", where="calibration") from None
        store = RunStore(db)
        runs = store.list_runs()
        ids = dict(zip(runs.name, runs.id))  # each case's job is named after it
        rows = []
        for label, net in cases:
            rid = ids.get(f"{label} net{net}")
            if rid is None:
                raise LabError(f"the loop calibration left no run for {label} on network {net}", where="calibration")
            m = measured_step(store.metrics(rid))
            cls_name, kwargs = CALIBRATION_NETS[net]
            numel = sum(p.numel() for p in build_calibration_net(cls_name, kwargs).parameters()) + 1
            hops = allgather_steps(procs) if label == Sharing.SPARSE_ALLGATHER else ring_steps(procs)  # 0 with one process
            rows.append({"kind": label, "net": net, "batch": LOOP_BATCH, "fb": m["compute"], "opt": 0.0,
                         "compress": m["compress"], "comm": m["comm"], "idle": m["idle"], "cycle": m["step"],
                         "bytes_sent": m["bytes_sent"], "hops": float(hops), "numel": numel, "cpu": m["compute"]})
    return rows
