"""A small GAN trained the way pytorch/examples' DCGAN trains: two models, two optimizers, the
discriminator's step on real and (detached) fake samples, then the generator's step running through
the discriminator. Bugs are planted at BUG_STEP; the loop itself is never changed for tensor_dap."""

from __future__ import annotations

import torch
from torch import nn

import tensor_dap

BUG_STEP = 4
BUGS = ("saturated_bce", "generator_norm", "generator_loss", "generator_sqrt")


def hand_bce(p, label):
    """Binary cross-entropy written by hand: log(0) once a sigmoid saturates to exactly 0 or 1."""
    return -(label * torch.log(p) + (1 - label) * torch.log(1 - p)).mean()


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(4, 8), nn.Linear(8, 6)
        self.sqrt = False  # generator_sqrt: from BUG_STEP on, a torch.where(sqrt) trap with NaN gradients

    def forward(self, z):
        h = torch.relu(self.inp(z))
        h = h / h.norm(dim=1, keepdim=True)  # BIRTH: generator_norm
        out = self.out(h)
        return torch.where(out > 0, torch.sqrt(out), out) if self.sqrt else out


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1), nn.Sigmoid())

    def forward(self, x):
        return self.net(x).squeeze(1)


LOSSES: dict[str, list[float]] = {"D": [], "G": []}  # the last run's step losses, as the loop printed them


def train(steps: int, watched: bool, bug: str | None = None, generator_on: str = "raise"):
    """(the watches, netD, netG) after ``steps`` iterations; the step losses are left in ``LOSSES``.
    ``saturated_bce``: a batch of real samples 1e4
    times too large saturates the discriminator's sigmoid to exactly 1 (log(1 - 1) in the loss);
    ``generator_norm``: every hidden unit of the generator dies, and it divides by a zero norm;
    ``generator_loss``: the generator's non-saturating loss, -log D(G(z)), written by hand, once the
    discriminator rejects every fake with a probability of exactly 0; ``generator_sqrt``: the generator's
    gradients are NaN from BUG_STEP on (``generator_on="log"`` trains on, as ``c`` at its stop would)."""
    torch.manual_seed(0)
    netG, netD = Generator(), Discriminator()
    optG = torch.optim.Adam(netG.parameters(), lr=1e-3)
    optD = torch.optim.Adam(netD.parameters(), lr=1e-3)
    watches = [tensor_dap.watch(netD, optD, on="raise", capture=False),
               tensor_dap.watch(netG, optG, on=generator_on, capture=False)] if watched else []
    LOSSES["D"], LOSSES["G"] = [], []
    try:
        for i in range(steps):
            real = torch.randn(16, 6) * (1e4 if bug == "saturated_bce" and i == BUG_STEP else 1.0)
            ones, zeros = torch.ones(16), torch.zeros(16)
            netD.zero_grad()
            err_real = hand_bce(netD(real), zeros if bug == "saturated_bce" and i == BUG_STEP else ones)
            err_real.backward()  # THE BACKWARD
            if bug == "generator_norm" and i == BUG_STEP:
                with torch.no_grad():
                    netG.inp.bias.fill_(-100.0)
            netG.sqrt = bug == "generator_sqrt" and i >= BUG_STEP
            fake = netG(torch.randn(16, 4))
            err_fake = hand_bce(netD(fake.detach()), zeros)
            err_fake.backward()
            LOSSES["D"].append((err_real + err_fake).item())
            optD.step()
            netG.zero_grad()
            if bug == "generator_loss":
                if i == BUG_STEP:
                    with torch.no_grad():
                        netD.net[2].bias.fill_(-1e4)
                err_g = -torch.log(netD(fake)).mean()
            else:
                err_g = hand_bce(netD(fake), ones)  # the generator's step runs through the discriminator
            err_g.backward()  # THE GENERATOR'S BACKWARD
            LOSSES["G"].append(err_g.item())
            optG.step()
    finally:
        for w in watches:
            w.close(flush=False)
    return watches, netD, netG
