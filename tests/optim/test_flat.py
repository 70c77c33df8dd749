"""lab.optim.flat: parameters and gradients become views of two flat buffers with a loss slot."""

import torch
from torch import nn

from lab.optim.flat import flatten_parameters


def test_views_keep_values_and_share_storage():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    model[2].bias.requires_grad_(False)  # a frozen tensor stays out of the buffers
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    params, pflat, gflat = flatten_parameters(model)
    assert len(params) == 3 and pflat.numel() == gflat.numel() == 3 * 4 + 4 + 4 * 2 + 1
    for p, b in zip(params, before):
        assert torch.equal(p.data, b)
    assert torch.equal(pflat[:-1], torch.cat([b.reshape(-1) for b in before])) and pflat[-1] == 0
    # A backward pass writes into the gradient buffer; a write to the buffer is a write to the model.
    model(torch.randn(5, 3)).sum().backward()
    assert torch.equal(gflat[:12], params[0].grad.reshape(-1)) and gflat[:-1].abs().sum() > 0
    pflat[0] = 42.0
    assert model[0].weight[0, 0].item() == 42.0
    # One reference: the gradient autograd computes for an unflattened copy.
    twin = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    twin.load_state_dict(model.state_dict())
    x = torch.randn(5, 3)
    model.zero_grad(set_to_none=False)
    gflat.zero_()
    model(x).sum().backward()
    twin(x).sum().backward()
    assert torch.allclose(gflat[:12], twin[0].weight.grad.reshape(-1))
