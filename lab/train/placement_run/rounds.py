"""The balancing loop inside a placement run: at the end of each round rank 0's loop re-plans from the measured
busy times, and every process takes the new plan, its operators moving with their parameters, buffers and
optimiser state."""
from __future__ import annotations

import torch
import torch.distributed as dist

from lab.modelled.balance import device_work, weighted_plan
from lab.train.placement_run.plan import replanned
from lab.train.step_record import StepRecord


class Rebalancing:
    """The balancing rounds of :class:`lab.train.placement_run.executor.PlacementTrainer`."""

    def replan(self, assignment: dict[str, str], schedule) -> None:
        """Move to a balancing round's new plan: every process sends what it held (parameters, buffers, the
        optimiser's state of its pieces) to every other, so each holds the whole model as it stands and the new
        owner of an operator continues its optimiser exactly where the old one stopped."""
        held = {id(q) for p in self.mine for q in p.module.parameters()}
        held_buffers = {id(b) for p in self.mine for b in p.module.buffers()}
        mine: dict = {"params": {}, "buffers": {}, "state": {}}
        for name, q in self.model.named_parameters():
            if id(q) in held:
                mine["params"][name] = q.detach().clone()
                if self.opt is not None and self.opt.state.get(q):
                    mine["state"][name] = {k: v.clone() if torch.is_tensor(v) else v
                                           for k, v in self.opt.state[q].items()}
        for name, b in self.model.named_buffers():
            if id(b) in held_buffers:
                mine["buffers"][name] = b.detach().clone()
        everyone: list = [None] * self.world
        if self.world > 1:
            dist.all_gather_object(everyone, mine)
        else:
            everyone = [mine]
        state: dict = {}
        with torch.no_grad():
            named_params, named_buffers = dict(self.model.named_parameters()), dict(self.model.named_buffers())
            for part in everyone:
                for name, v in part["params"].items():
                    named_params[name].copy_(v)
                for name, v in part["buffers"].items():
                    named_buffers[name].copy_(v)
                state.update(part["state"])
        self.cut(replanned(self.plan, assignment, schedule))
        if self.opt is not None:
            by_id = {id(q): name for name, q in self.model.named_parameters()}
            for q in self.params:
                if by_id[id(q)] in state:
                    self.opt.state[q] = state[by_id[id(q)]]

    def end_round(self, step: int) -> bool:
        """A balancing round ends at ``step``: every device's busy time and the step time, measured over the
        round's steps after its first (the warm-up of a new plan), go into rank 0's loop, which re-plans with the
        new weights; every process takes that plan. True when the loop is done (the run ends)."""
        recs = [[StepRecord.of(row) for row in rows] for rows in self.gather(self.round_recs)]
        self.round_recs = []
        n = len(recs[0])
        use = range(1, n) if n > 1 else range(n)
        span = sum(max(r[j].end for r in recs) - min(r[j].start for r in recs) for j in use) / len(use)
        busy = [sum(r[j].compute + r[j].emul_compute for j in use) / len(use) for r in recs]
        decision: list = [None]
        if self.rank == 0:
            g, loop = self.plan.tasks, self.loop
            before = tuple(self.plan.assignment[t] for t in g.tasks)
            rnd = loop.observe(before, busy, device_work(g, before), span)
            new = None
            if not loop.done:
                sched = weighted_plan(g, loop.weights, self.tr.strategy)
                new = ({t: sched.slots[t][0] for t in g.tasks}, sched)
            decision = [{"done": loop.done, "new": new}]
            self.rounds_info.append({
                "round": rnd.round, "step": step, "weights": list(rnd.weights), "busy": list(rnd.busy),
                "waits": list(rnd.waits), "round_time": rnd.round_time, "imbalance": rnd.imbalance,
                "good_enough": rnd.good_enough, "changes": rnd.changes, "unchanged": rnd.unchanged,
                "plan": list(before)})
            if self.store is not None:
                self._write(self.store.merge_info, self.run_id, {"balance": {
                    "rule": self.tr.balance, "nodes": list(self.plan.devices), "tasks": list(g.tasks),
                    "rounds": self.rounds_info, "done": loop.done, "converged": loop.converged,
                    "reason": loop.reason}, "placement": dict(new[0]) if new else dict(self.plan.assignment)})
        if self.world > 1:
            dist.broadcast_object_list(decision, src=0)
        d = decision[0]
        if d["new"] is not None and d["new"][0] != self.plan.assignment:
            self.replan(*d["new"])
        return d["done"]
