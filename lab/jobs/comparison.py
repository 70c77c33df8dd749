"""Comparisons a class can trust: runs grouped into variants, repeats summarised with their spread,
and a verdict on whether two variants differ by more than their noise.

Pure functions over plain data (a run's scenario dict and its job-level metric rows), so the Compare
page, the command line and the tests share them. A *variant* is every setting but the seed: runs
that differ only in their seed are repeats of one variant.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from lab.errors import LabError
from lab.jobs.variants import (
    SETTING_NAMES,
    compression_label,
    full_label,
    settings_of,
    short_label,
    variant_key,
)
from lab.processes import LOADED_SHARE, under_load
from lab.scenario.names import (
    OPTIMIZER_SHORT,
)
from lab.store.runs import JOB_WORKER

MAX_POOLED = 300  # runs a pooled comparison reads at most


def pooled_runs(store: Any, run_ids: Sequence[str]) -> list[str]:
    """The class's finished runs of the variants of ``run_ids`` (every setting but the seed the same), whoever
    ran them, with ``run_ids`` first: the repeats of thirty students pooled; at most :data:`MAX_POOLED`."""
    keys = {variant_key(settings_of(store.get_run(rid)["scenario"])) for rid in run_ids}
    out = list(dict.fromkeys(run_ids))
    for rid in store.list_runs(statuses=("done",)).id:
        if len(out) >= MAX_POOLED:
            break
        if rid not in out and variant_key(settings_of(store.get_run(rid)["scenario"])) in keys:
            out.append(rid)
    return out


def t95(dof: int) -> float:
    """Student's t quantile for a two-sided 95 % interval with ``dof`` degrees of freedom (scipy's)."""
    if dof < 1:
        return math.inf
    return float(student_t.ppf(0.975, dof))


@dataclass(frozen=True)
class RunResult:
    """What one run measured, as the summary needs it."""

    run_id: str
    final_acc: float
    best_acc: float
    steps_to_target: float  # nan: not reached
    seconds_to_target: float
    step_time: float  # s, mean over the steps after the warm-up
    bytes_per_step: float  # sent per worker and step
    finished: bool = True  # False while the run is queued or running, or when it stopped early: no final accuracy


def run_result(run_id: str, job: pd.DataFrame, per_worker: pd.DataFrame, target: float, workers: int,
               warmup: float = 0.1) -> RunResult:
    """``job``: the run's job-level rows (step, test_acc, wall); ``per_worker``: its per-worker rows
    (bytes_sent). ``target`` is a test accuracy (a fraction)."""
    if not 0 < target <= 1:
        raise LabError(f"the target accuracy must be between 0 and 100 % (got {100 * target:g} %)",
                       where="comparison")
    job = job.sort_values("step")
    acc = job.dropna(subset=["test_acc"])
    hit = acc[acc.test_acc >= target]
    steps_to = float(hit.step.iloc[0]) if len(hit) else math.nan
    secs_to = float(hit.wall.iloc[0]) if len(hit) and "wall" in hit else math.nan
    timed = job.dropna(subset=["wall"])
    step_time = math.nan
    if len(timed) >= 2:
        last = int(timed.step.max())
        start = timed[timed.step >= max(1, int(warmup * last))].iloc[0]
        end = timed.iloc[-1]
        if end.step > start.step:
            step_time = float((end.wall - start.wall) / (end.step - start.step))
    steps = int(job.step.max()) if len(job) else 0
    sent = float(per_worker.bytes_sent.sum()) if len(per_worker) else math.nan
    return RunResult(run_id, float(acc.test_acc.iloc[-1]) if len(acc) else math.nan,
                     float(acc.test_acc.max()) if len(acc) else math.nan, steps_to, secs_to, step_time,
                     sent / max(1, steps) / max(1, workers) if steps else math.nan)


# ---- reading stored runs: aggregates over every row, curves of at most MAX_CURVE_POINTS points ------

#: A run's curve is drawn with at most this many points: a longer run is drawn as the means of
#: equal buckets of steps, so a comparison reads and draws a bounded amount however long its runs
#: are. The summary numbers and the downloads still take every row.
MAX_CURVE_POINTS = 2000


def _query(store: Any, sql: str, args: Sequence[Any]) -> list:
    # An aggregate runs inside SQLite, so that what leaves it is a few numbers, not every metric row.
    return store.select(sql, args)


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def stored_result(store: Any, run_id: str, target: float, workers: int, warmup: float = 0.1) -> RunResult:
    """:func:`run_result` of a stored run, computed by SQL over every one of its metric rows."""
    if not 0 < target <= 1:
        raise LabError(f"the target accuracy must be between 0 and 100 % (got {100 * target:g} %)",
                       where="comparison")
    steps, best, hit, acc_step, timed, last_timed, per_rows, sent = _query(store, f"""
        SELECT MAX(CASE WHEN worker={JOB_WORKER} THEN step END),
               MAX(CASE WHEN worker={JOB_WORKER} THEN test_acc END),
               MIN(CASE WHEN worker={JOB_WORKER} AND test_acc >= ? THEN step END),
               MAX(CASE WHEN worker={JOB_WORKER} AND test_acc IS NOT NULL THEN step END),
               COUNT(CASE WHEN worker={JOB_WORKER} THEN wall END),
               MAX(CASE WHEN worker={JOB_WORKER} AND wall IS NOT NULL THEN step END),
               COUNT(CASE WHEN worker<>{JOB_WORKER} THEN 1 END),
               TOTAL(CASE WHEN worker<>{JOB_WORKER} THEN bytes_sent END)
        FROM metrics WHERE run_id=?""", (float(target), run_id))[0]

    def job_row(step: int, columns: str = "wall") -> Any:
        return _query(store, f"SELECT {columns} FROM metrics WHERE run_id=? AND worker={JOB_WORKER} AND step=?",
                      (run_id, step))[0]

    step_time = math.nan
    if timed >= 2:
        start = _query(store, f"SELECT step, wall FROM metrics WHERE run_id=? AND worker={JOB_WORKER} "
                              "AND wall IS NOT NULL AND step>=? ORDER BY step LIMIT 1",
                       (run_id, max(1, int(warmup * last_timed))))[0]
        if last_timed > start[0]:
            step_time = float((job_row(last_timed)[0] - start[1]) / (last_timed - start[0]))
    steps = int(steps or 0)
    return RunResult(run_id, _num(job_row(acc_step, "test_acc")[0]) if acc_step is not None else math.nan,
                     _num(best), _num(hit), _num(job_row(hit)[0]) if hit is not None else math.nan, step_time,
                     float(sent) / max(1, steps) / max(1, workers) if steps and per_rows else math.nan)


def curve_stride(steps: int) -> int:
    """The bucket width, in steps, that draws a run of ``steps`` steps in at most
    :data:`MAX_CURVE_POINTS` points (1: every step)."""
    return max(1, math.ceil(steps / MAX_CURVE_POINTS))


CURVES = ("loss", "test_acc")


def stored_curves(store: Any, run_id: str, stride: int = 1) -> dict[str, pd.DataFrame]:
    """A stored run's job-level loss and test accuracy where they were recorded: for each of
    :data:`CURVES`, a frame with columns step, wall and the curve's column; with ``stride`` > 1, one
    row per bucket of ``stride`` steps (its last step that recorded the column, the means of wall and
    of the column over those steps), so at most steps / stride + 1 rows. One pass over the rows."""
    picked = ", ".join(f"MAX(CASE WHEN {c} IS NOT NULL THEN step END), AVG(CASE WHEN {c} IS NOT NULL THEN wall END), "
                       f"AVG({c})" for c in CURVES)
    rows = _query(store, f"SELECT {picked} FROM metrics WHERE run_id=? AND worker={JOB_WORKER} "
                         "GROUP BY (step - 1) / ? ORDER BY (step - 1) / ?", (run_id, int(stride), int(stride)))
    out = {}
    for k, c in enumerate(CURVES):
        kept = [(int(r[3 * k]), _num(r[3 * k + 1]), float(r[3 * k + 2])) for r in rows if r[3 * k] is not None]
        out[c] = pd.DataFrame(kept, columns=["step", "wall", c])
    return out


def stored_curve(store: Any, run_id: str, column: str, stride: int = 1) -> pd.DataFrame:
    """One of :func:`stored_curves`: ``column`` is "loss" or "test_acc"."""
    if column not in CURVES:
        raise LabError(f"no curve of {column!r}; curves: {list(CURVES)}", where="comparison")
    return stored_curves(store, run_id, stride)[column]


@dataclass(frozen=True)
class Spread:
    """A summary number over repeats: mean, min, max, and the 95 % interval's half-width."""

    n: int
    mean: float
    lo: float
    hi: float
    half95: float
    sd: float

    @staticmethod
    def of(values: Iterable[float]) -> "Spread":
        v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=float)
        if len(v) == 0:
            return Spread(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        sd = float(v.std(ddof=1)) if len(v) > 1 else math.nan
        half = t95(len(v) - 1) * sd / math.sqrt(len(v)) if len(v) > 1 else math.inf
        return Spread(len(v), float(v.mean()), float(v.min()), float(v.max()), half, sd)

    def interval(self) -> tuple[float, float]:
        return self.mean - self.half95, self.mean + self.half95

    def text(self, scale: float = 1.0, digits: int = 3) -> str:
        if self.n == 0:
            return "—"
        if self.n == 1:
            return f"{self.mean * scale:.{digits}g} (one run)"
        return (f"{self.mean * scale:.{digits}g} ± {self.half95 * scale:.2g} "
                f"(range {self.lo * scale:.{digits}g}–{self.hi * scale:.{digits}g})")


def overlap(a: Spread, b: Spread) -> bool:
    """True when the two 95 % intervals overlap (or either has fewer than two repeats)."""
    if a.n < 2 or b.n < 2:
        return True
    (alo, ahi), (blo, bhi) = a.interval(), b.interval()
    return not (ahi < blo or bhi < alo)


def repeats_needed(a: Spread, b: Spread, cap: int = 1000) -> int | None:
    """How many repeats per variant would make the 95 % intervals of ``a`` and ``b`` stop
    overlapping, if the spread and the difference stay as observed (None: no difference seen)."""
    diff = abs(a.mean - b.mean)
    if not (math.isfinite(a.sd) and math.isfinite(b.sd)) or diff == 0:
        return None
    for n in range(2, cap + 1):
        if t95(n - 1) * (a.sd + b.sd) / math.sqrt(n) < diff:
            return n
    return None


def verdict(a: Spread, b: Spread, what: str = "final accuracy", scale: float = 100.0, unit: str = "points") -> str:
    """Whether two variants differ by more than their noise, in one sentence a student can follow: with n
    repeats the mean is known to within ± its 95 % half-width (Student's t with n - 1 degrees of freedom times
    the spread over the square root of n), and two variants are told apart only when those intervals do not
    overlap; if they do, how many repeats would separate them at the spread seen."""
    if a.n < 2 or b.n < 2:
        return f"one run each: the difference in {what} cannot be told from noise; repeat with more seeds"
    diff = abs(a.mean - b.mean) * scale
    if not overlap(a, b):
        return (f"distinguishable: the {diff:.3g}-{unit} difference in {what} is larger than both 95 % intervals "
                f"(±{a.half95 * scale:.2g} and ±{b.half95 * scale:.2g} {unit}) allow")
    n = repeats_needed(a, b)
    need = (f"about {n} repeats each would separate them if the spread stays as seen" if n else
            "no difference was seen at all")
    return (f"not distinguishable: with {a.n} and {b.n} repeats the means are known only to ±{a.half95 * scale:.2g} "
            f"and ±{b.half95 * scale:.2g} {unit} (95 %, Student's t with {a.n - 1} and {b.n - 1} degrees of freedom), "
            f"and the intervals overlap though the means differ by {diff:.3g} {unit}; {need}")


def _final_text(final: Spread, repeats: int) -> str:
    if not final.n:
        return "none finished yet"
    return final.text(100) + (f" ({repeats - final.n} unfinished)" if final.n < repeats else "")


def summary_rows(variants: Mapping[str, Sequence[RunResult]], dense_bytes: float | None = None,
                 target: float = 0.9) -> list[dict[str, Any]]:
    """One row per variant: repeats, accuracies, time to the target, step time, bytes per step and
    their ratio to dense, each as mean ± 95 % half-width and range."""
    rows = []
    for label, results in variants.items():
        # an unfinished run's last evaluation is not its final accuracy: the final is over the finished runs
        final = Spread.of(r.final_acc for r in results if r.finished)
        best = Spread.of(r.best_acc for r in results)
        reached = [r for r in results if math.isfinite(r.steps_to_target)]
        steps_to = Spread.of(r.steps_to_target for r in reached)
        secs_to = Spread.of(r.seconds_to_target for r in reached)
        step = Spread.of(r.step_time for r in results)
        sent = Spread.of(r.bytes_per_step for r in results)
        # The key columns come first, on screen in a narrow window; how many repeats reached the target stands
        # beside the time to it, which is a spread over those repeats only.
        rows.append({
            "variant": label, "repeats": len(results), "final test accuracy (%)": _final_text(final, len(results)),
            f"reached {100 * target:g} %": f"{len(reached)} of {len(results)}",
            f"steps to {100 * target:g} %": steps_to.text() if reached else "not reached",
            f"seconds to {100 * target:g} %": secs_to.text() if reached else "not reached",
            "best test accuracy (%)": best.text(100),
            "mean step time (ms)": step.text(1e3), "sent per worker and step (kB)": sent.text(1e-3),
            "bytes vs dense": (f"{sent.mean / dense_bytes:.3g}×" if dense_bytes and math.isfinite(sent.mean)
                               and dense_bytes > 0 else "—"),
            "_final": final, "_step": step, "_ids": [r.run_id for r in results],
            "_reached": (f"reached {100 * target:g} % (count)", len(reached)), "_finished": final.n,
            "_numbers": {"final test accuracy (%)": (final, 100), "best test accuracy (%)": (best, 100),
                         f"steps to {100 * target:g} %": (steps_to, 1), f"seconds to {100 * target:g} %": (secs_to, 1),
                         "mean step time (ms)": (step, 1e3), "sent per worker and step (kB)": (sent, 1e-3)},
        })
    return rows


def verdicts(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Each variant against the one with the best mean final accuracy."""
    rows = [r for r in rows if r["_final"].n]
    if len(rows) < 2:
        return []
    best = max(rows, key=lambda r: r["_final"].mean)
    return [{"variant": r["variant"], "against": best["variant"],
             "accuracy difference (points)": f"{100 * (r['_final'].mean - best['_final'].mean):+.2f}",
             "verdict": verdict(r["_final"], best["_final"])} for r in rows if r is not best]


def band(curves: Sequence[pd.DataFrame], x: str, y: str) -> pd.DataFrame:
    """Mean, min and max of ``y`` over repeats at every step they all have; column ``x`` is the step,
    or with ``x="wall"`` the repeats' mean wall time at that step (repeats share steps, not times)."""
    parts = [c[["step", "wall", y]].dropna(subset=[y]) for c in curves]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=[x, "mean", "min", "max", "n"])
    g = pd.concat(parts).groupby("step")
    out = pd.DataFrame({"mean": g[y].mean(), "min": g[y].min(), "max": g[y].max(), "n": g[y].count(),
                        "wall": g["wall"].mean()}).reset_index()
    out = out[out.n == len(parts)]
    return out.rename(columns={"step": "x"} if x == "step" else {"wall": "x"})[["x", "mean", "min", "max", "n"]] \
        .rename(columns={"x": x})


def export_frame(runs: Sequence[Mapping[str, Any]], metrics: pd.DataFrame) -> pd.DataFrame:
    """Every metric row of ``runs`` (dicts with id, name, scenario) with one column per setting."""
    rows = []
    for run in runs:
        s = settings_of(run["scenario"])
        rows.append({"run_id": run["id"], "run_name": run["name"], **s})
    settings = pd.DataFrame(rows, columns=["run_id", "run_name", *SETTING_NAMES])
    return settings.merge(metrics, on="run_id", how="right")[
        ["run_id", "run_name", *SETTING_NAMES, *[c for c in metrics.columns if c != "run_id"]]]


def export_filename(runs: Sequence[Mapping[str, Any]], what: str = "runs") -> str:
    """A file name that says what the file holds: how many runs of which models and optimisers."""
    models = sorted({str(settings_of(r["scenario"]).get("model")) for r in runs})
    opts = sorted({str(settings_of(r["scenario"]).get("optimizer")) for r in runs})
    return f"{what}-{len(runs)}-runs-{'-'.join(models)}-{'-'.join(opts)}"


@dataclass(frozen=True)
class VariantCurve:
    """One variant's curve over its repeats: its band (columns x, mean, min, max, n), each point the
    mean over a bucket of ``stride`` steps (1: every recorded step)."""

    label: str
    hover: str
    optimizer: str
    compression: str
    band: pd.DataFrame
    repeats: int
    stride: int = 1


@dataclass(frozen=True)
class Comparison:
    """Stored runs grouped into variants: curves, the summary table and the verdicts."""

    runs: list[dict]
    loss: list[VariantCurve]
    accuracy: list[VariantCurve]
    rows: list[dict]
    verdicts: list[dict]
    settings: dict = None  # variant label -> its settings (every one but the seed)
    same_seed: dict = None  # variant label -> runs left out because another run has its settings and seed

    @property
    def drawn_note(self) -> str:
        """A sentence for the figures' caption when a curve is drawn from bucket means, else ""."""
        stride = max((c.stride for c in self.loss), default=1)
        if stride <= 1:
            return ""
        return (f" Runs longer than {MAX_CURVE_POINTS:,} steps are drawn as at most {MAX_CURVE_POINTS:,} points: "
                f"each the mean over a bucket of consecutive steps (up to {stride:,}); the summary and the "
                "downloads use every step.")

    @property
    def loaded_words(self) -> str:
        """A sentence naming the runs measured under load ("" when none was): their times say as much about the
        other work as about their variant."""
        loaded = [(r["name"] or r["id"], r["info"]["load"]["others_share"]) for r in self.runs
                  if under_load(r["info"].get("load"))]
        if not loaded:
            return ""
        return (f"{len(loaded)} of the chosen runs were measured while other work took more than "
                f"{LOADED_SHARE * 100:.0f} % of this machine's CPU: "
                + ", ".join(f"{n} ({s * 100:.0f} %)" for n, s in loaded)
                + ". Their step times and seconds to the target are slower than a quiet machine gives; their losses "
                  "and accuracies per step are not.")

    def summary_frame(self) -> pd.DataFrame:
        """The summary as data: one row per variant with one column per setting, its repeats and how many of them
        reached the target and, for every number, its mean, the half-width of its 95 % interval, its minimum and
        maximum as numbers (the summary CSV)."""
        out = []
        for r in self.rows:
            row = {"variant": r["variant"], **{k: v for k, v in (self.settings or {}).get(r["variant"], {}).items()
                                               if k != "seed"}, "repeats": r["repeats"]}
            row[r["_reached"][0]] = r["_reached"][1]  # of the repeats: the times to the target are over these
            row["finished (count)"] = r["_finished"]  # of the repeats: the final accuracy is over these
            for name, (sp, scale) in r["_numbers"].items():
                stem, unit = (name.rsplit(" (", 1) + [""])[:2]
                unit = f" ({unit}" if unit else ""
                row |= {f"{stem} mean{unit}": sp.mean * scale if sp.n else None,
                        f"{stem} ± 95 %{unit}": sp.half95 * scale if sp.n > 1 else None,
                        f"{stem} min{unit}": sp.lo * scale if sp.n else None,
                        f"{stem} max{unit}": sp.hi * scale if sp.n else None}
            out.append(row)
        return pd.DataFrame(out)

    def table(self, predicted: Mapping[str, float] | None = None) -> pd.DataFrame:
        """The summary; with ``predicted`` (run id -> predicted step time, s, from the machine model),
        each variant's predicted step time beside its measured one."""
        df = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in self.rows])
        if predicted:
            at = list(df.columns).index("mean step time (ms)") + 1
            df.insert(at, "predicted step time (ms, modelled)",
                      [Spread.of(predicted.get(rid, math.nan) for rid in r["_ids"]).text(1e3) for r in self.rows])
        return df


