"""The Scenario: everything a person sets up, in one value that round-trips through JSON and URLs.

Like TensorFlow Playground's ``state.ts``, one declarative table per section (:data:`TRAINING_FIELDS`,
:data:`COMPRESSION_FIELDS`) lists every field with its type, default and allowed values; that
table drives validation, the JSON form and the compact URL form. Defaults live only there.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from dataclasses import dataclass, field, fields, make_dataclass, replace
from typing import Any, Mapping

from lab.errors import LabError
from lab.scenario.catalogue import preset_cxl
from lab.scenario.names import (
    ANY_MODEL,
    MODEL_WIDTH_MAX,
    MODEL_WIDTH_MIN,
    ALLREDUCE_IMPLS,
    BALANCE_CHOICES,
    COMPRESSORS,
    FAULT_KINDS,
    FAULT_POLICIES,
    OPTIMIZERS,
    PARALLEL_MODES,
    PIPELINE_SCHEDULES,
    SHARING,
    SPLITS,
    STRATEGY_NAMES,
    SYNC_MODES,
    Sharing,
)
from lab.scenario.text import check_distinct, check_name, loads, nfc, shown
from lab.scenario.topology import Topology, _check_keys

UPLOAD_MB = 5  # Streamlit's server.maxUploadSize (.streamlit/config.toml) and the README say the same
MAX_SCENARIO_BYTES = UPLOAD_MB * 1024 * 1024  # a file larger than this is refused before parsing


@dataclass(frozen=True)
class Setting:
    """One field of a settings section: its type, default and what is allowed, and how a page shows it
    (its label and help, the family whose labels a menu shows, a slider or a toggle where it is not a
    plain number box or checkbox, the step and format of a number box, whether lesson mode hides it). Pages
    build their widgets from it (the ``setting`` helper of the app's ``ui`` module), so each is written once,
    here."""

    type: type
    default: Any
    choices: tuple | None = None
    min: float | None = None
    max: float | None = None
    help: str = ""
    max_len: int = 200  # characters of a text value
    label: str = ""
    family: str | None = None  # lab.scenario.names: the labels of the choices
    widget: str = ""  # "slider" or "toggle"
    step: float | None = None
    format: str | None = None
    names: tuple[tuple[Any, str], ...] = ()  # the choices' labels where no family names them
    advanced: bool = False  # lesson mode hides its widget (its value stays in force), as a view control's

    def check(self, name: str, value: Any, where: str) -> Any:
        w = f"{where}.{name}"
        if self.type is bool:
            if not isinstance(value, bool):
                raise LabError(f"must be true or false (got {shown(value)})", where=w)
            return value
        if self.type in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise LabError(f"must be a number (got {shown(value)})", where=w)
            if isinstance(value, float) and not math.isfinite(value):
                raise LabError(f"must be finite (got {value})", where=w)
            if isinstance(value, int) and abs(value) > 10**18:  # far beyond every field's range; float() may overflow
                raise LabError(f"is far too large (an integer of about {int(value.bit_length() * 0.30103)} digits)",
                               where=w)
            if self.type is int and float(value) != int(value):
                raise LabError(f"must be a whole number (got {shown(value)})", where=w)
            value = self.type(value)
            if self.min is not None and value < self.min:
                raise LabError(f"must be at least {self.min:g} (got {value:g})", where=w)
            if self.max is not None and value > self.max:
                raise LabError(f"must be at most {self.max:g} (got {value:g})", where=w)
            return value
        if self.type is str:
            if not isinstance(value, str):
                raise LabError(f"must be a string (got {shown(value)})", where=w)
            if self.choices is not None and value not in self.choices:
                raise LabError(f"{shown(value)} is not allowed; choose one of {list(self.choices)}", where=w)
            if len(value) > self.max_len:
                raise LabError(f"is too long (at most {self.max_len:,} characters)", where=w)
            return str(value)  # a choice named in code (a StrEnum member) is kept as its plain name
        if self.type is tuple:  # a list of device names
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise LabError(f"must be a list of names (got {shown(value)})", where=w)
            if len(value) > 64:
                raise LabError("lists at most 64 names", where=w)
            return tuple(nfc(v) for v in value)  # device names are kept in composed form
        raise AssertionError(self.type)


DATASETS = ("digits", "synthetic")

TRAINING_FIELDS: dict[str, Setting] = {
    "model": Setting(str, "mlp", ANY_MODEL, help="a preset, a classic architecture, or a network uploaded as an "
                     "ONNX file", label="Model", family="model"),
    "model_width": Setting(float, 1.0, min=MODEL_WIDTH_MIN, max=MODEL_WIDTH_MAX, label="Model width (×)", step=0.25,
                           help="the lab's networks' channels or hidden sizes times this: 1 is the size the lab "
                                "ships (ResNet-18's 64 to 512 channels, the ViT's 128 hidden units); an uploaded "
                                "ONNX network keeps the file's", advanced=True),
    "dataset": Setting(str, "digits", DATASETS, help="digits ships with scikit-learn; synthetic is generated"),
    "dataset_size": Setting(int, 4096, min=64, max=1_000_000, help="samples of the synthetic set"),
    "optimizer": Setting(str, "adam", OPTIMIZERS, label="Optimiser", family="optimizer"),
    "lr": Setting(float, 1e-3, min=0.0, max=10.0, label="Learning rate", format="%.5f"),
    "beta1": Setting(float, 0.9, min=0.0, max=0.999999),
    "beta2": Setting(float, 0.999, min=0.0, max=0.999999),
    "eps": Setting(float, 1e-8, min=0.0, max=1.0),
    "weight_decay": Setting(float, 0.0, min=0.0, max=1.0),
    "fused": Setting(bool, False, label="Fused optimiser (compiled)",
                  help="one pass over each parameter, compiled by torch.compile at the first step (seconds); "
                       "within float32 rounding of the multi-tensor path. It pays off on large layers; on the "
                       "lab's small models a job steps its flat buffers in one call, about as fast as the "
                       "multi-tensor path (docs/measurements.md: bench_optim). Local steps only: the optimiser-state all-reduce "
                       "keeps the multi-tensor path", advanced=True),
    "lr_scaling": Setting(bool, False, help="the edge-compression design's linear scaling rule: lr × workers",
                       label="Scale lr by workers", advanced=True),
    "workers": Setting(int, 2, min=1, max=4, label="Workers (processes)", widget="slider"),
    "steps": Setting(int, 100, min=1, max=100_000, label="Steps (count)"),
    "batch_size": Setting(int, 32, min=1, max=4096, help="per worker", label="Batch per worker (samples)"),
    "seed": Setting(int, 0, min=0, max=2**31 - 1, label="Seed", advanced=True),
    "sync": Setting(str, "allreduce", SYNC_MODES, label="Sync mode", family="sync"),
    "allreduce_impl": Setting(str, "gloo", ALLREDUCE_IMPLS, label="All-reduce", family="allreduce_impl",
                              advanced=True),
    "split": Setting(str, "even", SPLITS, label="Data split", family="split", advanced=True),
    "dirichlet_alpha": Setting(float, 0.5, min=1e-3, max=1e3, help="small: each worker sees few classes",
                            label="Dirichlet alpha", advanced=True),
    "exchange_share": Setting(float, 0.0, min=0.0, max=1.0, label="Exchange share per step",
                           help="share of its samples each worker hands its ring neighbour each step (the "
                                "task-level design's data exchange)", advanced=True),
    "emulate": Setting(bool, False, help="emulate device speeds and link bandwidths of the topology",
                    label="Emulate the topology's devices and links", widget="toggle"),
    "worker_devices": Setting(tuple, (), help="device of the topology each worker stands for"),
    "eval_every": Setting(int, 10, min=1, max=100_000),
    "checkpoint_every": Setting(int, 0, min=0, max=100_000, help="0: only at the end"),
    "check_every": Setting(int, 10, min=1, max=100_000, help="parameter checksum across workers every K steps"),
    "fault": Setting(str, "none", FAULT_KINDS),
    "fault_worker": Setting(int, 0, min=0, max=3),
    "fault_step": Setting(int, 5, min=0, max=100_000),
    "fault_policy": Setting(str, "fail", FAULT_POLICIES),
    "parallel": Setting(str, "data", PARALLEL_MODES,
                        help="data parallel (every worker runs the whole model on its share of each batch), or each "
                             "operator on the device a plan puts it on (placement)"),
    "strategy": Setting(str, "type_rule", STRATEGY_NAMES, help="the placement strategy that makes the plan"),
    "micro_batches": Setting(int, 4, min=1, max=64, help="a placement run pipelines each batch in this many parts "
                                                          "(micro-batches)"),
    "schedule": Setting(str, "gpipe", PIPELINE_SCHEDULES, family="schedule",
                        help="the order each device of a placement run works through the micro-batches: GPipe (every "
                             "forward, then every backward) or 1F1B (after a warm-up of forwards, one forward and "
                             "one backward in turn: a device holds the activations of at most as many micro-batches "
                             "as the pipeline has pieces after it, plus one)"),
    "balance": Setting(str, "off", BALANCE_CHOICES, help="a placement run re-plans every round from each device's "
                    "measured waiting (greedy earliest finish or HEFT with weights), by this rule"),
    "round_steps": Setting(int, 10, min=2, max=10_000, help="steps per balancing round (the first of each is warm-up)"),
    "balance_tolerance": Setting(float, 0.05, min=0.0, max=1.0,
                              help="the weights stay when (max wait - mean wait) / step time is at most this"),
    "balance_patience": Setting(int, 3, min=1, max=100, help="the loop stops when the plan has not changed for this "
                                                           "many rounds in a row"),
}

COMPRESSION_FIELDS: dict[str, Setting] = {
    "kind": Setting(str, "none", COMPRESSORS, label="Compressor", family="compressor",
                 help="what each worker sends of its gradient each step"),
    "ratio": Setting(float, 0.01, min=1e-6, max=1.0, label="Ratio (kept fraction)", step=0.001, format="%.6f",
                  help="0.01 keeps 1 % of the entries"),
    "group_size": Setting(int, 1024, min=1, max=1 << 24, label="Group size (entries)",
                       help="Group-TopK keeps the top entries of every group", advanced=True),
    "error_feedback": Setting(bool, False, label="Error feedback",
                           help="adds what was not sent to the next step's gradient, so it is sent later",
                           advanced=True),
    "sharing": Setting(str, Sharing.SPARSE_ALLGATHER.value, SHARING, label="Sharing method", family="sharing",
                       advanced=True),
    "rank": Setting(int, 1, min=1, max=64, label="PowerSGD rank",
                 help="each gradient matrix is sent as two thin matrices of this many columns"),
    "warmup": Setting(int, 10, min=2, max=100_000, label="PowerSGD warm-up (steps)",
                   help="plain all-reduce steps before PowerSGD starts (torch's start_powerSGD_iter)"),
}


MAX_PINS = 256
MAX_PIN_NAME = 200


def _pairs(value: Any, where: str, maps: str, things: str) -> list[tuple]:
    """A mapping, or a list of pairs, as (key, value) pairs: at most MAX_PINS of them."""
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        pairs = [tuple(p) for p in value]
    else:
        raise LabError(f"must map {maps} (got {shown(value)})", where=where)
    if len(pairs) > MAX_PINS:
        raise LabError(f"holds {len(pairs):,} {things}; at most {MAX_PINS} are allowed", where=where)
    return pairs


def check_pins(value: Any, where: str = "training.pins") -> tuple:
    """Operator -> device pins as a tuple of (operator, device) pairs sorted by operator (hashable;
    the same pins in any order are the same scenario). Accepts a mapping or a list of pairs. Both
    sides are names (:func:`lab.scenario.text.check_name`): the Placement page shows them, and two
    operators that only look different cannot be told apart there."""
    pairs = _pairs(value, where, "operator names to device names", "pins")
    seen: dict[str, str] = {}
    for op, dev in pairs:
        op = check_name(op, where, what="every operator name", max_len=MAX_PIN_NAME)
        dev = check_name(dev, where, what="every device name", max_len=MAX_PIN_NAME)
        if op in seen and seen[op] != dev:
            raise LabError(f"operator {shown(op)} is pinned twice ({shown(seen[op])} and {shown(dev)})",
                           where=where)
        seen[op] = dev
    check_distinct(seen, where, namespace="the pins", what="operator")
    return tuple(sorted(seen.items()))


MAX_SLOWDOWN = 1e6


def check_slowdowns(value: Any, where: str = "training.slowdown") -> tuple:
    """Device -> slowdown factor pairs, sorted by device (hashable, as pins are). A factor is a finite number
    from 0.01 to 1e6; 1 is the catalogue's speed."""
    pairs = _pairs(value, where, "device names to slowdown factors", "entries")
    seen: dict[str, float] = {}
    factor_setting = Setting(float, 1.0, min=0.01, max=MAX_SLOWDOWN)
    for dev, factor in pairs:
        dev = check_name(dev, where, what="every device name", max_len=MAX_PIN_NAME)
        factor = factor_setting.check(dev, factor, where)
        if dev in seen and seen[dev] != factor:
            raise LabError(f"device {shown(dev)} has two slowdowns ({seen[dev]:g} and {factor:g})", where=where)
        seen[dev] = factor
    return tuple(sorted(seen.items()))


def _section_from_dict(settings: Mapping[str, Setting], d: Any, where: str) -> dict:
    _check_keys(d, settings, (), where)
    return {k: setting.check(k, d[k], where) if k in d else setting.default for k, setting in settings.items()}


def _table_fields(table: Mapping[str, Setting]) -> list[tuple]:
    """A section's dataclass fields, each with its type and default from the table: written once."""
    return [(k, setting.type, field(default=setting.default)) for k, setting in table.items()]


class _CompressionMethods:
    def __post_init__(self):
        for k in ("kind", "sharing"):  # a choice named in code (a StrEnum member) is kept as its plain name
            object.__setattr__(self, k, str(getattr(self, k)))

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in COMPRESSION_FIELDS}

    @staticmethod
    def from_dict(d: Any, where: str = "compression") -> "Compression":
        return Compression(**_section_from_dict(COMPRESSION_FIELDS, d, where))


