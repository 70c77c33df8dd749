"""The pipeline executor of a placement run: one process per device, each running its own pieces for every
micro-batch in the order of its schedule (:func:`lab.modelled.placement.order.schedule`, the list both models follow), sending
each output another device reads as soon as it exists."""
from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab.comm.peers import waiting_for_peers, waits_for_peers
from lab.errors import LabError
from lab.modelled.costmodel import DATASHEET
from lab.modelled.placement.memory import SavedCounter, model_state
from lab.modelled.placement.order import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Message
from lab.modelled.placement.order import schedule as order_of
from lab.optim.optimizers import from_training as optim_from_training
from lab.train import data as data_mod
from lab.train import resilience as rz
from lab.train.placement_run.clock import clock_offsets
from lab.train.placement_run.pieces import INPUT, CutPiece, link_wait, op_scales, outputs_on, pieces
from lab.train.placement_run.plan import StagePlan, model_for, replanned, resolve
from lab.train.placement_run.recording import Recorder, all_timelines, gather, step_rows
from lab.train.placement_run.rounds import Rounds, replan
from lab.train.placement_run.split import input_gradient, weight_gradient
from lab.train.placement_run.step import Step, Timed
from lab.train.placement_run.warm_times import WarmBook, WarmTimes
from lab.train.services import RankServices
from lab.train.step_record import StepRecord



