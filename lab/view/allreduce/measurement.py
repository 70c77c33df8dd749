"""The All-reduce page's measurement: real processes on this machine (gloo over loopback), the lab's ring beside
gloo's all_reduce, the α-β model fitted to their times, and the saved machine profile's model beside them.

A fit that cannot be right (no cost per byte, so an unlimited bandwidth) is not shown as a number but as a notice
saying why; a measurement taken while other work kept the machine busy carries the warning every measured run
carries (:func:`lab.processes.load_words`)."""

from __future__ import annotations

import math
from typing import Callable, Sequence

from lab.comm import measure as comm_measure
from lab.machine.fit import profile_errors
from lab.machine.profile import load_profile
from lab.modelled.collectives import GEOMEAN_ERROR_DEFINITION
from lab.modelled.collectives.timing import ring_features
from lab.processes import LoadMeter, load_words
from lab.scenario.units import fmt_rate
from lab.view.allreduce.tables import measured_table
from lab.view.section import Notice, Section

HEAD = Section("ar_measured_head", header="Measured on this machine", level="subheader", intro=(
    "Real processes on this machine's CPU (gloo, PyTorch's library of collectives for CPUs, over loopback): the lab's "
    "ring (`lab.comm.ring_allreduce`, isend/irecv) beside gloo's own `all_reduce`, each size after a warm-up (an "
    "untimed first run that pays one-off costs), median over iterations of the slowest process. The α-β model is then "
    "fitted to these times (least squares on relative error, t = 2(N−1)·α + 2(N−1)/N·S·β). The same from a shell: "
    "`python -m lab.comm.measure --procs 4`."))
SMALLEST = 4096  # bytes: the sizes measured go from here to the largest chosen, four times larger each


def measure(procs: int, top: int, iters: int, progress: Callable[[float, str], None] | None = None) -> list[dict]:
    """Time both implementations with ``procs`` processes from 4 KiB to ``top`` bytes, ``iters`` iterations a
    size; every row carries how busy the machine was with other work meanwhile (``load``,
    :class:`lab.processes.LoadMeter`). ``progress(fraction, text)`` hears of every row."""
    tell = None if progress is None else (
        lambda d, t, r: progress(d / t, f"{d} of {t}: {r['impl']} at {comm_measure.human_bytes(r['size'])}"))
    meter = LoadMeter()
    rows = comm_measure.measure(int(procs), comm_measure.sizes_between(SMALLEST, int(top), 4), int(iters), warmup=1, timeout=90,
                     op_timeout=30, progress=tell)
    load = meter.result()  # after the workers are reaped: their time is the measurement's own
    return [{**r, "load": load} for r in rows]


#: A fit whose bytes term is under this share of the modelled time at the largest size measured has found no
#: cost per byte: the times did not grow with the buffer size (a busy machine's delays drown the transfer).
MIN_BYTES_SHARE = 0.01


def fit_problem(fit) -> str | None:
    """Why a fitted α-β model cannot be right, or None: numbers that are not finite, a negative cost, or a cost
    per byte of 0 or next to it (an unlimited bandwidth: the bytes explain under :data:`MIN_BYTES_SHARE` of the
    largest size's time)."""
    if not (math.isfinite(fit.alpha) and math.isfinite(fit.beta)):
        return "the fit did not give finite numbers"
    if fit.alpha < 0 or fit.beta < 0:
        return "the fit gave a negative cost per step or per byte (a negative bandwidth)"
    steps, nbytes = ring_features(fit.n, max(fit.sizes))
    total = steps * fit.alpha + nbytes * fit.beta
    if not math.isfinite(fit.bandwidth) or nbytes * fit.beta < MIN_BYTES_SHARE * total:
        return ("the fitted cost per byte β came out as 0 or next to it, an unlimited bandwidth: the times did not "
                "grow with the buffer size over the sizes measured, so the fit put all of the time into α")
    return None


def _fit_words(impl: str, fit) -> str:
    return (f"**{impl}**: α = {fit.alpha * 1e6:.3g} µs, β = {fit.beta * 1e9:.3g} ns/B (≈ {fmt_rate(fit.bandwidth)}), "
            f"geometric-mean error **{100 * fit.geomean_error:.1f}%**.")


def _profile_note(rows: Sequence[dict]) -> tuple[dict, str, str]:
    """The saved machine profile's α-β for these processes (impl -> CommFit), its date, and the caption's words
    on its error against these measurements."""
    prof = load_profile()
    fits = prof.measured_allreduce.get(str(rows[0]["procs"]), {}) if prof is not None else {}
    if not fits:
        return {}, "", ""
    errs = profile_errors(fits, rows)
    return fits, prof.created, (f"; dotted: the saved machine profile's α-β (modelled, calibrated "
                                f"{prof.created[:16]}), its error against these measurements "
                                + ", ".join(f"{i} {e * 100:.0f}%" for i, e in errs.items()))


def measured(rows: Sequence[dict]) -> list[Section]:
    """The measured times beside the fitted α-β model (and the machine profile's), the table, and each fit in
    numbers: a fit that cannot be right as a notice saying why, and a measurement under load with its warning."""
    fits = {impl: comm_measure.fit_rows(rows, impl) for impl in comm_measure.IMPLS}
    problems = {impl: p for impl, f in fits.items() if (p := fit_problem(f)) is not None}
    shown = {impl: (None if impl in problems else f) for impl, f in fits.items()}
    profile, created, note = _profile_note(rows)
    load = load_words(rows[0].get("load"))
    words = " ".join(_fit_words(impl, f) for impl, f in shown.items() if f is not None)
    return [
        Section("ar_measured", chart="allreduce.measured_figure", kind="measured",
                chart_input=dict(rows=rows, fits=shown, title=f"{rows[0]['procs']} processes", profile=profile,
                                 created=created),
                notices=(Notice(load + " The α-β fit below is fitted to these slower times.", "warning",
                                ":material/speed:"),) if load else (),
                caption="markers: median time (bars: fastest and slowest iteration); dashed lines: the fitted α-β "
                        "model (modelled)" + note + "."),
        Section("ar_measured_times", table=measured_table(rows, shown, comm_measure.IMPL_LABELS), kind="measured"),
        Section("ar_fits", intro=words or None, kind="measured",
                notices=tuple(Notice(f"{impl}: no α-β model is shown, because {p}. Measure larger sizes, or on a "
                                     "quiet machine.", "warning", ":material/warning:") for impl, p in problems.items()),
                caption="times, algbw and busbw are measured; the modelled column and the errors come from the fit. "
                        f"{GEOMEAN_ERROR_DEFINITION}."),
    ]