def compare_runs(store: Any, run_ids: Sequence[str], target: float = 0.9, x: str = "step") -> Comparison:
    """Read ``run_ids`` from the run store, group them into variants (every setting but the seed) and
    summarise each over its repeats: the summary from every metric row (:func:`stored_result`), the
    curves from at most :data:`MAX_CURVE_POINTS` points per run (:func:`stored_curves`)."""
    runs = [store.get_run(rid) for rid in run_ids]
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault(variant_key(settings_of(run["scenario"])), []).append(run)
    order = list(OPTIMIZER_SHORT)

    def rank(key_members: tuple) -> tuple:  # optimisers in their usual order, dense before compressed
        s = settings_of(key_members[1][0]["scenario"])
        opt = s.get("optimizer")
        return (order.index(opt) if opt in order else len(order), (s.get("compression") or "none") != "none",
                compression_label(s))

    results: dict[str, list[RunResult]] = {}
    loss, acc = [], []
    dense = []
    settings: dict[str, dict] = {}
    same_seed: dict[str, list[str]] = {}
    for _, members in sorted(groups.items(), key=rank):
        s = settings_of(members[0]["scenario"])
        label = short_label(s)
        if label in results:  # two variants with the same short label: tell them apart by their settings
            label = f"{label} ({full_label(s)})"
        # Runs with the same settings and seed compute the same numbers: one run, not repeats (a finished one kept).
        by_seed: dict[Any, dict] = {}
        for run in sorted(members, key=lambda m: m["status"] != "done"):
            seed = settings_of(run["scenario"]).get("seed")
            if seed in by_seed:
                same_seed.setdefault(label, []).append(run["id"])
            else:
                by_seed[seed] = run
        members = list(by_seed.values())
        settings[label] = s
        rs = [replace(stored_result(store, run["id"], target, int(s.get("workers") or 1)),
                      finished=run["status"] == "done") for run in members]
        stride = curve_stride(max(int(store.progress(run["id"])) for run in members))  # one grid for the repeats
        results[label] = rs
        if (s.get("compression") or "none") == "none":
            dense += [r.bytes_per_step for r in rs if math.isfinite(r.bytes_per_step) and r.bytes_per_step > 0]
        common = dict(label=label, hover=full_label(s), optimizer=str(s.get("optimizer")),
                      compression=compression_label(s), repeats=len(members))
        curves = [stored_curves(store, run["id"], stride) for run in members]
        for out, column in ((loss, "loss"), (acc, "test_acc")):
            out.append(VariantCurve(band=band([c[column] for c in curves], x, column), stride=stride, **common))
    rows = summary_rows(results, float(np.mean(dense)) if dense else None, target)
    return Comparison(runs, loss, acc, rows, verdicts(rows), settings, same_seed)