class PlacementTrainer:
    """One process of a placement run: it holds its device's pieces and runs them in the order of the run's
    schedule. Its log, injected faults and store writer are the job's :class:`lab.train.services.RankServices`;
    what it records is its :class:`Recorder`; the balancing loop's book, with ``training.balance`` on, its
    :class:`lab.train.placement_run.rounds.Rounds`."""

    dtype = torch.float32

    def __init__(self, sc, rank: int, world: int, run_id: str | None, store, *, launched: bool):
        self.sc, self.rank, self.world, self.run_id, self.store = sc, rank, world, run_id, store
        self.services = RankServices(run_id, store, rank, launched=launched)
        self.step_no = 0

    def setup(self) -> None:
        sc = self.sc
        self.tr = tr = sc.training
        if tr.micro_batches > tr.batch_size:
            raise LabError(f"{tr.micro_batches} micro-batches need a batch of at least as many samples",
                           where="training.micro_batches")
        self.ds, self.model = self.build()
        self.plan = plan = resolve(sc, self.model, self.ds.in_features)  # traced in float32, as the Placement page
        self.model.to(self.dtype)
        if len(plan.devices) != self.world:
            raise LabError(f"the plan uses {len(plan.devices)} devices ({', '.join(plan.devices)}) but "
                           f"{self.world} processes were started; start one per device", where="placement")
        self.device = plan.devices[self.rank]
        self.rank_of = {d: r for r, d in enumerate(plan.devices)}
        self.owner = {name: op.name for op in plan.graph.ops for name in (op.name, *op.absorbed)}
        self.cut(plan)
        self.sampler = data_mod.worker_data(self.ds, 0, 1, "even", tr.batch_size, seed=tr.seed)
        self.rounds = Rounds(tr, plan, self.rank, self.world) if tr.balance != "off" else None
        # Each balancing round's last step is drawn; without the loop, the start, the middle and the end.
        drawn = self.rounds.drawn_steps() if self.rounds else {min(2, tr.steps), max(1, tr.steps // 2)}
        self.rec = Recorder(self.rank, self.device, sorted(drawn | {tr.steps}))
        self._overslept = 0.0

    def build(self) -> tuple:
        """The data set and the model this process runs (the calibration runs its own networks here)."""
        return model_for(self.sc)

    def cut(self, plan: StagePlan) -> None:
        """Hold the pieces ``plan`` puts on this process's device, and an optimiser for their parameters."""
        self.plan = plan
        self.pieces, self.final = pieces(self.model, plan)
        self.mine = [p for p in self.pieces if p.device == self.device]
        params, seen = [], set()
        for p in self.mine:
            for q in p.module.parameters():
                if id(q) not in seen:
                    seen.add(id(q))
                    params.append(q)
        self.params = params
        self.opt = optim_from_training(self.tr, params, self.tr.lr) if params else None
        self.scales = op_scales(self.sc, plan) if self.tr.emulate else {}
        self.state = model_state(self.model)
        self._shapes = {}
        split = any(a.kind == BACKWARD_INPUT for a in order_of(
            self.tr.schedule, [q.index for q in self.mine], len(self.pieces), self.tr.micro_batches))
        self.warm = WarmBook(lambda x: outputs_on(self.model, self.pieces, x), self.ds.x_test.to(self.dtype),
                             self.owner, self.scales, split)
        for rows in sorted({len(part) for part in torch.arange(self.tr.batch_size).tensor_split(self.tr.micro_batches)}):
            for p in self.mine:  # measured now, not inside the first step that needs them
                self.warm.of(p, rows, True)
        # (piece, output) of another device -> the smallest local piece reading it: its gradient goes back
        # once that piece's backward is done.
        self.last_reader = {}
        for p in self.mine:
            for r in p.reads:
                if r is not INPUT and self.pieces[r[0]].device != self.device:
                    self.last_reader[tuple(r)] = min(self.last_reader.get(tuple(r), p.index), p.index)

    def schedule_refuses(self, assignment: dict[str, str]) -> str | None:
        """Why the run's pipeline schedule cannot run the plan ``assignment`` (its pieces as this run would cut
        them), or None when it can."""
        plan = replanned(self.plan, assignment, self.plan.schedule)
        cut, _ = pieces(self.model, plan)
        try:
            for d in plan.devices:
                order_of(self.tr.schedule, [p.index for p in cut if p.device == d], len(cut), self.tr.micro_batches)
        except LabError as exc:
            return str(exc)
        return None

    # ----- sending and receiving ------------------------------------------------------------------
    def _stamp(self) -> torch.Tensor:
        """The send time, in the payload's own dtype: float32 holds it as two parts (high and the rest)."""
        now = time.perf_counter()
        if self.dtype == torch.float64:
            return torch.tensor([now], dtype=torch.float64)
        hi = torch.tensor([now], dtype=torch.float32)
        return torch.cat([hi, torch.tensor([now - float(hi)], dtype=torch.float32)])

    def _send(self, t: torch.Tensor, dst_rank: int, tag: int) -> None:
        """One message: the tensor, then its send time (the receiver knows the shape)."""
        flat = torch.cat([t.detach().reshape(-1).to(self.dtype), self._stamp()])
        self.outbox.append((dist.isend(flat, dst_rank, tag=tag), flat))  # the tensor lives until it is taken
        self.rec.stats["sent"] += t.numel() * t.element_size()

    def shape_of(self, piece: int, out: int, rows: int) -> torch.Size:
        """Shape of a piece's output for a micro-batch of ``rows`` samples: the pieces run once on zeros."""
        key = (piece, out, rows)
        if key not in self._shapes:
            for k, outs in outputs_on(self.model, self.pieces, torch.zeros(rows, self.ds.in_features, dtype=self.dtype)).items():
                for o, v in enumerate(outs):
                    self._shapes[(k, o, rows)] = v.shape
        return self._shapes[key]

    @waits_for_peers
    def _recv(self, msg: Message, dst_piece: int, shape) -> torch.Tensor:
        """Message ``msg``, for piece ``dst_piece`` (the reader forward, the piece whose output it is backward)."""
        fwd = msg.way == FORWARD
        src_piece = self.pieces[msg.piece]
        src_dev = src_piece.device if fwd else self.pieces[dst_piece].device
        src_rank = self.rank_of[src_dev]
        t0 = time.perf_counter()
        extra = 1 if self.dtype == torch.float64 else 2
        flat = torch.empty(math.prod(shape) + extra, dtype=self.dtype)
        dist.recv(flat, src_rank, tag=msg.tag)
        t1 = time.perf_counter()
        t = flat[:-extra].view(shape)
        sent = float(flat[-1]) if extra == 1 else float(flat[-2]) + float(flat[-1])
        nbytes = t.numel() * t.element_size()
        wait = link = 0.0
        if self.tr.emulate:
            link = link_wait(self.sc, src_dev, self.device, nbytes)
            due = sent + link
            wait = max(0.0, due - t1)
            if wait > 0:
                self.emulated_wait(wait)
        t2 = time.perf_counter()
        self.rec.stats["comm"] += t1 - t0
        self.rec.stats["emul_comm"] += t2 - t1
        self.rec.stats["recv"] += nbytes
        self.rec.event(kind="activation" if fwd else "gradient", src=src_dev, dst=self.device,
                   piece=(dst_piece if fwd else src_piece.index), micro=msg.micro, start=sent, end=t2,
                   bytes=nbytes, wait=wait, link=link, op=None, called=t0, from_piece=msg.piece if fwd else dst_piece,
                   output=msg.output)
        return t

    def op_done(self, piece: CutPiece, micro: int, op: str | None, t0: float, t1: float) -> None:
        """An operator (or a node it absorbs) ran from t0 to t1: record it and wait its emulated extra time, the
        device's slow-down times the operator's warm time."""
        self.rec.event(kind="forward", op=op, piece=piece.index, micro=micro, start=t0, end=t1)
        s = self.scales.get(op, 1.0)
        if s > 1.0:
            self.emulated_wait((s - 1.0) * self._warm_now.forward.get(op, 0.0), op=op, piece=piece.index, micro=micro)

    def emulated_wait(self, wait: float, **task) -> None:
        """Wait ``wait`` seconds of emulated time (an emulated device's extra time for ``task``, recorded as such,
        or a link's). A sleep overshoots by tens of microseconds, many times the wait of a small operator, so what
        it overshot is owed back: the next waits are shorter by it, and over a step the emulated time adds up to
        the topology's numbers."""
        t0 = time.perf_counter()
        target = wait - self._overslept
        if target <= 0:
            self._overslept = -target
        else:
            with rz.planned_wait(target):
                time.sleep(target)
            self._overslept = time.perf_counter() - t0 - target
        if task:
            self.rec.stats["emul_compute"] += wait
            self.rec.event(kind="emulated", start=t0, end=time.perf_counter(), wait=wait, **task)

    def backward_scale(self, warm: WarmTimes | None) -> float:
        """The emulated slowdown of a piece's backward pass: its operators' scales weighted by their warm forward
        times."""
        total = sum(warm.forward.values()) if warm is not None else 0.0
        if total <= 0:
            return 1.0
        return sum(self.scales.get(op, 1.0) * t for op, t in warm.forward.items()) / total

    # ----- one step ---------------------------------------------------------------------------------
    def run_piece(self, piece: CutPiece, micro: int, ins: list) -> tuple:
        out = Timed(self, piece, micro).run(*ins) if self.rec.timing or self.scales else piece.module(*ins)
        return (out,) if piece.single else tuple(out)

    def step_placement(self, x: torch.Tensor, y: torch.Tensor, *, train: bool = True) -> dict:
        """Forward (and with ``train``, backward and the optimiser) of one batch through the pipeline, in the
        order of the run's schedule (:func:`lab.modelled.placement.order.schedule`), the list the models follow
        too."""
        M = self.tr.micro_batches if train else 1
        st = Step(x, y, M, train)
        self.outbox = []
        with torch.set_grad_enabled(train):
            for a in order_of(self.tr.schedule, [p.index for p in self.mine], len(self.pieces), M, train=train):
                if a.kind == FORWARD:
                    self.forward_task(st, self.pieces[a.piece], a.micro)
                elif a.kind in (BACKWARD, BACKWARD_INPUT):
                    self.backward_task(st, self.pieces[a.piece], a.micro, a.kind)
                elif a.kind == BACKWARD_WEIGHT:
                    self.weight_task(st, self.pieces[a.piece], a.micro)
                else:
                    self.optimizer_task(st)
        self._wait_sent()
        return {"loss": st.loss_total, "correct": st.correct, "compute": st.compute, "saved_peak": st.peak}

    @waits_for_peers
    def _wait_sent(self) -> None:
        """Wait until every message of the step is taken by its receiver: a wait for peers, which may be in an
        emulated link's planned wait for as long as the link says."""
        for handle, _ in self.outbox:
            handle.wait()
        self.outbox = []

    def forward_task(self, st: Step, p: CutPiece, m: int) -> None:
        """Piece ``p`` on micro-batch ``m``: receive its inputs from other devices, run it, send what other
        devices read of it, and on the last piece the loss."""
        clock = time.perf_counter
        ins = []
        for r in p.reads:
            if r is INPUT:
                ins.append(st.xs[m])
                continue
            src = self.pieces[r[0]]
            if src.device == self.device:
                v = st.acts[(src.index, m)][r[1]]
            else:
                key = Message(FORWARD, src.index, r[1], m, self.rank)
                if key not in st.received:
                    st.received[key] = self._recv(key, p.index, self.shape_of(src.index, r[1], st.xs[m].shape[0]))
                v = st.received[key]
            v = v.detach()
            if st.train and v.is_floating_point():
                v.requires_grad_(True)
            ins.append(v)
        # what its emulated waits multiply, measured (when not yet) outside its time and its memory count
        self._warm_now = self.warm.of(p, len(st.xs[m]), st.train)
        t0 = clock()
        if st.train and self.rec.measuring:
            counter = SavedCounter(self.state)
            with counter.hooks():
                out = self.run_piece(p, m, [v.clone() for v in ins] if p.writes_in_place else ins)
            st.saved[(p.index, m)] = counter.bytes
            st.held += counter.bytes
            st.peak = max(st.peak, st.held)
        else:
            out = self.run_piece(p, m, [v.clone() for v in ins] if p.writes_in_place else ins)
        st.compute += clock() - t0
        st.acts[(p.index, m)], st.leaves[(p.index, m)] = out, ins
        for o, readers in p.readers.items():
            for dev in dict.fromkeys(self.pieces[k].device for k, _ in readers):
                if dev != self.device:
                    self._send(out[o], self.rank_of[dev], Message(FORWARD, p.index, o, m, self.rank_of[dev]).tag)
        if p.index == self.final[0]:
            t0 = clock()
            logits = out[self.final[1]]
            loss = F.cross_entropy(logits, st.ys[m], reduction="sum") / st.batch
            st.losses[m] = loss
            st.loss_total += float(loss.detach())
            st.correct += int((logits.argmax(1) == st.ys[m]).sum())
            t1 = clock()
            st.compute += t1 - t0
            self.rec.event(kind="loss", op=None, piece=p.index, micro=m, start=t0, end=t1)

    def backward_task(self, st: Step, p: CutPiece, m: int, kind: str = BACKWARD) -> None:
        """Piece ``p``'s backward on micro-batch ``m``: the gradients of its outputs (summed over local
        readers, received from other devices), its backward, and each input's gradient sent back once the
        last local piece reading it is done. With ``kind`` BACKWARD_INPUT, only its inputs' gradients: the weights'
        wait for :meth:`weight_task`."""
        clock = time.perf_counter
        outs, grads = [], []
        for o in range(p.outputs):
            g = st.grad.pop((p.index, o, m), None)
            for dev in dict.fromkeys(self.pieces[k].device for k, _ in p.readers.get(o, [])):
                if dev != self.device:
                    k0 = min(k for k, _ in p.readers[o] if self.pieces[k].device == dev)
                    got = self._recv(Message(BACKWARD, p.index, o, m, self.rank_of[dev]), k0,
                                     st.acts[(p.index, m)][o].shape)
                    g = got if g is None else g + got
            if g is not None and st.acts[(p.index, m)][o].requires_grad:
                outs.append(st.acts[(p.index, m)][o])
                grads.append(g)
        if p.index == self.final[0]:
            outs.append(st.losses[m])
            grads.append(None)
        t0 = clock()
        if kind == BACKWARD_INPUT:
            leaves = st.leaves[(p.index, m)]
            if outs and any(v.requires_grad for v in leaves):
                # torch's own split (its pipelining's zero-bubble stages): the inputs' gradients now, and the nodes
                # the weights' gradient starts from kept for later
                groups = input_gradient(outs, grads, leaves, p.module.parameters())
                st.split[(p.index, m)] = (groups, None, None)
            else:  # nothing to send back: the whole backward waits for the weights' turn, as torch's first stage
                st.split[(p.index, m)] = (None, outs, grads)
        elif outs:
            torch.autograd.backward(outs, grads)
        t1 = clock()
        if kind == BACKWARD:
            st.held -= st.saved.pop((p.index, m), 0)  # the backward frees what the forward saved
        self._computed(st, p, m, kind, t0, t1)
        for r, leaf in zip(p.reads, st.leaves[(p.index, m)]):
            if r is INPUT:
                continue
            g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
            key = (r[0], r[1], m)
            if self.pieces[r[0]].device == self.device:
                st.grad[key] = g if key not in st.grad else st.grad[key] + g
            else:
                st.remote[key] = g if key not in st.remote else st.remote[key] + g
                if self.last_reader[tuple(r)] == p.index:
                    src = self.pieces[r[0]]
                    self._send(st.remote.pop(key), self.rank_of[src.device],
                               Message(BACKWARD, src.index, r[1], m, self.rank).tag)

    def weight_task(self, st: Step, p: CutPiece, m: int) -> None:
        """The weights' gradient of piece ``p`` on micro-batch ``m``, after its input gradient (a split backward)."""
        groups, outs, grads = st.split.pop((p.index, m))
        t0 = time.perf_counter()
        if groups is not None:
            weight_gradient(p.module.parameters(), groups)
        elif outs:
            torch.autograd.backward(outs, grads)
        t1 = time.perf_counter()
        st.held -= st.saved.pop((p.index, m), 0)  # what the forward saved is read until the weights' gradient
        self._computed(st, p, m, BACKWARD_WEIGHT, t0, t1)

    def _computed(self, st: Step, p: CutPiece, m: int, kind: str, t0: float, t1: float) -> None:
        """A backward (or half of one) ran from t0 to t1: record it and wait its emulated extra time."""
        st.compute += t1 - t0
        self.rec.event(kind=kind, op=None, piece=p.index, micro=m, start=t0, end=t1)
        warm = self.warm.of(p, len(st.xs[m]), True)
        s = self.backward_scale(warm)
        if s > 1.0:  # the device's slow-down times the task's warm time
            self.emulated_wait((s - 1.0) * (warm.backward if kind == BACKWARD else warm.halves[kind == BACKWARD_WEIGHT]),
                               op=None, piece=p.index, micro=m)

    def optimizer_task(self, st: Step) -> None:
        clock = time.perf_counter
        t0 = clock()
        if self.opt is not None:
            self.opt.step()
            self.opt.zero_grad(set_to_none=False)
        t1 = clock()
        st.compute += t1 - t0
        self.rec.event(kind="optimizer", op=None, piece=-1, micro=-1, start=t0, end=t1)

    # ----- the loop -------------------------------------------------------------------------------
    def evaluate(self) -> float:
        """Test accuracy through the pipeline (every process takes part; the loss process knows it)."""
        self.model.eval()
        self.rec.timing = False
        try:
            r = self.step_placement(self.ds.x_test.to(self.dtype), self.ds.y_test, train=False)
        finally:
            self.model.train()
        acc = torch.tensor([r["correct"] / len(self.ds.y_test) if self.holds_loss() else -1.0], dtype=torch.float64)
        if self.world > 1:
            with waiting_for_peers():  # the last stage may still be in an emulated link's wait for the test batch
                dist.all_reduce(acc, op=dist.ReduceOp.MAX)
        return float(acc)

    def holds_loss(self) -> bool:
        """This process runs the piece whose output is the loss."""
        return self.device == self.pieces[self.final[0]].device

    def resume(self) -> None:
        """A restarted attempt starts again from step 0: each process holds different operators, so a placement run
        keeps no checkpoint (a lost process cannot be replaced by the others)."""
        if rz.attempt() > 0:
            self.services.restarted(0, {"from_checkpoint": False, "world": self.world, "workers": self.world,
                                        "exact": False})
            self.services.log(f"attempt {rz.attempt()}: starting again from step 0 (a placement run keeps no "
                              "checkpoint)")

    def train_step(self, step: int) -> StepRecord:
        """One step and its record, on the run's clock (every process holds the whole batch's samples:
        a micro-batch passes through each of them)."""
        rec = self.rec
        rec.begin(step, timed=bool(self.scales))
        self._overslept = 0.0
        x, y = self.sampler.next_batch()
        if self.world > 1:
            dist.barrier()
        c0, p0 = time.thread_time(), time.process_time()
        t0 = time.perf_counter()
        r = self.step_placement(x.to(self.dtype), y)
        t1 = time.perf_counter()
        c1, p1 = time.thread_time(), time.process_time()
        rec.end(r["saved_peak"])
        st, off = rec.stats, rec.offset
        return StepRecord(step, r["loss"] if self.holds_loss() else math.nan, r["compute"] - st["emul_compute"],
                          st["comm"], st["emul_compute"], st["emul_comm"], t0 - off, math.nan, t1 - off, st["sent"],
                          st["recv"], self.tr.batch_size, 0.0, c1 - c0, (p1 - p0) - (c1 - c0))

    def run(self) -> dict:
        tr, plan, rec, services = self.tr, self.plan, self.rec, self.services
        rec.offset, offset_err = clock_offsets(self.rank, self.world)
        offsets = gather([[rec.offset, offset_err]], self.world)
        if self.rank == 0 and services.recording:
            self.store.merge_info(self.run_id, {
                "world": self.world, "parallel": "placement", "strategy": tr.strategy, "devices": plan.devices,
                "placement": plan.assignment, "pieces": [{"index": p.index, "device": p.device, "ops": p.ops}
                                                         for p in self.pieces],
                "micro_batches": tr.micro_batches, "emulated": bool(tr.emulate), "plan_note": plan.note,
                "modelled_makespan": plan.schedule.makespan, "modelled_pass": DATASHEET.pass_,
                "clock_offsets": [o[0][0] for o in offsets], "clock_uncertainty": [o[0][1] for o in offsets],
                "timeline_steps": rec.timeline_steps, "launcher": "lab" if services.launched else "torchrun",
                "attempt": rz.attempt(), "torch_threads": torch.get_num_threads()})
            self.store.job_records.add_event(self.run_id, "running", attempt=rz.attempt(), step=0,
                                 detail={"world": self.world, "devices": plan.devices})
        if self.world > 1:
            dist.barrier()
        wall0 = time.perf_counter() - rec.offset
        write_info = lambda info: services.write(self.store.merge_info, self.run_id, info)  # noqa: E731
        pending: list[StepRecord] = []
        accs: dict = {}
        diverged, last_acc, step = None, math.nan, 0
        for step in range(1, tr.steps + 1):
            self.step_no = step
            services.fault(tr, step, 0)
            pending.append(self.train_step(step))
            loss = gather([[pending[-1].loss]], self.world)
            glob = next((v[0][0] for v in loss if math.isfinite(v[0][0])), math.nan) if self.world > 1 else loss[0][0][0]
            finite = math.isfinite(glob)
            settled = False
            if self.rounds is not None and finite and self.rounds.add(pending[-1]):
                settled, new = self.rounds.end(step, self.plan, write_info if services.recording else lambda _: None,
                                               self.schedule_refuses)
                if new is not None and new[0] != self.plan.assignment:
                    replan(self, *new)
            last = step == tr.steps or not finite or settled
            if finite and (step % tr.eval_every == 0 or last):
                last_acc = accs[step] = self.evaluate()
            if last or len(pending) >= services.flush_every:
                recs = gather(pending, self.world)
                pending = []
                if self.rank == 0 and services.recording:
                    services.write(self.store.add_metric_rows, self.run_id, step_rows(
                        recs, accs, self.rank_of[self.pieces[self.final[0]].device], tr.batch_size, wall0))
                services.log(f"step {step}: loss {glob:.4f}")
            if not finite:
                diverged = (step, glob)
                break
            if settled:  # the balancing loop is done: the plan has settled (or its rounds are used up)
                break
        timelines = all_timelines(rec, self.world)
        peak = gather([[rec.saved_peak]], self.world)
        if self.rank == 0 and services.recording:
            for s, rows in timelines.items():
                services.write(self.store.job_records.add_plan_events, self.run_id, s, rows)
            write_info({"saved_peak": [float(r[0][0]) for r in peak]})
        services.drain()
        return {"steps": step, "diverged": diverged, "test_acc": last_acc}
