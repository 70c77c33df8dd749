"""lab.train.data: the data sets, the shards, the batch sizes and the samplers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lab.errors import LabError
from lab.train import data as data_mod

pytestmark = pytest.mark.timeout(180)


def test_digits_and_synthetic_data():
    ds = data_mod.load_dataset("digits", seed=0)
    assert ds.x_train.shape == (1347, 64) and ds.x_test.shape == (450, 64)
    assert float(ds.x_train.min()) >= 0.0 and float(ds.x_train.max()) <= 1.0
    assert torch.equal(ds.x_test, data_mod.load_dataset("digits", seed=0).x_test)
    assert not torch.equal(ds.x_test, data_mod.load_dataset("digits", seed=1).x_test)
    syn = data_mod.load_dataset("synthetic", size=5000, seed=3)
    assert syn.x_train.shape[0] + syn.x_test.shape[0] == 5000
    assert set(syn.y_train.tolist()) == set(range(10))


@pytest.mark.parametrize("split", ["even", "weighted", "dirichlet"])
def test_shards_are_disjoint_and_cover_the_training_set(split):
    y = data_mod.load_dataset().y_train.numpy()
    shards = data_mod.make_shards(y, 3, split, weights=[1, 2, 5], alpha=0.1, seed=4)
    allidx = np.concatenate(shards)
    assert len(allidx) == len(y) and len(np.unique(allidx)) == len(y)
    sizes = [len(s) for s in shards]
    if split == "even":
        assert max(sizes) - min(sizes) <= 1
    if split == "weighted":
        assert sizes == data_mod.split_counts(len(y), [1, 2, 5])
    if split == "dirichlet":  # non-IID: with alpha 0.1 each worker is dominated by a few classes
        for s in shards:
            counts = np.bincount(y[s], minlength=10)
            assert np.sort(counts)[-3:].sum() > 0.6 * counts.sum()


def test_bad_splits_are_lab_errors():
    y = np.arange(10) % 10
    with pytest.raises(LabError, match="worker_devices"):
        data_mod.make_shards(y, 2, "weighted")
    with pytest.raises(LabError, match="cannot be shared"):
        data_mod.make_shards(y, 20, "even")


def test_sampler_and_exchange_share():
    x = torch.arange(20.0).reshape(10, 2)
    y = torch.arange(10)
    s = data_mod.ShardSampler(x, y, batch=4, seed=0, rank=0)
    seen = torch.cat([s.next_batch()[1] for _ in range(5)])  # 20 samples = exactly two passes
    assert sorted(seen.tolist()) == sorted(list(range(10)) * 2)
    give, keep = s.pick_share(0.3)
    assert len(give) == 3 and len(keep) == 7 and set(give.tolist()).isdisjoint(keep.tolist())
    assert len(s.pick_share(1.0)[1]) == 1  # always keeps one sample


def test_combined_batches_are_the_workers_batches_concatenated():
    ds = data_mod.load_dataset()
    comb = data_mod.combined_batches(ds, 2, "even", 8, 3)
    w0 = data_mod.worker_data(ds, 0, 2, "even", 8)
    w1 = data_mod.worker_data(ds, 1, 2, "even", 8)
    for x, y in comb:
        x0, y0 = w0.next_batch()
        x1, y1 = w1.next_batch()
        assert torch.equal(x, torch.cat([x0, x1])) and torch.equal(y, torch.cat([y0, y1]))


def test_digits_load_once_under_concurrent_sessions(tmp_path, monkeypatch):
    """Eight threads (the app's sessions submitting at the same moment) get equal digits arrays from
    a single .npz load: concurrent np.load of the header raised SystemError in CPython 3.11."""
    import threading

    import lab.train.data as data_mod

    monkeypatch.setenv("LAB_DATA", str(tmp_path))
    x0, y0 = data_mod._digits_arrays()  # writes the cache file of this LAB_DATA
    data_mod._DIGITS.clear()
    calls = []
    real = np.load
    monkeypatch.setattr(data_mod.np, "load", lambda *a, **k: calls.append(1) or real(*a, **k))
    out, errors = [], []
    barrier = threading.Barrier(8)

    def go():
        barrier.wait()
        try:
            out.append(data_mod._digits_arrays())
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(out) == 8 and len(calls) == 1
    for x, y in out:
        assert np.array_equal(x, x0) and np.array_equal(y, y0)
    out[0][0][0, 0] = 99.0  # callers get copies: the cache stays intact
    assert data_mod._digits_arrays()[0][0, 0] == x0[0, 0]
