"""Prediction beside measurement: the cost model's step time against real training runs.

    .venv/bin/python bench/bench_fidelity.py [--steps 200] [--batches 2] [--profile FILE] [--quick]
                                             [--only mlp] [--db FILE] [--evaluate] [--smoke]

1. Calibrates this machine (``lab.machine.calibrate.calibrate``: calibration networks that are not the
   presets, optimiser and compressor microbenchmarks, training-like cycles with 2-4 processes at
   once, all-reduce alpha/beta from lab.comm.measure) unless ``--profile`` names a saved profile.
2. Runs the preset batch (``lab.machine.fidelity.preset_batch``: 1-4 workers, MLP and CNN, dense and
   Group-TopK, emulation off and on) as real training jobs, one after another, into a run store
   (``--db``, default a temporary file). The runs are never used to fit anything. 200 steps by
   default: on this shared machine the median step of a 60-step run varies by about +-25 % from one
   run to the next (measured: the same 2-worker MLP run four times in a row), longer runs less.
3. Predicts each run (``lab.machine.fidelity.evaluate_runs``, the Fidelity page's code) and prints per run
   the predicted and the measured step time (mean over the steps after the warm-up of the time between the
   ends of consecutive steps), the error, and the parts (compute, compression, communication, idle;
   mean over workers of each worker's mean); then the geometric-mean error of the step time,
   exp(mean |ln(predicted / measured)|) - 1. Target: within 15 % on this machine.

4. The peer, measured in the same run: the batch runs ``--batches`` times (default 2, one after the
   other); the same scenario's measured step times in two batches differ by some amount, printed as
   the geometric-mean difference between batches. That is the measurement's own reproducibility on
   this machine, the floor under any model's error. The last line reads
   ``fidelity: runs <n>, geomean error <pct> %, reproducibility <pct> %, oracle floor <pct> %`` (the last two
   when a scenario ran in two batches).

``--evaluate`` skips the runs and re-predicts the runs already in ``--db`` with the profile.

5. ``--loaded``: after the quiet batches, the batch runs once more beside two processes that spin on the
   cores (as a class's other jobs would). Every run records the other work it ran beside
   (``lab.processes.LoadMeter``); the runs measured under load are flagged and kept out of the quiet
   error, and predicted again with the slowdown their measured load implies
   (``lab.machine.fidelity.load_slowdown``). The last line then reads
   ``fidelity: quiet <pct> %, loaded raw <pct> %, loaded corrected <pct> %, flagged <k> of <n>``.

The machine is shared (2 cores, other work running): runs with 3-4 workers are contended, which is
what the N-process calibration is meant to capture. The load average at the start and end is
printed with the table.

``--smoke``: the synthetic profile (``lab.machine.calibrate.synthetic_profile``, no calibration) unless
``--profile`` names one, and one batch of the one-worker MLP case for a handful of steps into a temporary
run store; it checks the bench still runs and measures nothing (its last line scores its run under load too).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import bench_parser, score, SMOKE_NOTE, table  # noqa: E402  (also puts the checkout on sys.path)

from lab.machine.calibrate import calibrate, format_profile, synthetic_profile  # noqa: E402
from lab.machine.fidelity import (  # noqa: E402
    evaluate_runs,
    load_summary,
    oracle_error,
    preset_batch,
    reproducibility,
    step_error_summary,
)
from lab.machine.profile import load_profile  # noqa: E402
from lab.store.runs import RunStore  # noqa: E402

SMOKE_CASE = "mlp 1w"  # the batch's smallest case: one rank, no compression, no emulation


def ms(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * 1e3:.2f}"


def pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * 100:+.0f}%"


def run_batch(db: Path, steps: int, only: str | None, batch: int | str = 1) -> None:
    from lab.train.launcher import launch

    for sc in preset_batch(steps):
        if only and only not in sc.name:
            continue
        name = f"{sc.name} #{batch}"
        cpus = None
        if os.environ.get("LAB_CALIBRATION_PIN", "1") != "0":  # ranks on the cores the job manager gives them
            from lab.machine.cases import rank_cpu
            from lab.machine.predict import job_procs

            cpus = [rank_cpu(k) for k in range(job_procs(sc))]
        with open(os.devnull, "w") as devnull:
            res = launch(sc, name=name, store_path=db, log=devnull, cpus=cpus)
        print(f"# {name}: {res.status} (load average {os.getloadavg()[0]:.1f})", flush=True)


def spinners(n: int) -> list[subprocess.Popen]:
    """``n`` processes that spin on the cores until they are killed: other work the runs know nothing of."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def report(prof, db: Path, smoke: bool = False) -> float:
    every, skipped = evaluate_runs(RunStore(db), prof)
    rows = [r for r in every if not r["under_load"]]
    out = []
    for r in every:
        pp, mm = r["parts_predicted"], r["parts_measured"]
        share = r["load"]["others_share"] * 100 if r["load"] else math.nan
        out.append([r["name"].replace("fidelity: ", ""), ms(r["predicted"]), ms(r["measured"]), pct(r["error"]),
                    "-" if math.isnan(share) else f"{share:.0f}%", "yes" if r["under_load"] else "",
                    ms(r["corrected"]) if r["under_load"] else "", pct(r["corrected_error"]) if r["under_load"] else "",
                    *(f"{ms(pp[k])}/{ms(mm[k])}" for k in ("compute", "compress", "comm", "idle"))])
    print(table(["scenario", "pred step (ms)", "meas step (ms)", "error", "other work", "flagged",
                 "corrected (ms)", "corrected error", "compute p/m (ms)", "compress p/m (ms)", "comm p/m (ms)",
                 "idle p/m (ms)"], out))
    for s in skipped:
        print(f"# not compared: {s['name']}: {s['why']}")
    g = step_error_summary([(r["predicted"], r["measured"]) for r in rows])
    print(f"\ngeometric-mean error of the step time over the {len(rows)} runs not under load: {g * 100:.1f}% "
          f"(target <= 15%; exp(mean |ln(predicted / measured)|) - 1)")
    for tag in sorted({r["name"].rpartition(" #")[2] for r in rows if " #" in r["name"]}):
        sel = [(r["predicted"], r["measured"]) for r in rows if r["name"].endswith(f" #{tag}")]
        print(f"  batch {tag}: {step_error_summary(sel) * 100:.1f}% over {len(sel)} runs")
    spread, pairs = reproducibility(sorted(rows, key=lambda r: r["name"]))
    if pairs:
        print(f"reproducibility (the peer): the same scenarios measured in consecutive batches differ by a "
              f"geometric mean of {spread * 100:.1f}% (exp(mean |ln(m_b / m_a)|) - 1, {pairs} pairs); "
              f"model error / reproducibility = {g / spread:.2f}")
    floor, n = oracle_error(rows)
    if n:
        print(f"oracle floor: each scenario predicted by the best constant fitted to its own {n} measured runs "
              f"(the median): {floor * 100:.1f}%; no model of one step time per scenario does better here")
    loaded = [r for r in every if r["name"].endswith(" #loaded")]
    if loaded:
        s = load_summary(every)
        flagged = sum(r["under_load"] for r in loaded)
        print(f"\nbeside two spinning processes: {flagged} of {len(loaded)} runs flagged as measured under load; "
              f"over the flagged runs the model is {s['loaded_raw'] * 100:.1f} % off as it predicts (a quiet machine) "
              f"and {s['loaded_corrected'] * 100:.1f} % off with the slowdown their measured load implies")
    # Why the error over the quiet runs can be no number: the bench knows which runs it compared.
    quiet_why = (("no run was compared" + "".join(f"; {x['name']}: {x['why']}" for x in skipped)) if not every
                 else "every run was measured under load" if not rows else "a run's step time is not a number")
    if loaded:
        score("fidelity", [("quiet", s["quiet"] * 100, "%", 1), ("loaded raw", s["loaded_raw"] * 100, "%", 1),
                           ("loaded corrected", s["loaded_corrected"] * 100, "%", 1),
                           ("flagged", flagged, f"of {len(loaded)}")],
              why_not={"quiet": quiet_why, "loaded raw": "no run was flagged as measured under load",
                       "loaded corrected": "no run was flagged as measured under load"})
    else:
        # A smoke run scores every run it compared, flagged or not: the suite runs it beside other tests, where its
        # one run is often under load, and it checks the way to the score, not the number.
        scored = every if smoke else rows
        error = step_error_summary([(r["predicted"], r["measured"]) for r in scored])
        # Reproducibility and the oracle floor need a scenario measured twice: one batch has neither.
        score("fidelity", [("runs", len(scored)), ("geomean error", error * 100, "%", 1),
                           *([("reproducibility", spread * 100, "%", 1)] if pairs else []),
                           *([("oracle floor", floor * 100, "%", 1)] if n else [])],
              why_not={"geomean error": quiet_why})
    return g


