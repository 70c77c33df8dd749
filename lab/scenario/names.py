"""The one table of names and labels: every choice a person makes by name (optimiser, compressor,
sharing method, all-reduce algorithm, model) with the label pages show. Every other list of these
names in the lab derives from here."""
from __future__ import annotations

OPTIMIZER_LABELS: dict[str, str] = {
    "adam": "Adam",
    "adabelief": "AdaBelief",
    "maxadabelief": "Max-AdaBelief (max of s)",
    "maxadabelief-corrected": "Max-AdaBelief (max of corrected ŝ)",
}
OPTIMIZERS: tuple[str, ...] = tuple(OPTIMIZER_LABELS)
#: The three a comparison runs (the corrected variant is a playground study).
COMPARED_OPTIMIZERS: tuple[str, ...] = ("adam", "adabelief", "maxadabelief")

COMPRESSOR_LABELS: dict[str, str] = {
    "none": "no compression (fp32)",
    "group_topk": "Group-TopK (top k in every group)",
    "topk": "global Top-K",
    "randomk": "Random-K",
    "fp16": "FP16",
}
COMPRESSORS: tuple[str, ...] = tuple(COMPRESSOR_LABELS)

SHARING_LABELS: dict[str, str] = {
    "dense": "dense ring all-reduce (fp32, decompressed)",
    "sparse_ring": "sparse ring (reduce-scatter + all-gather)",
    "sparse_allgather": "sparse all-gather",
}
SHARING: tuple[str, ...] = tuple(SHARING_LABELS)

ALGORITHM_LABELS: dict[str, str] = {
    "ring": "ring (reduce-scatter + all-gather)",
    "host": "host aggregation",
    "tree": "binary tree (reduce + broadcast)",
    "hierarchical": "hierarchical (groups, then leaders' ring)",
}
ALGORITHMS: tuple[str, ...] = tuple(ALGORITHM_LABELS)

MODEL_LABELS: dict[str, str] = {
    "mlp": "MLP (64-128-64-10)",
    "cnn": "LeNet-style CNN",
    "resnet": "small ResNet (3 residual blocks)",
    "transformer": "Transformer encoder block",
}
MODELS: tuple[str, ...] = tuple(MODEL_LABELS)

COST_MODEL_LABELS: dict[str, str] = {
    "datasheet": "datasheet (the catalogue's throughputs)",
    "calibrated": "calibrated (this machine's measured costs)",
}
COST_MODELS: tuple[str, ...] = tuple(COST_MODEL_LABELS)
