"""The work of one page view at the size caps (256 devices, 64 switches, 1,024 links) and for a long
run, before and after: prints a table of seconds (median of --repeat) and the ratio.

* all-pairs routes of a 256-device star, chain and 1,024-link mesh: the previous algorithm (one
  Dijkstra per source and bandwidth level, a Path for every pair; kept here only) against the
  route table (lab.scenario.routes), built afresh each time;
* the Topology page's lab calls at the caps (the layout, the heatmap and the CXL/PCIe comparison before
  and after, then the whole view with cold and warm caches: routes and layout are kept
  per topology value in the server process);
* the All-reduce page's lab calls with its default 64 devices, and the Placement page's link model
  (before: a route per device pair);
* the Compare page's comparison of one synthetic 90,000-step run with 2 workers (270,000 metric
  rows, written with the run store's own API): every row read (the previous compare_runs, kept
  here) against SQL aggregates and at most MAX_CURVE_POINTS points per curve; the same for the
  per-run summary; the loss figure's points.

    .venv/bin/python bench/bench_caps.py [--repeat 3] [--steps 90000] [--smoke]

``--smoke`` runs every row once on the star cut down to 16 devices and a 200-step run, in seconds: it
checks the bench still runs and measures nothing (the caps are the point of the real bench).
"""

from __future__ import annotations

import math
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import networkx as nx

from common import bench_parser, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)
from lab.figures import allreduce as afigs  # noqa: E402
from lab.figures import compare as cfigs  # noqa: E402
from lab.figures import topology as tfigs  # noqa: E402
from lab.jobs import comparison  # noqa: E402
from lab.jobs import variants  # noqa: E402
from lab.modelled import collectives as AR  # noqa: E402
from lab.modelled.datasheet import LinkCost  # noqa: E402
from lab.scenario import routes  # noqa: E402
from lab.scenario.catalogue import as_pcie  # noqa: E402
from lab.scenario.document import default_scenario  # noqa: E402
from lab.scenario.topology import Path as Route  # noqa: E402
from lab.scenario.topology import Topology  # noqa: E402
from lab.store.runs import JOB_WORKER, RunStore  # noqa: E402
from lab.testing import caps  # noqa: E402
from lab.testing.caps import summary_every_row  # noqa: E402
from lab.view import allreduce as arview  # noqa: E402
from lab.view import topology as topology_page  # noqa: E402
from lab.view.allreduce import model as arview_model  # noqa: E402
from lab.view import topology_tables as tables  # noqa: E402
from lab.view.state import ALLREDUCE_SIZES, VIEW  # noqa: E402


SMOKE_DEVICES = 16


def first_devices(topo: Topology, n: int) -> Topology:
    """``topo`` with its first ``n`` devices, every switch and the links among those: the smoke run's
    stand-in for a topology at the caps, whose previous routes alone take minutes."""
    devices = topo.devices[:n]
    nodes = {d.name for d in devices} | {s.name for s in topo.switches}
    links = tuple(l for l in topo.links if l.a in nodes and l.b in nodes)
    return Topology(topo.name, devices, links, topo.switches, topo.description).validate()


def mb(fig) -> float:
    return len(fig.to_json()) / 1e6


def seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ---- the previous route algorithm --------------------------------------------------------------

def previous_paths_from(topo: Topology, src: str) -> dict[str, Route]:
    """Widest paths from ``src`` as the lab computed them before: for each bandwidth level, from the
    highest down, a Dijkstra over the links at least that fast; a Path for every node."""
    g = topo.graph
    result = {src: Route((src,), (), math.inf, 0.0)}
    remaining = set(g.nodes) - {src}
    for level in sorted({l.bandwidth for l in topo.links}, reverse=True):
        if not remaining:
            break
        sub = nx.subgraph_view(g, filter_edge=lambda u, v, lv=level: g[u][v]["bandwidth"] >= lv)
        _, found = nx.single_source_dijkstra(sub, src, weight=lambda u, v, e: e["latency"] + 1e-15)
        for node in [n for n in remaining if n in found]:
            nodes = tuple(found[node])
            links = tuple(g[u][v]["link"] for u, v in zip(nodes, nodes[1:]))
            result[node] = Route(nodes, links, min(l.bandwidth for l in links), sum(l.latency for l in links))
            remaining.discard(node)
    return result


