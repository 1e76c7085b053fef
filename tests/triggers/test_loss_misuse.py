"""A loss misused without an error: given what it computes itself (a softmax's output to cross_entropy, a
sigmoid's to ..._with_logits), or a prediction broadcast against a target of another shape."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.format import fmt_num
from tensor_dap.triggers import loss_misuse

pytestmark = [pytest.mark.timeout(60), pytest.mark.filterwarnings("ignore:Using a target size"),  # (torch's own)
              pytest.mark.filterwarnings("ignore:Implicit dimension choice")]


def _scores(n: int = 16, classes: int = 4) -> torch.Tensor:
    torch.manual_seed(0)
    return nn.Linear(8, classes)(torch.randn(n, 8))


TARGETS = torch.arange(16) % 4


@pytest.mark.parametrize("loss, said", [
    (lambda s: F.cross_entropy(F.softmax(s, dim=1), TARGETS), "log_softmax of a softmax's output"),
    (lambda s: nn.CrossEntropyLoss()(nn.Softmax(dim=-1)(s).view(16, 4), TARGETS), "log_softmax of a softmax"),
    (lambda s: F.nll_loss(F.softmax(s, dim=1), TARGETS), "nll_loss is given a softmax's output"),
    (lambda s: F.binary_cross_entropy_with_logits(torch.sigmoid(s), torch.rand(16, 4)),
     "binary_cross_entropy_with_logits is given a sigmoid's output"),
    (lambda s: 0.5 * F.mse_loss(s, torch.zeros(16, 4)) + F.cross_entropy(F.softmax(s, 1), TARGETS),
     "log_softmax of a softmax's output"),  # one term of several
    (lambda s: F.mse_loss(s[:, :1], torch.zeros(16)),  # a regression's [N, 1] output against a target of [N]
     "mse_loss compares a prediction of shape [16, 1] with a target of another shape: both were broadcast to "
     "[16, 16]"),
    (lambda s: nn.HuberLoss()(torch.zeros(16), s[:, :1] * 2), "huber_loss compares a prediction of shape [16, 1]"),
    (lambda s: F.smooth_l1_loss(s[:, :1], torch.zeros(16, 3)), "both were broadcast to [16, 3]"),
    (lambda s: F.nll_loss(F.log_softmax(s, dim=0), TARGETS),  # normalized over the batch
     "nll_loss is given a log_softmax taken over dim 0 of a [16, 4] tensor, but its classes are dim 1"),
    (lambda s: F.nll_loss(nn.LogSoftmax()(s.view(2, 8, 4)).view(-1, 4), TARGETS),  # no dim: 3-D takes dim 0
     "log_softmax taken over dim 0 of a [2, 8, 4] tensor, but its classes are dim 2"),
    (lambda s: F.nll_loss(F.log_softmax(s.view(2, 8, 4), dim=1).reshape(16, 4), TARGETS),
     "log_softmax taken over dim 1 of a [2, 8, 4] tensor, but its classes are dim 2"),
    (lambda s: F.nll_loss(s[TARGETS > 0], TARGETS[TARGETS > 0]),  # raw scores (GAT without its log_softmax)
     lambda s: f"nll_loss is given values up to {fmt_num(float(s.detach()[TARGETS > 0].max()))} (made by addmm), which "
               "log-probabilities never are"),
    (lambda s: nn.NLLLoss()(torch.log(torch.sigmoid(s) * 3), TARGETS),  # a log, of values above 1
     "(made by log), which log-probabilities never are (they are at most 0): it is not handed a log_softmax"),
])
def test_a_loss_given_what_it_computes_itself_is_named(loss, said):
    scores = _scores()
    said = said(scores) if callable(said) else said
    assert said in (loss_misuse.misuse(loss(scores)) or "")


@pytest.mark.parametrize("loss", [
    lambda s: F.cross_entropy(s, TARGETS),
    lambda s: F.nll_loss(F.log_softmax(s, dim=1), TARGETS),
    lambda s: F.binary_cross_entropy(torch.sigmoid(s), torch.rand(16, 4)),  # DCGAN's discriminator: right
    lambda s: F.binary_cross_entropy_with_logits(s, torch.rand(16, 4)),
    lambda s: F.kl_div(F.log_softmax(s, 1), F.softmax(s.detach() * 2, 1), reduction="batchmean"),  # distillation
    lambda s: F.cross_entropy(F.softmax(s, 1) / 0.1, TARGETS),  # scaled again: not the plain mistake
    lambda s: F.mse_loss(s, torch.zeros(16, 4)),
    lambda s: F.mse_loss(s[:, :1].squeeze(1), torch.zeros(16)),
    lambda s: F.mse_loss(s, torch.zeros(4)),  # a target broadcast to the prediction: no more elements
    lambda s: F.nll_loss(F.log_softmax(s, dim=-1), TARGETS),  # a negative dim (torch keeps it unsigned)
    lambda s: F.nll_loss(F.log_softmax(s.view(2, 8, 4), dim=-1).view(-1, 4), TARGETS),  # a sequence model's
    lambda s: F.nll_loss(F.log_softmax(s.view(2, 8, 4), dim=1), TARGETS[:8].view(2, 4)),  # classes: dim 1 of 3
    lambda s: F.nll_loss(torch.log(F.softmax(s, dim=1)), TARGETS),  # log-probabilities made another way
    lambda s: F.nll_loss(-F.softplus(s), TARGETS),  # log-sigmoids: at most 0
])
def test_right_uses_are_not_named(loss):
    assert loss_misuse.misuse(loss(_scores())) is None


def test_watch_says_it_once_from_the_first_backward(capfd, monkeypatch):
    from tensor_dap.triggers import silent

    calls = []
    monkeypatch.setattr(silent, "misuse", lambda loss: calls.append(loss) or loss_misuse.misuse(loss))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Softmax(dim=1))  # a softmax at the end
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(3):
            loss = F.cross_entropy(model(torch.randn(16, 8)), TARGETS)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    said = " ".join(capfd.readouterr().err.split())
    assert said.count("log_softmax of a softmax's output") == 1, said
    assert "hand it the logits (drop the model's final softmax) (said once)" in said
    assert len(calls) == 1  # the graph is read at the first backward() only


def test_a_graph_that_cannot_be_read_says_nothing():
    class Odd:
        grad_fn = object()  # no name(), no next_functions

    assert loss_misuse.misuse(Odd()) is None
    assert loss_misuse.misuse(torch.tensor(1.0)) is None


def test_a_check_that_fails_never_breaks_the_backward(monkeypatch, caplog):
    from tensor_dap.triggers import silent, zero_grad

    def broken(*_args):
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(silent, "misuse", broken)
    monkeypatch.setattr(zero_grad, "_untouched", broken)
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(4):  # no optimizer.zero_grad(): the zero_grad check looks, and fails, too
            F.cross_entropy(model(torch.randn(16, 8)), TARGETS).backward()
            optimizer.step()
    assert "internal error, check skipped: RuntimeError: a bug of ours" in caplog.text


def test_the_raw_scores_read_stops_at_its_bound_even_inside_one_row():
    """One row of more values than MAX_READ (a vocabulary of 100,000): only its first piece is read."""
    targets = torch.tensor([0, 1])
    early, late = torch.full((2, 100_000), -1.0), torch.full((2, 100_000), -1.0)
    early[0, 10] = 3.0  # inside the first piece: said
    late[0, loss_misuse.MAX_READ + 10] = 3.0  # past it: not read
    said = loss_misuse.misuse(F.nll_loss(early.requires_grad_() * 1.0, targets)) or ""
    assert "nll_loss is given values up to 3 (made by mul)" in said, said
    assert loss_misuse.misuse(F.nll_loss(late.requires_grad_() * 1.0, targets)) is None
