"""What keeps a training job alive through faults: heartbeats, checkpoints with every rank's state,
resuming, injected faults, and the rendezvous that cannot clash.

* **Heartbeats.** Under the lab's launcher (LAB_HEARTBEAT_FILE set) a daemon thread in every worker
  writes a small JSON file every ``LAB_HEARTBEAT_EVERY`` seconds (default 0.5): pid, attempt, the
  step it is on, when it last moved (``progress_t``), and its *phase*: ``comm`` while the main
  thread waits for its peers (a torch.distributed call, the lab's ring, the parameter-server
  exchange), ``busy`` otherwise, with the lab function it is in (``where``). A process that froze
  stops writing (the file grows old); a worker that hangs keeps writing but stops moving.
  The launcher tells the culprit (``busy``) from the peers that wait for it (``comm``). Moving is a
  new step, a unit of work inside one (:func:`progressed`: an operator of a placement run, a message
  received), the end of a wait for peers (a declared one counts even when no beat saw it), or a wait the
  worker planned (:func:`planned_wait`: an emulated device's extra time) that has not yet reached its end: a
  long step of a slow emulated device on a loaded machine is not a hang, for it or for the peers that wait
  for it.
* **Checkpoints.** Every ``checkpoint_every`` steps each rank writes its own small state (sampler
  position and random generator, floating buffers, and its optimiser state where that is local:
  ``state_allreduce``), all ranks meet at a barrier, then the owner (rank 0, or the parameter
  server) writes the model and optimiser atomically (``stepNNNNNN.pt``). A main checkpoint on disk
  therefore implies every rank's state of that step is there too. The last two are kept.
* **Resuming.** A restarted attempt (LAB_ATTEMPT > 0 from the lab's launcher, or
  TORCHELASTIC_RESTART_COUNT > 0 under torchrun) loads the newest checkpoint. With the same world
  size every rank restores its exact state, so the run continues as if nothing happened; with
  fewer workers (the lab's recovery drops the failed one) the data is re-split over the remaining
  workers and their samplers start afresh (seeded by the step). Metric rows after the checkpoint
  step are deleted (those steps are redone); rows up to it stay.
* **Faults** (``training.fault``) fire only in attempt 0, so a restart does not repeat them: ``kill``
  (SIGKILL itself), ``raise`` (an exception), ``hang`` (sleeps forever in the step; only the
  heartbeat watch or gloo's timeout ends it). Before firing, the worker stores a ``fault`` stage
  with the time, so detection time can be measured.
* **Rendezvous.** The launcher binds and listens on a port-0 socket and hands its descriptor to
  rank 0, whose TCPStore serves on it (``master_listen_fd``): the port is held from the moment the
  operating system chose it, so two jobs can never pick the same one; keys live under a per-attempt
  prefix, so a stray process from another job or attempt cannot join.

The launcher and the job manager read heartbeats and checkpoints' names from here without torch
(it takes seconds to import), so torch and the compressors are imported only by the functions that
save, load or restore state.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from lab import settings
from lab.comm.peers import is_waiting, waits_ended

log = logging.getLogger("lab.train")

KEEP_CHECKPOINTS = 2
_LAB = str(Path(__file__).resolve().parents[1])  # .../lab


def attempt() -> int:
    """0 for the first start of the job, k after the k-th restart."""
    for key in ("LAB_ATTEMPT", "TORCHELASTIC_RESTART_COUNT"):
        v = os.environ.get(key)
        if v and v.isdigit():
            return int(v)
    return 0


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ and not settings.raw("LAB_ERROR_FILE")


def torchrun_restarts_left() -> bool:
    """Under torchrun: will the agent start this job again after a failure?"""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) < int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    except ValueError:
        return False


# ----- rendezvous ------------------------------------------------------------------------------
def init_process_group(rank: int, world: int, timeout_s: float) -> None:
    """gloo process group: through the launcher's held socket (LAB_STORE_FD on rank 0) and a key
    prefix (LAB_RDZV_PREFIX) when the lab's launcher started us, else env:// (torchrun)."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    prefix = settings.raw("LAB_RDZV_PREFIX")
    if not prefix and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun's agent keeps one store for every restart of the job: without a prefix per
        # attempt, a restarted rank can read a dead rank's address from the previous attempt
        rendezvous = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                              timeout=timeout)
        tag = os.environ.get("TORCHELASTIC_RUN_ID", "job")
        dist.init_process_group("gloo", store=dist.PrefixStore(f"lab/{tag}/attempt{attempt()}/", rendezvous), rank=rank,
                                world_size=world, timeout=timeout)
        return
    if not prefix:
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world, timeout=timeout)
        return
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    kw = {}
    if rank == 0 and settings.raw("LAB_STORE_FD"):
        kw["master_listen_fd"] = int(settings.raw("LAB_STORE_FD"))
    rendezvous = dist.TCPStore(addr, port, world, rank == 0, timeout=timeout, wait_for_workers=False, **kw)
    dist.init_process_group("gloo", store=dist.PrefixStore(prefix, rendezvous), rank=rank, world_size=world,
                            timeout=timeout)