def previous_matrix(topo: Topology) -> None:
    names = topo.device_names
    for a in names:
        paths = previous_paths_from(topo, a)
        [paths[b].time(1e6) for b in names]


def fresh_table(topo: Topology) -> routes.RouteTable:
    g = topo.graph
    index = {n: i for i, n in enumerate(g.nodes)}
    return routes.RouteTable(tuple(g.nodes), [(index[u], index[v], e["bandwidth"], e["latency"])
                                              for u, v, e in g.edges(data=True)])


def topology_view(topo: Topology) -> None:
    """The Topology page's lab calls for one view (default transfer size, the PCIe comparison)."""
    nbytes = 10e6
    tfigs.network_figure(topo)
    tfigs.path_heatmap(topo.path_matrix(nbytes), nbytes)
    topology_page.route(topo, topo.device_names[0], topo.device_names[-1], 10.0, "")
    target = tables.comparison_target(topo, tables.AS_PCIE)
    if target is not None:
        df, _ = tables.compare_designs(topo, target[0], nbytes, ("this cluster", target[1]))
        tfigs.comparison_figure(df, nbytes)


def allreduce_view(topo: Topology) -> None:
    """The All-reduce page's lab calls for one view with its default devices (at most 64)."""
    names = AR.default_participants(topo)
    AR.given_ring_order(topo, names)
    best = AR.best_ring_order(topo, names)
    setup = AR.Setup(tuple(names), tuple(names.index(x) for x in best.names),
                     tuple(map(tuple, AR.topology_groups(topo, names))), AR.default_host(topo, names))
    nbytes = 1 << 20
    afigs.step_figure(setup.schedule("ring", nbytes, with_state=True), 1, "ring")
    AR.schedule_time(setup.schedule("ring", nbytes), topo)
    AR.compare_algorithms(topo, setup, nbytes)
    curves = {x: (x, setup) for x in AR.ALGORITHMS}
    curves["ring (lab order)"] = ("ring", setup)
    AR.sweep_sizes(topo, curves, list(ALLREDUCE_SIZES))
    AR.sweep_devices(topo, curves, nbytes)
    compute = AR.compute_times(topo, names, 1e9)
    for mode in ("sync", "async"):
        AR.trigger_timeline(setup.schedule("ring", nbytes), topo, compute, mode)


def shared_allreduce_view(topo: Topology) -> None:
    """The All-reduce page's view model for one view with its default devices, through the orders and sweeps
    that sessions share per cluster value (the work of :func:`allreduce_view`)."""
    v = {k: VIEW[k].setting.default for k in VIEW if k.startswith("ar_")} | {
        "ar_devices": tuple(AR.default_participants(topo)), "ar_size": 1 << 20}
    m = arview.prepare(v, topo)
    afigs.step_figure(m.schedule, 1, "ring")
    arview.timing(m)
    arview.trigger(m, arview.compute(m, 1.0))


def sessions_at_once(view, topo: Topology, n: int) -> tuple[float, float]:
    """``n`` sessions opening ``view`` at the same moment, each on its own copy of ``topo`` (as a link gives it):
    (wall seconds until the last is done, the 95th percentile of one session's seconds)."""
    start, took = threading.Barrier(n), []

    def session() -> None:
        mine = Topology.from_json(topo.to_json())
        start.wait()
        t0 = time.perf_counter()
        view(mine)
        took.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=session) for _ in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, float(statistics.quantiles(took, n=20)[-1]) if n > 1 else took[0]


def previous_link_cost(topo: Topology) -> None:
    """The placement's link model as it was built before: a route per device pair."""
    for a in topo.device_names:
        for b in topo.device_names:
            if a != b:
                p = topo.path(a, b)
                (p.latency, 1.0 / p.bottleneck)


def clear_caches() -> None:
    routes._tables.clear()
    tfigs._positions.cache_clear()
    arview_model._ORDERS.clear()
    arview_model._SWEEPS.clear()


# ---- the previous comparison (every metric row read) -------------------------------------------------

