"""A job's layout, decided before any process starts: the workers and a parameter server, each rank's device, batch sizes and learning rate, the emulation; checking a Scenario against it."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lab.errors import LabError
from lab.optim.optimizers import from_training as optim_from_training
from lab.scenario.document import Scenario, Training
from lab.scenario.models import model_of
from lab.train import compressed
from lab.train import data as data_mod
from lab.train import emulation as emu

IDLE_DEFINITION = ("idle = latest 'ready to communicate' wall-clock stamp among the workers minus this "
                   "worker's own stamp, capped at its time in the collective; comm = the rest")


@dataclass
class JobLayout:
    """What every rank works out, identically, from the scenario and the world size."""

    training: Training
    world: int
    workers: int
    server: int | None  # rank of the parameter server, if any
    lr: float
    batch_sizes: list[int]
    emulation: emu.Emulation | None
    server_device: str | None
    op_class: str
    info: dict = field(default_factory=dict)


def job_layout(sc: Scenario, world: int, model: torch.nn.Module, in_features: int) -> JobLayout:
    tr = sc.training
    ps = tr.sync == "param_server"
    workers = world - 1 if ps else world
    if workers < 1:
        raise LabError("param_server mode needs at least 2 processes (1 worker and the server)", where="training.sync")
    if workers != tr.workers:
        tr = tr.replace(workers=workers)  # under torchrun the world size decides
    op = emu.dominant_op_class(model, in_features)
    em = None
    if tr.emulate or tr.split == "weighted":
        if not tr.worker_devices:
            raise LabError("map every worker to a device of the topology first (training.worker_devices): "
                           + ("emulation" if tr.emulate else "a weighted split") + " needs each worker's device",
                           where="training.worker_devices")
        sc.check_devices()
        em = emu.worker_devices(sc.topology, tr.worker_devices, workers, op)
    server_dev = emu.server_device(sc.topology, tr.worker_devices, workers) if (ps and tr.emulate) else None
    weights = em.shares if (em is not None and tr.split == "weighted") else None
    sizes = data_mod.batch_sizes(tr.batch_size, workers, tr.split, weights)
    compressed.check(tr, sum(p.numel() for p in model.parameters() if p.requires_grad))
    lr = tr.lr * (workers if tr.lr_scaling else 1)
    return JobLayout(tr, world, workers, workers if ps else None, lr, sizes, em if tr.emulate else None,
                server_dev, op, {"weights": weights, "compute_shares_from": list(em.devices) if em else None})


def check_scenario(sc: Scenario) -> JobLayout:
    """Everything a job would refuse, checked in this process before any worker starts, with the
    very steps a worker's setup takes (:meth:`lab.train.trainer.Trainer.setup`): the data set and the
    model, the layout (devices and their kernels for emulation, compute shares, batch sizes, the
    compression), the optimiser, and that every worker gets data."""
    tr = sc.training
    ds = data_mod.load_dataset(tr.dataset, tr.dataset_size, tr.seed)
    model = model_of(tr, ds.in_features, ds.classes)
    layout = job_layout(sc, tr.workers + (1 if tr.sync == "param_server" else 0), model, ds.in_features)
    optim_from_training(layout.training, [p for p in model.parameters() if p.requires_grad], layout.lr)
    data_mod.make_shards(ds.y_train, layout.workers, tr.split, weights=layout.info["weights"], alpha=tr.dirichlet_alpha,
                         seed=tr.seed)
    return layout
