"""Processes that tests and benches start around a placement run (spawned processes import them from here)."""
from __future__ import annotations

import json
import os

import torch

from lab.comm.spawn import init_worker
from lab.scenario.document import Scenario
from lab.train.placement_run import PlacementTrainer
from lab.train.placement_run.rounds import replan


def held_params(t) -> dict[str, torch.Tensor]:
    """The parameters this process holds, flat, in float64."""
    return {n: p.detach().double().reshape(-1).clone() for n, p in t.model.named_parameters()
            if any(p is q for q in t.params)}


def save_outputs(out_dir: str, stem: str, out: dict) -> None:
    """``out`` as ``stem.json``, its parameters as tensors in ``stem.pt`` (a zoo network's millions of floats
    written as JSON text took longer than its run)."""
    torch.save(out.pop("params"), os.path.join(out_dir, f"{stem}.pt"))
    with open(os.path.join(out_dir, f"{stem}.json"), "w") as f:
        json.dump(out, f)


def load_outputs(out_dir, stem: str) -> dict:
    """What :func:`save_outputs` wrote."""
    with open(os.path.join(out_dir, f"{stem}.json")) as f:
        out = json.load(f)
    out["params"] = torch.load(os.path.join(out_dir, f"{stem}.pt"), weights_only=True)
    return out


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
        t.rec.timeline_steps = list(range(1, steps + 1))
        recs = [t.train_step(s) for s in range(1, steps + 1)]
        out = {"losses": [r.loss for r in recs], "device": t.device, "params": held_params(t),
               "events": [e for s in sorted(t.rec.timelines) for e in t.rec.timelines[s]],
               "pieces": [p.index for p in t.mine], "saved_peak": t.rec.saved_peak}
        dist.barrier()
    finally:
        dist.destroy_process_group()
    save_outputs(out_dir, f"plan{rank}", out)


def overhead_worker(rank: int, world: int, port: int, scenario_json: str, steps: int, out_dir: str) -> None:
    """One process: the executor with every operator on this one device against plain training of the same
    model (model(x), the loss, backward, the optimiser), taking turns step by step on the same batches'
    sizes. Writes ``overhead.json``: seconds per step of each."""
    import time

    import torch.nn.functional as F

    from lab.optim.optimizers import from_training as optim_from_training
    from lab.scenario.models import model_of

    init_worker(rank, world, port, timeout_s=120.0)
    try:
        sc = Scenario.from_json(scenario_json)
        tr = sc.training
        t = PlacementTrainer(sc, rank, world, None, None, launched=False)
        t.setup()
        t.rec.timeline_steps = []
        plain = model_of(tr, t.ds.in_features, t.ds.classes)
        opt = optim_from_training(tr, list(plain.parameters()), tr.lr)
        got = {"executor": [], "plain": []}
        for s in range(1, steps + 1):
            rec = t.train_step(s)
            got["executor"].append(rec.end - rec.start)
            x, y = t.sampler.next_batch()
            t0 = time.perf_counter()
            loss = F.cross_entropy(plain(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            got["plain"].append(time.perf_counter() - t0)
    finally:
        import torch.distributed as dist

        dist.destroy_process_group()
    with open(os.path.join(out_dir, "overhead.json"), "w") as f:
        json.dump(got, f)


def replan_worker(rank: int, world: int, port: int, scenario_json: str, plans_json: str, steps_per_plan: int,
                  out_dir: str) -> None:
    """One process of a placement run in float64 that moves to the next of ``plans`` (operator -> device) every
    ``steps_per_plan`` steps, as a balancing round does: writes its losses, the parameters it holds at the end and
    the pieces it held under each plan."""
    import torch.distributed as dist

    init_worker(rank, world, port, timeout_s=120.0)
    try:
        t = PlacementTrainer(Scenario.from_json(scenario_json), rank, world, None, None, launched=False)
        t.dtype = torch.float64
        t.setup()
        t.rec.timeline_steps = []
        losses, held, step = [], [], 0
        for k, plan in enumerate(json.loads(plans_json)):
            if k:
                replan(t, plan, None)
            held.append([p.index for p in t.mine])
            for _ in range(steps_per_plan):
                step += 1
                losses.append(t.train_step(step).loss)
        out = {"losses": losses, "held": held, "params": held_params(t)}
        dist.barrier()
    finally:
        dist.destroy_process_group()
    save_outputs(out_dir, f"replan{rank}", out)


def first_step_worker(rank: int, world: int, port: int, scenario_json: str, out_dir: str) -> None:
    """One process of a placement run up to the end of its first step, as a job starts it (build, cut, one
    step): writes ``first<rank>.json`` with the wall-clock time that step ended."""
    import time

    import torch.distributed as dist

    init_worker(rank, world, port, timeout_s=120.0)
    try:
        t = PlacementTrainer(Scenario.from_json(scenario_json), rank, world, None, None, launched=False)
        t.setup()
        t.rec.timeline_steps = []
        t.train_step(1)
        end = time.time()
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"first{rank}.json"), "w") as f:
        json.dump({"end": end}, f)


def one_process_first_step(rank: int, world: int, port: int, scenario_json: str, out_dir: str) -> None:
    """The peer of :func:`first_step_worker`: the whole model's first training step in one process started the
    same way (build, one step of the same batch with Adam): writes ``one<rank>.json``."""
    import time

    import torch.nn.functional as F

    from lab.scenario.models import model_of

    init_worker(rank, world, port, timeout_s=120.0)
    try:
        tr = Scenario.from_json(scenario_json).training
        model = model_of(tr)
        opt = torch.optim.Adam(model.parameters(), lr=tr.lr)
        x, y = torch.rand(tr.batch_size, 64), torch.randint(0, 10, (tr.batch_size,))
        F.cross_entropy(model(x), y).backward()
        opt.step()
        end = time.time()
    finally:
        import torch.distributed as dist

        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"one{rank}.json"), "w") as f:
        json.dump({"end": end}, f)
