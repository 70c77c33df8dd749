"""torch's compression hooks run on the lab's ring: the same parameters as DDP with the hooks themselves."""
from __future__ import annotations

import json

import pytest
import torch

from lab.comm.spawn import run_local
from lab.comm.torch_hooks import PowerSGD, ready_order
from lab.errors import LabError
from lab.scenario.models import build_model
from lab.testing.hook_workers import hook_worker

CASES = [("mlp", "powersgd", 1, 2), ("cnn", "powersgd", 2, 3), ("transformer", "powersgd", 4, 2),
         ("mlp", "fp16_hook", 0, 0), ("mlp", "bf16_hook", 0, 0)]


@pytest.fixture(scope="module")
def ddp_rows(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("hooks")
    run_local(hook_worker, 2, (str(out), CASES), timeout_s=240)
    rows = json.loads((out / "rank0.json").read_text())
    assert not [r for r in rows if "error" in r], rows
    return rows


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_lab_run_of_a_hook_trains_to_ddps_parameters(ddp_rows, case, spawns):
    row = ddp_rows[case]
    assert (row["model"], row["kind"]) == CASES[case][:2]
    assert row["moved"] > 1e-3  # the runs trained: the comparison is not of two untouched models
    # two workers: every sum is one addition, so summation order cannot differ; only PowerSGD's matrix products
    # may round differently by a float32 unit
    assert row["max_diff"] <= 1e-7, row


def test_bytes_are_the_ring_bytes_of_what_each_hook_sends(ddp_rows, spawns):
    for (model, kind, r, start), row in zip(CASES, ddp_rows):
        params = list(build_model(model, seed=3).parameters())
        numel = sum(p.numel() for p in params)
        steps = row["stats"]
        if kind == "powersgd":
            kept = PowerSGD([p.shape for p in params], r, start).compressed_numel()
            assert kept < numel / 2
            # warm-up steps all-reduce the whole fp32 gradient; after them, the uncompressed parameters, P and Q
            assert [s["kept"] for s in steps] == [numel] * start + [kept] * (len(steps) - start)
            # a two-rank ring sends every entry once (half in the reduce-scatter, half in the all-gather)
            assert [s["bytes_sent"] for s in steps] == [4 * s["kept"] for s in steps]
        else:
            assert all(s["kept"] == numel and s["bytes_sent"] == 2 * numel for s in steps)


def test_ready_order_is_the_backward_order_and_refusals_are_clear():
    m = build_model("mlp", seed=0)
    x, y = torch.randn(4, 64), torch.randint(0, 10, (4,))
    order = ready_order(m, lambda mm: torch.nn.functional.cross_entropy(mm(x), y))
    assert sorted(order) == list(range(6)) and order[0] in (4, 5)  # the last layer's gradients are ready first
    assert all(p.grad is None for p in m.parameters())  # the backward ran on a copy
    with pytest.raises(LabError, match="warm-up"):
        PowerSGD([(4, 4)], 1, 1)
    with pytest.raises(LabError, match="rank"):
        PowerSGD([(4, 4)], 0, 2)
    with pytest.raises(LabError, match="every parameter"):
        PowerSGD([(4, 4), (4,)], 1, 2, order=[0, 0])


def test_powersgd_state_survives_a_checkpoint_loaded_with_weights_only(tmp_path):
    ps = PowerSGD([(32, 16), (32,)], 2, 2, seed=5)
    ps.iter, ps.error = 7, torch.randn(544)
    ps.rng.randint(1_000_000_000)  # the generator has moved on since it was seeded
    torch.save(ps.state_dict(), tmp_path / "ps.pt")
    twin = PowerSGD([(32, 16), (32,)], 2, 2, seed=0)
    twin.load_state_dict(torch.load(tmp_path / "ps.pt", weights_only=True))
    assert twin.iter == 7 and torch.equal(twin.error, ps.error) and twin.p_memory is None
    assert twin.rng.randint(1_000_000_000) == ps.rng.randint(1_000_000_000)
    # the bias is sent whole; the matrix as P (32 x 2) and Q (16 x 2); a small matrix would not be worth it (torch's
    # rule: (n + m) r x 2 must be under n m)
    assert twin.sizes() == (32, 64, 32) and twin.compressed_numel() == 128
    assert PowerSGD([(8, 4)], 2, 2).sizes() == (32, 0, 0)
