"""One rank of the training job: the same code whether the lab's launcher or torchrun started it.

The loop, per step, on every worker (``sync = "allreduce"``)::

    batch -> forward -> backward (into one flat gradient buffer) -> [emulated compute wait]
          -> all-reduce (mean) of [gradients..., loss]  (gloo, or the lab's ring)
          -> the optimiser's ordinary local step (identical on every worker)

The buffer's last element carries each worker's weighted loss, so the all-reduce also yields the
loss over the combined batch, and a NaN or inf anywhere reaches every worker in the same step (so
all stop together, and the run is marked diverged).

``param_server``: one extra rank (the last) receives every worker's [gradients..., loss], sums them,
steps the optimiser and sends [parameters..., loss] back. ``state_allreduce``: each worker's local
gradient goes into lab.optim.optimizers's ``step_distributed`` (the CXL design's optimiser-state all-reduce).

Measurements travel to rank 0 in one all-gather every few steps (with the parameter checksum every
``check_every`` steps) and rank 0 writes them to the run store; another rank writes there only to
record its own fault or failure.

Time split per worker and step (seconds):

* ``t_compute``: batch, forward, backward, optimiser step (plus the emulated compute wait).
* ``t_idle``: waiting for the slowest worker. Every worker stamps the wall clock when it is ready
  to communicate; idle = (latest stamp among the workers) - (own stamp), capped at the time spent in
  the collective. No extra barrier is needed (same machine: one clock; several machines: as good
  as their clock synchronisation).
* ``t_comm``: the rest of the time in the collective (and in the task-level design's sample exchange).
* ``t_compress``: compressing the gradient (``training.compression``, gradient all-reduce only; see
  lab.train.compressed), measured; 0 without compression.
* ``t_emul_compute``: the part of t_compute that was emulated device waiting.
* ``t_emul_comm``: the part of t_comm that was emulated link waiting.
"""

from __future__ import annotations

import json
import math
import os
import time

import torch
import torch.distributed as dist

from lab.errors import LabError
from lab.optim.flat import flatten_parameters
from lab.optim.optimizers import from_training as optim_from_training
from lab.scenario.document import Scenario
from lab.scenario.models import build_model
from lab.scenario.names import optimiser_implementation
from lab.store.runs import JOB_WORKER, RunStore
from lab.train import compressed
from lab.train import data as data_mod
from lab.train import emulation as emu
from lab.train import resilience as rz
from lab.train.layout import IDLE_DEFINITION, job_layout
from lab.train.metric_book import MetricBook
from lab.train.services import RankServices
from lab.train.step_record import FIELDS, StepRecord
from lab.train.sync_steps import DataParallelStep
from lab.comm.peers import waits_for_peers



