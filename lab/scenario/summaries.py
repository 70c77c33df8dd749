"""One line about a run's settings, as the Training page and its figures say it: which compression and which
optimiser implementation a run uses (from a Scenario's training dict or a stored run's)."""

from __future__ import annotations

from typing import Mapping

from lab.scenario.names import COMPRESSOR_SHORT, OPTIMIZER_LABELS, SHARING_SHORT, TORCH_HOOKS, optimiser_implementation

#: The compressors as a sentence about one run names them: outside a comparison there is no dense
#: baseline to name, and Top-K needs "global" beside Group-TopK.
COMPRESSOR_NAMES = {**COMPRESSOR_SHORT, "none": "none (no compression)", "topk": "global Top-K"}
SHARING_NAMES = SHARING_SHORT


def compression_summary(comp: Mapping) -> str:
    """One line saying which compression a run uses, from a :class:`lab.scenario.document.Compression`'s
    dict (the current settings, or a stored run's ``scenario["training"]["compression"]``), e.g.
    "Group-TopK, 1 % per group of 1024, with error feedback, shared by sparse all-gather"."""
    kind = comp.get("kind", "none")
    if kind == "none":
        return "no compression"
    name = COMPRESSOR_NAMES.get(kind, str(kind))
    if kind == "powersgd":
        return (f"{name}, rank {int(comp.get('rank', 1))} after {int(comp.get('warmup', 0))} plain all-reduce steps, "
                "with error feedback and warm start: torch's powerSGD_hook arithmetic on the lab's ring")
    if kind in TORCH_HOOKS:
        half = "fp16" if kind == "fp16_hook" else "bf16"
        return f"{name}, every entry cast to {half} and averaged in {half}: torch's hook arithmetic on the lab's ring"
    pct = f"{100 * float(comp.get('ratio', 0.0)):.4g} %"
    kept = {"group_topk": f"{pct} per group of {int(comp.get('group_size', 0))}",
            "topk": f"{pct} of all entries", "randomk": f"{pct} of all entries, chosen at random",
            "fp16": "every entry at half precision"}.get(kind, pct)
    feedback = "with error feedback" if comp.get("error_feedback") else "without error feedback"
    sharing = SHARING_NAMES.get(comp.get("sharing", ""), str(comp.get("sharing", "")))
    return f"{name}, {kept}, {feedback}, shared by {sharing}"


def optimiser_summary(tr: Mapping) -> str:
    """One line saying which optimiser a run uses and which implementation of it ran, from a stored run's
    ``scenario["training"]`` dict, e.g. "AdaBelief, one fused pass per parameter (compiled by torch.compile)"."""
    name = OPTIMIZER_LABELS.get(tr.get("optimizer", ""), str(tr.get("optimizer", "")))
    if optimiser_implementation(bool(tr.get("fused")), str(tr.get("sync", ""))) == "fused":
        return f"{name}, one fused pass per parameter (compiled by torch.compile)"
    return f"{name}, multi-tensor (torch._foreach_* operations)"


__all__ = ["COMPRESSOR_NAMES", "SHARING_NAMES", "compression_summary", "optimiser_summary"]
