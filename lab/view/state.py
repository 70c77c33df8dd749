"""The view: every control a page shows that changes what it draws, in one declarative table.

The Scenario holds what a person sets up about the cluster and the training; this table holds how
they look at it (an all-reduce algorithm, a step, a buffer size, a placement strategy, the runs
they picked). As in TensorFlow Playground's ``state.ts``, one table drives everything: the page's
session state and its defaults, validation, and the compact ``?v=`` form that a link carries, so a
link opens the same page with the same controls and figures.

Each control is keyed by the widget key its page uses. A control whose key is a prefix (one widget
per device, say) covers every key that starts with it. A default may be taken from the Scenario
(the Placement page's model starts as the training model). Decoding a link never raises: an unknown
or invalid entry falls back to its default and comes back as a notice a page can show.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping

from lab.compression.cholesky import MATRIX_NAMES
from lab.errors import LabError
from lab.modelled.placement import STRATEGIES
from lab.optim.playground import FUNCTIONS, MAX_COUNTEREXAMPLE_STEPS, PERIOD, SCHEDULES
from lab.scenario.catalogue import PRESETS
from lab.scenario.document import Spec
from lab.scenario.names import ALGORITHMS, COST_MODELS, MODELS, OPTIMIZERS, SPARSIFIERS
from lab.scenario.text import check_name, loads, shown

MAX_VIEW_CHARS = 20_000  # a link's view part longer than this is not read
MAX_VIEW_ENTRIES = 400  # every control of every page, and a per-device value for each of 256 devices


@dataclass(frozen=True)
class Control:
    """One control of one page that travels in a link: its page, and its field (type, default, allowed
    values, label) in the same :class:`lab.scenario.document.Spec` the Scenario's fields are."""

    page: str
    spec: Spec
    prefix: bool = False
    from_scenario: Callable[[Any], Any] | None = None
    prefix_key: str = ""  # for a prefix control: the key it owns every continuation of (set by the table)

    def check(self, key: str, value: Any) -> Any:
        if self.prefix:  # the rest of the key names a device or an operator: a name like any other
            check_name(key[len(self.prefix_key):], f"view.{self.prefix_key}", what="the name in a control's key")
        if self.spec.type is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:  # an integer of hundreds of digits
                raise LabError("is not a number this control takes (too large)", where=f"view.{key}") from None
        if self.spec.type is tuple and self.spec.choices is not None:  # a set of allowed values, any type
            if not isinstance(value, (list, tuple)) or len(value) > len(self.spec.choices):
                raise LabError(f"must be a list of allowed values (got {shown(value)})", where=f"view.{key}")
            if any(isinstance(v, bool) or v not in self.spec.choices for v in value):
                raise LabError(f"holds a value that is not allowed (got {shown(value)})", where=f"view.{key}")
            return tuple(value)
        try:
            value = self.spec.check(key, value, "view")
        except (OverflowError, ValueError) as exc:  # an infinite or huge number: not a value of any control
            if isinstance(exc, LabError):
                raise
            raise LabError(f"is not a number this control takes ({type(exc).__name__})", where=f"view.{key}") from None
        if self.spec.choices is not None and self.spec.type is not str and value not in self.spec.choices:
            raise LabError(f"{shown(value)} is not one of the allowed values", where=f"view.{key}")
        return value

    @property
    def label(self) -> str:
        return self.spec.label

    def default(self, scenario: Any = None) -> Any:
        if self.from_scenario is not None and scenario is not None:
            return self.from_scenario(scenario)
        return self.spec.default


def _c(page: str, type_: type, default: Any, label: str, choices: tuple | None = None, lo: float | None = None,
       hi: float | None = None, *, help: str = "", widget: str = "", step: float | None = None,
       format: str | None = None, family: str | None = None, **kw: Any) -> Control:
    return Control(page, Spec(type_, default, choices, lo, hi, help=help, label=label, widget=widget, step=step,
                              format=format, family=family), **kw)


RING_COMPRESSORS = SPARSIFIERS  # the compressors the sparse ring simulation takes
ALLREDUCE_SIZES = tuple(4 << 10 << (2 * k) for k in range(10))  # 4 KiB .. 1 GiB
TRANSFER_SIZES_MB = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)

