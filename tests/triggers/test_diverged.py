"""A loss diverging while finite (a float64 run a million times its first loss; a cross-entropy ten times a uniform
guess's): said once."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.format import fmt_num
from tensor_dap.triggers.diverged import Divergence

pytestmark = pytest.mark.timeout(60)


def _regression(updates: int, lr: float, capfd, read_inside: bool = False) -> tuple[list[float], str]:
    """pytorch/examples' polynomial regression (features x..x^4) with MSE, in float64, under watch; the losses and
    what was said (inside the ``with`` block only, when ``read_inside``)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(1)
    target = torch.randn(4, 1, generator=gen, dtype=torch.float64) * 5
    losses, inside = [], ""
    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(updates):
            x = torch.randn(32, generator=gen, dtype=torch.float64).unsqueeze(1) ** torch.arange(1, 5)
            loss = F.mse_loss(model(x), x @ target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        if read_inside:
            inside = capfd.readouterr().err
    return losses, " ".join((inside or capfd.readouterr().err).split())


def test_a_float64_run_diverging_is_said_at_its_end(capfd):
    losses, err = _regression(30, 0.1, capfd)
    assert all(map(lambda v: v < float("inf"), losses)) and losses[-1] > 1e20  # diverged, never overflowed
    assert err.count("the training diverges") == 1, err
    assert f"the loss grew from {fmt_num(losses[0])} at the first step to {fmt_num(losses[-1])} " in err
    assert "lower the learning rate or clip gradients" in err


def test_a_long_diverging_run_is_said_at_the_look_while_it_runs(capfd):
    losses, err = _regression(70, 0.1, capfd, read_inside=True)  # read before the watch ends: said at update 64
    assert "the training diverges" in err, err
    assert losses[-1] < float("inf")


def test_a_run_that_trains_is_not_said(capfd):
    losses, err = _regression(100, 1e-4, capfd)
    assert losses[-1] < losses[0]
    assert "diverges" not in err


@pytest.mark.parametrize("first, latest, said", [
    (0.5, 1e145, True),
    (1e-9, 0.5, False),  # a loss that starts near 0 (a warm-up's auxiliary term alone): below 1e6 itself
    (1e-9, 2e6, True),
    (-3.0, 1e9, False),  # a log-likelihood, a policy gradient: no ratio to take
    (0.5, float("inf"), False),  # the non-finite trigger's case
    (torch.tensor(2.0), torch.tensor(3e6), True),
])
def test_the_growth_rule(first, latest, said):
    divergence = Divergence()
    divergence.first_loss(first if isinstance(first, torch.Tensor) else torch.tensor(first))
    assert (divergence.look([latest], None) is not None) is said


def _classifier_run(lr: float, updates: int, capfd, label_smoothing: float = 0.0) -> tuple[list[float], str]:
    """A 50-class linear classifier trained with Adam at ``lr`` under watch: its losses and what was said."""
    torch.manual_seed(0)
    model = nn.Linear(16, 50)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(1)
    losses = []
    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(updates):
            x = torch.randn(32, 16, generator=gen)
            loss = F.cross_entropy(model(x), torch.randint(0, 50, (32,), generator=gen),
                                   label_smoothing=label_smoothing)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses, " ".join(capfd.readouterr().err.split())


def test_a_cross_entropy_far_above_a_uniform_guess_is_said_at_the_first_look(capfd):
    """word_language_model's AdamW at its SGD rate of 20: a finite cross-entropy in the thousands. Random labels
    here: the model can only grow its logits."""
    losses, err = _classifier_run(20.0, 130, capfd)
    assert max(losses) < float("inf") and losses[64] > 10 * math.log(50)  # (the look of step 64: its loss)
    assert err.count("times the 3.912 of a uniform guess over its 50 classes") == 1, err
    median = statistics.median(losses[49:65])
    assert f"the loss is {fmt_num(losses[64])} at the update of step 64 (a median of {fmt_num(median)} over its " \
           f"last 16 steps)" in err, err
    assert "the model is confidently wrong, so the training diverged while the loss stays finite" in err


@pytest.mark.parametrize("latest, recent, said", [
    (80.0, [80.0] * 16, True),
    (80.0, [3.0] * 15 + [80.0], False),  # a spike at the look: the median stays near chance
    (3.0, [80.0] * 15 + [3.0], False),  # back near chance at the look: nothing to say now
    (80.0, [3.0] * 7 + [80.0] * 9, True),
    (torch.tensor(80.0), [torch.tensor(80.0)] * 8 + [80.0] * 8, True),  # tensors and values, read together
])
def test_the_chance_rule_takes_the_median_of_the_recent_losses(latest, recent, said):
    """A cross-entropy over 10 classes (chance 2.303): over 23.03 in the median of the last 16 losses."""
    divergence = Divergence()
    logits = torch.zeros(4, 10, requires_grad=True)
    divergence.first_loss(F.cross_entropy(logits, torch.tensor([0, 1, 2, 3])))
    text = divergence.look([*recent[:-1], latest], 64)
    assert (text is not None) is said, text


@pytest.mark.parametrize("lr, smoothing", [(1e-3, 0.0), (20.0, 0.1)])
def test_a_cross_entropy_near_chance_or_not_alone_in_its_graph_is_not_compared_with_chance(capfd, lr, smoothing):
    """A run that learns; and label smoothing, whose loss is not nll_loss's node (no chance level read)."""
    _, err = _classifier_run(lr, 130, capfd, label_smoothing=smoothing)
    assert "uniform guess" not in err


def test_a_short_run_ending_far_above_a_uniform_guess_is_said_at_its_end(capfd):
    """Fewer updates than a look needs (word_language_model crashed at its first epoch's end): the end of the run
    says it from its last loss."""
    losses, err = _classifier_run(20.0, 40, capfd)
    assert (f"tensor_dap: the loss is {fmt_num(losses[-1])} at the end of the run (a median of "
            f"{fmt_num(statistics.median(losses[-16:]))} over its last 16 steps), more than 10 times the 3.912 of a "
            f"uniform guess over its 50 classes") in err, err
