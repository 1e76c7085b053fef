"""A running total of the loss kept with its graph (``total_loss += loss``): every 64th update the frames running the
loop are looked at, and it is said once; a total of ``loss.item()`` and a sum of a few loss terms are not."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers.running_total import EVERY

pytestmark = pytest.mark.timeout(60)


def _setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    return model, torch.optim.SGD(model.parameters(), lr=0.01), torch.randn(16, 8), torch.randint(0, 3, (16,))


@pytest.mark.parametrize("mode", ["loop", "step"])
def test_a_total_of_losses_with_their_graphs_is_said_once(capfd, mode):
    model, optimizer, x, y = _setup()

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    with tensor_dap.watch(model, optimizer) as w:
        total_loss = 0
        for _ in range(2 * EVERY + 5):
            total_loss += step() if mode == "loop" else w.step(step)  # BUG: step().item()
    err = capfd.readouterr().err
    assert err.count("holds a running total of the loss kept with its graph") == 1, err
    # the first look (step 64) finds it young: nothing of it older than the first update; the second finds it
    assert (f"`total_loss` (in test_a_total_of_losses_with_their_graphs_is_said_once at test_running_total.py) "
            f"holds a running total of the loss kept with its graph at step {2 * EVERY}: {2 * EVERY} additions"
            in err), err
    assert "Add `loss.item()`" in err


def test_a_trainers_total_on_self_is_named_as_an_attribute(capfd):
    class Trainer:
        def __init__(self):
            self.model, self.optimizer, self.x, self.y = _setup()
            self.running = torch.zeros(())

        def fit(self, steps):
            with tensor_dap.watch(self.model, self.optimizer):
                for _ in range(steps):
                    self.optimizer.zero_grad()
                    loss = F.cross_entropy(self.model(self.x), self.y)
                    loss.backward()
                    self.optimizer.step()
                    self.running = 0.9 * self.running + 0.1 * loss  # BUG: an average with every step's graph

    Trainer().fit(2 * EVERY + 1)
    assert "`self.running` (in fit at test_running_total.py) holds a running total" in capfd.readouterr().err


def test_a_total_of_numbers_and_a_sum_of_loss_terms_are_not_said(capfd):
    """A loss of 40 terms added in one step (a mixture of experts' per-layer losses) is a long chain of additions,
    all made since the last look: not a running total."""
    model, optimizer, x, y = _setup()
    with tensor_dap.watch(model, optimizer):
        total_loss = 0.0
        for _ in range(3 * EVERY + 1):
            optimizer.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y)
            for _ in range(40):
                loss = loss + 1e-4 * out.pow(2).mean()
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
    assert "running total" not in capfd.readouterr().err


def test_a_value_made_from_the_total_is_said_as_such(capfd):
    """pytorch/examples' word language model with `.item()` dropped: the total is reset at each log line, and the
    value logged from it (total / interval) holds the older chain; it is said as made from a running total."""
    model, optimizer, x, y = _setup()
    with tensor_dap.watch(model, optimizer):
        total_loss, shown = 0, None
        for step in range(1, 2 * EVERY + 2):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total_loss += loss  # BUG: loss.item()
            if step % 50 == 0:
                shown, total_loss = total_loss / 50, 0
                print(f"loss {float(shown):.3f}")
    err = capfd.readouterr().err
    assert "`shown` (in test_a_value_made_from_the_total_is_said_as_such at test_running_total.py) holds a value " \
           "made from a running total of the loss kept with its graph" in err, err