VIEW: dict[str, Control] = {
    # ---- Topology
    "topo_size": _c("topology", float, 10.0, "Transfer size (MB)", TRANSFER_SIZES_MB, widget="select_slider"),
    "topo_from": _c("topology", str, "", "route from"),
    "topo_to": _c("topology", str, "", "route to"),
    "topo_cmp": _c("topology", str, "as_pcie", "compare with", ("as_pcie", *PRESETS)),
    # ---- Placement
    "pl_model": _c("placement", str, "mlp", "Model", tuple(MODELS), family="model", from_scenario=lambda sc: sc.training.model),
    "pl_batch": _c("placement", int, 32, "Batch size (samples)", lo=1, hi=65536, from_scenario=lambda sc: sc.training.batch_size),
    "pl_strategy": _c("placement", str, "greedy_eft", "Strategy", tuple(STRATEGIES), family="strategy"),
    "pl_cost": _c("placement", str, "datasheet", "Cost model", COST_MODELS, family="cost_model", widget="radio"),
    "pl_why": _c("placement", str, "", "operator explained"),
    "pl_bal_mode": _c("placement", str, "model", "What is balanced", ("model", "data"), widget="radio"),
    "pl_slow_": _c("placement", float, 1.0, "slowdown", lo=0.01, hi=1e6, prefix=True),
    "pl_noise": _c("placement", float, 0.02, "noise σ", lo=0.0, hi=1.0, step=0.01),
    "pl_seed": _c("placement", int, 0, "seed", lo=0, hi=2**31 - 1, step=1, from_scenario=lambda sc: sc.training.seed),
    "pl_tol": _c("placement", float, 0.05, "tolerance", lo=0.0, hi=1.0, step=0.01),
    "pl_patience": _c("placement", int, 3, "patience (rounds)", lo=1, hi=100, step=1),
    "pl_rounds": _c("placement", int, 40, "max rounds", lo=1, hi=500, step=1),
    "pl_micro": _c("placement", int, 4, "Micro-batches", lo=1, hi=64, help="each batch is pipelined in this many parts",
                   from_scenario=lambda sc: sc.training.micro_batches),
    "pl_steps": _c("placement", int, 40, "Steps", lo=5, hi=2000),
    "pl_emulate": _c("placement", bool, True, "Emulate the drawn cluster", widget="toggle",
                     help="off: every device is this machine, and only the calibrated costs are tested"),
    "pl_repeats": _c("placement", int, 1, "Repeats per strategy", lo=1, hi=5,
                     help="Run every strategy: each plan runs this many times (seeds 0, 1, ...)"),
    "pl_runs": _c("placement", tuple, (), "placement runs shown"),
    # The plan kept for comparison, as its record's JSON (lab.view.placement.baseline_json), so a link keeps it.
    "pl_baseline": Control("placement", Spec(str, "", max_len=MAX_VIEW_CHARS, label="the plan kept as the baseline")),
    "pl_round_steps": _c("placement", int, 5, "Steps per round", lo=2, hi=1000,
                         help="the first step of each round is a warm-up"),
    "pl_bal_runs": _c("placement", tuple, (), "balancing runs shown"),
    # ---- All-reduce
    "ar_source": _c("allreduce", str, "topology", "Devices", ("topology", "identical"), widget="radio"),
    "ar_devices": _c("allreduce", tuple, (), "devices taking part"),
    "ar_n": _c("allreduce", int, 4, "N", lo=2, hi=16, widget="slider"),
    "ar_bw": _c("allreduce", float, 25.0, "Link bandwidth (GB/s per direction)", lo=0.01, hi=1000.0),
    "ar_lat": _c("allreduce", float, 1.0, "Link latency (µs)", lo=0.0, hi=10000.0),
    "ar_alg": _c("allreduce", str, "ring", "Algorithm", tuple(ALGORITHMS), family="algorithm"),
    "ar_size": _c("allreduce", int, 4 << 20, "Buffer per device S", ALLREDUCE_SIZES, widget="select_slider"),
    "ar_order": _c("allreduce", str, "given", "Ring order", ("given", "lab"), widget="radio"),
    "ar_step": _c("allreduce", int, 0, "step", lo=0, hi=100_000),
    "ar_work": _c("allreduce", float, 1.0, "Work per device and iteration (GFLOP, run as matrix multiplies)", lo=0.001,
                   hi=1e6),
    "ar_procs": _c("allreduce", int, 2, "Processes", (2, 3, 4)),
    "ar_top": _c("allreduce", int, 256 << 10, "Largest size", (64 << 10, 256 << 10, 1 << 20)),
    "ar_iters": _c("allreduce", int, 5, "Iterations per size", lo=1, hi=50),
    # ---- Training (the settings of a run are the Scenario's; these only shape a comparison)
    "tr_repeats": _c("training", int, 3, "Repeats (seeds)", lo=1, hi=10,
                     help="each variant runs with this many seeds, so its noise shows"),
    # ---- Compare
    "cmp_runs": _c("compare", tuple, (), "runs"),
    "cmp_x": _c("compare", str, "step", "Against", ("step", "wall"), widget="radio"),
    "cmp_target": _c("compare", float, 90.0, "Target test accuracy (%)", lo=1.0, hi=100.0, step=1.0,
                     help="The summary gives the steps and seconds each variant took to reach it"),
    # ---- Optimisers
    "pg_fn": _c("optimisers", str, "rosenbrock", "Test function", tuple(FUNCTIONS)),
    "pg_opts": _c("optimisers", tuple, tuple(OPTIMIZERS), "Optimisers", tuple(OPTIMIZERS), family="optimizer"),
    "pg_steps": _c("optimisers", int, 400, "Steps (count)", lo=10, hi=2000, widget="slider", step=10),
    "pg_lr": _c("optimisers", float, 0.1, "Learning rate lr", lo=1e-4, hi=10.0, format="%.4f"),
    "pg_seed": _c("optimisers", int, 0, "Noise seed", lo=0, hi=2**31 - 1,
                  help="Fixes the gradient noise of the noisy quadratic; every optimiser sees the same noise"),
    "pg_own_start": _c("optimisers", bool, False, "Own start point", help="Otherwise each function's usual start point"),
    "pg_x0": _c("optimisers", float, -1.5, "start x", lo=-10.0, hi=10.0),
    "pg_y0": _c("optimisers", float, 2.0, "start y", lo=-10.0, hi=10.0),
    "ce_schedule": _c("optimisers", str, SCHEDULES[0], "Step size", tuple(SCHEDULES), widget="radio"),
    "ce_lr": _c("optimisers", float, 1.0, "lr", lo=1e-4, hi=10.0, format="%.4f"),
    "ce_steps": _c("optimisers", int, 500 * PERIOD, "Steps (count)", lo=PERIOD, hi=MAX_COUNTEREXAMPLE_STEPS,
                   step=PERIOD),
    "ce_opts": _c("optimisers", tuple, tuple(OPTIMIZERS), "Optimisers", tuple(OPTIMIZERS), family="optimizer"),
    # ---- Compression
    "cp_source": _c("compression", str, "real", "Gradient", ("real", "generated"), widget="radio"),
    "cp_model": _c("compression", str, "mlp", "Model (real)", tuple(MODELS), family="model"),
    "cp_n": _c("compression", int, 1_000_000, "Entries (generated, count)", lo=1_000, hi=5_000_000, step=100_000),
    "cp_batch": _c("compression", int, 64, "Batch per worker (digits)", lo=8, hi=512),
    "cp_group": _c("compression", int, 1024, "Group size (entries)", lo=1, hi=65536,
                   from_scenario=lambda sc: int(min(sc.training.compression.group_size, 65536))),
    "cp_seed": _c("compression", int, 0, "Seed", lo=0, hi=2**31 - 1, from_scenario=lambda sc: sc.training.seed),
    "cp_ratios": _c("compression", tuple, (0.001, 0.01, 0.05, 0.1), "Ratios (kept fraction)",
                    (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)),
    "ring_workers": _c("compression", int, 4, "Workers N", lo=2, hi=8, widget="slider",
                       from_scenario=lambda sc: max(4, sc.training.workers)),
    "ring_kind": _c("compression", str, "group_topk", "Compressor", RING_COMPRESSORS, family="compressor",
                    from_scenario=lambda sc: sc.training.compression.kind
                    if sc.training.compression.kind in RING_COMPRESSORS else RING_COMPRESSORS[0]),
    "ring_ratio": _c("compression", float, 0.01, "Ratio (kept fraction)", lo=1e-4, hi=1.0, format="%.4f",
                     from_scenario=lambda sc: max(1e-4, sc.training.compression.ratio)),
    "ch_matrix": _c("compression", str, MATRIX_NAMES[2], "Matrix", tuple(MATRIX_NAMES)),
    "ch_damping": _c("compression", float, 1e-3, "Damping (× mean diagonal)", lo=0.0, hi=1.0, format="%.4f"),
    "ch_workers": _c("compression", int, 4, "Workers", lo=2, hi=8),
    "ch_batch": _c("compression", int, 256, "Batch (digits)", lo=2, hi=1797),
    "ch_by_class": _c("compression", bool, False, "Non-IID (by class)"),
    # ---- Jobs
    "jobs_class": _c("jobs", bool, False, "Show the whole class's jobs (read-only)", widget="toggle",
                     help="Every session's jobs and the command line's, to read; you stop and release only yours"),
    # ---- Fidelity
    "fid_quick": _c("fidelity", bool, False, "Quick (fewer repeats, about half the time)", widget="toggle"),
    "fid_steps": _c("fidelity", int, 200, "steps per run", lo=20, hi=1000),
}
# A prefix control knows its own key, so that it can check the name that follows it.
VIEW = {k: replace(c, prefix_key=k) if c.prefix else c for k, c in VIEW.items()}