def main() -> int:
    ap = bench_parser(__doc__)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batches", type=int, default=2, help="run the preset batch this many times (default 2)")
    ap.add_argument("--profile", default=None, help="use this saved profile instead of calibrating")
    ap.add_argument("--save-profile", default=None, help="save the fresh profile here")
    ap.add_argument("--quick", action="store_true", help="quick calibration (fewer repeats)")
    ap.add_argument("--cycles", choices=("harness", "loop"), default=None,
                    help="where the calibration measures the N-process terms (default: lab.machine.calibrate's)")
    ap.add_argument("--only", default=None, help="only cases whose name contains this text")
    ap.add_argument("--db", default=None, help="run store to write (default: a temporary file)")
    ap.add_argument("--evaluate", action="store_true", help="only re-predict the runs already in --db")
    ap.add_argument("--loaded", action="store_true", help="then run the batch beside two spinning processes")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.batches, args.only, args.db, args.evaluate, args.loaded = 8, 1, SMOKE_CASE, None, False, False
        args.save_profile = None
        print(SMOKE_NOTE, flush=True)

    load0 = os.getloadavg()[0]
    if args.smoke and not args.profile:
        prof = synthetic_profile()
    elif args.profile:
        prof = load_profile(Path(args.profile))
        if prof is None:
            print(f"no profile at {args.profile}", file=sys.stderr)
            return 2
    else:
        t0 = time.time()
        extra = {"cycle_source": args.cycles} if args.cycles else {}
        prof = calibrate(quick=args.quick, **extra, progress=lambda m, f: print(f"# calibrating [{f * 100:3.0f}%] {m}",
                                                                          flush=True))
        print(f"# calibration took {time.time() - t0:.0f} s")
        if args.save_profile:
            prof.save(Path(args.save_profile))
    print(format_profile(prof))
    with tempfile.TemporaryDirectory(prefix="lab-fidelity-") as tmp:
        db = Path(args.db) if args.db else Path(tmp) / "runs.db"
        os.environ["LAB_DB"] = str(db)
        os.environ.setdefault("LAB_DATA", str(db.parent))
        if not args.evaluate:
            for b in range(1, args.batches + 1):
                run_batch(db, args.steps, args.only, b)
            if args.loaded:
                spin = spinners(2)
                try:
                    run_batch(db, args.steps, args.only, "loaded")
                finally:
                    for p in spin:
                        p.kill()
                        p.wait()
        print()
        print(f"# load average (1 min) {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; 2 cores shared")
        if args.smoke:
            print(SMOKE_NOTE)
        report(prof, db, args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
