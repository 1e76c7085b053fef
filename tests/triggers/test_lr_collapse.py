"""A learning rate decayed to nothing (a scheduler meant for epochs stepped in the batch loop) is said once."""

from __future__ import annotations

import math
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap

pytestmark = pytest.mark.timeout(60)


def _train(updates: int, schedule: Callable[[torch.optim.Optimizer], Callable[[int], None]], lr: float = 1.0) -> None:
    """``updates`` steps of a small classifier under watch; ``schedule(optimizer)`` gives what runs after each update
    (it is told the update's number)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    after = schedule(optimizer)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for i in range(updates):
            x = torch.randn(16, 8)
            loss = F.cross_entropy(model(x), (x[:, 0] > 0).long())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            after(i)


def test_an_epoch_scheduler_stepped_every_batch_is_named_with_its_settings(capfd):
    def per_batch(optimizer):
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
        return lambda i: scheduler.step()

    _train(300, per_batch, lr=0.5)
    err = " ".join(capfd.readouterr().err.split())
    assert err.count("under a millionth") == 1, err  # said once, at the second look that finds it (update 128)
    assert f"the learning rate is {0.5 * 0.7 ** 128:.3g} at the update of step 128, under a millionth of the 0.5" in err
    assert "StepLR(step_size=1, gamma=0.7) stepped 128 times in 128 updates: a scheduler meant for epochs" in err


def test_a_rate_lowered_by_hand_with_no_scheduler_is_said_without_one(capfd):
    def halve(optimizer):
        def after(i):
            for group in optimizer.param_groups:
                group["lr"] *= 0.5
        return after

    _train(200, halve)
    err = " ".join(capfd.readouterr().err.split())
    assert "something lowers it at every update (a learning-rate scheduler stepped in the batch loop?)" in err, err


@pytest.mark.parametrize("kind", ["per epoch", "cosine to zero", "warm-up from zero"])
def test_schedules_that_keep_learning_are_not_said(capfd, kind):
    def schedule(optimizer):
        if kind == "per epoch":  # the same StepLR, stepped after each epoch of 50 batches
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
            return lambda i: scheduler.step() if i % 50 == 49 else None
        if kind == "cosine to zero":  # annealed to exactly 0 at the run's last update: low at one look only
            scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=256)
            return lambda i: scheduler.step()
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, s / 100))  # starts at 0
        return lambda i: scheduler.step()

    _train(258, schedule)
    assert "learning rate is" not in capfd.readouterr().err


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_a_non_finite_learning_rate_is_the_diagnosis_of_the_update_it_broke(bad):
    """A schedule that divides by a warmup of 0 steps (numpy's float division gives Inf or NaN, with a warning only)
    makes the rate itself non-finite: the report said only "the optimizer update made a parameter non-finite", with
    "lr: inf" among its facts and no diagnosis."""
    def broken(optimizer):
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: bad if s >= 3 else 1.0)
        return lambda i: scheduler.step()

    with pytest.raises(tensor_dap.NonFiniteError) as info:
        _train(8, broken, lr=0.1)
    report = info.value.report
    assert report.phase == "optimizer" and report.step == 3, report.headline
    assert report.diagnosis.startswith(f"the learning rate is {bad}, so every update with it makes the parameters "
                                       "non-finite"), report.diagnosis
    assert report.lr and not all(map(math.isfinite, report.lr))


def test_finite_rates_leave_the_diagnosis_to_the_other_rules():
    from tensor_dap.triggers.diagnose import nonfinite_rate

    assert nonfinite_rate([1e-3, 0.0, 1e30]) is None and nonfinite_rate([]) is None
    assert nonfinite_rate([1e-3, float("nan")]).startswith("the learning rate is nan")
