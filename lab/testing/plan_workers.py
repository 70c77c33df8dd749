"""Processes that tests and benches start around a placement run (spawned processes import them from here)."""
from __future__ import annotations

import json
import os

import torch

from lab.comm.processes import init_worker
from lab.scenario.document import Scenario
from lab.train.stages import PlacementTrainer


def plan_worker(rank: int, world: int, port: int, scenario_json: str, steps: int, out_dir: str,
                dtype: str = "float64") -> None:
    """One process of a placement run, the job's own PlacementTrainer in ``dtype``: writes its losses per step
    (NaN where it does not hold the loss), its parameters after the last step and what it waited, emulated."""
    import torch.distributed as dist

    init_worker(rank, world, port, timeout_s=120.0)
    try:
        t = PlacementTrainer(Scenario.from_json(scenario_json), rank, world, None, None, launched=False)
        t.dtype = getattr(torch, dtype)
        t.setup()
        t.offset, t.losses, t.timelines = 0.0, [], {}
        t.timeline_steps = list(range(1, steps + 1))
        recs = [t.train_step(s) for s in range(1, steps + 1)]
        out = {"losses": [r[1] for r in recs], "device": t.device,
               "params": {n: p.detach().double().reshape(-1).tolist() for n, p in t.model.named_parameters()
                          if any(p is q for q in t.params)},
               "events": [e for s in sorted(t.timelines) for e in t.timelines[s]],
               "pieces": [p.index for p in t.mine]}
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"plan{rank}.json"), "w") as f:
        json.dump(out, f)
