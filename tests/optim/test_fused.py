"""The fused (compiled) optimisers: within float32 rounding of torch's Adam, adabelief-pytorch and the lab's
multi-tensor path; one compiled pass per parameter; the same guarantees on a NaN gradient; a real job with it."""
from __future__ import annotations

import contextlib
import io

import pytest
import torch
from adabelief_pytorch import AdaBelief as PackageAdaBelief

from lab.errors import LabError
from lab.optim import fused
from lab.optim import optimizers as lab_opt
from lab.optim.optimizers import AdaBelief, Adam, MaxAdaBelief, MaxAdaBeliefCorrected, NonFiniteGradient

pytestmark = [pytest.mark.usefixtures("spawns"), pytest.mark.skipif(not fused.available(), reason="torch.compile needs a C++ compiler")]
SHAPES = [(64, 32), (32,), (10, 64), (1,), (5, 5, 3)]
STEPS = 25


def params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g, dtype=torch.float32)) for s in SHAPES]


def run(opt, ps, steps=STEPS, seed=1):
    for k in range(steps):
        g = torch.Generator().manual_seed(seed * 100_003 + k)
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()


def close(a, b):
    """float32 rounding: a few units in the last place of parameters of order 1, after 25 steps"""
    for x, y in zip(a, b):
        torch.testing.assert_close(x.detach(), y.detach(), rtol=1e-5, atol=2e-6)


@pytest.fixture
def no_multi_tensor(monkeypatch):
    """The fused optimisers must not fall back to the multi-tensor functions in a local step."""
    def refuse(*a, **k):
        raise AssertionError("the multi-tensor path ran")
    monkeypatch.setattr(lab_opt, "adam_update", refuse)
    monkeypatch.setattr(lab_opt, "adabelief_update", refuse)


@pytest.mark.parametrize("wd,decoupled", [(0.0, False), (0.1, False), (0.1, True)])
def test_fused_adam_is_torch_adam_within_rounding(no_multi_tensor, wd, decoupled):
    ours, ref = params(), params()
    run(Adam(ours, lr=3e-2, betas=(0.8, 0.95), weight_decay=wd, decoupled_weight_decay=decoupled, fused=True), ours)
    run(torch.optim.Adam(ref, lr=3e-2, betas=(0.8, 0.95), weight_decay=wd, decoupled_weight_decay=decoupled), ref)
    close(ours, ref)
    assert max(float((p - q).abs().max()) for p, q in zip(ours, params())) > 0.1  # it moved


@pytest.mark.parametrize("cls,amsgrad", [(AdaBelief, False), (MaxAdaBelief, True)])
@pytest.mark.parametrize("wd,decoupled", [(0.0, True), (0.1, True), (0.1, False)])
def test_fused_adabelief_is_the_package_within_rounding(no_multi_tensor, cls, amsgrad, wd, decoupled):
    ours, ref = params(), params()
    run(cls(ours, lr=3e-2, eps=1e-12, weight_decay=wd, decoupled_weight_decay=decoupled, fused=True), ours)
    with contextlib.redirect_stdout(io.StringIO()):
        pkg = PackageAdaBelief(ref, lr=3e-2, eps=1e-12, weight_decay=wd, weight_decouple=decoupled, rectify=False,
                               amsgrad=amsgrad, print_change_log=False)
    run(pkg, ref)
    close(ours, ref)


def test_fused_corrected_max_is_the_multi_tensor_path_within_rounding():
    ours, ref = params(), params()
    a, b = MaxAdaBeliefCorrected(ours, lr=3e-2, fused=True), MaxAdaBeliefCorrected(ref, lr=3e-2)
    run(a, ours)
    run(b, ref)
    close(ours, ref)
    for p, q in zip(ours, ref):
        torch.testing.assert_close(a.state[p]["max_exp_avg_var_hat"], b.state[q]["max_exp_avg_var_hat"],
                                   rtol=1e-5, atol=1e-12)


