"""A loss with one exact value over the last steps is said at the end of a watched run: it trains nothing.

The first case is the bug of pytorch/examples' DDP tutorial: ``F.cross_entropy`` over logits of shape [N, 1]
with soft targets is 0 whatever the model does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers import running_total
from tensor_dap.triggers.aftermath import FLAT_STEPS, flat_loss


def _train(loss_of, steps: int, *, lr: float = 1e-2, loop: bool = True) -> tensor_dap.watch:
    torch.manual_seed(0)
    model = nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def step(x, y):
        optimizer.zero_grad()
        loss = loss_of(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    gen = torch.Generator().manual_seed(1)
    with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for _ in range(steps):
            x, y = torch.rand(32, 20, generator=gen), torch.rand(32, 1, generator=gen)
            step(x, y) if loop else w.step(step, x, y)
    return w


@pytest.mark.parametrize("loop", [True, False])
def test_a_cross_entropy_over_one_class_is_said_at_the_end(capsys, monkeypatch, loop):
    if loop:  # as a torchrun rank: its lines say which (read from torchrun's variables: at the end the group is gone)
        monkeypatch.setenv("RANK", "1")
        monkeypatch.setenv("WORLD_SIZE", "2")
    w = _train(F.cross_entropy, FLAT_STEPS + 3, loop=loop)
    err = capsys.readouterr().err
    assert w.step_count == FLAT_STEPS + 3 and not w.reports
    rank = "[rank 1] " if loop else ""
    assert f"{rank}tensor_dap.watch(Linear): the loss was exactly 0 in each of the last {FLAT_STEPS} steps" in err
    assert "single class" in err


def test_a_learning_rate_of_zero_on_one_batch_is_said_with_its_value(capsys):
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    with tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(FLAT_STEPS):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
    err = capsys.readouterr().err
    assert f"the loss was exactly {loss.item():.6g} in each of the last {FLAT_STEPS} steps" in err
    assert "learning rate of 0" in err


@pytest.mark.parametrize("steps, loss_of", [
    (FLAT_STEPS - 1, F.cross_entropy),  # too few steps to tell
    (FLAT_STEPS + 3, F.mse_loss),  # a loss that moves
])
def test_no_note_for_a_short_run_or_a_moving_loss(capsys, steps, loss_of):
    _train(loss_of, steps)
    assert "the loss was exactly" not in capsys.readouterr().err


def test_the_rule_reads_values_and_tensors_and_skips_what_it_cannot_read():
    flat = [torch.tensor(1.5)] * FLAT_STEPS
    assert "exactly 1.5 in each" in flat_loss([3.0, *flat])  # only the last FLAT_STEPS count
    assert flat_loss([*flat[:-1], 1.5000001]) is None  # one step differs
    assert flat_loss([float("nan")] * FLAT_STEPS) is None  # non-finite: the non-finite count says it

    class Unreadable:
        def __float__(self):
            raise RuntimeError("device lost")

    assert flat_loss([Unreadable()] * FLAT_STEPS) is None


def test_a_saturated_sigmoid_at_binary_cross_entropy_s_cap_is_said_during_the_run_and_once(capsys):
    """pytorch/examples' dcgan at a learning rate of 0.05: both models' sigmoids saturate and each loss sits at exactly
    100, nn.BCELoss's cap, for the rest of the run. Said at the watch's first look (64 updates), not only at the
    end, and not twice."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 1), nn.Sigmoid())
    with torch.no_grad():
        model[2].bias.fill_(-200.0)  # saturated: sigmoid gives exactly 0 where the target is 1
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    criterion = nn.BCELoss()
    with tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(running_total.EVERY + 8):
            optimizer.zero_grad()
            loss = criterion(model(torch.randn(16, 8)).squeeze(1), torch.ones(16))
            loss.backward()
            optimizer.step()
            if step == running_total.EVERY + 1:
                during = capsys.readouterr().err
    said = " ".join((during + capsys.readouterr().err).split())
    assert loss.item() == 100.0
    assert f"the loss was exactly 100 in each of the last {FLAT_STEPS} steps: binary cross-entropy's cap" in \
        " ".join(during.split())
    assert said.count("the loss was exactly") == 1, said
    assert "nn.BCEWithLogitsLoss" in said and "lower the learning rate" in said


def test_the_cap_is_told_for_its_multiples_only():
    assert "a multiple of binary cross-entropy's cap" in flat_loss([200.0] * FLAT_STEPS)
    assert "cap" not in flat_loss([150.0] * FLAT_STEPS)
    assert "nothing the model learns changes it" in flat_loss([-100.0] * FLAT_STEPS)
    assert "cap" not in flat_loss([100.0 * 2.0 ** 60] * FLAT_STEPS)  # a huge value, a multiple of 100 by chance