Compression = make_dataclass("Compression", _table_fields(COMPRESSION_FIELDS), bases=(_CompressionMethods,),
                             frozen=True, namespace={"__module__": __name__,
                                                     "__doc__": "A run's gradient compression: the fields of "
                                                                "COMPRESSION_FIELDS."})


class _TrainingMethods:
    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in TRAINING_FIELDS}
        d["worker_devices"] = list(self.worker_devices)
        d["compression"] = self.compression.to_dict()
        d["pins"] = dict(self.pins)
        d["placement"] = dict(self.placement)
        d["slowdown"] = dict(self.slowdown)
        return d

    @staticmethod
    def from_dict(d: Any, where: str = "training") -> "Training":
        d = dict(d) if isinstance(d, Mapping) else d
        comp = d.pop("compression", {}) if isinstance(d, dict) else {}
        pins = check_pins(d.pop("pins", {}) if isinstance(d, dict) else {}, where=f"{where}.pins")
        placed = check_pins(d.pop("placement", {}) if isinstance(d, dict) else {}, where=f"{where}.placement")
        slow = check_slowdowns(d.pop("slowdown", {}) if isinstance(d, dict) else {}, where=f"{where}.slowdown")
        values = _section_from_dict(TRAINING_FIELDS, d, where)
        return Training(**values, compression=Compression.from_dict(comp, where=f"{where}.compression"), pins=pins,
                        placement=placed, slowdown=slow)

    def replace(self, **changes: Any) -> "Training":
        """A copy with ``changes`` applied and checked against the field table."""
        d = self.to_dict()
        for k, v in changes.items():
            if k == "compression" and isinstance(v, Compression):
                v = v.to_dict()
            if k in ("pins", "placement"):
                v = dict(check_pins(v, where=f"training.{k}"))
            if k == "slowdown":
                v = dict(check_slowdowns(v))
            d[k] = list(v) if isinstance(v, tuple) else v
        return Training.from_dict(d)


