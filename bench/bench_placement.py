"""Speed of the placement core: greedy EFT and HEFT on a 2,000-operator random DAG over 16 devices,
and the contiguous chain partition (DP) on 200 layers over 8 devices.

    .venv/bin/python bench/bench_placement.py [--tasks 2000] [--devices 16] [--layers 200]
                                              [--chain-devices 8] [--rounds 3] [--seed 0] [--smoke]

The DAG: every operator gets a random class and FLOPs and 1-3 inputs among the 40 operators before
it; the 16 devices are catalogue devices (CPUs, GPUs, FPGAs, ASICs, DPUs: some lack kernels) on
two CXL switches joined by a fabric switch, so transfer times depend on the device pair
(lab.modelled.datasheet.LinkCost). Peers measured in the same run, on the same inputs:

* ``networkx.topological_sort`` of the same DAG (a floor: any list scheduler visits every edge);
* a naive greedy EFT in plain Python (per device, per input, one ``link_time`` call);
* a naive chain DP in plain Python (the same O(M^2 L + M L^2) recurrence, no numpy), which must
  give the same bottleneck.

Candidates take turns round after round so a noisy neighbour slows them alike; medians. Target:
each of greedy, HEFT and the chain DP well under a second.
"""

from __future__ import annotations

import math
import random
import statistics
import time

import networkx as nx
import numpy as np

from common import bench_parser, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)

from lab.modelled.datasheet import LinkCost  # noqa: E402
from lab.modelled.placement import TaskGraph, greedy_eft, heft, partition_chain  # noqa: E402
from lab.scenario.catalogue import catalogue_device, catalogue_link  # noqa: E402
from lab.scenario.topology import OP_CLASSES, Switch, Topology  # noqa: E402


def cluster(m: int) -> Topology:
    types = ["cpu", "gpu", "fpga", "gpu", "asic", "dpu", "cpu", "fpga"]
    devs = [catalogue_device(f"d{i}-{types[i % len(types)]}", types[i % len(types)], f"pool{i % 2}")
            for i in range(m)]
    sws = (Switch("sw0"), Switch("sw1"), Switch("fabric"))
    links = [catalogue_link(d.name, f"sw{i % 2}", "cxl") for i, d in enumerate(devs)]
    links += [catalogue_link("sw0", "fabric", "switch"), catalogue_link("sw1", "fabric", "switch")]
    return Topology("bench", tuple(devs), tuple(links), sws).validate()


def random_dag(n: int, topo: Topology, seed: int) -> TaskGraph:
    rng = random.Random(seed)
    compute, transfer = {}, {}
    for i in range(n):
        cls = rng.choice(OP_CLASSES)
        flops = rng.uniform(1e6, 1e9)
        row = {d.name: flops / d.throughput[cls] for d in topo.devices if cls in d.throughput}
        compute[f"op{i}"] = row
        for p in rng.sample(range(max(0, i - 40), i), min(i, rng.randint(1, 3))):
            transfer[(f"op{p}", f"op{i}")] = rng.uniform(1e3, 1e7)  # bytes
    return TaskGraph(compute, transfer, LinkCost(topo), devices=topo.device_names)


def naive_greedy(g: TaskGraph) -> float:
    """Seed B's S2 with scalar Python loops and one link_time call per (device, input)."""
    index = {t: i for i, t in enumerate(g.tasks)}
    dag = nx.DiGraph(list(g.transfer))
    dag.add_nodes_from(g.tasks)
    order = list(nx.lexicographical_topological_sort(dag, key=index.__getitem__))
    comp = g.compute
    avail = dict.fromkeys(g.devices, 0.0)
    where, fin = {}, {}
    preds: dict = {t: [] for t in g.tasks}
    for (u, v), b in g.transfer.items():
        preds[v].append((u, b))
    for t in order:
        best = (math.inf, None)
        for d in g.devices:
            c = comp[t].get(d, math.inf)
            if not math.isfinite(c):
                continue
            r = 0.0
            for u, b in preds[t]:
                r = max(r, fin[u] + (0.0 if where[u] == d else g.link_time(where[u], d, b)))
            f = max(avail[d], r) + c
            if f < best[0]:
                best = (f, d)
        fin[t], where[t] = best
        avail[best[1]] = best[0]
    return max(fin.values())