def test_a_nan_gradient_leaves_a_fused_optimiser_untouched():
    ps = params()
    opt = AdaBelief(ps, lr=1e-2, fused=True)
    run(opt, ps, steps=2)
    before = [p.detach().clone() for p in ps]
    state = [opt.state[p]["exp_avg"].clone() for p in ps]
    for p in ps:
        p.grad = torch.ones_like(p)
    ps[2].grad[0, 0] = float("nan")
    with pytest.raises(NonFiniteGradient, match="parameter 2"):
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(ps, before))
    assert all(torch.equal(opt.state[p]["exp_avg"], s) for p, s in zip(ps, state))


def test_without_a_compiler_the_fused_optimiser_is_refused_clearly(monkeypatch):
    monkeypatch.setattr(fused, "available", lambda: False)
    with pytest.raises(LabError, match="C\\+\\+ compiler"):
        Adam(params(), fused=True)


def test_a_training_run_with_the_fused_optimiser_equals_the_multi_tensor_one(monkeypatch):
    from lab.scenario.document import Training
    from lab.train.reference import single_process

    tr = Training(workers=2, steps=8, lr=0.01, optimizer="maxadabelief", model="cnn")
    b = single_process(tr)
    with monkeypatch.context() as m:  # the setting reaches the optimiser: the multi-tensor path must not run
        m.setattr(lab_opt, "adabelief_update", lambda *a, **k: pytest.fail("the multi-tensor path ran"))
        a = single_process(tr.replace(fused=True))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=2e-6)
    assert max(float((a[k] - single_process(tr, steps=0)[k]).abs().max()) for k in a) > 1e-3


def test_a_job_with_the_fused_optimiser_trains_as_one_process_does(lab_db):
    from lab.scenario.document import default_scenario
    from lab.store.runs import RunStore
    from tests.conftest import run_command
    from lab.train.reference import single_process

    sc = default_scenario()
    tr = sc.training.replace(workers=2, steps=6, lr=0.01, optimizer="adabelief", fused=True, check_every=1)
    res = run_command(sc.replace(training=tr), lab_db)
    assert res.status == "done", res.error
    assert RunStore(lab_db).get_run(res.run_id)["info"]["optimiser_implementation"] == "fused"
    got = torch.load(RunStore(lab_db).checkpoint_dir(res.run_id) / "final.pt", weights_only=True)["model"]
    want = single_process(tr.replace(fused=False))
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=2e-6)


def test_a_job_with_the_fused_optimiser_and_powersgd_runs_to_its_end_and_says_both(lab_db):
    """The two set together (as the Training page's journey sets them by clicking) train to the end, and the run
    records both implementations."""
    from lab.scenario.document import Compression, default_scenario
    from lab.store.runs import RunStore
    from tests.conftest import run_command

    sc = default_scenario()
    tr = sc.training.replace(workers=2, steps=8, batch_size=16, fused=True,
                             compression=Compression.from_dict({"kind": "powersgd", "rank": 3, "warmup": 4}))
    res = run_command(sc.replace(training=tr), lab_db)
    assert res.status == "done", res.error
    info = RunStore(lab_db).get_run(res.run_id)["info"]
    assert info["optimiser_implementation"] == "fused"
    assert RunStore(lab_db).progress(res.run_id) == 8


def test_a_jobs_flat_buffers_are_stepped_in_one_call_within_rounding():
    """A training job's parameters and gradients are views of two flat buffers: the fused optimiser packs its states
    the same way and steps the whole model in one kernel call, as the per-tensor path would."""
    from lab.optim.flat import flatten_parameters
    from lab.scenario.models import build_model

    results = []
    for flat in (True, False):
        model = build_model("cnn", seed=0)
        ps = flatten_parameters(model)[0] if flat else list(model.parameters())
        opt = MaxAdaBelief(ps, lr=1e-2, fused=True)
        for k in range(10):
            g = torch.Generator().manual_seed(k)
            for p in ps:
                p.grad.copy_(torch.randn(p.shape, generator=g)) if flat else setattr(p, "grad", torch.randn(
                    p.shape, generator=g))
            opt.step()
        exp_avgs = [opt.state[p]["exp_avg"] for p in ps]
        assert (fused.span(exp_avgs) is not None) == flat  # packed back to back only for the job's buffers
        results.append([p.detach().clone() for p in ps])
    close(*results)
    assert fused.span([torch.zeros(3), torch.zeros(3)]) is None  # separate tensors are not one span
