"""The one table of names and labels: every choice a person makes by name (optimiser, compressor,
sharing method, all-reduce algorithm, model, sync mode, data split, fault) with the label pages
show and, where legends and run names need one, a short label. Every other list of these names in
the lab derives from here."""
from __future__ import annotations

import re
from enum import StrEnum

#: family -> name -> (label, short label). The order of a family is the order pages offer it.
CHOICES: dict[str, dict[str, tuple[str, str]]] = {
    "optimizer": {
        "adam": ("Adam", "Adam"),
        "adabelief": ("AdaBelief", "AdaBelief"),
        "maxadabelief": ("Max-AdaBelief (max of s)", "Max-AdaBelief"),
        "maxadabelief-corrected": ("Max-AdaBelief (max of corrected ŝ)", "Max-AdaBelief (corrected)"),
    },
    # In a comparison no compression is the dense baseline, so its short label reads "dense".
    "compressor": {
        "none": ("no compression (fp32)", "dense"),
        "group_topk": ("Group-TopK (top k in every group)", "Group-TopK"),
        "topk": ("global Top-K", "Top-K"),
        "randomk": ("Random-K", "Random-K"),
        "fp16": ("FP16", "FP16"),
        "powersgd": ("PowerSGD (torch's low-rank hook)", "PowerSGD"),
        "fp16_hook": ("FP16 all-reduce (torch's fp16 hook)", "FP16 hook"),
        "bf16_hook": ("BF16 all-reduce (torch's bf16 hook)", "BF16 hook"),
    },
    "sharing": {
        "dense": ("dense ring all-reduce (fp32, decompressed)", "dense ring all-reduce"),
        "sparse_ring": ("sparse ring (reduce-scatter + all-gather)", "sparse ring"),
        "sparse_allgather": ("sparse all-gather", "sparse all-gather"),
    },
    "algorithm": {
        "ring": ("ring (reduce-scatter + all-gather)", "ring"),
        "host": ("host aggregation", "host"),
        "tree": ("binary tree (reduce + broadcast)", "tree"),
        "hierarchical": ("hierarchical (groups, then leaders' ring)", "hierarchical"),
    },
    "model": {
        "mlp": ("MLP (64-128-64-10)", "MLP"),
        "cnn": ("LeNet-style CNN", "CNN"),
        "resnet": ("small ResNet (3 residual blocks)", "ResNet"),
        "transformer": ("Transformer encoder block", "Transformer"),
        "resnet18": ("ResNet-18 (torchvision, 32x32 images)", "ResNet-18"),
        "mobilenet_v3_small": ("MobileNetV3-Small (torchvision, 32x32 images)", "MobileNetV3-S"),
        "vgg11": ("VGG-11 with batch norm (torchvision, 32x32 images)", "VGG-11"),
        "vit_small": ("Vision Transformer, 4 layers (torchvision, 32x32 images)", "ViT-small"),
    },
    "cost_model": {
        "datasheet": ("datasheet (the catalogue's throughputs)", "datasheet"),
        "calibrated": ("calibrated (this machine's measured costs)", "calibrated"),
    },
    # How a job spreads the work: every worker holds the whole model, or each operator runs where a plan puts it.
    "parallel": {
        "data": ("data parallel (every worker trains the whole model on its share)", "data parallel"),
        "placement": ("placement (each operator runs on the device a plan puts it on)", "placement"),
    },
    "strategy": {
        "greedy_eft": ("greedy earliest finish", "greedy EFT"),
        "heft": ("HEFT (rank order, gap insertion)", "HEFT"),
        "optimal": ("exact optimum (branch and bound)", "optimum"),
        "type_rule": ("rule by device type (linear->GPU, conv->FPGA, activation->ASIC/DPU)", "type rule"),
        "single_fastest": ("single fastest device", "fastest device"),
        "round_robin": ("round robin", "round robin"),
        "even_split": ("even contiguous layer split", "even split"),
        "even_rounds": ("even split twice round the devices (two stretches each, for interleaved 1F1B)", "even rounds"),
        "chain_dp": ("optimal contiguous pipeline split (DP)", "chain split"),
    },
    # A placement run's plan made once, or re-made every round from each device's measured waiting (the
    # load-balancing design's loop) by one of two rules for the next weights.
    "schedule": {
        "gpipe": ("GPipe: every micro-batch forward, then every backward", "GPipe"),
        "1f1b": ("1F1B: one forward, one backward (fewer activations held)", "1F1B"),
        "interleaved_1f1b": ("Interleaved 1F1B: each device holds several stretches, taken in turn (a smaller "
                             "bubble)", "interleaved 1F1B"),
        "zero_bubble": ("Zero bubble: each backward split into the input's gradient, sent at once, and the weights' "
                        "gradient, done in the gaps", "zero bubble"),
    },
    "balance": {
        "off": ("off (the plan is made once)", "off"),
        "wait": ("shift by waiting time", "wait"),
        "throughput": ("proportional to measured speed", "throughput"),
    },
    "sync": {
        "allreduce": ("gradient all-reduce, then identical local steps", "all-reduce"),
        "param_server": ("parameter server (one extra process steps the optimiser)", "parameter server"),
        "state_allreduce": ("optimiser-state all-reduce (the distributed Max-AdaBelief of the CXL design)",
                            "state all-reduce"),
    },
    "allreduce_impl": {
        "gloo": ("gloo's all_reduce", "gloo"),
        "ring": ("the lab's ring (counts bytes)", "lab ring"),
    },
    "split": {
        "even": ("even", "even"),
        "weighted": ("weighted by compute share", "weighted"),
        "dirichlet": ("non-IID by label (Dirichlet)", "Dirichlet"),
    },
    # Faults a job can inject into one worker, and what the job does then.
    "fault": {
        "none": ("no fault", "none"),
        "kill": ("kill (SIGKILL)", "kill"),
        "hang": ("hang (found by its heartbeat)", "hang"),
        "raise": ("raise (an exception)", "raise"),
    },
    "fault_policy": {
        "fail": ("fail the job", "fail"),
        "recover": ("recover from the last checkpoint without the failed worker", "recover"),
    },
}


