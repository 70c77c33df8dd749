"""The view: every control a page shows that changes what it draws, in one declarative table.

The Scenario holds what a person sets up about the cluster and the training; this table holds how
they look at it (an all-reduce algorithm, a step, a buffer size, a placement strategy, the runs
they picked). As in TensorFlow Playground's ``state.ts``, one table drives everything: the page's
session state and its defaults, validation, and the compact ``?v=`` form that a link carries, so a
link opens the same page with the same controls and figures.

Each control is keyed by the widget key its page uses. A control whose key is a prefix (one widget
per device, say) covers every key that starts with it. Every input a page shows is here; a control
marked *transient* is one whose value means nothing in another session or later (a password, a file
being uploaded, a form being filled in, a confirmation tick, a choice the Scenario records once it is
applied): its widget is built from its row like any other, but it is not kept across pages and no
link carries it. A default may be taken from the Scenario
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
from lab.jobs.grid import GRID_DEFAULT, GRID_VARIANTS
from lab.jobs.limits import MAX_PROCS, MAX_STEPS
from lab.modelled.placement import STRATEGIES
from lab.optim.playground import FUNCTIONS, MAX_COUNTEREXAMPLE_STEPS, PERIOD, SCHEDULES
from lab.scenario.catalogue import DEVICE_CATALOGUE, PRESET_LABELS, PRESETS
from lab.scenario.document import UPLOAD_MB, Setting
from lab.scenario.names import (ANY_MODEL, ALGORITHMS, COST_MODELS, FAULT_KINDS, FAULT_POLICIES, MODELS, OPTIMIZERS,
                                PIPELINE_SCHEDULES, SPARSIFIERS)
from lab.scenario.text import check_name, loads, shown
from lab.scenario.topology import LINK_KINDS

MAX_VIEW_CHARS = 20_000  # a link's view part longer than this is not read
MAX_VIEW_ENTRIES = 400  # every control of every page, and a per-device value for each of 256 devices


@dataclass(frozen=True)
class Control:
    """One control of one page that travels in a link: its page, and its field (type, default, allowed
    values, label) in the same :class:`lab.scenario.document.Setting` the Scenario's fields are."""

    page: str
    setting: Setting
    prefix: bool = False
    from_scenario: Callable[[Any], Any] | None = None
    prefix_key: str = ""  # for a prefix control: the key it owns every continuation of (set by the table)
    transient: bool = False  # neither kept across pages nor carried by a link
    advanced: bool = False  # lesson mode hides it (its value stays in force)

    def check(self, key: str, value: Any) -> Any:
        if self.prefix:  # the rest of the key names a device or an operator: a name like any other
            check_name(key[len(self.prefix_key):], f"view.{self.prefix_key}", what="the name in a control's key")
        if self.setting.type is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:  # an integer of hundreds of digits
                raise LabError("is not a number this control takes (too large)", where=f"view.{key}") from None
        if self.setting.type is tuple and self.setting.choices is not None:  # a set of allowed values, any type
            if not isinstance(value, (list, tuple)) or len(value) > len(self.setting.choices):
                raise LabError(f"must be a list of allowed values (got {shown(value)})", where=f"view.{key}")
            if any(isinstance(v, bool) or v not in self.setting.choices for v in value):
                raise LabError(f"holds a value that is not allowed (got {shown(value)})", where=f"view.{key}")
            return tuple(value)
        try:
            value = self.setting.check(key, value, "view")
        except (OverflowError, ValueError) as exc:  # an infinite or huge number: not a value of any control
            if isinstance(exc, LabError):
                raise
            raise LabError(f"is not a number this control takes ({type(exc).__name__})", where=f"view.{key}") from None
        if self.setting.choices is not None and self.setting.type is not str and value not in self.setting.choices:
            raise LabError(f"{shown(value)} is not one of the allowed values", where=f"view.{key}")
        return value

    @property
    def label(self) -> str:
        return self.setting.label

    def default(self, scenario: Any = None) -> Any:
        if self.from_scenario is not None and scenario is not None:
            return self.from_scenario(scenario)
        return self.setting.default


