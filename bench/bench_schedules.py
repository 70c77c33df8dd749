"""Pipeline schedules run for real beside their model: step time, bubble and activation memory, GPipe against 1F1B,
interleaved 1F1B and zero bubble.

    .venv/bin/python bench/bench_schedules.py [--steps 10] [--repeats 2] [--models mlp,cnn,resnet,transformer]
                                              [--micro 2,4,8] [--smoke]

**What runs.** Each preset model on the CXL preset without its DPU (four devices: a bench starts at most four
processes), cut into equal contiguous stretches of layers, one per device with a kernel for every operator (the host
and the GPU: a pipeline of two stages) for GPipe, 1F1B and zero bubble (each backward split into its input's and
its weights' gradients, torch's own split), and twice round those devices (four stretches, two per
device: the even rounds strategy) for interleaved 1F1B, with 2, 4 and 8 micro-batches of a batch of 32, emulated (the drawn cluster's speeds
and links) and not (every device is this machine). The schedules of one setting take turns, run after run,
``repeats`` times; a run's step is the median of its steps after the warm-up; a setting's step the median of its
runs. Beside every run the share of the machine's CPU other work took; a run above 15 % is reported apart and not
scored.

**What is measured and modelled.**

* *Step*: measured as the lab's placement runs measure it; modelled by the lab's model of the executor on this
  machine's cores from the saved profile (a quick calibration when there is none), frozen before the first run.
* *Bubble*: the share of device time in which a device computes nothing, in the recorded last step and in the
  modelled step.
* *Peak activation memory*: per process, the most bytes held at once for a later backward, counted by autograd's
  saved-tensor hook in the recorded step, and modelled from the operator graph and the schedule's list of actions
  (:mod:`lab.modelled.placement.memory`). The table shows the largest process's.

The last line: ``schedules: <n> schedules, best step vs gpipe <x>x, peak memory 1f1b/gpipe <x>x, step model
error <pct> %, memory model error <pct> %``: the geometric mean over the settings of the fastest schedule's
measured step over GPipe's (1.00x: GPipe was fastest everywhere); of 1F1B's largest measured peak over GPipe's;
the geometric-mean error of every scored run's modelled step; and of every process's modelled peak.
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import time

from common import bench_parser, score, table  # noqa: E402  (also puts the checkout on sys.path)

from bench_plan import four_devices, made_up_profile, profile  # noqa: E402
from lab.errors import LabError  # noqa: E402
from lab.machine.heldout import WARMUP, measure_plan  # noqa: E402
from lab.machine.plan_memory import modelled_peaks  # noqa: E402
from lab.machine.plans import predict_plan  # noqa: E402
from lab.machine.profile import geomean_error  # noqa: E402
from lab.modelled.placement.pipeline import bubble_share  # noqa: E402
from lab.processes import LOADED_SHARE  # noqa: E402
from lab.scenario.document import Scenario, Training  # noqa: E402
from lab.scenario.names import PIPELINE_SCHEDULE_SHORT, PIPELINE_SCHEDULES  # noqa: E402
from lab.train.placement_run import resolved, stage_devices  # noqa: E402


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs)) if xs else math.nan


def settings_of(models: list[str], micros: list[int], modes: list[bool], steps: int) -> list[dict]:
    """Every (model, micro-batches, mode) with one scenario per schedule: the even split under GPipe, 1F1B and zero
    bubble, the even rounds plan under interleaved 1F1B."""
    out = []
    for model in models:
        tr = Training(model=model, parallel="placement", strategy="even_split", batch_size=32, steps=steps)
        base = resolved(Scenario(f"{model}-schedules", four_devices(), tr))
        # Interleaving needs several stretches per device: the even split twice round the devices.
        rounds = resolved(Scenario(f"{model}-schedules", four_devices(), tr.replace(strategy="even_rounds")))
        for micro in micros:
            for emulate in modes:
                scs = {s: (rounds if s == "interleaved_1f1b" else base).replace(training=(
                    rounds if s == "interleaved_1f1b" else base).training.replace(
                        micro_batches=micro, emulate=emulate, schedule=s)) for s in PIPELINE_SCHEDULES}
                out.append({"model": model, "micro": micro, "emulated": emulate, "scs": scs})
    return out


def main() -> None:
    ap = bench_parser(__doc__)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--models", default="mlp,cnn,resnet,transformer")
    ap.add_argument("--micro", default="2,4,8")
    a = ap.parse_args()
    modes = [True, False]
    if a.smoke:
        a.steps, a.repeats, a.models, a.micro, modes = WARMUP + 2, 1, "mlp", "4", [False]
        print("smoke run: smallest sizes, not a measurement; nothing recorded")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    prof, source = made_up_profile() if a.smoke else profile()
    t_start = time.time()
    sets = settings_of(a.models.split(","), [int(m) for m in a.micro.split(",")], modes, a.steps)
    for s in sets:  # the predictions, frozen before anything runs
        s["pred"] = {}
        for name, sc in s["scs"].items():
            try:
                got = predict_plan(sc, prof)
                s["pred"][name] = {"step": got.makespan, "bubble": bubble_share(got.rows, stage_devices(sc)),
                                   "memory": modelled_peaks(sc)}
            except LabError as exc:  # a plan the schedule cannot run (1F1B: one piece per device)
                s["pred"][name] = {"refused": str(exc)}
    runs = 0
    for s in sets:
        s["runs"] = {n: [] for n in s["scs"] if "refused" not in s["pred"][n]}
        for _ in range(a.repeats):
            for name in s["runs"]:
                s["runs"][name].append(measure_plan(s["scs"][name], a.steps, record_last=True))
                runs += 1
        print(f"# {s['model']} x{s['micro']} {'emulated' if s['emulated'] else 'this machine'}: "
              + ", ".join(f"{n} {statistics.median(r['step'] for r in rs) * 1e3:.2f} ms" for n, rs in s["runs"].items()),
              file=sys.stderr, flush=True)
    rows, apart, step_pairs, mem_pairs, best, mem_ratio = [], [], [], [], [], []
    for s in sets:
        got = {}
        for name, rs in s["runs"].items():
            devices = stage_devices(s["scs"][name])
            step = statistics.median(r["step"] for r in rs)
            last = rs[-1]
            measured_mem = dict(zip(devices, last["saved_peak"]))
            pred = s["pred"][name]
            loaded = not a.smoke and max(r["others"] for r in rs) > LOADED_SHARE
            got[name] = {"step": step, "loaded": loaded, "memory": max(measured_mem.values())}
            row = [s["model"], s["micro"], "emulated" if s["emulated"] else "this machine", PIPELINE_SCHEDULE_SHORT[name],
                   f"{pred['step'] * 1e3:.2f}", f"{step * 1e3:.2f}", f"{(step / pred['step'] - 1) * 100:+.0f}",
                   f"{pred['bubble'] * 100:.0f}", f"{bubble_share(last['events'], devices) * 100:.0f}",
                   f"{max(pred['memory'].values()) / 1e3:.1f}", f"{max(measured_mem.values()) / 1e3:.1f}",
                   f"{max(r['others'] for r in rs) * 100:.0f}"]
            (apart if loaded else rows).append(row)
            if not loaded:
                step_pairs.append((pred["step"], step))
                mem_pairs += [(pred["memory"][d], measured_mem[d]) for d in devices if pred["memory"][d] > 0]
        for name, p in s["pred"].items():
            if "refused" in p:
                rows.append([s["model"], s["micro"], "emulated" if s["emulated"] else "this machine",
                             PIPELINE_SCHEDULE_SHORT[name], "refused: " + p["refused"][:60], "", "", "", "", "", "", ""])
        quiet = {n: g for n, g in got.items() if not g["loaded"]}
        if "gpipe" in quiet and len(quiet) > 1:
            best.append(min(g["step"] for g in quiet.values()) / quiet["gpipe"]["step"])
        if "gpipe" in got and "1f1b" in got:  # bytes are counted, not timed: a loaded run counts them as well
            mem_ratio.append(got["1f1b"]["memory"] / got["gpipe"]["memory"])
    head = ["model", "micro-batches", "mode", "schedule", "modelled (ms)", "measured (ms)", "error (%)",
            "bubble modelled (%)", "bubble measured (%)", "peak modelled (kB)", "peak measured (kB)", "other work (%)"]
    print(f"# CXL preset without its DPU, even contiguous split over the devices with every kernel (interleaved 1F1B: "
          f"twice round them), batch 32, {a.steps} steps, median of {a.repeats} "
          f"runs taken in turns; step model: {source} ({prof.created[:19]}); peak: the largest process's")
    print(table(head, rows))
    if apart:
        print(f"# runs with more than {LOADED_SHARE * 100:.0f} % other work, not scored:")
        print(table(head, apart))
    step_err = geomean_error([m for m, _ in step_pairs], [x for _, x in step_pairs]) if step_pairs else math.nan
    mem_err = geomean_error([m for m, _ in mem_pairs], [x for _, x in mem_pairs]) if mem_pairs else math.nan
    print(f"# {time.time() - t_start:.0f} s, {runs} runs")
    loaded = "every run was measured under load"
    score("schedules", [("", len(PIPELINE_SCHEDULES), "schedules"), ("best step vs gpipe", geomean(best), "x"),
                        ("peak memory 1f1b/gpipe", geomean(mem_ratio), "x"),
                        ("step model error", step_err * 100, "%", 1), ("memory model error", mem_err * 100, "%", 1)],
          why_not={"best step vs gpipe": loaded + " or every other schedule was refused",
                   "peak memory 1f1b/gpipe": "1F1B was refused on every plan", "step model error": loaded,
                   "memory model error": "no run counted its saved bytes"})


if __name__ == "__main__":
    main()
