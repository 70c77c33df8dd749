"""The balancing loop inside a placement run: at the end of each round rank 0's loop re-plans from the measured
busy times, and every process takes the new plan (:func:`replan`), its operators moving with their parameters,
buffers and optimiser state."""
from __future__ import annotations

import torch
import torch.distributed as dist

from lab.modelled.balance import MAX_ROUNDS, device_work, model_loop, weighted_plan
from lab.train.placement_run.plan import replanned
from lab.train.placement_run.recording import gather
from lab.train.step_record import StepRecord


def replan(run, assignment: dict[str, str], schedule) -> None:
    """Move placement process ``run`` to a new plan: every process sends what it held (parameters, buffers, the
    optimiser's state of its pieces) to every other, so each holds the whole model as it stands and the new
    owner of an operator continues its optimiser exactly where the old one stopped."""
    held = {id(q) for p in run.mine for q in p.module.parameters()}
    held_buffers = {id(b) for p in run.mine for b in p.module.buffers()}
    mine: dict = {"params": {}, "buffers": {}, "state": {}}
    for name, q in run.model.named_parameters():
        if id(q) in held:
            mine["params"][name] = q.detach().clone()
            if run.opt is not None and run.opt.state.get(q):
                mine["state"][name] = {k: v.clone() if torch.is_tensor(v) else v for k, v in run.opt.state[q].items()}
    for name, b in run.model.named_buffers():
        if id(b) in held_buffers:
            mine["buffers"][name] = b.detach().clone()
    everyone: list = [None] * run.world
    if run.world > 1:
        dist.all_gather_object(everyone, mine)
    else:
        everyone = [mine]
    state: dict = {}
    with torch.no_grad():
        named_params, named_buffers = dict(run.model.named_parameters()), dict(run.model.named_buffers())
        for part in everyone:
            for name, v in part["params"].items():
                named_params[name].copy_(v)
            for name, v in part["buffers"].items():
                named_buffers[name].copy_(v)
            state.update(part["state"])
    run.cut(replanned(run.plan, assignment, schedule))
    if run.opt is not None:
        by_id = {id(q): name for name, q in run.model.named_parameters()}
        for q in run.params:
            if by_id[id(q)] in state:
                run.opt.state[q] = state[by_id[id(q)]]


class Rounds:
    """The balancing rounds of a placement run with ``training.balance`` on: the steps each round's records
    gather, and on rank 0 the balancing loop (:func:`lab.modelled.balance.model_loop`) and the rounds' story."""

    def __init__(self, tr, plan, rank: int, world: int):
        self.tr, self.rank, self.world = tr, rank, world
        self.rounds = max(1, min(MAX_ROUNDS, tr.steps // tr.round_steps))
        self.loop = model_loop(plan.tasks, tr.balance, tolerance=tr.balance_tolerance, patience=tr.balance_patience,
                               max_rounds=self.rounds) if rank == 0 else None
        self.recs: list[StepRecord] = []
        self.info: list[dict] = []

    def drawn_steps(self) -> set[int]:
        """Each round's last step (the run draws its timeline)."""
        return {self.tr.round_steps * k for k in range(1, self.rounds + 1)}

    def add(self, rec: StepRecord) -> bool:
        """A step of the round is done; True when it ends the round."""
        self.recs.append(rec)
        return rec.step % self.tr.round_steps == 0

    def end(self, step: int, plan, write, refuses=lambda assignment: None) -> tuple[bool, tuple | None]:
        """A balancing round ends at ``step``: every device's busy time and the step time, measured over the
        round's steps after its first (the warm-up of a new plan), go into rank 0's loop, which re-plans with the
        new weights; ``write(info)`` stores the rounds' story (rank 0). A new plan the run's pipeline schedule cannot
        run (``refuses(assignment)`` says why; 1F1B, for one, runs one stretch per device) is not taken: the round
        keeps its plan and says why. Every process gets (the loop is done, the new plan as (assignment, schedule)
        or None)."""
        recs = [[StepRecord.of(row) for row in rows] for rows in gather(self.recs, self.world)]
        self.recs = []
        n = len(recs[0])
        use = range(1, n) if n > 1 else range(n)
        span = sum(max(r[j].end for r in recs) - min(r[j].start for r in recs) for j in use) / len(use)
        busy = [sum(r[j].compute + r[j].emul_compute for j in use) / len(use) for r in recs]
        decision: list = [None]
        if self.rank == 0:
            g, loop = plan.tasks, self.loop
            before = tuple(plan.assignment[t] for t in g.tasks)
            rnd = loop.observe(before, busy, device_work(g, before), span)
            new, kept = None, None
            if not loop.done:
                sched = weighted_plan(g, loop.weights, self.tr.strategy)
                new = ({t: sched.slots[t][0] for t in g.tasks}, sched)
                kept = refuses(new[0]) if new[0] != plan.assignment else None
                if kept is not None:
                    new = None
            decision = [{"done": loop.done, "new": new}]
            self.info.append({
                "round": rnd.round, "step": step, "weights": list(rnd.weights), "busy": list(rnd.busy),
                "waits": list(rnd.waits), "round_time": rnd.round_time, "imbalance": rnd.imbalance,
                "good_enough": rnd.good_enough, "changes": rnd.changes, "unchanged": rnd.unchanged,
                "plan": list(before), "kept": kept})
            write({"balance": {
                "rule": self.tr.balance, "nodes": list(plan.devices), "tasks": list(g.tasks), "rounds": self.info,
                "done": loop.done, "converged": loop.converged, "reason": loop.reason},
                "placement": dict(new[0]) if new else dict(plan.assignment)})
        if self.world > 1:
            dist.broadcast_object_list(decision, src=0)
        return decision[0]["done"], decision[0]["new"]
