"""An evaluation without ``model.eval()``: forwards under no_grad in train mode, several in a row, said once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers import eval_mode

pytestmark = pytest.mark.timeout(60)


def _model(*extra: nn.Module) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), *extra, nn.Linear(16, 4))


def _run(model: nn.Module, validate) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for step in range(6):
            x, y = torch.randn(16, 8, generator=gen), torch.randint(0, 4, (16,), generator=gen)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            if step == 2:
                validate(model)


def _validation(model: nn.Module, with_eval: bool) -> None:
    if with_eval:
        model.eval()
    with torch.no_grad():
        for _ in range(5):
            model(torch.randn(16, 8))
    model.train()


def _err(capfd) -> str:
    return " ".join(capfd.readouterr().err.split())


def test_a_validation_without_eval_is_said_once_with_its_layers(capfd):
    model = _model(nn.Dropout(0.3), nn.BatchNorm1d(16))
    running = model[3].running_mean.clone()
    _run(model, lambda m: _validation(m, with_eval=False))
    err = _err(capfd)
    assert ("tensor_dap: Sequential ran 3 forwards in a row under torch.no_grad() in train mode, so its 1 Dropout, "
            "1 BatchNorm1d act as in training (dropout drops activations; batch norm normalizes with each batch's "
            "statistics and moves its running statistics toward these batches): an evaluation without model.eval()?"
            ) in err, err
    assert err.count("forwards in a row under torch.no_grad()") == 1
    assert not torch.equal(model[3].running_mean, running)  # what it says: the validation moved them


def test_a_validation_in_eval_mode_is_not_said(capfd):
    _run(_model(nn.Dropout(0.3)), lambda m: _validation(m, with_eval=True))
    assert "under torch.no_grad() in train mode" not in _err(capfd)


def test_a_model_the_mode_does_not_change_is_not_said(capfd):
    _run(_model(), lambda m: _validation(m, with_eval=False))
    assert "under torch.no_grad() in train mode" not in _err(capfd)


def test_one_no_grad_forward_a_step_is_not_an_evaluation(capfd):
    generator = _model(nn.BatchNorm1d(16))  # a GAN's generator making its discriminator's batch under no_grad
    optimizer = torch.optim.Adam(generator.parameters())
    with tensor_dap.watch(generator, optimizer, on="raise"):
        for _ in range(8):
            with torch.no_grad():
                generator(torch.randn(16, 8))
            optimizer.zero_grad()
            generator(torch.randn(16, 8)).pow(2).mean().backward()
            optimizer.step()
    assert "under torch.no_grad() in train mode" not in _err(capfd)


def _nothing():
    """The model's forward, as the capture hands it to ``forward``: not needed to count."""


def test_the_count_starts_again_at_each_training_step():
    model = _model(nn.Dropout(0.1))
    evaluations = eval_mode.Evaluations(model)
    for _ in range(eval_mode.EVAL_FORWARDS - 1):
        evaluations.forward(_nothing, (), {})
    assert not evaluations.done
    evaluations.count = 0  # what the capture does at a step's first training forward
    evaluations.forward(_nothing, (), {})
    assert not evaluations.done and evaluations.count == 1
