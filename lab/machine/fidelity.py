"""How close the calibrated model comes: a stored run's measured step beside its prediction.

:func:`measured_step` reads a run from the run store (the mean or median over the steps after a
warm-up); :func:`prediction_table` puts it beside :func:`lab.machine.predict.predict_step` with
relative errors; :func:`evaluate_runs`, :class:`FidelityBatch` and the statistics below say how far
the model is off over many runs, against how much a repeated run varies by itself.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any, Mapping, Sequence

from lab.errors import LabError
from lab.machine.predict import PART_LABELS, PARTS, Prediction, job_procs, predict_step
from lab.machine.profile import MachineProfile, geomean_error, load_profile
from lab.scenario.catalogue import preset
from lab.scenario.document import Compression, Scenario, Training
from lab.processes import LOADED_SHARE, under_load
from lab.store.runs import ACTIVE
from lab.store.runs import run_store
from lab.scenario.names import Sharing

# ---------------------------------------------------------------------------------------------
# Measured, from the run store
# ---------------------------------------------------------------------------------------------
MEASURED_PARTS = ("t_compute", "t_compress", "t_comm", "t_idle", "t_emul_compute", "t_emul_comm")


def default_warmup(steps: int) -> int:
    """Steps left out at the start of a run (process start, first allocations): 10, or a quarter of a short run."""
    return int(min(10, max(1, steps // 4)))


STATISTICS = ("mean", "median")
#: The calibrated model's aim on this machine: a prediction within this share of the measured step.
TARGET_ERROR = 0.15


def measured_step(metrics: Any, warmup: int | None = None, statistic: str = "mean") -> dict:
    """A run's step time and its parts from the run store's metrics, over the steps after ``warmup``.

    ``statistic`` "mean" (the default): the mean step, i.e. the wall time from the end of the warm-up
    to the end of the run per step, what the run's throughput comes from; a step that waits for a
    scheduler slice now and then counts in proportion. "median": the typical step (on a shared
    machine the steps of one run can be bimodal, and the median then jumps between the two modes from
    one run to the next, which is why the mean is the default).

    Returns {"step": the statistic of the seconds between the ends of consecutive steps (whole job),
    "compute", "compress", "comm", "idle", "emul_compute", "emul_comm": mean over workers of each
    worker's statistic, "bytes_sent": mean over workers of the statistic of bytes per step, "steps":
    steps used, "statistic", "per_worker": {worker: {part: statistic}}}."""
    import pandas as pd

    if statistic not in STATISTICS:
        raise LabError(f"the step statistic is one of {list(STATISTICS)} (got {statistic!r})", where="measured step")
    m = metrics
    if m is None or len(m) == 0:
        raise LabError("the run has no measurements yet", where="measured step")
    job = m[m.worker == -1].sort_values("step")
    per = m[m.worker >= 0]
    last = int(job.step.max()) if len(job) else int(per.step.max())
    warmup = default_warmup(last) if warmup is None else int(warmup)
    wall = job[["step", "wall"]].dropna()
    wall = wall[wall.step >= 1]
    dt = wall.wall.diff()
    dt = dt[(wall.step > warmup).values & (wall.step.diff() == 1).values]
    sel = per[per.step > warmup]
    if sel.empty or dt.dropna().empty:
        raise LabError(f"the run has no steps after the {warmup} warm-up steps yet", where="measured step")
    by = sel.groupby("worker")[list(MEASURED_PARTS) + ["bytes_sent"]]
    med = by.mean() if statistic == "mean" else by.median()
    dt = dt.dropna()
    out = {"step": float(dt.mean() if statistic == "mean" else dt.median()), "steps": int(sel.step.nunique()),
           "warmup": warmup, "statistic": statistic}
    for col in MEASURED_PARTS:
        out[col[2:]] = float(pd.to_numeric(med[col], errors="coerce").fillna(0.0).mean())
    out["bytes_sent"] = float(med["bytes_sent"].fillna(0.0).mean())
    out["per_worker"] = {int(w): {c[2:]: float(v) for c, v in row.items() if c in MEASURED_PARTS}
                         for w, row in med.iterrows()}
    return out


def compare(pred: Prediction, meas: Mapping[str, Any]) -> list[dict]:
    """Rows (part, predicted s, measured s, error = predicted / measured - 1) for the parts and the step."""
    rows = []
    for part in PARTS:
        p, m = float(getattr(pred, part)), float(meas.get(part, math.nan))
        err = p / m - 1 if m > 0 and math.isfinite(m) else math.nan
        rows.append({"part": part, "label": PART_LABELS[part], "predicted": p, "measured": m, "error": err})
    return rows


def prediction_table(run: Any = None, profile: MachineProfile | None = None, *, store: Any = None,
                     scenario: Scenario | None = None, metrics: Any = None, warmup: int | None = None):
    """Predicted against measured step time and its parts, with the relative error, as a DataFrame.

    Either ``run`` (a run id; the scenario and metrics come from the run store ``store``, default
    :func:`lab.store.runs.run_store`) or ``scenario`` + ``metrics``. ``profile`` defaults to the saved
    machine profile. Columns: part, predicted_ms, measured_ms, error_pct (predicted / measured - 1,
    in percent). Raises LabError when there is no profile or no measurement yet.
    """
    import pandas as pd

    profile = profile or load_profile()
    if profile is None:
        raise LabError("no machine profile yet: calibrate this machine on the Fidelity page (or run "
                       "python -m lab.machine.calibrate)", where="prediction")
    if run is not None:

        st = store or run_store()
        info = st.get_run(run)
        scenario = Scenario.from_dict(info["scenario"])
        metrics = st.metrics(run)
    if scenario is None or metrics is None:
        raise LabError("give a run id, or a scenario and its metrics", where="prediction")
    pred = predict_step(scenario, profile)
    meas = measured_step(metrics, warmup)
    rows = compare(pred, meas)
    return pd.DataFrame([{"part": r["label"], "predicted_ms": r["predicted"] * 1e3, "measured_ms": r["measured"] * 1e3,
                          "error_pct": r["error"] * 100} for r in rows])


def load_slowdown(load: Mapping | None, procs: int) -> float:
    """How much slower a job of ``procs`` busy processes runs beside the other work ``load`` measured
    (:class:`lab.processes.LoadMeter`): its processes share the cores the other work left, so with
    ``others_share`` s of ``cpus`` cores taken, ``procs`` processes run max(1, procs / (cpus (1 - s)))
    times slower than they would on ``cpus`` free cores, max(1, procs / cpus)."""
    if not load:
        return 1.0
    cpus = max(1, int(load.get("cpus", 1)))
    free = cpus * (1.0 - min(float(load.get("others_share", 0.0)), 0.95))
    return max(1.0, procs / free) / max(1.0, procs / cpus)


def _facts(sc: Scenario) -> dict:
    tr = sc.training
    return {"model": tr.model, "workers": tr.workers, "compressed": tr.compression.kind != "none" and tr.workers > 1,
            "emulated": bool(tr.emulate), "sync": tr.sync}


def evaluate_run(store: Any, run_id: str, profile: MachineProfile, warmup: int | None = None) -> dict:
    """One stored run, predicted and measured: a row for the Fidelity page's tables and figures.

    """
    run = store.get_run(run_id)
    sc = Scenario.from_dict(run["scenario"])
    pred = predict_step(sc, profile)
    meas = measured_step(store.metrics(run_id), warmup)
    load = run["info"].get("load")
    # An emulated wait is a sleep: it needs no core, so other work does not stretch it; the rest does.
    asleep = min(pred.step, pred.emul_compute + pred.emul_comm)
    corrected = asleep + (pred.step - asleep) * load_slowdown(load, job_procs(sc))
    return {"id": run_id, "name": run["name"], **_facts(sc), "scenario_key": scenario_key(sc),
            "predicted": pred.step, "measured": meas["step"],
            "error": pred.step / meas["step"] - 1, "load": load, "under_load": under_load(load),
            "corrected": corrected, "corrected_error": corrected / meas["step"] - 1, "parts_predicted": pred.parts(),
            "parts_measured": {k: meas[k] for k in PARTS}, "steps": meas["steps"], "approximate": pred.approximate}


def evaluate_runs(store: Any, profile: MachineProfile, run_ids: Sequence[str] | None = None,
                  warmup: int | None = None) -> tuple[list[dict], list[dict]]:
    """:func:`evaluate_run` for the finished runs (default: every run with status done); returns
    (rows, skipped) where skipped lists {"id", "name", "why"} for runs that could not be compared."""
    if run_ids is None:
        runs = store.list_runs(statuses=("done",))
        run_ids = list(runs.id)
    rows, skipped = [], []
    for rid in run_ids:
        try:
            rows.append(evaluate_run(store, rid, profile, warmup))
        except LabError as exc:
            try:
                name = store.get_run(rid)["name"]
            except LabError:
                name = rid
            skipped.append({"id": rid, "name": name, "why": str(exc)})
    return rows, skipped


class FidelityBatch:
    """The preset batch queued through the job queue (lab.jobs.manager; one run at a time unless its
    capacity says otherwise). ``status()`` says how far it is, from the run store."""
    def __init__(self, manager: Any, profile: MachineProfile | None = None, steps: int = 200,
                 scenarios: Sequence[Scenario] | None = None, owner: str | None = None):
        self.manager = manager
        self.owner = owner  # who started it: its runs are theirs
        self.scenarios = list(scenarios) if scenarios is not None else preset_batch(steps)
        self.run_ids: list[str] = []

    def start(self) -> "FidelityBatch":
        jobs = self.manager.submit_many([(sc, sc.name) for sc in self.scenarios],
                                        **({"owner": self.owner} if self.owner else {}))
        self.run_ids = [j.run_id for j in jobs]
        return self

    def status(self) -> dict:
        st = [self.manager.store.status(r) for r in self.run_ids]
        active = [r for r, s in zip(self.run_ids, st) if s in ACTIVE]
        current = next((self.manager.store.get_run(r)["name"] for r, s in zip(self.run_ids, st) if s == "running"), None)
        failed = [r for r, s in zip(self.run_ids, st) if s not in ACTIVE and s != "done"]
        return {"total": len(self.run_ids), "done": len(self.run_ids) - len(active), "current": current,
                "run_ids": list(self.run_ids), "running": bool(active), "finished": not active,
                "error": f"{len(failed)} run(s) did not finish: {', '.join(failed)}" if failed else None}

    def running(self) -> bool:
        return self.status()["running"]


GEOMEAN_ERROR_HELP = ("exp(mean over runs of |ln(predicted / measured)|) − 1: the typical factor by which the "
                      "prediction misses, as a percentage; over- and under-estimates count alike")


def fidelity_table(rows: Sequence[dict]) -> list[dict]:
    """The Fidelity page's table: one row per run, milliseconds and percent in the column names."""
    out = []
    for r in rows:
        pp, mm = r["parts_predicted"], r["parts_measured"]
        d = {"run": r["name"], "model": r["model"], "workers": r["workers"], "compressed": r["compressed"],
             "emulated": r["emulated"], "predicted step (ms)": r["predicted"] * 1e3,
             "measured step (ms)": r["measured"] * 1e3, "error (%)": r["error"] * 100,
             "other work (% of CPU)": r["load"]["others_share"] * 100 if r.get("load") else None,
             "under load": r.get("under_load", False),
             "corrected for the load (ms)": r["corrected"] * 1e3 if r.get("under_load") else None}
        for part in ("compute", "compress", "comm", "idle"):
            d[f"{PART_LABELS[part]} predicted (ms)"] = pp[part] * 1e3
            d[f"{PART_LABELS[part]} measured (ms)"] = mm[part] * 1e3
        d["id"] = r["id"]
        out.append(d)
    return out