def naive_chain(times: np.ndarray, cut: np.ndarray) -> float:
    L, M = times.shape
    T, C = times.tolist(), cut.tolist()
    f = [[math.inf] * (L + 1) for _ in range(M)]
    for j in range(M):
        h = [math.inf] * (L + 1)
        h[0] = 0.0
        for ip in range(1, L):
            for jp in range(j):
                h[ip] = min(h[ip], max(f[jp][ip], C[ip - 1][jp][j]))
        for i in range(1, L + 1):
            s = 0.0
            for ip in range(i - 1, -1, -1):
                s += T[ip][j]
                f[j][i] = min(f[j][i], max(s, h[ip]))
    return min(f[j][L] for j in range(M))


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--devices", type=int, default=16)
    ap.add_argument("--layers", type=int, default=200)
    ap.add_argument("--chain-devices", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.smoke:  # enough devices for every kind of the catalogue's mix, a few layers per device
        a.tasks, a.devices, a.layers, a.chain_devices, a.rounds = 50, 8, 12, 3, 1

    topo = cluster(a.devices)
    build_s, g = timed(lambda: random_dag(a.tasks, topo, a.seed))
    nxg = nx.DiGraph(list(g.transfer))
    nxg.add_nodes_from(g.tasks)
    rng = np.random.default_rng(a.seed)
    times = rng.uniform(1e-4, 1e-3, (a.layers, a.chain_devices))
    times[rng.random(times.shape) < 0.1] = math.inf  # no kernel
    times[:, -1] = rng.uniform(1e-4, 1e-3, a.layers)  # the last device runs everything: always feasible
    cut = rng.uniform(0, 5e-4, (a.layers - 1, a.chain_devices, a.chain_devices))

    cands = {
        "networkx.topological_sort (peer)": lambda: list(nx.topological_sort(nxg)),
        "naive greedy EFT, plain Python (peer)": lambda: naive_greedy(g),
        "greedy_eft": lambda: greedy_eft(g).makespan,
        "heft": lambda: heft(g).makespan,
        "naive chain DP, plain Python (peer)": lambda: naive_chain(times, cut),
        "partition_chain (numpy DP)": lambda: partition_chain(times, cut)[0],
    }
    samples: dict[str, list[float]] = {k: [] for k in cands}
    results: dict[str, object] = {}
    for _ in range(a.rounds):
        for name, fn in cands.items():
            dt, out = timed(fn)
            samples[name].append(dt)
            results[name] = out
    med = {k: statistics.median(v) for k, v in samples.items()}
    assert abs(results["greedy_eft"] - results["naive greedy EFT, plain Python (peer)"]) <= 1e-12 * results["greedy_eft"]
    assert math.isclose(results["partition_chain (numpy DP)"], results["naive chain DP, plain Python (peer)"],
                        rel_tol=1e-9)

    if a.smoke:
        print(SMOKE_NOTE)
    print(f"DAG: {a.tasks} operators, {len(g.transfer)} edges, {a.devices} devices "
          f"(TaskGraph built in {build_s:.3f} s); chain: {a.layers} layers x {a.chain_devices} devices; "
          f"median of {a.rounds} rounds\n")
    topo_s = med["networkx.topological_sort (peer)"]
    rows = []
    for name in cands:
        if "chain" in name.lower():
            peer, peer_name = med["naive chain DP, plain Python (peer)"], "naive chain DP"
        else:
            peer, peer_name = topo_s, "nx topo sort"
        rows.append([name, f"{med[name]:.4f}", f"{med[name] / peer:.2f}x {peer_name}",
                     f"{results[name]:.6g}" if isinstance(results[name], float) else "-"])
    print(table(["candidate", "seconds", "ratio to peer", "makespan / bottleneck (s)"], rows))
    print(f"\ngreedy_eft / naive greedy: {med['greedy_eft'] / med['naive greedy EFT, plain Python (peer)']:.2f}x; "
          f"target: greedy, HEFT and the chain DP each under 1 s -> "
          + ("met" if max(med['greedy_eft'], med['heft'], med['partition_chain (numpy DP)']) < 1.0 else "NOT met"))
    chain, naive = med["partition_chain (numpy DP)"], med["naive greedy EFT, plain Python (peer)"]
    score("placement", [("greedy_eft", med["greedy_eft"], "s", 4), ("heft", med["heft"], "s", 4),
                        ("partition_chain", chain, "s", 4), ("greedy_eft/naive greedy", med["greedy_eft"] / naive, "x"),
                        ("partition_chain/naive chain DP", chain / med["naive chain DP, plain Python (peer)"], "x")])


if __name__ == "__main__":
    main()
