"""Data for the training job: data sets, shards per worker, per-step batches, and the task-level design's exchange.

* ``digits``: scikit-learn's bundled 8x8 digits (1,797 images), a fixed train/test split by seed
  (25 % test, stratified), features scaled to [0, 1] (pixel / 16). Cached as a small .npz (in
  LAB_DATA/cache or the temporary directory) so worker processes need not import scikit-learn.
* ``synthetic``: ``dataset_size`` generated samples of 64 features in [0, 1] from 10 classes (a
  class prototype image plus noise), whose size can grow for scale runs; 20 % test.

Shards (every worker starts from different data, the edge-compression design): ``even`` (equal disjoint parts),
``weighted`` (part sizes and per-worker batch sizes in proportion to compute shares, through
:func:`lab.modelled.balance.split_batch`), ``dirichlet`` (non-IID: each class is spread over the workers by
proportions drawn from Dirichlet(alpha); small alpha = each worker sees few classes).
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lab import settings
from lab.errors import LabError
from lab.modelled.balance import split_batch

IN_FEATURES = 64
CLASSES = 10


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: torch.Tensor  # float32, (n, 64), values in [0, 1]
    y_train: torch.Tensor  # int64, (n,)
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def in_features(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def classes(self) -> int:
        return CLASSES


def _cache_dir() -> Path:
    """LAB_DATA/cache when set, else a folder in the system's temporary directory (shared by runs)."""
    return settings.cache_dir()


_DIGITS_LOCK = threading.Lock()
_DIGITS: dict[str, tuple[np.ndarray, np.ndarray]] = {}


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The digits arrays (copies): loaded once per process and cache folder, under a lock. Loading
    an .npz in several threads at once can fail in CPython 3.11 (numpy parses each array's header
    with ``ast.literal_eval``: "AST constructor recursion depth mismatch"), which the app's
    sessions, each a thread, did when several submitted runs at the same moment."""
    key = str(_cache_dir())
    with _DIGITS_LOCK:
        if key not in _DIGITS:
            _DIGITS[key] = _load_digits_arrays()
        x, y = _DIGITS[key]
    return x.copy(), y.copy()


def _load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    path = _cache_dir() / "digits.npz"
    try:
        with np.load(path) as z:
            return z["x"], z["y"]
    except (OSError, KeyError, ValueError):
        pass
    from sklearn.datasets import load_digits  # slow to import: only on the first run

    d = load_digits()
    x, y = d.data.astype(np.float32) / 16.0, d.target.astype(np.int64)
    try:  # atomic write: several workers may get here at once
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, x=x, y=y)
        os.replace(tmp, path)
    except OSError:
        pass
    return x, y


def _split(x: np.ndarray, y: np.ndarray, test_share: float, seed: int) -> tuple:
    """Stratified train/test split, fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        test.append(idx[: int(round(len(idx) * test_share))])
    test_idx = np.sort(np.concatenate(test))
    mask = np.ones(len(y), bool)
    mask[test_idx] = False
    train_idx = np.flatnonzero(mask)
    rng.shuffle(train_idx)
    return x[train_idx], y[train_idx], x[test_idx], y[test_idx]