def previous_compare(store: RunStore, ids: list[str], target: float) -> comparison.Comparison:
    runs = [store.get_run(r) for r in ids]
    m = store.metrics(ids)
    results, loss, acc = {}, [], []
    for run in runs:
        s = variants.settings_of(run["scenario"])
        mm = m[m.run_id == run["id"]]
        job, per = mm[mm.worker == JOB_WORKER], mm[mm.worker != JOB_WORKER]
        results[variants.short_label(s)] = [comparison.run_result(run["id"], job, per, target, int(s.get("workers") or 1))]
        common = dict(label=variants.short_label(s), hover=variants.full_label(s), optimizer=str(s.get("optimizer")),
                      compression=variants.compression_label(s), repeats=1)
        loss.append(comparison.VariantCurve(band=comparison.band([job], "step", "loss"), **common))
        acc.append(comparison.VariantCurve(band=comparison.band([job], "step", "test_acc"), **common))
    rows = comparison.summary_rows(results, None, target)
    return comparison.Comparison(runs, loss, acc, rows, comparison.verdicts(rows))


def long_run(store: RunStore, steps: int) -> str:
    sc = default_scenario()
    sc = sc.replace(training=sc.training.replace(workers=2, steps=steps))
    rid = store.create_run(sc, status="done")
    rng = random.Random(0)
    rows = []
    for s in range(1, steps + 1):
        acc = 0.1 + 0.85 * s / (s + 5000) if s % 100 == 0 else None
        rows.append((s, JOB_WORKER, 2.0 / s ** 0.3 + rng.uniform(0, 0.05), acc, None, None, None, None, None, None,
                     None, None, 100.0, s * 0.01))
        for w in range(2):
            rows.append((s, w, None, None, 1000.0, 1000.0, 0.005, 0.003, 0.0, 0.0, 0.0, 0.0, 50.0, s * 0.01))
    store.add_metric_rows(rid, rows)
    return rid


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=90_000)
    ap.add_argument("--shapes", default="star,chain,mesh", help="of lab.testing.caps (the mesh's previous "
                                                               "routes take about ten minutes)")
    a = ap.parse_args()
    if a.smoke:
        a.repeat, a.steps, a.shapes = 1, 200, "star"
        print(SMOKE_NOTE)
    shapes = a.shapes.split(",")

    def cap_topology(shape: str) -> Topology:
        topo = caps.cap_topology(shape)
        return first_devices(topo, SMOKE_DEVICES) if a.smoke else topo

    rows = []
    # The last line scores what the table of docs/measurements.md quotes: the routes, the sessions at once and the comparison.
    scored = []

    def row(what: str, before: float | None, after: float, note: str = "") -> None:
        rows.append([what, f"{before:.3f}" if before is not None else "—", f"{after:.3f}",
                     f"{before / after:,.0f}×" if before is not None and after > 0 else "—", note])

    for shape in shapes:
        topo = cap_topology(shape)
        before = seconds(lambda: previous_matrix(topo), 1)
        after = seconds(lambda: fresh_table(topo), a.repeat)
        row(f"all-pairs routes, {shape} ({len(topo.devices)} dev, {len(topo.links)} links)", before, after,
            "previous: once; every link its own bandwidth")
        scored.append((f"routes {shape}", after, "s", 3))
    for shape in shapes:
        topo = cap_topology(shape)
        g = topo.graph
        before = seconds(lambda: nx.kamada_kawai_layout(g), 1)
        after = seconds(lambda: tfigs._positions.__wrapped__(tuple(g.nodes), tuple(g.edges), 7), a.repeat)
        row(f"Topology drawing layout, {shape}", before, after, "Kamada–Kawai → spring layout above 40 nodes")
        m = topo.path_matrix(10e6)
        limit = tfigs.HOVER_TEXT_MAX
        tfigs.HOVER_TEXT_MAX = 10 ** 6  # the previous heatmap: a hover sentence per cell
        before, size_before = seconds(lambda: tfigs.path_heatmap(m, 10e6), 1), mb(tfigs.path_heatmap(m, 10e6))
        tfigs.HOVER_TEXT_MAX = limit
        after = seconds(lambda: tfigs.path_heatmap(m, 10e6), a.repeat)
        row(f"Topology heatmap, {shape}", before, after,
            f"figure {size_before:.1f} → {mb(tfigs.path_heatmap(m, 10e6)):.1f} MB")
        other = as_pcie(topo)

        def every_pair():
            df = tables.transfer_comparison({"mine": topo, "pcie": other}, 10e6,
                                            [d.name for d in topo.devices if d.type == "cpu"])
            return df, tfigs.comparison_figure(df, 10e6)

        def bounded():
            df, _ = tables.compare_designs(topo, other, 10e6, ("mine", "pcie"))
            return df, tfigs.comparison_figure(df, 10e6)

        before, after = seconds(every_pair, 1), seconds(bounded, a.repeat)
        (df0, f0), (df1, f1) = every_pair(), bounded()
        row(f"Topology CXL/PCIe comparison, {shape}", before, after,
            f"{len(df0) // 2:,} → {len(df1) // 2} pairs drawn, {mb(f0):.1f} → {mb(f1):.2f} MB")
    for shape in shapes:
        topo = cap_topology(shape)
        cold = []
        for _ in range(a.repeat):
            clear_caches()
            t0 = time.perf_counter()
            topology_view(cap_topology(shape))  # a new session's copy of the topology
            cold.append(time.perf_counter() - t0)
        warm = seconds(lambda: topology_view(cap_topology(shape)), a.repeat)
        row(f"Topology page lab calls, {shape}: first view / later view", statistics.median(cold), warm,
            "routes and layout kept per topology value")

    n = 2 if a.smoke else 10  # sessions opening the All-reduce view at once
    for shape in shapes:
        topo = cap_topology(shape)
        row(f"All-reduce page lab calls, {shape}, 64 devices", None, seconds(lambda: allreduce_view(topo), a.repeat),
            "ring search, step-through, sweeps, trigger")
        before = seconds(lambda: previous_link_cost(topo), 1)
        row(f"Placement link model, {shape}", before, seconds(lambda: LinkCost(topo), a.repeat),
            "a Path per device pair → the route table's matrices")
        clear_caches()
        before, p95_before = sessions_at_once(allreduce_view, topo, n)
        clear_caches()
        after, p95_after = sessions_at_once(shared_allreduce_view, topo, n)
        row(f"All-reduce view, {n} sessions at once, {shape}: until the last is done", before, after,
            f"one session's p95 {p95_before:.2f} → {p95_after:.2f} s: orders and sweeps computed once per cluster")
        scored += [(f"sessions at once {shape}", after, "s", 1),
                   (f"sessions own/shared {shape}", before / after, "x", 1)]

    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore(Path(tmp) / "runs.db", Path(tmp))
        t0 = time.perf_counter()
        rid = long_run(store, a.steps)
        written = time.perf_counter() - t0
        n_rows = len(store.metrics(rid, worker=JOB_WORKER)) * 3
        before = seconds(lambda: previous_compare(store, [rid], 0.9), a.repeat)
        after = seconds(lambda: comparison.compare_runs(store, [rid], 0.9), a.repeat)
        old, new = previous_compare(store, [rid], 0.9), comparison.compare_runs(store, [rid], 0.9)
        same = all(old.rows[0][k] == new.rows[0][k] for k in old.rows[0]
                   if not k.startswith("_") and k != "bytes vs dense")  # the previous one here skips dense
        row(f"Compare: compare_runs, {a.steps:,}-step run ({n_rows:,} rows)", before, after,
            f"summary numbers equal: {same}")
        scored.append(("compare_runs", after, "s", 3))
        fb = seconds(lambda: cfigs.band_figure(old.loss, "step", "loss", "loss"), a.repeat)
        fa = seconds(lambda: cfigs.band_figure(new.loss, "step", "loss", "loss"), a.repeat)
        row("Compare: loss figure", fb, fa, f"{len(old.loss[0].band):,} → {len(new.loss[0].band):,} points, "
            f"{mb(cfigs.band_figure(old.loss, 'step', 'loss', 'loss')):.2f} → "
            f"{mb(cfigs.band_figure(new.loss, 'step', 'loss', 'loss')):.2f} MB")
        sb = seconds(lambda: summary_every_row(store, [rid]), a.repeat)
        sa = seconds(lambda: store.summary([rid]), a.repeat)
        row("Compare: per-run summary (expander)", sb, sa, "RunStore.summary → SQL aggregates")
        eb = seconds(lambda: comparison.export_frame(new.runs, store.metrics([rid])).to_csv(index=False), 1)
        row("Compare: 'every step' CSV", eb, 0.0, "now built only when the button is clicked")
    print(f"seconds, median of {a.repeat} (the previous route algorithm and the CSV: once); "
          f"{a.steps:,}-step run written in {written:.1f} s")
    print(table(["per-view work at the caps", "before s", "after s", "ratio", "note"], rows))
    if a.smoke:
        print(SMOKE_NOTE)
    score("caps", [("sessions", n), *scored])


if __name__ == "__main__":
    main()
