"""One training step of a data-parallel rank, in each sync mode: the gradients all-reduced (gloo or the lab's ring,
compressed or not), the whole model state all-reduced, or a parameter server's workers and server; with the
emulated device and link waits."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F

from lab.comm import ring_allreduce
from lab.optim.optimizers import NonFiniteGradient
from lab.train import emulation as emu
from lab.train import resilience as rz
from lab.comm.peers import waits_for_peers
from lab.modelled.collectives.ring import ring_bytes
from lab.scenario.topology import Topology
from lab.train.compressed import CompressedAllReduce
from lab.train.layout import JobLayout


@dataclass(frozen=True)
class StepResult:
    """What one training step of one rank measured (seconds are wall time on this rank)."""

    local_loss: float  # this rank's loss on its batch
    loss: float  # the job's loss (the workers' mean); NaN when the step diverged
    t_compute: float  # forward, backward, optimiser and emulated compute wait
    t_coll: float  # communication
    t_emul_compute: float  # of t_compute: the wait that emulates a slower device
    t_emul_comm: float  # of t_coll: the wait that emulates a slower link
    ready: float  # time.time() when this rank was ready to communicate
    bytes_sent: int
    bytes_recv: int


class DataParallelStep:
    """One data-parallel rank's training step in its sync mode, with its collectives and the emulated device and link
    waits. It is handed what it works on (the model, the flat parameter and gradient buffers, the optimiser, the
    sampler: the same objects the rank checkpoints) and owns what only the step uses (the ring, the link delays,
    the last optimiser step's and compression's seconds)."""

    def __init__(self, rank: int, world: int, layout: JobLayout, topology: Topology, *, model: torch.nn.Module,
                 flat: tuple[torch.Tensor, torch.Tensor], opt, sampler, buffers: list[torch.Tensor],
                 compressed: CompressedAllReduce | None, link_delay: Callable[[int, int, int], float] | None):
        self.rank, self.world, self.layout, self.topology = rank, world, layout, topology
        self.tr = layout.training
        self.is_server = layout.server is not None and rank == layout.server
        self.n = layout.workers
        self.model, self.opt, self.sampler, self.buffers = model, opt, sampler, buffers
        self.pflat, self.gflat = flat
        self.weight = 1.0
        if not self.is_server:
            # mean over workers of (weight x local gradient) = gradient of the combined batch's mean loss
            self.weight = layout.batch_sizes[rank] * self.n / sum(layout.batch_sizes)
        self.scale = layout.emulation.scales[rank] if (layout.emulation and not self.is_server) else 1.0
        self.ring = self.tr.allreduce_impl == "ring" and world > 1
        self.link_delay = link_delay
        self.compressed = compressed
        self.t_compress = 0.0  # the last step's compression seconds
        self.last_opt_s = 0.0  # the last optimiser step's seconds: the emulated device waits for them too

    def step(self) -> StepResult:
        """One step in the job's sync mode."""
        if self.tr.sync == "param_server":
            return self.step_ps_server() if self.is_server else self.step_ps_worker()
        return self.step_state() if self.tr.sync == "state_allreduce" else self.step_allreduce()

    # ----- collectives -------------------------------------------------------------------------
    @waits_for_peers
    def allreduce(self, t: torch.Tensor, op: str) -> tuple[int, int, float]:
        """All-reduce ``t`` in place among all ranks; returns (bytes sent, bytes received, emulated s)."""
        if self.world == 1:
            return 0, 0, 0.0
        nbytes = t.numel() * t.element_size()
        if self.ring and op in ("sum", "mean"):

            st = ring_allreduce(t, op, link_delay=self.link_delay)
            return st.sent, st.received, st.delay_seconds
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        if op == "mean":
            t.div_(self.world)
        emulated = 0.0
        if self.layout.emulation is not None:
            emulated = emu.ring_allreduce_time(self.topology, self.layout.emulation.devices, nbytes)
            if emulated > 0:
                time.sleep(emulated)
        # gloo does not count bytes: record what a ring all-reduce sends (modelled)
        moved = int(ring_bytes(nbytes, self.world))
        return moved, moved, emulated

    @waits_for_peers
    def _send_delay(self, dst_dev: str | None, nbytes: int) -> float:
        if self.layout.emulation is None or dst_dev is None:
            return 0.0
        src = self.layout.server_device if self.is_server else self.layout.emulation.devices[self.rank]
        if src == dst_dev:
            return 0.0
        d = self.topology.transfer_time(src, dst_dev, nbytes)
        time.sleep(d)
        return d

    # ----- pieces of a step --------------------------------------------------------------------
    def forward_backward(self) -> float:
        x, y = self.sampler.next_batch()
        self.gflat.zero_()
        loss = F.cross_entropy(self.model(x), y)
        (loss if self.weight == 1.0 else loss * self.weight).backward()
        lv = float(loss.detach())
        self.gflat[-1] = lv * self.weight
        return lv

    def compute_wait(self, seconds: float) -> float:
        if self.scale <= 1.0 or seconds <= 0:
            return 0.0
        w = seconds * (self.scale - 1.0)
        with rz.planned_wait(w):
            time.sleep(w)
        return w

    @waits_for_peers
    def exchange(self) -> tuple[int, int, float]:
        """The task-level design: hand a random share of the local samples to the ring neighbour (rank + 1)."""
        if self.tr.exchange_share <= 0 or self.n < 2 or self.is_server:
            return 0, 0, 0.0
        right, left = (self.rank + 1) % self.n, (self.rank - 1) % self.n
        give, keep = self.sampler.pick_share(self.tr.exchange_share)
        x_out = self.sampler.x[give].contiguous()
        y_out = self.sampler.y[give].contiguous()
        cnt_out, cnt_in = torch.tensor([len(give)], dtype=torch.int64), torch.zeros(1, dtype=torch.int64)
        reqs = [dist.isend(cnt_out, right), dist.irecv(cnt_in, left)]
        for r in reqs:
            r.wait()
        k = int(cnt_in.item())
        x_in = torch.empty((k, x_out.shape[1]), dtype=x_out.dtype)
        y_in = torch.empty(k, dtype=y_out.dtype)
        nbytes = x_out.numel() * 4 + y_out.numel() * 8
        delay = 0.0
        if self.layout.emulation is not None:
            delay = self._send_delay(self.layout.emulation.devices[right], nbytes)
        reqs = []
        if len(give):
            reqs += [dist.isend(x_out, right), dist.isend(y_out, right)]
        if k:
            reqs += [dist.irecv(x_in, left), dist.irecv(y_in, left)]
        for r in reqs:
            r.wait()
        self.sampler.replace_samples(torch.cat([self.sampler.x[keep], x_in]), torch.cat([self.sampler.y[keep], y_in]))
        return nbytes + 8, x_in.numel() * 4 + y_in.numel() * 8 + 8, delay

    # ----- the step, per sync mode -------------------------------------------------------------
    def _compute(self) -> tuple[float, float, float, float]:
        """Forward and backward, then the emulated device's wait for them and the last optimiser step: (this rank's
        loss, compute seconds, emulated seconds, the moment it is ready to communicate)."""
        t0 = time.perf_counter()
        local = self.forward_backward()
        tc = time.perf_counter() - t0
        emul = self.compute_wait(tc + self.last_opt_s)
        return local, tc, emul, time.time()

    def step_allreduce(self) -> StepResult:
        local, tc, emul, ready = self._compute()
        t1 = time.perf_counter()
        if self.compressed is not None:  # compress, share by the chosen method, mean (lab.train.compressed)
            ready, sent, recv, emul_c, self.t_compress = self.compressed.sync(self.gflat, local)
            glob = local  # the job's loss is the weighted mean of the workers' (store_records)
        else:
            sent, recv, emul_c = self.allreduce(self.gflat, "mean")
            glob = float(self.gflat[-1])
        tcoll = time.perf_counter() - t1 - self.t_compress
        t2 = time.perf_counter()
        if math.isfinite(glob):
            glob = self._opt_step(glob)
        self.last_opt_s = time.perf_counter() - t2
        return StepResult(local, glob, tc + self.last_opt_s + emul, tcoll, emul, emul_c, ready, sent, recv)

    def step_state(self) -> StepResult:
        local, tc, emul, ready = self._compute()
        coll = {"t": 0.0, "sent": 0, "recv": 0, "emul": 0.0}

        def fn(t: torch.Tensor, op: str) -> None:
            a = time.perf_counter()
            s, r, e = self.allreduce(t, op)
            coll["t"] += time.perf_counter() - a
            coll["sent"] += s
            coll["recv"] += r
            coll["emul"] += e

        lossbuf = self.gflat[-1:].clone()
        fn(lossbuf, "mean")
        glob = float(lossbuf)
        t2 = time.perf_counter()
        before = coll["t"]
        if math.isfinite(glob):
            glob = self._opt_step(glob, fn)
        self.last_opt_s = max(0.0, time.perf_counter() - t2 - (coll["t"] - before))
        return StepResult(local, glob, tc + self.last_opt_s + emul, coll["t"], emul, coll["emul"], ready,
                          coll["sent"], coll["recv"])

    def _opt_step(self, glob: float, allreduce_fn=None) -> float:
        """The optimiser step; a NaN/inf gradient (every rank sees it together) counts as divergence."""

        try:
            if allreduce_fn is None:
                self.opt.step()
            else:
                self.opt.step_distributed(allreduce_fn, reduce="state")
        except NonFiniteGradient:
            return math.nan
        return glob

    @waits_for_peers
    def step_ps_worker(self) -> StepResult:
        t0 = time.perf_counter()
        local = self.forward_backward()
        tc = time.perf_counter() - t0
        emul = self.compute_wait(tc)
        ready = time.time()
        t1 = time.perf_counter()
        nbytes = self.gflat.numel() * 4
        delay = self._send_delay(self.layout.server_device, nbytes)
        reqs = [dist.isend(self.gflat, self.layout.server), dist.irecv(self.pflat, self.layout.server)]
        for r in reqs:
            r.wait()
        tcoll = time.perf_counter() - t1
        glob = float(self.pflat[-1])
        return StepResult(local, glob, tc + emul, tcoll, emul, delay, ready, nbytes, nbytes)

    @waits_for_peers
    def step_ps_server(self) -> StepResult:
        ready = time.time()
        t1 = time.perf_counter()
        bufs = [torch.empty_like(self.gflat) for _ in range(self.n)]
        for r in [dist.irecv(b, w) for w, b in enumerate(bufs)]:
            r.wait()
        t_recv = time.perf_counter() - t1
        t2 = time.perf_counter()
        self.gflat.copy_(bufs[0])
        for b in bufs[1:]:  # in rank order
            self.gflat.add_(b)
        self.gflat.div_(self.n)  # the workers' losses are weighted so the mean is the combined batch's
        glob = float(self.gflat[-1])
        if math.isfinite(glob):
            glob = self._opt_step(glob)
        self.pflat[-1] = glob
        tc = time.perf_counter() - t2
        t3 = time.perf_counter()
        nbytes = self.pflat.numel() * 4
        delay = 0.0
        if self.layout.emulation is not None:  # the sends to the workers overlap: wait for the slowest
            d = max(self.topology.transfer_time(self.layout.server_device, dev, nbytes)
                    if dev != self.layout.server_device else 0.0 for dev in self.layout.emulation.devices)
            time.sleep(d)
            delay = d
        for r in [dist.isend(self.pflat, w) for w in range(self.n)]:
            r.wait()
        tcoll = t_recv + time.perf_counter() - t3
        return StepResult(math.nan, glob, tc, tcoll, 0.0, delay, ready, nbytes * self.n, nbytes * self.n)

    # ----- evaluation, checksum, records -------------------------------------------------------
    @waits_for_peers
    def sync_buffers(self) -> None:
        """Average floating-point buffers (batch-norm running statistics) over the workers (the
        parameter server adds zeros)."""
        if not self.buffers or self.world == 1:
            return
        flat = torch.cat([b.reshape(-1) for b in self.buffers])
        if self.is_server:
            flat.zero_()
        dist.all_reduce(flat)
        flat.div_(self.n)
        off = 0
        for b in self.buffers:
            b.copy_(flat[off:off + b.numel()].view_as(b))
            off += b.numel()
