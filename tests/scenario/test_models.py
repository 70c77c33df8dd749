"""lab.scenario.models: every preset builds, answers in the shape the trainer expects, starts from
the same weights for the same seed, and leaves the caller's random state alone."""

import pytest
import torch

from lab.errors import LabError
from lab.scenario.models import build_model, parameter_count
from tests.conftest import every_model


@pytest.mark.parametrize("name", every_model())
def test_every_preset_builds_and_trains_one_step(name):
    model = build_model(name, 64, 10, seed=3)
    x = torch.rand(5, 64)
    out = model(x)
    assert out.shape == (5, 10) and torch.isfinite(out).all()
    torch.nn.functional.cross_entropy(out, torch.arange(5)).backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert parameter_count(model) == sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.parametrize("name", every_model())
def test_same_seed_same_weights_and_the_global_generator_is_untouched(name):
    torch.manual_seed(123)
    want_next = torch.rand(3)
    torch.manual_seed(123)
    a = build_model(name, seed=7)
    assert torch.equal(torch.rand(3), want_next)  # building did not consume the caller's random numbers
    b, c = build_model(name, seed=7), build_model(name, seed=8)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)


def test_bad_requests_are_lab_errors():
    with pytest.raises(LabError, match="unknown model"):
        build_model("<script>")
    with pytest.raises(LabError, match="at least 1 input feature and 2 classes"):
        build_model("mlp", 0, 10)