Training = make_dataclass(
    "Training",
    [*_table_fields(TRAINING_FIELDS),
     ("compression", Compression, field(default_factory=Compression)),
     # ((operator, device), ...) from check_pins: operators placed by hand
     ("pins", tuple, field(default=())),
     # The plan a placement run executes, ((operator, device), ...): every operator's device, as the strategy
     # placed it with the pins. Empty: the run works it out from the strategy with the datasheet model.
     ("placement", tuple, field(default=())),
     # ((device, factor), ...) from check_slowdowns: with emulation, a device is this many times slower still
     # than the catalogue says (the truth a balancing loop has to find; the planner does not know it).
     ("slowdown", tuple, field(default=()))],
    bases=(_TrainingMethods,), frozen=True,
    namespace={"__module__": __name__, "__doc__": "A run's training settings: the fields of TRAINING_FIELDS, the "
                                                  "compression, the pins, the plan and the emulated slowdowns."})


@dataclass(frozen=True)
class Scenario:
    name: str
    topology: Topology
    training: Training = field(default_factory=Training)

    def __post_init__(self) -> None:  # the name compares in composed form, however it was typed
        object.__setattr__(self, "name", nfc(self.name))

    def to_dict(self) -> dict:
        return {"format": "hetlab-scenario/1", "name": self.name,
                "topology": self.topology.to_dict(), "training": self.training.to_dict()}

    @staticmethod
    def from_dict(d: Any) -> "Scenario":
        if isinstance(d, Mapping) and "devices" in d and "links" in d:
            # A bare topology file is accepted as a scenario with default training settings.
            topo = Topology.from_dict(d)
            return Scenario(name=topo.name, topology=topo)
        _check_keys(d, ("format", "name", "topology", "training"), ("topology",), "scenario")
        if d.get("format", "hetlab-scenario/1") != "hetlab-scenario/1":
            raise LabError(f"unsupported format {shown(d['format'])}; this lab reads hetlab-scenario/1", where="scenario")
        name = check_name(d.get("name", "scenario"), "scenario", what="the scenario's name", max_len=200)
        topo = Topology.from_dict(d["topology"])
        training = Training.from_dict(d.get("training", {}))
        sc = Scenario(name=name, topology=topo, training=training)
        sc.check_devices()
        return sc

    def check_devices(self) -> None:
        names = set(self.topology.device_names)
        for n in self.training.worker_devices:
            if n not in names:
                raise LabError(f"worker device {shown(n)} is not a device of topology {shown(self.topology.name)}",
                               where="training.worker_devices")
        for op, dev in self.training.pins:
            if dev not in names:
                raise LabError(f"operator {shown(op)} is pinned to {shown(dev)}, which is not a device of topology "
                               f"{shown(self.topology.name)}; devices: {sorted(names)}", where="training.pins")
        for dev, _ in self.training.slowdown:
            if dev not in names:
                raise LabError(f"the slowdown names {shown(dev)}, which is not a device of topology "
                               f"{shown(self.topology.name)}; devices: {sorted(names)}", where="training.slowdown")
        for op, dev in self.training.placement:
            if dev not in names:
                raise LabError(f"the plan puts operator {shown(op)} on {shown(dev)}, which is not a device of topology "
                               f"{shown(self.topology.name)}; devices: {sorted(names)}", where="training.placement")

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @staticmethod
    def from_json(text: str | bytes) -> "Scenario":
        if len(text) > MAX_SCENARIO_BYTES:
            raise LabError(f"the file is {len(text):,} bytes; at most {MAX_SCENARIO_BYTES:,} are accepted")
        return Scenario.from_dict(loads(text))

    # ----- compact URL form -------------------------------------------------------------------
    def to_url_param(self) -> str:
        """A compact, URL-safe form: deflated JSON in base64url. Round-trips exactly."""
        raw = json.dumps(self.to_dict(), separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")

    @staticmethod
    def from_url_param(s: str) -> "Scenario":
        if not isinstance(s, str) or len(s) > 100_000:
            raise LabError("the scenario in the link is missing or too long")
        try:
            d = zlib.decompressobj()
            raw = d.decompress(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)), MAX_SCENARIO_BYTES)
        except (ValueError, zlib.error) as exc:
            raise LabError(f"the scenario in the link is damaged ({exc})") from None
        if d.unconsumed_tail or d.unused_data or not d.eof:  # more than a file may hold, or cut short
            raise LabError(f"the scenario in the link is damaged or unpacks to more than {UPLOAD_MB} MB")
        return Scenario.from_json(raw)

    def replace(self, **changes: Any) -> "Scenario":
        return replace(self, **changes)


def default_scenario() -> Scenario:
    return Scenario(name="cxl-mlp", topology=preset_cxl())


def field_names(table: Mapping[str, Setting]) -> list[str]:
    return list(table)


__all__ = ["Scenario", "Training", "Compression", "Setting", "TRAINING_FIELDS", "COMPRESSION_FIELDS",
           "default_scenario", "MAX_SCENARIO_BYTES", "UPLOAD_MB", "fields"]