def control_for(key: str) -> Control | None:
    """The control that owns widget key ``key`` (exactly, or by a prefix control), else None."""
    c = VIEW.get(key)
    if c is not None:
        return c
    for k, c in VIEW.items():
        if c.prefix and key.startswith(k) and len(key) > len(k):
            return c
    return None


def page_keys(page: str) -> list[str]:
    return [k for k, c in VIEW.items() if c.page == page and not c.prefix]


def defaults(scenario: Any = None) -> dict[str, Any]:
    """Every (non-prefix) control's default, some taken from ``scenario``."""
    return {k: c.default(scenario) for k, c in VIEW.items() if not c.prefix}


def checked(values: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The entries of ``values`` that are known controls with allowed values, and a notice for each
    entry that is not (it is left out, so its default stays)."""
    good: dict[str, Any] = {}
    notices: list[str] = []
    if len(values) > MAX_VIEW_ENTRIES:
        return {}, [f"the view holds {len(values):,} entries; the lab has at most {MAX_VIEW_ENTRIES}, so defaults "
                    "are shown"]
    for key, value in values.items():
        if not isinstance(key, str):
            notices.append("an entry of the view has a name that is not text; it is ignored")
            continue
        c = control_for(key)
        if c is None:
            notices.append(f"the control {shown(key, 60)} is unknown here; it is ignored")
            continue
        try:
            good[key] = c.check(key, value)
        except LabError as exc:
            notices.append(f"{c.label}: {exc}; its default is shown")
    return good, notices


def _plain_json(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return value  # json keeps 10.0 as 10.0, so the type round-trips
    return value


def encode(values: Mapping[str, Any], scenario: Any = None) -> str:
    """The compact link form of ``values``: only the controls that differ from their default,
    as deflated JSON in base64url. Unknown keys and invalid values are left out."""
    good, _ = checked(values)
    base = defaults(scenario)
    diff = {k: _plain_json(v) for k, v in sorted(good.items()) if k not in base or base[k] != v}
    raw = json.dumps(diff, separators=(",", ":"), ensure_ascii=True).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def decode(text: Any) -> tuple[dict[str, Any], list[str]]:
    """The controls a link's ``?v=`` carries, checked against the table, and notices for whatever
    was left out. Never raises: a damaged link gives no values and one notice."""
    if not isinstance(text, str) or not text:
        return {}, []
    if len(text) > MAX_VIEW_CHARS:
        return {}, [f"the view part of the link is longer than {MAX_VIEW_CHARS:,} characters; defaults are shown"]
    try:
        raw = zlib.decompressobj().decompress(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)), 1 << 20)
        # Bounded like a scenario file: no NaN or Infinity, no key twice, nesting refused before any quote.
        data = loads(raw.decode("utf-8"), finite=True)
    except LabError as exc:
        return {}, [f"the view part of the link is damaged ({exc}); defaults are shown"]
    except (ValueError, zlib.error, UnicodeDecodeError) as exc:
        return {}, [f"the view part of the link is damaged ({type(exc).__name__}); defaults are shown"]
    if not isinstance(data, dict):
        return {}, ["the view part of the link is not a table of controls; defaults are shown"]
    return checked(data)


def fit_choice(value: Any, options: Iterable[Any], fallback: Any) -> tuple[Any, bool]:
    """``value`` if it is one of ``options``, else ``fallback``; and whether it changed."""
    opts = list(options)
    if value in opts:
        return value, False
    return fallback, True


def fit_subset(value: Iterable[Any], options: Iterable[Any], fallback: Iterable[Any]) -> tuple[tuple, bool]:
    """``value`` as it is while every item is still one of ``options`` (a person's own choice, even
    of one device, stays theirs); otherwise without the items that are gone, or ``fallback`` when
    that leaves fewer than two (a choice of participants needs two) or nothing was chosen yet. The
    second item says whether it changed."""
    opts = list(options)
    value = tuple(value)
    kept = tuple(v for v in value if v in opts)
    if value and kept == value:
        return kept, False
    if len(kept) >= 2:
        return kept, True
    return tuple(fallback), tuple(fallback) != tuple(value)


def fit_range(value: Any, lo: float, hi: float) -> tuple[Any, bool]:
    """``value`` clamped into [lo, hi], and whether it changed (NaN becomes ``lo``)."""
    if isinstance(value, float) and math.isnan(value):
        return lo, True
    v = min(max(value, lo), hi)
    return v, v != value