def step_error_summary(pairs: Sequence[tuple[float, float]]) -> float:
    """Geometric-mean error of (predicted, measured) step times."""
    return geomean_error([p for p, _ in pairs], [m for _, m in pairs])


def profile_load_words(profile: MachineProfile) -> str:
    """A warning for a profile calibrated beside other work ("" for one calibrated on a quiet machine, or
    before calibrations recorded their load)."""
    load = profile.machine.get("load")
    if not under_load(load):
        return ""
    return (f"This profile was calibrated under load: other work took {load['others_share'] * 100:.0f} % of this "
            "machine's CPU time while it measured, so every prediction made from it carries that work's slowdown. "
            "Calibrate again while no jobs run.")


def calibrate_now_words(jobs_running: int) -> str:
    """A warning before a calibration beside running jobs ("" when none runs)."""
    if not jobs_running:
        return ""
    return (f"{jobs_running} job(s) are running on this machine now. A calibration beside them measures their "
            "slowdown too; it records how busy the machine was, and the profile is marked as taken under load if it "
            "was. Waiting until they end gives a profile of the machine itself.")


def load_line(summary: Mapping) -> str:
    """What :func:`load_summary` says of the runs measured under load ("" when there were none)."""
    n = summary["n_loaded"]
    if not n:
        return ""
    return (f"{n} run(s) were measured while other work took more than {LOADED_SHARE * 100:.0f} % of this machine's "
            f"CPU: they are kept out of the model's error above. Over them the model is "
            f"{summary['loaded_raw'] * 100:.1f} % off as it predicts (a quiet machine), and "
            f"{summary['loaded_corrected'] * 100:.1f} % off with the slowdown their measured load implies (its "
            "processes sharing the cores the other work left).")