def _c(page: str, type_: type, default: Any, label: str, choices: tuple | None = None, lo: float | None = None,
       hi: float | None = None, *, help: str = "", widget: str = "", step: float | None = None,
       format: str | None = None, family: str | None = None, names: tuple = (), **kw: Any) -> Control:
    return Control(page, Setting(type_, default, choices, lo, hi, help=help, label=label, widget=widget, step=step,
                              format=format, family=family, names=names), **kw)


RING_COMPRESSORS = SPARSIFIERS  # the compressors the sparse ring simulation takes
ALLREDUCE_SIZES = tuple(4 << 10 << (2 * k) for k in range(10))  # 4 KiB .. 1 GiB
TRANSFER_SIZES_MB = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)

VIEW: dict[str, Control] = {
    # ---- Topology
    "topo_size": _c("topology", float, 10.0, "Transfer size (MB)", TRANSFER_SIZES_MB, widget="select_slider",
                    names=tuple((x, f"{x:g}") for x in TRANSFER_SIZES_MB)),
    "topo_from": _c("topology", str, "", "from"),
    "topo_to": _c("topology", str, "", "to"),
    "topo_cmp": _c("topology", str, "as_pcie", "Compare this cluster with", ("as_pcie", *PRESETS),
                   names=(("as_pcie", "the same cluster with PCIe through the host"), *PRESET_LABELS.items())),
    # What the Load button loads, the file being uploaded, the editors' edits and the new device's form: what
    # they change is the Scenario, which the link carries.
    "topo_preset": _c("topology", str, next(iter(PRESETS)), "Preset", tuple(PRESETS), transient=True,
                      names=tuple(PRESET_LABELS.items())),
    "topo_upload": _c("topology", str, "", f"…or upload a scenario or topology JSON (max {UPLOAD_MB} MB)", widget="file", transient=True),
    "topo_dev_": _c("topology", tuple, (), "devices", widget="table", prefix=True, transient=True),
    "topo_sw_": _c("topology", tuple, (), "switches", widget="table", prefix=True, transient=True),
    "topo_link_": _c("topology", tuple, (), "links", widget="table", prefix=True, transient=True),
    "topo_new_type": _c("topology", str, "gpu", "type", tuple(DEVICE_CATALOGUE),
                        transient=True),
    "topo_new_name": _c("topology", str, "", "name", widget="text", transient=True,
                        help="A free name is proposed; every device and switch needs its own"),
    "topo_new_attach": _c("topology", str, "", "link it to", transient=True),
    "topo_new_kind": _c("topology", str, LINK_KINDS[0], "link kind", tuple(LINK_KINDS), transient=True,
                        help="Fills in the kind's catalogue bandwidth and latency unless you typed your own"),
    "topo_new_bw": _c("topology", float, 0.0, "bandwidth (GB/s each way)", lo=0.0, format="%.4g", transient=True),
    "topo_new_lat": _c("topology", float, 0.0, "latency (µs)", lo=0.0, format="%.4g", transient=True),
    # ---- Placement
    "pl_upload": _c("placement", str, "", "Upload your own network as an ONNX file (at most 5 MB)", widget="file",
                    transient=True),
    "pl_model": _c("placement", str, "mlp", "Model", ANY_MODEL, family="model", from_scenario=lambda sc: sc.training.model),
    "pl_batch": _c("placement", int, 32, "Batch size (samples)", lo=1, hi=65536, from_scenario=lambda sc: sc.training.batch_size),
    "pl_strategy": _c("placement", str, "greedy_eft", "Strategy", tuple(STRATEGIES), family="strategy",
                      help=("greedy earliest finish: each operator in turn on the device where it would finish "
                            "earliest; HEFT (Heterogeneous Earliest Finish Time): the same, the operators with the "
                            "longest path to the end placed first; the makespan is the step's length")),
    "pl_cost": _c("placement", str, "datasheet", "Cost model", COST_MODELS, family="cost_model", widget="radio",
                  help="datasheet: the topology's numbers; calibrated: numbers fitted to timings of this machine "
                       "(the Fidelity page calibrates it)"),
    "pl_why": _c("placement", str, "", "Operator"),
    # The pin form: the pins themselves are the Scenario's.
    "pl_pin_op": _c("placement", str, "", "Operator to pin", transient=True),
    "pl_pin_dev": _c("placement", str, "", "on device", transient=True),
    "pl_run_drawn": _c("placement", str, "", "Run drawn"),
    "pl_bal_mode": _c("placement", str, "model", "What is balanced", ("model", "data"), widget="radio",
                      names=(("model", "operators across devices (model parallel)"),
                             ("data", "batch shares (data parallel)")),
                      help="model parallel: each device runs its own operators of the model; data parallel: every "
                           "device runs the whole model on its share of each batch"),
    "pl_slow_": _c("placement", float, 1.0, "slowdown (×)", lo=0.01, hi=1e6, prefix=True),
    "pl_pick_slow": _c("placement", str, "", "Device to slow down"),
    # The simulated balancing loop's knobs: lesson mode hides them (their values stay in force).
    "pl_noise": _c("placement", float, 0.02, "noise σ", lo=0.0, hi=1.0, step=0.01, advanced=True),
    "pl_seed": _c("placement", int, 0, "seed", lo=0, hi=2**31 - 1, step=1, from_scenario=lambda sc: sc.training.seed,
                  advanced=True),
    "pl_tol": _c("placement", float, 0.05, "tolerance", lo=0.0, hi=1.0, step=0.01, advanced=True),
    "pl_patience": _c("placement", int, 3, "patience (rounds)", lo=1, hi=100, step=1, advanced=True),
    "pl_rounds": _c("placement", int, 40, "max rounds", lo=1, hi=500, step=1, advanced=True),
    "pl_micro": _c("placement", int, 4, "Micro-batches", lo=1, hi=64,
                   help=("each batch is pipelined in this many parts (micro-batches, in the order the schedule says); "
                         "more parts shrink the bubble, the time stages wait at the start and end"),
                   from_scenario=lambda sc: sc.training.micro_batches),
    "pl_schedule": _c("placement", str, "gpipe", "Schedule", PIPELINE_SCHEDULES, family="schedule",
                      help=("GPipe: every micro-batch forward, then every backward (a device holds all their "
                            "activations); 1F1B: after a warm-up, one forward and one backward in turn (a device "
                            "holds at most as many as there are pieces from it to the end), for plans that give "
                            "each device one stretch of the model; interleaved 1F1B: the same over several "
                            "stretches per device, for plans that go round the devices in turn (the even rounds "
                            "strategy makes one); zero bubble: each backward split into the input's gradient, sent "
                            "at once, and the weights' gradient, done where the others leave a gap"),
                      from_scenario=lambda sc: sc.training.schedule),
    "pl_steps": _c("placement", int, 40, "Steps", lo=5, hi=2000),
    "pl_emulate": _c("placement", bool, True, "Emulate the drawn cluster", widget="toggle",
                     help="off: every device is this machine, and only the calibrated costs are tested"),
    "pl_repeats": _c("placement", int, 1, "Repeats per strategy", lo=1, hi=5,
                     help="Run every strategy: each plan runs this many times (seeds 0, 1, ...)"),
    "pl_runs": _c("placement", tuple, (), "placement runs shown"),
    # The plan kept for comparison, as its record's JSON (lab.view.placement.baseline_json), so a link keeps it.
    "pl_baseline": Control("placement", Setting(str, "", max_len=MAX_VIEW_CHARS, label="the plan kept as the baseline")),
    "pl_round_steps": _c("placement", int, 5, "Steps per round", lo=2, hi=1000,
                         help="the first step of each round is a warm-up: it pays one-off costs, so it is not timed"),
    "pl_bal_runs": _c("placement", tuple, (), "balancing runs shown"),
    # ---- All-reduce
    "ar_source": _c("allreduce", str, "topology", "Devices", ("topology", "identical"), widget="radio",
                    names=(("topology", "of the scenario's topology"), ("identical", "N identical devices"))),
    "ar_devices": _c("allreduce", tuple, (), "Devices taking part (ring order = this order)"),
    "ar_n": _c("allreduce", int, 4, "N", lo=2, hi=16, widget="slider"),
    "ar_bw": _c("allreduce", float, 25.0, "Link bandwidth (GB/s per direction)", lo=0.01, hi=1000.0, advanced=True),
    "ar_lat": _c("allreduce", float, 1.0, "Link latency (µs)", lo=0.0, hi=10000.0, advanced=True),
    "ar_alg": _c("allreduce", str, "ring", "Algorithm", tuple(ALGORITHMS), family="algorithm"),
    "ar_size": _c("allreduce", int, 4 << 20, "Buffer per device S", ALLREDUCE_SIZES, widget="select_slider"),
    "ar_order": _c("allreduce", str, "given", "Ring order", ("given", "lab"), widget="radio",
                   names=(("given", "as listed"), ("lab", "the lab's: widest slowest hop"))),
    "ar_step": _c("allreduce", int, 0, "Step (0 = before the first)", lo=0, hi=100_000, widget="slider"),
    "ar_play": _c("allreduce", bool, False, "▶ Play the steps", widget="toggle", transient=True,
                  help="moves the one step control, the figure and the page link together, a step a second"),
    "ar_work": _c("allreduce", float, 1.0, "Work per device and iteration (GFLOP, run as matrix multiplies)", lo=0.001,
                   hi=1e6, advanced=True),
    # Edits of the compute times derived from the work above; the link carries the work, not the edits.
    "ar_compute": _c("allreduce", tuple, (), "compute per device", widget="table", transient=True, advanced=True),
    "ar_procs": _c("allreduce", int, 2, "Processes", (2, 3, 4)),
    "ar_top": _c("allreduce", int, 256 << 10, "Largest size", (64 << 10, 256 << 10, 1 << 20), advanced=True),
    "ar_iters": _c("allreduce", int, 5, "Iterations per size", lo=1, hi=50, advanced=True),
    # ---- Training (the settings of a run are the Scenario's; these only shape a comparison)
    "tr_repeats": _c("training", int, 3, "Repeats (seeds)", lo=1, hi=10,
                     help="each variant runs with this many seeds, so its noise shows", advanced=True),
    # One box per worker: together they are the Scenario's worker devices.
    "tr_dev_": _c("training", str, "", "device", prefix=True, transient=True),
    # ---- Compare
    "cmp_class": _c("compare", bool, False, "Include the whole class's runs (read-only)", widget="toggle",
                    help="Other sessions' runs to compare with yours; you delete only your own"),
    "cmp_runs": _c("compare", tuple, (), "Runs"),
    "cmp_confirm": _c("compare", bool, False, "Yes, delete the chosen runs", transient=True),
    "cmp_x": _c("compare", str, "step", "Against", ("step", "wall"), widget="radio",
                names=(("step", "step (count)"), ("wall", "wall time (s)"))),
    "cmp_target": _c("compare", float, 90.0, "Target test accuracy (%)", lo=1.0, hi=100.0, step=1.0,
                     help="The summary gives the steps and seconds each variant took to reach it"),
    # ---- Class
    "cls_code": _c("classroom", str, "", "Join code", transient=True, help="six letters and digits, from the teacher"),
    "cls_name": _c("classroom", str, "", "Your name", transient=True, help="as the teacher should see it"),
    "cls_lesson": _c("classroom", str, "", "Lesson for the class", transient=True),
    "cls_remove": _c("classroom", str, "", "Student to remove", transient=True),
    "cls_back": _c("classroom", str, "", "Removed student", transient=True),
    # ---- Optimisers
    "pg_fn": _c("optimisers", str, "rosenbrock", "Test function", tuple(FUNCTIONS),
                names=tuple((k, f.label) for k, f in FUNCTIONS.items())),
    "pg_opts": _c("optimisers", tuple, tuple(OPTIMIZERS), "Optimisers", tuple(OPTIMIZERS), family="optimizer"),
    "pg_steps": _c("optimisers", int, 400, "Steps (count)", lo=10, hi=2000, widget="slider", step=10),
    "pg_lr": _c("optimisers", float, 0.1, "Learning rate lr", lo=1e-4, hi=10.0, format="%.4f"),
    "pg_seed": _c("optimisers", int, 0, "Noise seed", lo=0, hi=2**31 - 1,
                  help="Fixes the gradient noise of the noisy quadratic; every optimiser sees the same noise",
                  advanced=True),
    "pg_own_start": _c("optimisers", bool, False, "Own start point", help="Otherwise each function's usual start point",
                       advanced=True),
    "pg_x0": _c("optimisers", float, -1.5, "start x", lo=-10.0, hi=10.0, advanced=True),
    "pg_y0": _c("optimisers", float, 2.0, "start y", lo=-10.0, hi=10.0, advanced=True),
    "ce_schedule": _c("optimisers", str, SCHEDULES[0], "Step size", tuple(SCHEDULES), widget="radio",
                      names=tuple((s, "lr / √t (the paper's)" if s == "1/sqrt(t)" else "constant lr") for s in SCHEDULES)),
    "ce_lr": _c("optimisers", float, 1.0, "lr", lo=1e-4, hi=10.0, format="%.4f"),
    "ce_steps": _c("optimisers", int, 500 * PERIOD, "Steps (count)", lo=PERIOD, hi=MAX_COUNTEREXAMPLE_STEPS,
                   step=PERIOD),
    "ce_opts": _c("optimisers", tuple, tuple(OPTIMIZERS), "Optimisers", tuple(OPTIMIZERS), family="optimizer"),
    # ---- Compression
    "cp_source": _c("compression", str, "real", "Gradient", ("real", "generated"), widget="radio",
                    names=(("real", "real (one backward pass on digits)"),)),
    "cp_model": _c("compression", str, "mlp", "Model (real)", tuple(MODELS), family="model"),
    "cp_n": _c("compression", int, 1_000_000, "Entries (generated, count)", lo=1_000, hi=5_000_000, step=100_000),
    "cp_batch": _c("compression", int, 64, "Batch per worker (digits)", lo=8, hi=512),
    "cp_group": _c("compression", int, 1024, "Group size (entries)", lo=1, hi=65536, advanced=True,
                   from_scenario=lambda sc: int(min(sc.training.compression.group_size, 65536))),
    "cp_seed": _c("compression", int, 0, "Seed", lo=0, hi=2**31 - 1, from_scenario=lambda sc: sc.training.seed,
                  advanced=True),
    "cp_ratios": _c("compression", tuple, (0.001, 0.01, 0.05, 0.1), "Ratios (kept fraction)",
                    (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)),
    "cp_grid_variants": _c("compression", tuple, GRID_DEFAULT, "Variants (each run with the three optimisers)",
                           GRID_VARIANTS),
    "ring_workers": _c("compression", int, 4, "Workers N", lo=2, hi=8, widget="slider",
                       from_scenario=lambda sc: max(4, sc.training.workers)),
    "ring_kind": _c("compression", str, "group_topk", "Compressor", RING_COMPRESSORS, family="compressor",
                    from_scenario=lambda sc: sc.training.compression.kind
                    if sc.training.compression.kind in RING_COMPRESSORS else RING_COMPRESSORS[0]),
    "ring_ratio": _c("compression", float, 0.01, "Ratio (kept fraction)", lo=1e-4, hi=1.0, format="%.4f",
                     from_scenario=lambda sc: max(1e-4, sc.training.compression.ratio)),
    "ch_matrix": _c("compression", str, MATRIX_NAMES[2], "Matrix", tuple(MATRIX_NAMES)),
    "ch_damping": _c("compression", float, 1e-3, "Damping (× mean diagonal)", lo=0.0, hi=1.0, format="%.4f",
                     advanced=True),
    "ch_workers": _c("compression", int, 4, "Workers", lo=2, hi=8),
    "ch_batch": _c("compression", int, 256, "Batch (digits)", lo=2, hi=1797),
    "ch_by_class": _c("compression", bool, False, "Non-IID (by class)"),
    # ---- Jobs
    "jobs_class": _c("jobs", bool, False, "Show the whole class's jobs (read-only)", widget="toggle",
                     help="Every session's jobs and the command line's, to read; you stop and release only yours"),
    "jobs_pick": _c("jobs", str, "", "Job"),
    "jobs_fault": _c("jobs", str, "kill", "Fault", tuple(k for k in FAULT_KINDS if k != "none"),
                     help="kill: SIGKILL; hang: sleeps forever (found by its heartbeat); raise: an exception"),
    "jobs_fault_worker": _c("jobs", int, 1, "Worker (rank)", lo=0, hi=MAX_PROCS - 1),
    "jobs_fault_step": _c("jobs", int, 7, "At step", lo=1, hi=MAX_STEPS),
    "jobs_fault_policy": _c("jobs", str, "recover", "Policy", tuple(sorted(FAULT_POLICIES, reverse=True)),
                            help="recover: restart from the last checkpoint without the failed worker"),
    "jobs_fault_ck": _c("jobs", int, 5, "Checkpoint every (steps)", lo=0, hi=MAX_STEPS),
    # The teacher's form: the limits it sets are the server's, shown as they are.
    "jobs_max_steps": _c("jobs", int, 20_000, "Most steps of a job", lo=1, hi=MAX_STEPS, transient=True),
    "jobs_max_s": _c("jobs", float, 900.0, "Most seconds a job runs (0: no limit)", lo=0.0, hi=86_400.0,
                     transient=True),
    "jobs_max_procs": _c("jobs", int, 8, "Most processes of a job", lo=1, hi=MAX_PROCS, transient=True),
    "jobs_teacher_token": _c("jobs", str, "", "The teacher's token", widget="password", transient=True,
                             help="LAB_TEACHER_TOKEN of this server; it stays out of the address and the history, "
                                  "and this browser stays the teacher across reloads"),
    "jobs_topo": _c("jobs", str, "gpu-npu", "Topology", ("scenario", *PRESETS)),
    "jobs_whatif": _c("jobs", tuple, (), "jobs of the what-if", widget="table", transient=True),
    "jobs_maxrun": _c("jobs", int, 0, "At most this many jobs at once (0: no limit)", lo=0, hi=100),
    # ---- Fidelity
    "fid_quick": _c("fidelity", bool, False, "Quick (fewer repeats, about half the time)", widget="toggle",
                    advanced=True),
    "fid_steps": _c("fidelity", int, 200, "Steps per run", lo=20, hi=1000, step=20, advanced=True),
    "fid_class": _c("fidelity", bool, False, "Include the whole class's runs (read-only)", widget="toggle",
                    help="Other sessions' and the command line's runs beside yours"),
    "fid_trace_run": _c("fidelity", str, "", "Run"),
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


def linked(key: str) -> Control | None:
    """The control that owns widget key ``key`` if its value is kept across pages and carried by a link."""
    c = control_for(key)
    return None if c is None or c.transient else c


def defaults(scenario: Any = None) -> dict[str, Any]:
    """Every (non-prefix, non-transient) control's default, some taken from ``scenario``."""
    return {k: c.default(scenario) for k, c in VIEW.items() if not c.prefix and not c.transient}


def from_scenario(scenario: Any) -> dict[str, Any]:
    """The controls whose default is the scenario's (a page's model, batch, seed), with the scenario's value."""
    return {k: c.from_scenario(scenario) for k, c in VIEW.items() if c.from_scenario is not None and not c.prefix}


def followed(seen: Mapping[str, Any], scenario: Any) -> dict[str, Any]:
    """The controls to set because the scenario changed what they follow since ``seen`` (the values the scenario
    gave them at the session's last run): a model chosen on Training becomes Placement's model too."""
    return {k: v for k, v in from_scenario(scenario).items() if k in seen and seen[k] != v}


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
        c = linked(key)
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
