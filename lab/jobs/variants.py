"""What a comparison runs: its variants (every setting but the seed) with their labels, the compressions set beside
the chosen one, each student's seeds, and the scenarios queued for the repeats."""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

from lab.errors import LabError
from lab.scenario.document import Compression, Scenario
from lab.scenario.names import (
    COMPARED_OPTIMIZERS,
    COMPRESSOR_SHORT,
    OPTIMIZER_SHORT,
    SPARSIFIERS,
    TORCH_HOOKS,
    Sharing,
)

#: The setting columns of an export, in order: (column, path in the scenario's training section).
SETTING_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("optimizer", ("optimizer",)), ("compression", ("compression", "kind")), ("ratio", ("compression", "ratio")),
    ("group_size", ("compression", "group_size")), ("error_feedback", ("compression", "error_feedback")),
    ("sharing", ("compression", "sharing")), ("rank", ("compression", "rank")), ("warmup", ("compression", "warmup")),
    ("model", ("model",)), ("workers", ("workers",)),
    ("steps", ("steps",)), ("batch", ("batch_size",)), ("lr", ("lr",)), ("seed", ("seed",)), ("sync", ("sync",)),
    ("emulation", ("emulate",)), ("fused", ("fused",)),
)
SETTING_NAMES = tuple(c for c, _ in SETTING_COLUMNS)
def settings_of(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """The setting columns of a stored run's scenario (a missing field is None)."""
    tr = scenario.get("training", {}) if isinstance(scenario, Mapping) else {}
    out = {}
    for col, path in SETTING_COLUMNS:
        v: Any = tr
        for k in path:
            v = v.get(k) if isinstance(v, Mapping) else None
        out[col] = v
    out["fused"] = bool(out["fused"])  # runs stored before the setting existed ran the multi-tensor path
    return out


def variant_key(settings: Mapping[str, Any]) -> tuple:
    """Every setting but the seed: runs with equal keys are repeats of one variant."""
    s = dict(settings)
    kind = s.get("compression")
    if kind in (None, "none", *TORCH_HOOKS):  # the lab compressors' parameters do not matter without them
        s.update(ratio=None, group_size=None, error_feedback=None, sharing=None)
    if kind != "powersgd":
        s.update(rank=None, warmup=None)
    return tuple(s.get(c) for c in SETTING_NAMES if c != "seed")


def compression_label(settings: Mapping[str, Any]) -> str:
    kind = settings.get("compression") or "none"
    if kind == "none":
        return "dense"
    label = COMPRESSOR_SHORT.get(kind, str(kind))
    if kind in SPARSIFIERS and settings.get("ratio") is not None:
        label += f" {100 * float(settings['ratio']):g} %"
    if kind == "powersgd" and settings.get("rank") is not None:
        return f"{label} rank {settings['rank']}"
    if settings.get("error_feedback") and kind not in TORCH_HOOKS:
        label += " + EF"
    return label


def short_label(settings: Mapping[str, Any]) -> str:
    """A legend label: optimiser (fused when it was) and compression (the full settings go in the hover text)."""
    opt = OPTIMIZER_SHORT.get(settings.get("optimizer"), str(settings.get("optimizer")))
    return f"{opt}{' fused' if settings.get('fused') else ''} · {compression_label(settings)}"


def full_label(settings: Mapping[str, Any]) -> str:
    """Every setting but the seed, leaving out the compression parameters the run's compressor does not take."""
    shown = dict(zip((c for c in SETTING_NAMES if c != "seed"), variant_key(settings)))
    names = {"rank": "PowerSGD rank", "warmup": "PowerSGD warm-up"}
    return ", ".join(f"{names.get(c, c)} {v}" for c, v in shown.items()
                     if v is not None or c not in ("ratio", "group_size", "error_feedback", "sharing", "rank", "warmup"))


def run_name(settings: Mapping[str, Any]) -> str:
    """A run's name that says what it is: model, optimiser, compression, steps, seed."""
    return (f"{settings.get('model')} · {short_label(settings)} · {settings.get('steps')} steps · "
            f"seed {settings.get('seed')}")


MAX_COMPARISON_RUNS = 60  # a comparison queues at most this many runs


DEFAULT_COMPRESSION = Compression(kind="group_topk", ratio=0.01, group_size=1024, error_feedback=True,
                                  sharing=Sharing.SPARSE_ALLGATHER)


def comparison_compressions(chosen: Compression) -> list[Compression]:
    """No compression, and the chosen one (Group-TopK 1 % with error feedback when none is chosen;
    dense sharing of a sparse compressor falls back to sparse all-gather, which is what it is for)."""
    if chosen.kind == "none":
        return [Compression(), DEFAULT_COMPRESSION]
    if chosen.sharing == "dense" and chosen.kind in SPARSIFIERS:
        chosen = Compression(**{**chosen.to_dict(), "sharing": Sharing.SPARSE_ALLGATHER})
    return [Compression(), chosen]


def student_seed(seed: int, owner: str) -> int:
    """The first seed of a student's comparison: the scenario's seed moved by a number drawn from the student's
    owner id, so that thirty students' comparisons are thirty sets of different seeds, which pooled are repeats
    (the same seed would compute the same numbers: one run, not repeats). The same student gets the same seeds."""
    shift = int(hashlib.sha256(str(owner).encode()).hexdigest()[:8], 16) % 100_000
    return (int(seed) + 100 * shift) % 2**31


def comparison_scenarios(sc: Scenario, compressions: Sequence[Compression], repeats: int = 3,
                         optimizers: Sequence[str] = COMPARED_OPTIMIZERS,
                         first_seed: int | None = None) -> list[tuple[Scenario, str]]:
    """The runs of one comparison: every optimiser x every compression x ``repeats`` seeds (the
    scenario's seed, seed + 1, ...), all else as the scenario has it, with gradient all-reduce over the
    lab's ring (it counts the dense bytes too, so every variant's bytes can be compared). Repeat r of
    every variant has the same seed, so the variants see the same data order and initial weights.
    Ordered repeat by repeat, so the first variants' first repeats finish first."""
    if not 1 <= repeats <= 10:
        raise LabError(f"repeats must be between 1 and 10 (got {repeats})", where="comparison")
    n = repeats * len(optimizers) * len(compressions)
    if n > MAX_COMPARISON_RUNS:
        raise LabError(f"this comparison would queue {n} runs; at most {MAX_COMPARISON_RUNS} are allowed",
                       where="comparison")
    out = []
    first = sc.training.seed if first_seed is None else int(first_seed)
    for r in range(repeats):
        for opt in optimizers:
            for comp in compressions:
                tr = sc.training.replace(optimizer=opt, sync="allreduce", allreduce_impl="ring", compression=comp,
                                         seed=(first + r) % 2**31)
                run = sc.replace(training=tr)
                out.append((run, run_name(settings_of(run.to_dict()))))
    return out