def load_summary(rows: Sequence[Mapping]) -> dict:
    """The model's error over the runs measured on a quiet machine, and apart from it over the runs measured
    under load, as predicted (raw) and with the slowdown their measured load implies (corrected)."""
    quiet = [r for r in rows if not r["under_load"]]
    loaded = [r for r in rows if r["under_load"]]
    nan = math.nan
    return {"quiet": step_error_summary([(r["predicted"], r["measured"]) for r in quiet]) if quiet else nan,
            "n_quiet": len(quiet), "n_loaded": len(loaded),
            "loaded_raw": step_error_summary([(r["predicted"], r["measured"]) for r in loaded]) if loaded else nan,
            "loaded_corrected": step_error_summary([(r["corrected"], r["measured"]) for r in loaded]) if loaded else nan}



def profile_tables(prof: MachineProfile) -> dict[str, list[dict]]:
    """What a calibration measured, as the Fidelity page's tables: ``classes`` (throughput and overhead per
    operator class and process count), ``comm`` (each collective's fit: α or per hop, β or per byte, fit error, where
    it was measured) and ``step_terms`` (the N-process terms of a step, and compute after a wait)."""
    where = "short jobs in the training loop" if prof.settings.get("cycle_source") == "loop" else "training-like cycles"
    classes = [{"procs": p, "class": c, "throughput": v.throughput, "overhead": v.overhead}
               for p in prof.procs for c, v in prof.compute_fit(p).classes.items()]

    def row(p: Any, k: str, alpha: float, beta: float, err: float, at: str) -> dict:
        return {"processes": p, "collective": k, "α or per hop (µs)": alpha * 1e6, "β or per byte (ns/B)": beta * 1e9,
                "fit error (%)": err * 100, "where": at}

    comm = [row(p, k, f.alpha if hasattr(f, "alpha") else f.per_hop, f.beta if hasattr(f, "beta") else f.per_byte,
                f.fit_error, where) for p, t in prof.allreduce.items() for k, f in t.items()]
    comm += [row(p, k, f.alpha, f.beta, f.fit_error, "lab.comm.measure (barrier first)")
             for p, t in prof.measured_allreduce.items() for k, f in t.items()]
    comm += [row(p, k, f.per_hop, f.per_byte, f.fit_error, where) for p, t in prof.sharing.items() for k, f in t.items()]
    steps = [{"processes": str(p), "compute slow-down (×)": prof.slowdown(p), "+ per step (µs)": prof.extra_per_step(p) * 1e6,
              "idle of equal workers (µs)": prof.jitter_cost(p).fixed * 1e6,
              "rest of the step (µs)": prof.remainder_cost(p).fixed * 1e6} for p in prof.procs]
    steps += [{"processes": f"after a {w * 1e3:g} ms wait", "compute slow-down (×)": f} for w, f in prof.wait_slowdown]
    return {"classes": classes, "comm": comm, "step_terms": steps}

