"""Bring your own model, take away a report: how long each architecture offered (the presets, torchvision's zoo)
and an ONNX file of a preset take from choice (or upload) to their operator graph, to every strategy's placement,
to the first measured step of a real placement run, and how long the Placement view's report takes and weighs.

    .venv/bin/python bench/bench_models.py [--smoke]

**Peers, measured in the same run.** The graph beside torch's own floor for the same question (``torch.fx`` and
torch's FLOP counter on the built model); the first step beside the same model's first training step in one
process started the same way; the report beside plotly's own self-contained HTML of the same figures (each file
carrying plotly.js).

Every step starts from a fresh process where a person would pay for one (the first step: two processes over
gloo, started as the job's are); the graph and the placements are timed in this process after the model's first
build, as the Placement page pays for them on a choice.

The last line: ``models: architectures <n>, onnx networks <n>, slowest graph <s> s, slowest first step <s> s, report
<s> s, report size <mb> MB``, where the slowest graph is the longest time from choice to the operator graph and every
strategy's plan.
"""
from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from common import bench_parser, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)

import torch  # noqa: E402

from lab.comm.spawn import run_local  # noqa: E402
from lab.modelled.opgraph import reference_flops, trace  # noqa: E402
from lab.modelled.placement import STRATEGIES  # noqa: E402
from lab.scenario import onnx_models  # noqa: E402
from lab.scenario.catalogue import preset  # noqa: E402
from lab.scenario.document import Scenario, Training, default_scenario  # noqa: E402
from lab.scenario.models import build_model, graph_of  # noqa: E402
from lab.scenario.names import MODELS  # noqa: E402
from lab.testing.plan_workers import first_step_worker, one_process_first_step  # noqa: E402
from lab.train.placement_run import resolve  # noqa: E402

BATCH = 32


def onnx_file(name: str) -> bytes:
    m = build_model(name, 64, 10)
    buf = io.BytesIO()
    torch.onnx.export(m, (torch.zeros(2, 64),), buf, input_names=["x"], output_names=["y"], dynamo=False,
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17, do_constant_folding=False)
    return buf.getvalue()


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def graph_times(name: str, blob: bytes | None) -> tuple[str, float, float, int]:
    """(model name, seconds from choice or upload to the operator graph, torch's floor for it, operators)."""
    if blob is not None:
        info, t_keep = timed(lambda: onnx_models.keep(blob, f"{name}.onnx"))
        name = info.name
    else:
        t_keep = 0.0
    g, t_graph = timed(lambda: trace(name, BATCH))

    def floor():
        m = build_model(name, 64, 10)
        graph_of(m)
        reference_flops(m, BATCH)

    _, t_floor = timed(floor)
    return name, t_keep + t_graph, t_floor, len(g)


def placement_time(name: str) -> float:
    """Every strategy's plan of the model on the CXL preset, as the Placement page makes them."""
    model = build_model(name, 64, 10)
    t0 = time.perf_counter()
    for strategy in STRATEGIES:
        sc = Scenario("bench", preset("cxl"), Training(model=name, parallel="placement", batch_size=BATCH,
                                                       strategy=strategy))
        resolve(sc, model, 64)
    return time.perf_counter() - t0