# ----- heartbeats ------------------------------------------------------------------------------
_WORK = 0  # units of work done in this process, for the heartbeat's "moved"
_PLANNED: dict[int, float] = {}  # thread -> when the wait it planned ends (time.time())


def progressed() -> None:
    """One unit of work inside a step is done: the heartbeat counts it as moving (a step of many
    operators can outlast the heartbeat timeout on a slow device without any one of them hanging)."""
    global _WORK
    _WORK += 1


@contextmanager
def planned_wait(seconds: float) -> Iterator[None]:
    """Inside this block the calling thread waits ``seconds`` on purpose (an emulated device's extra
    time): until that end it counts as moving, however long the wait is; past it, as any other work."""
    me = threading.get_ident()
    _PLANNED[me] = time.time() + seconds
    try:
        yield
    finally:
        _PLANNED.pop(me, None)
        progressed()


def main_thread_phase(main: int | None = None) -> tuple[str, str]:
    """('comm' | 'compile' | 'busy', innermost lab function) of the thread that trains (``main``, by default the
    main thread): 'comm' while it says it waits for its peers (:func:`lab.comm.peers.waiting_for_peers`) or is
    inside torch.distributed; 'compile' while torch.compile builds a kernel (start-up work, however late in the
    run it comes); the function is only named, for the alarm's text, and decides nothing."""
    main = threading.main_thread().ident if main is None else main
    frame = sys._current_frames().get(main)
    where = ""
    in_dist = in_compile = False
    while frame is not None:
        fn = frame.f_code.co_filename
        if "torch" in fn and "distributed" in fn:
            in_dist = True
        if "torch" in fn and ("_dynamo" in fn or "_inductor" in fn):
            in_compile = True
        if not where and fn.startswith(_LAB):
            where = frame.f_code.co_name
        frame = frame.f_back
    return ("comm" if in_dist or is_waiting(main) else "compile" if in_compile else "busy"), where


class Heartbeat:
    """A daemon thread writing this worker's heartbeat file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike, step_of, every: float | None = None, relay=None):
        self.path = Path(path)
        self.step_of = step_of
        self.relay = relay  # also hands each beat on (a rank on a Ray node has no launcher beside it to read its file)
        self.watch = threading.get_ident()  # the thread that trains: a Ray actor's method may not run on the main one
        self._relay_failed = False
        self.every = every if every is not None else settings.number("LAB_HEARTBEAT_EVERY")
        self._stop = threading.Event()
        self._moved = (-1, -1, -1)
        self._phase = ""
        self._progress_t = time.time()
        self._thread = threading.Thread(target=self._run, name="lab-heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        global _BEAT
        self.beat()
        self._thread.start()
        _BEAT = self
        return self

    def beat(self) -> None:
        step = int(self.step_of() or 0)
        now = time.time()
        phase, where = main_thread_phase(self.watch)
        # A wait for peers that ended is a move too: a worker that waited long for a peer's planned wait is not
        # stale the moment it gets back to work. A deadlock never ends its wait, so it is still found. A declared
        # wait is counted when it ends, even if no beat saw it (a starved heartbeat thread beats seconds apart);
        # a wait inside torch.distributed is seen on the stack, and its end by the next beat.
        moved = (step, _WORK, waits_ended(self.watch))
        if (moved != self._moved or now < _PLANNED.get(self.watch, 0.0)
                or (self._phase == "comm" and phase != "comm")):
            self._moved, self._progress_t = moved, now
        self._phase = phase
        self._write({"pid": os.getpid(), "attempt": attempt(), "step": step, "phase": phase, "where": where,
                     "t": now, "progress_t": self._progress_t})

    def _write(self, doc: dict) -> None:
        write_heartbeat(self.path, doc)
        if self.relay is not None:
            try:
                self.relay(doc)
            except Exception as exc:  # noqa: BLE001 - a lost beat is one the launcher waits for; it says why once
                if not self._relay_failed:
                    sys.stderr.write(f"heartbeats cannot be relayed: {type(exc).__name__}: {exc}\n")
                self._relay_failed = True

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.beat()

    def stop(self, phase: str | None = None) -> None:
        """End the thread; with ``phase`` (e.g. "exiting") write one last heartbeat saying so,
        after which the launcher no longer expects beats from this worker."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self.every + 1.0)
        if phase is not None:
            self._write({"pid": os.getpid(), "attempt": attempt(), "step": int(self.step_of() or 0), "phase": phase,
                         "where": "", "t": time.time(), "progress_t": time.time()})


_BEAT: Heartbeat | None = None


def poke() -> None:
    """Beat now (from the main thread): called on the first step of an attempt, so the launcher
    knows at once that this worker is past its start-up (whose timeout is much longer)."""
    if _BEAT is not None:
        _BEAT.beat()


