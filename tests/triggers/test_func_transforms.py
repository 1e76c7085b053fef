"""Training with torch.func (DP-SGD's per-sample gradients: vmap(grad(loss)) through functional_call, clipped,
noised and set as .grad, with no backward()): watch must stop at the step, name the op and line where the gradients
went non-finite in the exact mode, and say why the unchanged loop cannot re-run such a step."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

import tensor_dap
from tensor_dap import NonFiniteError
from tensor_dap.triggers.fixes import DIAGNOSES
from tensor_dap.triggers.loop import FUNC_TRANSFORM


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x / x.norm(dim=-1, keepdim=True)  # a sample of zeros: 0/0
        return self.fc2(torch.tanh(self.fc1(x)))


def _dp_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
             zero_scale: bool) -> None:
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_of(p: dict, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, p, (xi[None],)), yi[None])

    grads = vmap(grad(loss_of), in_dims=(None, 0, 0))(params, x, y)
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()]).norm(dim=0)
    scale = 1.0 / (norms * 0) if zero_scale else (1.0 / norms).clamp(max=1.0)  # a clip bound of 0
    for name, p in model.named_parameters():
        p.grad = (grads[name] * scale.view(-1, *[1] * (grads[name].dim() - 1))).sum(0) / len(x)
    optimizer.step()


def _batches(bad_step: int | None, zero_sample: bool):
    gen = torch.Generator().manual_seed(3)
    for step in range(4):
        x, y = torch.randn(5, 6, generator=gen), torch.randint(0, 3, (5,), generator=gen)
        if zero_sample and step == bad_step:
            x[2] = 0.0
        yield step, x, y


@pytest.mark.parametrize("bug", ["sample of zeros", "clip bound of 0"])
def test_the_exact_mode_names_the_op_inside_vmap_and_the_one_after_it(bug):
    torch.manual_seed(0)
    model = _Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    zero_sample = bug == "sample of zeros"
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise") as w:
        for step, x, y in _batches(2, zero_sample):
            w.step(_dp_step, model, optimizer, x, y, zero_scale=not zero_sample and step == 2)
    report = info.value.report
    if zero_sample:  # inside the vmapped forward, seen over every sample at once
        assert (report.step, report.phase, report.module, report.op) == (2, "forward", "", "div"), report
        assert report.source["text"].startswith("x = x / x.norm(dim=-1, keepdim=True)")
        assert all("vmap ×5" in s.notes for section, _, s in report.tensors if section == "op inputs")
    else:  # after the transform, in the program's own code: the gradients it set came from it
        assert (report.step, report.module, report.op) == (2, None, "rdiv"), report
        assert report.source["text"].startswith("scale = 1.0 / (norms * 0)")
    assert report.diagnosis == DIAGNOSES["div"]
    assert report.bundle is not None


def test_the_unchanged_loop_stops_at_the_step_and_says_the_gradients_came_from_a_transform():
    torch.manual_seed(0)
    model = _Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = None
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise"):
        for _, x, y in _batches(2, True):
            before = [p.detach().clone() for p in model.parameters()]
            _dp_step(model, optimizer, x, y, zero_scale=False)
    report = info.value.report
    assert report.step == 2 and report.phase == "backward"
    assert report.headline == "non-finite gradient of fc2, set by the program with no backward()", report
    assert any("from a torch.func transform, with no backward()" in n for n in report.notes), report.notes
    assert any(FUNC_TRANSFORM in n and "hand it to watch.step)" in n for n in report.notes), report.notes
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))  # stopped before the update


def test_break_if_inside_vmap_checks_every_sample_instead_of_raising_torchs_error():
    """A per-sample loss under vmap refuses .item(): break_if reads every sample's at once and fires on the one that
    would (the highest above a threshold, the lowest under one, a non-finite one first)."""
    from tensor_dap import LossThresholdError

    batch = torch.tensor([[0.0, 1.0], [1.0, 3.0], [0.5, 0.5]])  # per-sample sums 1, 4, 1
    def above(x: torch.Tensor) -> torch.Tensor:
        tensor_dap.break_if(x.sum(), above=3.0, on="raise")
        return x.sum()

    with pytest.raises(LossThresholdError) as info:
        vmap(above)(batch)
    assert info.value.report.loss == 4.0 and "vmap ×3" in info.value.report.tensors[0][2].notes

    def below(x: torch.Tensor) -> torch.Tensor:
        tensor_dap.break_if(x.sum(), below=2.0, on="raise")
        return x.sum()

    with pytest.raises(LossThresholdError) as info:
        vmap(below)(batch)
    assert info.value.report.loss == 1.0

    def nan(x: torch.Tensor) -> torch.Tensor:
        tensor_dap.break_if(torch.log(x - 0.75).sum(), above=100.0, on="raise")  # sample 0 and 2: log of < 0
        return x.sum()

    with pytest.raises(NonFiniteError):
        vmap(nan)(batch)
    assert torch.equal(vmap(lambda x: x.sum() if not tensor_dap.break_if(x.sum(), above=9.0, on="raise")
                            else x.sum())(batch), torch.tensor([1.0, 4.0, 1.0]))  # nothing fires: values as ever
