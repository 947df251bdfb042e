"""TF32Linear and the first version of swap_linear_ / unswap_linear_."""

import pytest
import torch
from torch import nn

from pygpukit_torch import TF32Linear, swap_linear_, unswap_linear_
from conftest import DEVICES, rel_error


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32, bias=False))
        self.heads = nn.ModuleList([nn.Linear(32, 16) for _ in range(2)])
        self.lm_head = nn.Linear(32, 32)
        self.half = nn.Linear(8, 8).half()
        self.lazy = nn.LazyLinear(4)

    def forward(self, x):
        y = self.proj(x)
        return self.lm_head(y) + sum(h(y).sum(-1, keepdim=True) for h in self.heads)


@pytest.mark.parametrize("device", DEVICES)
def test_swap_keeps_outputs_parameters_and_state_dict(device):
    model = Block().to(device)
    x = torch.randn(5, 7, 32, device=device)
    ref = model(x)
    params = {n: p for n, p in model.named_parameters()}
    keys = set(model.state_dict())
    swapped = swap_linear_(model)
    assert swapped is model
    report = model.pygpukit_swap_report
    assert sorted(report.swapped) == ["heads.0", "heads.1", "lm_head", "proj.0", "proj.2"]
    reasons = dict(report.skipped)
    assert "float16" in reasons["half"] and "lazy" in reasons["lazy"]
    assert isinstance(model.proj[0], TF32Linear)
    assert all(p is params[n] for n, p in model.named_parameters())
    assert set(model.state_dict()) == keys
    assert rel_error(model(x), ref.double()) < 2e-3
    unswap_linear_(model)
    assert type(model.proj[0]) is nn.Linear
    assert all(p is params[n] for n, p in model.named_parameters())


def test_root_linear_and_filter():
    lin = nn.Linear(4, 3)
    new = swap_linear_(lin)
    assert isinstance(new, TF32Linear) and new.weight is lin.weight
    seq = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    swap_linear_(seq, filter_fn=lambda m, fqn: fqn != "1")
    assert isinstance(seq[0], TF32Linear) and type(seq[1]) is nn.Linear
    assert ("1", "excluded by filter_fn") in seq.pygpukit_swap_report.skipped


def test_tied_weights_stay_tied_and_train():
    emb = nn.Embedding(10, 8)
    head = nn.Linear(8, 10, bias=False)
    head.weight = emb.weight
    model = nn.Sequential(emb, head)
    swap_linear_(model)
    assert model[1].weight is model[0].weight
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = emb.weight.detach().clone()
    model(torch.tensor([1, 2, 3])).sum().backward()
    opt.step()
    assert not torch.equal(before, emb.weight)


def test_subclass_is_skipped_with_reason():
    model = nn.Sequential(nn.modules.linear.NonDynamicallyQuantizableLinear(4, 4))
    swap_linear_(model)
    assert "subclass" in dict(model.pygpukit_swap_report.skipped)["0"]
