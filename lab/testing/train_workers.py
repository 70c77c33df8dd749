"""Workers that benches spawn around the training job (spawned processes import them from here)."""
from __future__ import annotations

import json
import os
import time

from lab.comm.spawn import init_worker
from lab.scenario.catalogue import preset
from lab.scenario.document import Scenario, Training
from lab.train.trainer import Trainer


def paired_bench_worker(rank: int, world: int, port: int, out_dir: str, config: dict) -> None:
    """One rank of the paired benchmark: for each optimiser, the job's own Trainer (setup and the
    gradient all-reduce step, exactly as a run does) once per variant in ``config["variants"]``
    (name -> Compression dict), all in these processes, taking turns **step by step** (the order
    alternates every step), so every variant sees the same machine load. Per variant: wall time of
    each step on this rank, bytes, compression time, emulated link time, and at the end the test
    accuracy and the parameter checksum. Writes ``paired<rank>.json``."""
    init_worker(rank, world, port, timeout_s=120.0)
    import torch.distributed as dist

    out: dict = {}
    try:
        for opt in config["optimisers"]:
            trainers = {}
            for name, comp in config["variants"].items():
                tr = Training.from_dict({**config["training"], "optimizer": opt, "compression": comp})
                sc = Scenario(config.get("name", "bench"), preset(config["preset"]), tr)
                t = Trainer(sc, rank, world, None, None, launched=False)
                t.setup()
                trainers[name] = t
            names = list(trainers)
            rec = {n: {"dt": [], "sent": [], "recv": [], "t_compress": [], "emul_comm": []} for n in names}
            dist.barrier()
            for step in range(config["steps"]):
                for n in (names if step % 2 == 0 else names[::-1]):
                    t0 = time.perf_counter()
                    res = trainers[n].sync.step_allreduce()
                    rec[n]["dt"].append(time.perf_counter() - t0)
                    rec[n]["sent"].append(res.bytes_sent)
                    rec[n]["recv"].append(res.bytes_recv)
                    rec[n]["emul_comm"].append(res.t_emul_comm)
                    rec[n]["t_compress"].append(trainers[n].sync.t_compress)
            for n, t in trainers.items():
                rec[n]["test_acc"] = t.evaluate()
                rec[n]["checksum"] = t.checksum()
                rec[n]["lr"] = t.layout.lr
            out[opt] = rec
        dist.barrier()
    except Exception as exc:  # noqa: BLE001 - reported to the bench
        out = {"error": f"rank {rank}: {type(exc).__name__}: {exc}"}
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"paired{rank}.json"), "w") as f:
        json.dump(out, f)