def write_heartbeat(path: str | os.PathLike, doc: dict) -> None:
    """Replace a heartbeat file whole (a reader never sees half a file); a full disk loses one beat."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
    except OSError:
        pass


def read_heartbeat(path: str | os.PathLike) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


# ----- faults ----------------------------------------------------------------------------------
def inject(tr, rank: int, step: int, record) -> None:
    """Fire the scenario's fault at (fault_worker, fault_step), first attempt only. ``record(detail)``
    stores the 'fault' stage first (its time is the start of the detection clock)."""
    if tr.fault == "none" or step != tr.fault_step or rank != tr.fault_worker or attempt() != 0:
        return
    try:
        record({"kind": tr.fault, "rank": rank, "pid": os.getpid()})
    except Exception as exc:  # noqa: BLE001 - the fault happens even if the store is unreachable
        log.warning("the injected fault could not be recorded: %s: %s", type(exc).__name__, exc)
    if tr.fault == "raise":
        raise RuntimeError(f"injected fault: worker {rank} raised at step {step}")
    if tr.fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if tr.fault == "hang":
        while True:  # until someone kills this process
            time.sleep(3600)


# ----- checkpoints -----------------------------------------------------------------------------
def main_name(step: int) -> str:
    return f"step{step:06d}.pt"


def rank_name(step: int, rank: int) -> str:
    return f"step{step:06d}.rank{rank}.pt"


def latest_checkpoint(folder: Path) -> int | None:
    """The newest step with a complete main checkpoint in ``folder``."""
    steps = []
    for f in folder.glob("step*.pt"):
        stem = f.name[4:-3]
        if stem.isdigit():
            steps.append(int(stem))
    return max(steps) if steps else None


def save_atomic(obj, path: Path) -> None:
    import torch

    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def prune(folder: Path, keep: int = KEEP_CHECKPOINTS) -> None:
    """Keep the newest ``keep`` intermediate checkpoints (main and rank files)."""
    steps = sorted({int(f.name[4:10]) for f in folder.glob("step*.pt") if f.name[4:10].isdigit()})
    for s in steps[:-keep] if keep else steps:
        for f in folder.glob(f"step{s:06d}*.pt"):
            f.unlink(missing_ok=True)


def rank_state(trainer) -> dict:
    """This rank's own state at a checkpoint: what the owner's file does not hold."""
    st: dict = {"world": trainer.world, "step": trainer.step_no}
    s = trainer.sampler
    if s is not None:
        st["sampler_gen"] = s.gen.get_state()
        st["sampler_perm"] = s._perm.clone()
        st["sampler_pos"] = int(s._pos)
        if trainer.tr.exchange_share > 0:  # the task-level design's exchange changed the local samples
            st["sampler_x"], st["sampler_y"] = s.x.clone(), s.y.clone()
    if trainer.buffers:
        st["buffers"] = [b.detach().clone() for b in trainer.buffers]
    if trainer.opt is not None and trainer.tr.sync == "state_allreduce":
        st["optimizer"] = trainer.opt.state_dict()
    st.update(compression_state(trainer))
    return st


def _compressor(trainer):
    c = getattr(trainer, "compressed", None)
    return c.gc.compressor if c is not None else None


def _powersgd(trainer):
    c = getattr(trainer, "compressed", None)
    return c.gc.hook if c is not None and c.gc.kind == "powersgd" else None


def compression_state(trainer) -> dict:
    """This rank's compression memory: the error-feedback residual, Random-K's generator, PowerSGD's state."""
    from lab.compression.compressors import (  # imports torch (module docstring)
        ErrorFeedback,
        RandomK,
    )

    comp, st = _compressor(trainer), {}
    if (ps := _powersgd(trainer)) is not None:
        st["powersgd"] = ps.state_dict()
    if isinstance(comp, ErrorFeedback):
        if comp.residual is not None:
            st["ef_residual"] = comp.residual.clone()
        comp = comp.compressor
    if isinstance(comp, RandomK):
        st["randomk_gen"] = comp.generator.get_state()
    return st


def restore_rank_state(trainer, st: dict) -> None:
    import torch

    s = trainer.sampler
    if s is not None and "sampler_gen" in st:
        if "sampler_x" in st:
            s.replace_samples(st["sampler_x"], st["sampler_y"])
        s.gen.set_state(st["sampler_gen"])
        s._perm, s._pos = st["sampler_perm"], int(st["sampler_pos"])
    if "buffers" in st:
        with torch.no_grad():
            for b, v in zip(trainer.buffers, st["buffers"]):
                b.copy_(v)
    if "optimizer" in st and trainer.opt is not None:
        trainer.opt.load_state_dict(st["optimizer"])
    if "powersgd" in st and (ps := _powersgd(trainer)) is not None:
        ps.load_state_dict(st["powersgd"])
    comp = _compressor(trainer)
    if "ef_residual" in st and comp is not None:
        comp.residual = st["ef_residual"].clone()
        comp = comp.compressor
    if "randomk_gen" in st and comp is not None:
        comp.generator.set_state(st["randomk_gen"])


def load(path: Path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


__all__ = ["Heartbeat", "progressed", "planned_wait", "read_heartbeat", "attempt", "under_torchrun", "torchrun_restarts_left", "inject",
           "init_process_group", "latest_checkpoint", "main_name", "rank_name", "save_atomic", "prune",
           "rank_state", "restore_rank_state", "compression_state", "load", "main_thread_phase"]
