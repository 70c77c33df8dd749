"""Topologies at the lab's size caps (256 devices, 64 switches, 1,024 links), for the tests and
benches that check what each page computes there stays bounded; and the run summary read row by row, the
reference for the one SQLite computes."""
from __future__ import annotations

import math
import random

from lab.scenario.catalogue import LINK_CATALOGUE, catalogue_device
from lab.scenario.topology import DEVICE_TYPES, MAX_DEVICES, MAX_LINKS, MAX_SWITCHES, Link, Switch, Topology

SHAPES = ("star", "chain", "mesh")


def cap_topology(shape: str, *, distinct: bool = True, seed: int = 0) -> Topology:
    """A valid topology of ``shape`` at the caps, its devices ``d000``… of every type in turn.

    * "star": every device on one switch ``hub`` (256 links);
    * "chain": the devices in a line (255 links), so routes are up to 255 hops long;
    * "mesh": every device on one of 64 switches, the switches in a ring, and random links
      between any two nodes up to 1,024 links.

    With ``distinct`` every link has its own bandwidth (each one a bandwidth level of its own, the
    case a search per level pays most for); otherwise the bandwidths are the catalogue's few."""
    rng = random.Random(seed)
    devices = tuple(catalogue_device(f"d{i:03d}", DEVICE_TYPES[i % len(DEVICE_TYPES)]) for i in range(MAX_DEVICES))
    names = [d.name for d in devices]
    kinds = list(LINK_CATALOGUE)

    def link(a: str, b: str, k: int) -> Link:
        kind = kinds[k % len(kinds)]
        bw, lat, _ = LINK_CATALOGUE[kind]
        if distinct:
            bw = bw * (1.0 + k / 4096)
        return Link(a, b, kind, bw, lat * (1 + rng.randrange(4)))

    if shape == "star":
        switches = (Switch("hub"),)
        links = [link(n, "hub", k) for k, n in enumerate(names)]
    elif shape == "chain":
        switches = ()
        links = [link(a, b, k) for k, (a, b) in enumerate(zip(names, names[1:]))]
    elif shape == "mesh":
        switches = tuple(Switch(f"s{i:02d}") for i in range(MAX_SWITCHES))
        sw = [s.name for s in switches]
        pairs = [(n, sw[i % len(sw)]) for i, n in enumerate(names)]
        pairs += [(a, b) for a, b in zip(sw, sw[1:] + sw[:1])]
        seen = {frozenset(p) for p in pairs}
        nodes = names + sw
        while len(pairs) < MAX_LINKS:
            a, b = rng.sample(nodes, 2)
            if frozenset((a, b)) not in seen:
                seen.add(frozenset((a, b)))
                pairs.append((a, b))
        links = [link(a, b, k) for k, (a, b) in enumerate(pairs)]
    else:
        raise ValueError(f"no shape {shape!r}; shapes: {SHAPES}")
    return Topology(f"cap-{shape}", devices, tuple(links), switches,
                    f"{shape} at the size caps ({len(devices)} devices, {len(switches)} switches, "
                    f"{len(links)} links)").validate()


def summary_every_row(store, run_ids):
    """:meth:`lab.store.runs.RunStore.summary` the way it was before SQLite computed it: every metric
    row read into pandas. The reference its tests compare with, and the bench's "before"."""
    import pandas as pd

    from lab.store.runs import JOB_WORKER

    out = []
    for rid in run_ids:
        run = store.get_run(rid)
        tr = run["scenario"].get("training", {})
        m = store.metrics(rid)
        job, per = m[m.worker == JOB_WORKER], m[m.worker != JOB_WORKER]
        acc = job.test_acc.dropna()
        row = {"id": rid, "name": run["name"], "status": run["status"], "optimizer": tr.get("optimizer"),
               "sync": tr.get("sync"), "workers": tr.get("workers"), "emulate": tr.get("emulate"),
               "steps": int(job.step.max()) if len(job) else 0,
               "final_loss": float(job.loss.dropna().iloc[-1]) if job.loss.notna().any() else math.nan,
               "final_test_acc": float(acc.iloc[-1]) if len(acc) else math.nan,
               "best_test_acc": float(acc.max()) if len(acc) else math.nan,
               "wall_s": float(job.wall.max()) if len(job) else math.nan,
               "bytes_sent": float(per.bytes_sent.sum()) if len(per) else 0.0,
               "bytes_recv": float(per.bytes_recv.sum()) if len(per) else 0.0}
        for k in ("t_compute", "t_comm", "t_compress", "t_idle", "t_emul_compute", "t_emul_comm"):
            row[k] = float(per.groupby("worker")[k].sum().mean()) if len(per) else math.nan
        out.append(row)
    return pd.DataFrame(out)