def synthetic_arrays(size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` samples of 64 features in [0, 1]: 10 class prototypes (smooth random 8x8 images)
    plus Gaussian noise, clipped. Same size and seed -> same data."""
    if size < CLASSES * 2:
        raise LabError(f"the synthetic data set needs at least {CLASSES * 2} samples (got {size})",
                       where="training.dataset_size")
    rng = np.random.default_rng(10_000 + seed)
    protos = rng.random((CLASSES, 8, 8))
    protos = (protos + np.roll(protos, 1, 1) + np.roll(protos, 1, 2)) / 3.0  # a little spatial structure
    protos = protos.reshape(CLASSES, IN_FEATURES)
    y = rng.integers(0, CLASSES, size)
    x = protos[y] + rng.normal(0.0, 0.35, (size, IN_FEATURES))
    return np.clip(x, 0.0, 1.0).astype(np.float32), y.astype(np.int64)


def load_dataset(name: str = "digits", size: int = 4096, seed: int = 0) -> Dataset:
    if name == "digits":
        x, y = _digits_arrays()
        parts = _split(x, y, 0.25, seed)
    elif name == "synthetic":
        x, y = synthetic_arrays(size, seed)
        parts = _split(x, y, 0.2, seed)
    else:
        raise LabError(f"unknown data set {name!r}; choose 'digits' or 'synthetic'", where="training.dataset")
    xt, yt, xs, ys = (torch.from_numpy(np.ascontiguousarray(a)) for a in parts)
    return Dataset(name, xt, yt, xs, ys)


# ----- shares and shards -------------------------------------------------------------------------
def split_counts(total: int, weights) -> list[int]:
    """Integer parts of ``total`` in proportion to ``weights`` (lab.modelled.balance.split_batch)."""

    return [int(v) for v in split_batch(int(total), [float(w) for w in weights])]


def make_shards(labels: torch.Tensor | np.ndarray, workers: int, split: str = "even", *,
                weights=None, alpha: float = 0.5, seed: int = 0) -> list[np.ndarray]:
    """Disjoint index arrays into the training set, one per worker."""
    y = np.asarray(labels)
    n = len(y)
    rng = np.random.default_rng(20_000 + seed)
    if workers < 1:
        raise LabError(f"need at least one worker (got {workers})", where="training.workers")
    if n < workers:
        raise LabError(f"{n} training samples cannot be shared among {workers} workers", where="training.workers")
    if split == "even":
        perm = rng.permutation(n)
        shards = [np.sort(s) for s in np.array_split(perm, workers)]
    elif split == "weighted":
        if weights is None or len(weights) != workers:
            raise LabError("a weighted split needs one compute share per worker: map every worker to a device "
                           "of the topology (training.worker_devices)", where="training.split")
        counts = split_counts(n, weights)
        perm = rng.permutation(n)
        bounds = np.cumsum([0, *counts])
        shards = [np.sort(perm[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    elif split == "dirichlet":
        parts: list[list[np.ndarray]] = [[] for _ in range(workers)]
        for c in np.unique(y):
            idx = np.flatnonzero(y == c)
            rng.shuffle(idx)
            p = rng.dirichlet([alpha] * workers)
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(int)
            for w, part in enumerate(np.split(idx, cuts)):
                parts[w].append(part)
        shards = [np.sort(np.concatenate(p)) for p in parts]
    else:
        raise LabError(f"unknown split {split!r}; choose even, weighted or dirichlet", where="training.split")
    for w, s in enumerate(shards):
        if len(s) == 0:
            raise LabError(f"worker {w} got no training samples with this split; use fewer workers"
                           + (" or a larger dirichlet_alpha" if split == "dirichlet" else ""), where="training.split")
    return shards


def batch_sizes(batch_size: int, workers: int, split: str, weights=None) -> list[int]:
    """Per-worker batch sizes: ``batch_size`` each, or (weighted split) the total
    ``batch_size * workers`` shared in proportion to the compute shares (each at least 1)."""
    if split != "weighted":
        return [int(batch_size)] * workers
    if weights is None or len(weights) != workers:
        raise LabError("a weighted split needs one compute share per worker", where="training.split")
    sizes = split_counts(batch_size * workers, weights)
    if min(sizes) < 1:
        raise LabError(f"with these compute shares some worker gets an empty batch ({sizes}); "
                       "raise the batch size", where="training.batch_size")
    return sizes


class ShardSampler:
    """A worker's local samples and its stream of mini-batches.

    Batches walk through a fresh permutation of the local samples each pass (seeded by ``seed`` and
    the rank); a batch that reaches the end of a pass is completed from the next pass. After
    the task-level design's exchange changes the local samples, the next batch starts a new pass.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch: int, seed: int, rank: int):
        self.x, self.y = x.contiguous(), y.contiguous()
        self.batch = int(batch)
        self.gen = torch.Generator().manual_seed(30_000 + 7919 * rank + seed)
        self._perm = torch.empty(0, dtype=torch.long)
        self._pos = 0

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def _take(self, k: int) -> torch.Tensor:
        out = []
        while k > 0:
            if self._pos >= len(self._perm):
                self._perm = torch.randperm(len(self), generator=self.gen)
                self._pos = 0
            part = self._perm[self._pos:self._pos + k]
            self._pos += len(part)
            k -= len(part)
            out.append(part)
        return out[0] if len(out) == 1 else torch.cat(out)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        idx = self._take(self.batch)
        return self.x[idx], self.y[idx]

    def replace_samples(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x.contiguous(), y.contiguous()
        self._perm = torch.empty(0, dtype=torch.long)
        self._pos = 0

    def pick_share(self, share: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Indices to hand on (a random ``share`` of the local samples, at least one while more
        than one remains) and the indices kept."""
        n = len(self)
        k = int(round(share * n))
        if share > 0 and k == 0 and n > 1:
            k = 1
        k = min(k, n - 1)  # always keep at least one sample
        perm = torch.randperm(n, generator=self.gen)
        return perm[:k], perm[k:]


def worker_data(ds: Dataset, rank: int, workers: int, split: str, batch_size: int, *,
                weights=None, alpha: float = 0.5, seed: int = 0) -> ShardSampler:
    """The sampler of worker ``rank``: its shard of the training set and its batch size."""
    shards = make_shards(ds.y_train, workers, split, weights=weights, alpha=alpha, seed=seed)
    sizes = batch_sizes(batch_size, workers, split, weights)
    idx = torch.from_numpy(shards[rank])
    return ShardSampler(ds.x_train[idx], ds.y_train[idx], sizes[rank], seed, rank)


def combined_batches(ds: Dataset, workers: int, split: str, batch_size: int, steps: int, *,
                     weights=None, alpha: float = 0.5, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The per-step concatenation of every worker's batch (no exchange): what one process sees
    when it trains on the combined batch, the reference for the equivalence test."""
    samplers = [worker_data(ds, r, workers, split, batch_size, weights=weights, alpha=alpha, seed=seed)
                for r in range(workers)]
    out = []
    for _ in range(steps):
        parts = [s.next_batch() for s in samplers]
        out.append((torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])))
    return out