def scenario_key(sc: Scenario) -> str:
    """What makes two runs the same experiment: the scenario without its name."""
    d = sc.to_dict()
    d.pop("name", None)
    return json.dumps(d, sort_keys=True)


def reproducibility(rows: Sequence[Mapping]) -> tuple[float, int]:
    """The measurement's own spread: runs of the same scenario (:func:`scenario_key`), taken in the
    order given, in consecutive pairs; the geometric-mean difference of their measured step times,
    exp(mean |ln(m_b / m_a)|) - 1, and the number of pairs ((nan, 0) when no scenario ran twice).
    No model can be expected to predict closer than this."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r["scenario_key"], []).append(float(r["measured"]))
    ratios = [b / a for ms in groups.values() for a, b in zip(ms, ms[1:]) if a > 0 and b > 0]
    if not ratios:
        return math.nan, 0
    return math.exp(sum(abs(math.log(x)) for x in ratios) / len(ratios)) - 1, len(ratios)


def oracle_error(rows: Sequence[Mapping]) -> tuple[float, int]:
    """The least error a model of *one step time per scenario* could reach on these runs: every run
    of a scenario measured at least twice (:func:`scenario_key`) predicted by the best constant for
    that scenario, fitted to the very runs it is judged on (the median of their log step times, which
    minimises the sum of |ln(predicted / measured)|). Returns (geometric-mean error,
    exp(mean |ln(oracle / measured)|) - 1, and the number of runs); (nan, 0) when no scenario ran
    twice. A calibrated model, fitted elsewhere, cannot beat it on the same runs."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        m = float(r["measured"])
        if m > 0 and math.isfinite(m):
            groups.setdefault(r["scenario_key"], []).append(math.log(m))
    logs = []
    for ls in groups.values():
        if len(ls) > 1:
            best = statistics.median(ls)
            logs += [abs(best - x) for x in ls]
    if not logs:
        return math.nan, 0
    return math.exp(sum(logs) / len(logs)) - 1, len(logs)