class Trainer:
    """One rank of a data-parallel job: its setup, the step loop, its measurements and checkpoints; the step in its
    sync mode is its :class:`lab.train.sync_steps.DataParallelStep`, the log, faults and store writer its
    :class:`lab.train.services.RankServices`."""

    def __init__(self, sc: Scenario, rank: int, world: int, run_id: str | None, store: RunStore | None,
                 *, launched: bool, model_builder=None):
        self.sc, self.rank, self.world, self.run_id, self.store = sc, rank, world, run_id, store
        # The calibration passes its own networks; a job builds the Scenario's model.
        self.build_model = model_builder or build_model
        self.services = RankServices(run_id, store, rank, launched=launched)
        self.step_no = 0
        self.start_step = 0

    # ------------------------------------------------------------------------------------------
    def setup(self) -> None:
        sc = self.sc
        tr0 = sc.training
        self.ds = data_mod.load_dataset(tr0.dataset, tr0.dataset_size, tr0.seed)
        self.model = self.build_model(tr0.model, self.ds.in_features, self.ds.classes, seed=tr0.seed,
                                      width=tr0.model_width)
        self.layout = layout = job_layout(sc, self.world, self.model, self.ds.in_features)
        self.tr = tr = layout.training
        self.is_server = layout.server is not None and self.rank == layout.server
        self.n = layout.workers
        # Parameters and gradients live in flat buffers with one extra slot (the loss): the
        # collective then moves one contiguous tensor and no copies are made.
        self.params, self.pflat, self.gflat = flatten_parameters(self.model)
        self.buffers = [b for b in self.model.buffers() if b.is_floating_point()]
        self.opt = optim_from_training(tr, self.params, layout.lr) if (layout.server is None or self.is_server) else None
        self.sampler = None
        if not self.is_server:
            self.sampler = data_mod.worker_data(self.ds, self.rank, self.n, tr.split, tr.batch_size,
                                                weights=layout.info["weights"], alpha=tr.dirichlet_alpha, seed=tr.seed)
        link_delay = None
        if layout.emulation is not None and layout.server is None:
            link_delay = emu.ring_link_delay(sc.topology, layout.emulation.devices)
        self.compressed = compressed.attach(self, link_delay)  # the compressed gradient sync, or None
        self.sync = DataParallelStep(self.rank, self.world, layout, sc.topology, model=self.model,
                                     flat=(self.pflat, self.gflat), opt=self.opt, sampler=self.sampler,
                                     buffers=self.buffers, compressed=self.compressed, link_delay=link_delay)
        self.records: list[StepRecord] = []
        self.book = MetricBook(self.n, self.compressed.job_loss if self.compressed is not None else None)

    def bytes_kind(self) -> str:
        """Whether the bytes a step records were counted on the wire or from the collective's model."""
        ring = self.sync.ring
        if self.layout.server is not None or (ring and self.tr.sync == "allreduce") or self.compressed is not None:
            return "measured"
        if ring:  # the optimiser's max all-reduces go through gloo
            return "measured (ring) + modelled (gloo max)"
        return "modelled"

    def evaluate(self) -> float:
        self.model.eval()
        with torch.no_grad():
            pred = self.model(self.ds.x_test).argmax(1)
        self.model.train()
        return float((pred == self.ds.y_test).float().mean())

    def checksum(self) -> float:
        return float(self.pflat[:-1].double().sum())

    @waits_for_peers
    def flush(self, step: int, check: bool) -> None:
        """All ranks: gather the buffered records (and the checksum) to every rank; rank 0 stores them."""
        rows = self.records
        self.records = []
        cap = self.services.flush_every * len(FIELDS)
        local = torch.full((2 + cap,), math.nan, dtype=torch.float64)
        local[0] = self.checksum() if check else 0.0
        local[1] = len(rows)
        if rows:
            local[2:2 + len(rows) * len(FIELDS)] = torch.tensor(rows, dtype=torch.float64).reshape(-1)
        if self.world > 1:
            out = [torch.empty_like(local) for _ in range(self.world)]
            dist.all_gather(out, local)
        else:
            out = [local]
        if check:
            sums = [float(o[0]) for o in out]
            if max(sums) != min(sums):
                raise LabError(f"the workers' parameters differ after step {step}: checksum max {max(sums)!r}, "
                               f"min {min(sums)!r} (per rank: {sums}). Every worker must hold identical parameters.",
                               where="training")
        if self.rank == 0 and self.store is not None:
            rows = self.book.rows([o[2:2 + int(o[1]) * len(FIELDS)].reshape(-1, len(FIELDS)).numpy() for o in out])
            if rows:
                self.services.write(self.store.add_metric_rows, self.run_id, rows)

    def checkpoint(self, step: int, final: bool) -> None:
        """Intermediate: every worker saves its own state, all meet, then the owner saves the model
        and optimiser (so a main checkpoint implies the ranks' files; lab.train.resilience)."""

        if self.store is None:
            return
        owner = self.layout.server if self.layout.server is not None else 0
        folder = self.store.checkpoint_dir(self.run_id)
        if not final:
            self.services.commit()  # rank 0: every measurement up to this step is committed first
            if not self.is_server:
                rz.save_atomic(rz.rank_state(self), folder / rz.rank_name(step, self.rank))
            if self.world > 1:
                dist.barrier()
        if self.rank != owner:
            return
        state = {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "step": step,
                 "rng": torch.get_rng_state(), "run_id": self.run_id,
                 "training": json.dumps(self.tr.to_dict()), "world": self.world, "t_start": self.book.t_start}
        if self.sampler is not None:
            state["sampler_rng"] = self.sampler.gen.get_state()
        rz.save_atomic(state, folder / ("final.pt" if final else rz.main_name(step)))
        if not final:
            rz.prune(folder)
            self.services.log(f"checkpoint at step {step}")

    def resume(self) -> None:
        """A restarted attempt continues from the newest checkpoint (lab.train.resilience)."""

        self.start_step = 0
        if rz.attempt() == 0 or self.store is None or self.run_id is None:
            return
        folder = self.store.checkpoint_dir(self.run_id, create=False)
        step = rz.latest_checkpoint(folder) if folder.exists() else None
        exact = False
        if step is not None:
            ck = rz.load(folder / rz.main_name(step))
            self.model.load_state_dict(ck["model"])  # copies into the flat buffer's views
            if self.opt is not None:
                self.opt.load_state_dict(ck["optimizer"])
            torch.set_rng_state(ck["rng"])
            files = [folder / rz.rank_name(step, r) for r in range(self.n)]
            exact = ck.get("world") == self.world and all(f.exists() for f in files)
            if exact and not self.is_server:
                rz.restore_rank_state(self, rz.load(files[self.rank]))
            elif self.sampler is not None:  # new shards: a fresh stream, not a replay of the first batches
                self.sampler.gen.manual_seed(30_000 + 7919 * self.rank + self.tr.seed + 1_000_003 * step)
            self.book.resumed_from = ck.get("t_start")
        self.start_step = step or 0
        self.services.log(f"attempt {rz.attempt()}: resuming from step {self.start_step} "
                 f"({'exact state of every rank' if exact else 'data re-split over ' + str(self.n) + ' worker(s)'})")
        self.services.restarted(self.start_step, {
            "from_checkpoint": step is not None, "world": self.world, "workers": self.n, "exact": exact,
            "compression_state_reset": self.compressed is not None and not exact})

    # ----- the loop ----------------------------------------------------------------------------
    def run(self) -> dict:
        tr, layout = self.tr, self.layout
        steps = tr.steps
        if self.rank == 0 and self.store is not None:
            info = {"world": self.world, "workers": self.n, "server_rank": layout.server, "params": self.pflat.numel() - 1,
                    "lr_effective": layout.lr, "batch_sizes": layout.batch_sizes,
                    "shard_sizes": None, "bytes_kind": self.bytes_kind(), "dominant_op": layout.op_class,
                    "emulated": layout.emulation is not None, "idle_definition": IDLE_DEFINITION,
                    "devices": list(layout.emulation.devices) if layout.emulation else None,
                    "scales": list(layout.emulation.scales) if layout.emulation else None,
                    "server_device": layout.server_device, "torch_threads": torch.get_num_threads(),
                    "optimiser_implementation": optimiser_implementation(tr.fused, tr.sync),
                    "launcher": "lab" if self.services.launched else "torchrun", "checkpoint_dir":
                        str(self.store.checkpoint_dir(self.run_id, create=False)),
                    "attempt": rz.attempt()}
            if self.sampler is not None:
                info["shard_sizes"] = [len(s) for s in data_mod.make_shards(
                    self.ds.y_train, self.n, tr.split, weights=layout.info["weights"], alpha=tr.dirichlet_alpha,
                    seed=tr.seed)]
            self.store.merge_info(self.run_id, info)
            self.store.job_records.add_event(self.run_id, "data", attempt=rz.attempt(), step=self.start_step, detail={
                "split": tr.split, "workers": self.n, "shard_sizes": info["shard_sizes"],
                "batch_sizes": layout.batch_sizes, "dataset": tr.dataset, "exchange_share": tr.exchange_share})
        if self.sampler is not None:
            self.services.log(f"pid {os.getpid()}, {len(self.sampler)} local samples, batch {layout.batch_sizes[self.rank]}")
        if self.world > 1:
            dist.barrier()
        self.book.start(time.time(), self.world)
        if self.rank == 0 and self.store is not None:
            self.store.job_records.add_event(self.run_id, "running", attempt=rz.attempt(), step=self.start_step,
                                 detail={"world": self.world, "workers": self.n})
        if self.rank == 0 and self.store is not None and self.start_step == 0:
            self.store.add_metrics(self.run_id, [{"step": 0, "worker": JOB_WORKER, "test_acc": self.evaluate(),
                                                  "wall": 0.0}])
        diverged_at = None
        last_acc = math.nan
        step = self.start_step
        for step in range(self.start_step + 1, steps + 1):
            self.step_no = step
            self.services.fault(tr, step, self.start_step)
            r = self.sync.step()
            local, glob, tcomp, tcoll, emul_cp, emul_cm = (r.local_loss, r.loss, r.t_compute, r.t_coll,
                                                           r.t_emul_compute, r.t_emul_comm)
            ready, sent, recv = r.ready, r.bytes_sent, r.bytes_recv
            if step == 1 and not self.is_server:
                self._check_grad_views()
            t_x = time.perf_counter()
            xs, xr, xd = self.sync.exchange()
            tcoll += time.perf_counter() - t_x
            emul_cm += xd
            finite = math.isfinite(glob)
            samples = 0 if self.is_server else self.layout.batch_sizes[self.rank]
            self.records.append(StepRecord(step, local, tcomp, tcoll, emul_cp, emul_cm, math.nan, ready, time.time(),
                                           sent + xs, recv + xr, samples, self.sync.t_compress))
            last = step == steps or not finite
            if self.rank == 0:
                self.book.note(step, loss=glob)
            do_eval = finite and (step % tr.eval_every == 0 or last)
            if do_eval:
                self.sync.sync_buffers()
                if self.rank == 0:
                    last_acc = self.evaluate()
                    self.book.note(step, test_acc=last_acc)
            check = finite and (step % tr.check_every == 0 or last)
            ck_step = bool(tr.checkpoint_every) and step % tr.checkpoint_every == 0  # rows stored before the checkpoint
            every = self.services.flush_every
            if last or check or ck_step or step % every == 0 or len(self.records) >= every:
                self.flush(step, check)
                self.services.log(f"step {step}: local loss {local:.4f}")
            if tr.checkpoint_every and step % tr.checkpoint_every == 0 and finite and not last:
                self.checkpoint(step, final=False)
            if not finite:
                diverged_at = (step, glob)
                break
        if diverged_at is None:
            self.checkpoint(step, final=True)
        self.services.drain()
        return {"steps": step, "diverged": diverged_at, "test_acc": last_acc}

    def _check_grad_views(self) -> None:
        base = self.gflat.data_ptr()
        end = base + self.gflat.numel() * 4
        for p in self.params:
            if p.grad is None or not (base <= p.grad.data_ptr() < end):
                raise RuntimeError("a gradient left the flat buffer (the optimiser or autograd replaced p.grad)")