def _choice(name: str, family: str) -> type[StrEnum]:
    """A family as a StrEnum for the code that names one choice (``Sharing.SPARSE_RING``): its members
    are the names themselves, so they compare, hash and serialise as the plain strings."""
    return StrEnum(name, {k.upper().replace("-", "_"): k for k in CHOICES[family]}, module=__name__)


Optimizer = _choice("Optimizer", "optimizer")
Compressor = _choice("Compressor", "compressor")
Sharing = _choice("Sharing", "sharing")
Algorithm = _choice("Algorithm", "algorithm")
Parallel = _choice("Parallel", "parallel")
Strategy = _choice("Strategy", "strategy")
Balance = _choice("Balance", "balance")
SyncMode = _choice("SyncMode", "sync")


def names(family: str) -> tuple[str, ...]:
    return tuple(CHOICES[family])


def labels(family: str) -> dict[str, str]:
    return {k: v[0] for k, v in CHOICES[family].items()}


def short_labels(family: str) -> dict[str, str]:
    return {k: v[1] for k, v in CHOICES[family].items()}


OPTIMIZERS, OPTIMIZER_LABELS, OPTIMIZER_SHORT = names("optimizer"), labels("optimizer"), short_labels("optimizer")
COMPRESSORS, COMPRESSOR_LABELS, COMPRESSOR_SHORT = names("compressor"), labels("compressor"), short_labels("compressor")
SHARING, SHARING_LABELS, SHARING_SHORT = names("sharing"), labels("sharing"), short_labels("sharing")
ALGORITHMS, ALGORITHM_LABELS = names("algorithm"), labels("algorithm")
MODELS, MODEL_LABELS = names("model"), labels("model")

#: An uploaded network's name: ``onnx-`` and the first 12 hex digits of its file's SHA-256 (lab.scenario.onnx_models).
UPLOADED_MODEL = re.compile(r"^onnx-[0-9a-f]{12}$")


def is_uploaded_model(name: object) -> bool:
    return isinstance(name, str) and bool(UPLOADED_MODEL.match(name))


class ModelNames(tuple):
    """The models offered by name (presets and the zoo), and any uploaded network's name: whether this server
    holds its file is checked where the model is built, with a message that says so."""

    def __contains__(self, name: object) -> bool:
        return tuple.__contains__(self, name) or is_uploaded_model(name)


ANY_MODEL = ModelNames(MODELS)
#: The Scenario's model width: the lab's networks' channels or hidden sizes times this (1: the size it ships).
MODEL_WIDTH_MIN, MODEL_WIDTH_MAX = 0.25, 2.0
COST_MODELS, COST_MODEL_LABELS = names("cost_model"), labels("cost_model")
SYNC_MODES, SYNC_LABELS = names("sync"), labels("sync")
BALANCE_CHOICES, BALANCE_LABELS = names("balance"), labels("balance")
PIPELINE_SCHEDULES, PIPELINE_SCHEDULE_LABELS = names("schedule"), labels("schedule")
PIPELINE_SCHEDULE_SHORT = short_labels("schedule")
#: The balancing loop's two update rules (every balance choice but "off").
BALANCE_RULES: tuple[str, ...] = BALANCE_CHOICES[1:]
PARALLEL_MODES, PARALLEL_LABELS = names("parallel"), labels("parallel")
STRATEGY_NAMES, STRATEGY_LABELS, STRATEGY_SHORT = names("strategy"), labels("strategy"), short_labels("strategy")
ALLREDUCE_IMPLS, ALLREDUCE_IMPL_LABELS = names("allreduce_impl"), labels("allreduce_impl")
SPLITS, SPLIT_LABELS = names("split"), labels("split")
FAULT_KINDS, FAULT_POLICIES = names("fault"), names("fault_policy")

#: The three a comparison runs (the corrected variant is a playground study).
COMPARED_OPTIMIZERS: tuple[str, ...] = ("adam", "adabelief", "maxadabelief")
#: The compressors that keep a fraction of the entries: they take a ratio and send a sparse payload.
SPARSIFIERS: tuple[str, ...] = ("group_topk", "topk", "randomk")
def optimiser_implementation(fused: bool, sync: str) -> str:
    """Which code steps a run's optimiser: "fused" (one compiled pass per parameter) when asked for, except under
    the optimiser-state all-reduce, whose all-reduce sits between the passes; else "multi-tensor"."""
    return "fused" if fused and sync != "state_allreduce" else "multi-tensor"


#: PyTorch's DDP compression hooks, run by the lab on its ring: they send by their own all-reduces (no payload, no
#: sharing method); PowerSGD takes a rank and a warm-up instead of a ratio.
TORCH_HOOKS: tuple[str, ...] = ("powersgd", "fp16_hook", "bf16_hook")
#: The lab's own compressors: each turns a gradient into one payload that a sharing method sends.
PAYLOAD_COMPRESSORS: tuple[str, ...] = tuple(k for k in CHOICES["compressor"] if k not in TORCH_HOOKS)