def first_step(name: str, out: Path) -> tuple[float, float]:
    """(seconds from start to the end of the first step of a 2-process placement run, the same for one process
    training the whole model)."""
    ops = trace(name, BATCH).names
    plan = {op: ("gpu" if i < len(ops) // 2 else "host") for i, op in enumerate(ops)}  # both have every kernel
    sc = Scenario("bench", preset("cxl"), Training(model=name, parallel="placement", batch_size=BATCH,
                                                   micro_batches=2, steps=1, placement=plan))
    t0 = time.time()
    run_local(first_step_worker, 2, (sc.to_json(), str(out)), timeout_s=600)
    ends = [json.loads((out / f"first{r}.json").read_text())["end"] for r in range(2)]
    t1 = time.time()
    run_local(one_process_first_step, 1, (sc.to_json(), str(out)), timeout_s=600)
    one = json.loads((out / "one0.json").read_text())["end"]
    return max(ends) - t0, one - t1


def report(name: str) -> tuple[float, float, float]:
    """(seconds to build the Placement view's report of the model, its MB, seconds for plotly's own files)."""
    from lab.figures import build
    from lab.report import render
    from lab.report.about import about
    from lab.view import placement as view
    from lab.view.state import VIEW

    v = {k: VIEW[k].setting.default for k in (*view.PLAN_CONTROLS, "pl_cost")} | {"pl_model": name}
    t0 = time.perf_counter()
    sc = default_scenario()
    pv = view.PlacementView.build(sc, v)
    sections = [*pv.plan(), *pv.assignment(), pv.comparison()]
    page = render(about("Placement", "placement", "http://localhost:8501/placement", v, sc), sections)
    t_report = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in sections:
        fig = build(s.chart, s.chart_input)
        if fig is not None:
            fig.to_html(full_html=True, include_plotlyjs=True)
    return t_report, len(page.encode()) / 1e6, time.perf_counter() - t0


def main() -> None:
    ap = bench_parser(__doc__, smoke="the MLP, a small ViT and the MLP's ONNX file; seconds")
    a = ap.parse_args()
    names = ["mlp", "vit_small"] if a.smoke else list(MODELS)
    if a.smoke:
        print(SMOKE_NOTE)
    os.environ.setdefault("LAB_DATA", tempfile.mkdtemp(prefix="bench-models-"))
    cases = [(n, None) for n in names] + [("mlp" if a.smoke else "cnn", onnx_file("mlp" if a.smoke else "cnn"))]
    trace("mlp", BATCH)  # the first trace loads what every later one uses, once per server process
    rows, slow_graph, slow_step = [], 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, blob in cases:
            shown = f"{name} (ONNX file)" if blob is not None else name
            build_model(name, 64, 10)  # the first build pays for imports, as the page's first view does
            model, t_graph, t_floor, n_ops = graph_times(name, blob)
            t_place = placement_time(model)
            if a.smoke and (model == "vit_small" or blob is not None):
                # the smoke run starts processes for one model only (the suite runs an uploaded network cut in
                # two processes in its own tests)
                t_step, t_one = float("nan"), float("nan")
            else:
                t_step, t_one = first_step(model, Path(tmp))
            slow_graph = max(slow_graph, t_graph + t_place)
            slow_step = max(slow_step, t_step if t_step == t_step else 0.0)
            rows.append([shown, n_ops, f"{t_graph:.2f}", f"{t_floor:.2f}", f"{t_graph / t_floor:.1f}x",
                         f"{t_place:.2f}", f"{t_step:.1f}", f"{t_one:.1f}",
                         f"{t_step / t_one:.1f}x" if t_one == t_one else "-"])
        print(table(["model", "operators", "graph s", "torch floor s", "ratio", "all strategies s",
                     "first step s", "one process s", "ratio"], rows))
        t_rep, mb, t_plotly = report("resnet18" if not a.smoke else "mlp")
        print()
        print(table(["report of the Placement view", "seconds", "MB", "plotly's own files s", "ratio"],
                    [["resnet18" if not a.smoke else "mlp", f"{t_rep:.2f}", f"{mb:.2f}", f"{t_plotly:.2f}",
                      f"{t_rep / t_plotly:.1f}x"]]))
    # The ONNX networks count those turned into a graph and plans (one failing stops the bench before this line).
    score("models", [("architectures", len(names)), ("onnx networks", sum(blob is not None for _, blob in cases)),
                     ("slowest graph", slow_graph, "s"), ("slowest first step", slow_step, "s", 1),
                     ("report", t_rep, "s"), ("report size", mb, "MB", 1)])


if __name__ == "__main__":
    sys.exit(main())
