"""Parameters that get gradients but are in no param group of the optimizer: said at the end of the run."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers import finite, unoptimized

pytestmark = pytest.mark.timeout(60)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _train(model: nn.Module, optimizers: list[torch.optim.Optimizer], watched: torch.optim.Optimizer,
           steps: int = 6) -> None:
    gen = torch.Generator().manual_seed(1)
    with tensor_dap.watch(model, watched, on="raise"):
        for _ in range(steps):
            x, y = torch.randn(16, 8, generator=gen), torch.randint(0, 2, (16,), generator=gen)
            loss = F.cross_entropy(model(x), y)
            for opt in optimizers:
                opt.zero_grad()
            loss.backward()
            for opt in optimizers:
                opt.step()


def _end_lines(capfd) -> str:
    return " ".join(capfd.readouterr().err.split())


def test_a_head_replaced_after_the_optimizer_was_made_is_named(capfd):
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model[2] = nn.Linear(16, 2)  # a 2-class head, after the optimizer took the old one's parameters
    before = model[2].weight.detach().clone()
    _train(model, [optimizer], optimizer)
    err = _end_lines(capfd)
    assert torch.equal(model[2].weight, before)  # what the line says: it never changed
    assert ("tensor_dap.watch(Sequential): 2 parameters (2.weight, 2.bias) got gradients and never changed over 6 "
            "updates: they "
            "are in no param group of Adam") in err, err
    assert "set requires_grad_(False)" in err


def test_an_optimizer_given_only_the_head_names_the_rest(capfd):
    model = _model()
    optimizer = torch.optim.SGD(model[2].parameters(), lr=0.1)  # the body still requires grad
    _train(model, [optimizer], optimizer)
    assert "2 parameters (0.weight, 0.bias) got gradients and never changed" in _end_lines(capfd)


def test_parameters_another_optimizer_updates_are_not_said(capfd):
    model = _model()
    body, head = torch.optim.SGD(model[0].parameters(), lr=0.1), torch.optim.Adam(model[2].parameters(), lr=1e-2)
    _train(model, [body, head], head)  # the watch knows the head's optimizer only; the body's changes all the same
    assert "never changed" not in _end_lines(capfd)


def test_a_model_its_optimizer_holds_whole_is_not_said(capfd):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _train(model, [optimizer], optimizer)
    model[0].weight.requires_grad_(False)  # frozen on purpose: no gradient, not followed
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    _train(model, [optimizer], optimizer)
    assert "never changed" not in _end_lines(capfd)


def test_what_is_kept_of_a_parameter_is_bounded():
    big = nn.Parameter(torch.randn(1000, 1000))
    sample = finite.spread(big, unoptimized.SAMPLE)
    assert sample.numel() <= unoptimized.SAMPLE
    assert sample.data_ptr() != big.data_ptr()  # a copy: the parameter changing would show
    flat = big.detach().reshape(-1)
    assert torch.equal(sample, flat[:: flat.numel() // unoptimized.SAMPLE][: unoptimized.SAMPLE])  # spread over it
    transposed = big.detach().t()  # strides of another order: no flattened copy, the same logical order
    assert torch.equal(finite.spread(transposed, 10), transposed.reshape(-1)[::100000][:10])


def test_a_long_run_is_told_at_its_twentieth_update_not_at_its_end(capfd):
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model[2] = nn.Linear(16, 2)
    gen = torch.Generator().manual_seed(1)
    said_by_step = {}
    with tensor_dap.watch(model, optimizer, on="raise"):
        for step in range(24):
            loss = F.cross_entropy(model(torch.randn(16, 8, generator=gen)), torch.randint(0, 2, (16,), generator=gen))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            said_by_step[step] = "never changed over" in capfd.readouterr().err
    assert [s for s, said in said_by_step.items() if said] == [19]  # at the 20th update, and only then
    assert "never changed" not in _end_lines(capfd)  # not again at the end