# ---------------------------------------------------------------------------------------------
# The preset batch: real runs spanning 1-4 workers, MLP and CNN, dense and compressed, emulation
# ---------------------------------------------------------------------------------------------
#: (name, topology preset, training changes). Short runs (steps set by preset_batch).
PRESET_BATCH: tuple[tuple[str, str, dict], ...] = (
    ("mlp 1w", "cxl", {"model": "mlp", "workers": 1}),
    ("mlp 2w", "cxl", {"model": "mlp", "workers": 2}),
    ("mlp 3w", "cxl", {"model": "mlp", "workers": 3}),
    ("mlp 4w", "cxl", {"model": "mlp", "workers": 4}),
    ("cnn 1w", "cxl", {"model": "cnn", "workers": 1}),
    ("cnn 2w", "cxl", {"model": "cnn", "workers": 2}),
    ("cnn 4w", "cxl", {"model": "cnn", "workers": 4}),
    ("mlp 2w group-topk", "cxl", {"model": "mlp", "workers": 2,
                                  "compression": {"kind": "group_topk", "ratio": 0.01, "sharing": Sharing.SPARSE_ALLGATHER}}),
    ("cnn 3w group-topk", "cxl", {"model": "cnn", "workers": 3,
                                  "compression": {"kind": "group_topk", "ratio": 0.05, "sharing": Sharing.SPARSE_ALLGATHER}}),
    ("mlp 2w emulated gpu+host", "cxl", {"model": "mlp", "workers": 2, "emulate": True,
                                         "worker_devices": ["gpu", "host"]}),
    ("cnn 2w emulated gpu+fpga", "cxl", {"model": "cnn", "workers": 2, "emulate": True,
                                         "worker_devices": ["gpu", "fpga"]}),
    ("mlp 4w emulated edge", "edge", {"model": "mlp", "workers": 4, "emulate": True,
                                      "worker_devices": ["edge0", "edge1", "edge2", "edge3"]}),
    ("mlp 4w emulated edge group-topk", "edge", {"model": "mlp", "workers": 4, "emulate": True,
                                                 "worker_devices": ["edge0", "edge1", "edge2", "edge3"],
                                                 "compression": {"kind": "group_topk", "ratio": 0.01,
                                                                 "sharing": Sharing.SPARSE_ALLGATHER}}),
)


def preset_batch(steps: int = 200, seed: int = 0) -> list[Scenario]:
    """The Fidelity page's and bench's batch of real runs, as Scenarios (named after the case)."""
    out = []
    for name, topo, changes in PRESET_BATCH:
        ch = dict(changes)
        comp = Compression.from_dict(ch.pop("compression", {}))
        tr = Training().replace(steps=steps, seed=seed, eval_every=max(10, steps), check_every=10, **ch)
        out.append(Scenario(name=f"fidelity: {name}", topology=preset(topo), training=tr.replace(compression=comp)))
    return out


__all__ = ["profile_tables", "oracle_error", "reproducibility", "preset_batch", "PRESET_BATCH", "FidelityBatch", "evaluate_runs",
           "evaluate_run", "fidelity_table", "measured_step", "compare", "prediction_table", "STATISTICS",
           "MEASURED_PARTS", "GEOMEAN_ERROR_HELP", "default_warmup", "step_error_summary", "scenario_key"]
