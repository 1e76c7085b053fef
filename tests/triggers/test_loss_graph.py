"""A NaN/Inf born in a loss function nobody handed to tensor_dap: the unchanged loop reads the op from the
loss's autograd graph when backward() is called. And a GAN's loop: two models, two optimizers, the
generator's step running through the discriminator, under ``tensor-dap run --guard``-style watches."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import tensor_dap
from tensor_dap import NonFiniteError
from tensor_dap.triggers import loss_graph
from tensor_dap.triggers.loss_graph import loss_birth, sequence_nr

pytestmark = [pytest.mark.timeout(60)]


def hand_bce(p, label):
    """Binary cross-entropy written by hand: log(0) once a sigmoid saturates to exactly 0 or 1."""
    return -(label * torch.log(p) + (1 - label) * torch.log(1 - p)).mean()


# ------------------------------------------------------------------ the graph walk itself

def test_a_saturated_sigmoid_in_a_hand_written_bce_is_log_of_zero():
    w = torch.tensor([60.0, 0.3], requires_grad=True)
    p = torch.sigmoid(w * 1.0)  # the "model": 60 saturates to exactly 1.0 in float32
    loss = hand_bce(p, torch.zeros(2))
    birth = loss_birth(loss, sequence_nr(p))
    assert (birth.phase, birth.op, birth.kind, birth.module) == ("loss", "log", "inf", None)
    [(name, x)] = birth.inputs
    assert name == "input" and x[0].item() == 0.0 and x.grad_fn is None  # detached: no graph kept alive
    assert torch.isneginf(birth.output[0]) and math.isfinite(birth.output[1].item())


@pytest.mark.parametrize("make, op", [
    (lambda y: (y / (y - y)).sum(), "div"),  # 0/0 and x/0
    (lambda y: (y / 0.0).sum(), "div"),  # a Python zero: only the divisor is saved
    (lambda y: torch.sqrt(y - 3).sum(), "sqrt"),
    (lambda y: (y - 2).pow(-1).sum(), "pow"),
    (lambda y: torch.exp(y * 100).sum(), "exp"),
])
def test_the_ops_that_make_non_finite_values_from_finite_ones_are_named(make, op):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    birth = loss_birth(make(y), sequence_nr(y))
    assert birth is not None and birth.op == op


def test_only_the_loss_computation_after_the_model_is_looked_at():
    """A NaN the model masks itself (where/sqrt: NaN in the unused branch) is older than the loss's log(0);
    with the model's last node as the boundary the walk names the loss op, without it the older one."""
    x = torch.tensor([-1.0, 4.0], requires_grad=True)
    h = torch.where(x > 0, torch.sqrt(x), torch.zeros(2))  # sqrt(-1) is NaN, masked: the output is finite
    loss = torch.log(h * 0).sum()
    assert loss_birth(loss, sequence_nr(h)).op == "log"
    assert loss_birth(loss).op == "sqrt"


def test_the_earliest_birth_wins():
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    y = x * 1.0
    first = torch.log(y)  # -inf at 0
    loss = (first + torch.sqrt(y - 2)).sum()  # a second, later birth (NaN)
    assert loss_birth(loss, sequence_nr(y)).op == "log"


def test_what_cannot_be_told_is_none_and_nothing_raises():
    x = torch.tensor([1e30, 2.0], requires_grad=True)
    y = x * 1.0
    assert loss_birth(nn.functional.mse_loss(y, torch.zeros(2)), sequence_nr(y)) is None  # overflow in one op
    assert loss_birth(y.sum(), sequence_nr(x)) is None  # finite
    loss = torch.log(y - y).sum()
    loss.backward()  # the nodes' saved tensors are freed now: reading them fails inside, quietly
    assert loss_birth(loss) is None
    assert loss_birth(torch.tensor(float("nan"))) is None  # no graph at all


def test_the_walk_is_bounded(monkeypatch):
    monkeypatch.setattr(loss_graph, "MAX_NODES", 50)
    x = torch.tensor([0.0], requires_grad=True)
    y = torch.log(x * 1.0)  # the birth, far below the 5000 adds above it
    for _ in range(5000):
        y = y + 1.0
    assert loss_birth(y.sum()) is None  # the walk stopped long before reaching it


# ------------------------------------------------------------------ the unchanged loop: a GAN

class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 6))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1), nn.Sigmoid())

    def forward(self, x):
        return self.net(x).squeeze(1)


BUG_STEP = 4


def train_gan(steps: int, watched: bool):
    """The shape of pytorch/examples' DCGAN loop, with a hand-written BCE: at BUG_STEP a batch of real
    samples 1e4 times too large saturates the discriminator's sigmoid to exactly 1."""
    torch.manual_seed(0)
    netG, netD = Generator(), Discriminator()
    optG = torch.optim.Adam(netG.parameters(), lr=1e-3)
    optD = torch.optim.Adam(netD.parameters(), lr=1e-3)
    watches = [tensor_dap.watch(netD, optD, on="raise", capture=False),
               tensor_dap.watch(netG, optG, on="raise", capture=False)] if watched else []
    try:
        for i in range(steps):
            real = torch.randn(16, 6) * (1e4 if i == BUG_STEP else 1.0)
            ones, zeros = torch.ones(16), torch.zeros(16)
            netD.zero_grad()
            err_real = hand_bce(netD(real), zeros if i == BUG_STEP else ones)
            err_real.backward()  # THE BACKWARD
            fake = netG(torch.randn(16, 4))
            err_fake = hand_bce(netD(fake.detach()), zeros)
            err_fake.backward()
            optD.step()
            netG.zero_grad()
            err_g = hand_bce(netD(fake), ones)  # the generator's step runs through the discriminator
            err_g.backward()
            optG.step()
    finally:
        for w in watches:
            w.close(flush=False)
    return watches, netD, netG


def test_a_gan_s_discriminator_names_the_log_at_its_own_step_with_its_own_losses(capsys):
    with pytest.raises(NonFiniteError) as info:
        train_gan(BUG_STEP + 3, watched=True)
    report = info.value.report
    assert (report.phase, report.module, report.op, report.kind) == ("loss", None, "log", "nonfinite")
    assert report.step == BUG_STEP  # the discriminator's optimizer steps: the generator's are not counted
    assert "log of zero" in report.diagnosis
    assert report.source["text"].endswith("# THE BACKWARD") and report.mode == "loop"
    assert report.origin.startswith("log, in the loss computed before test_loss_graph.py:")
    # its history holds the discriminator's step losses (real + fake), not the generator's
    assert len(report.loss_history) == BUG_STEP + 1 and math.isnan(report.loss_history[-1])
    assert all(0.5 < v < 3.0 for v in report.loss_history[:-1])
    summary = f"1 of the {BUG_STEP + 1} steps watched were non-finite (the first at step {BUG_STEP})"
    assert summary in capsys.readouterr().err


def test_a_gan_trains_bit_identically_and_quietly_under_both_watches():
    (wd, wg), netD, netG = train_gan(BUG_STEP, watched=True)
    _, plainD, plainG = train_gan(BUG_STEP, watched=False)
    assert wd.reports == wg.reports == []
    assert (wd.step_count, wg.step_count) == (BUG_STEP, BUG_STEP)
    for a, b in zip([*netD.parameters(), *netG.parameters()], [*plainD.parameters(), *plainG.parameters()]):
        assert torch.equal(a, b)
