"""Gradients clipped outside backward() → step() (after the update, or before backward()): said once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap

pytestmark = pytest.mark.timeout(60)


def _run(order: str, steps: int = 6) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for i in range(steps):
            loss = F.cross_entropy(model(torch.randn(32, 8, generator=gen)), torch.randint(0, 4, (32,), generator=gen))
            if order == "after step":
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                nn.utils.clip_grad_value_(model.parameters(), 0.1)
            elif order.startswith("before backward"):  # (the first step has no gradient to clip yet)
                optimizer.zero_grad(set_to_none=order.endswith("none"))
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                loss.backward()
                optimizer.step()
            elif order == "accumulation":
                (loss / 2).backward()
                if i % 2:
                    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    optimizer.zero_grad()
            elif order == "no clipping":
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            else:
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()



def _err(capfd) -> str:
    return " ".join(capfd.readouterr().err.split())


@pytest.mark.parametrize("order, kind", [("after step", "clip_grad_value_"), ("before backward", "clip_grad_norm_"),
                                         ("before backward, gradients none", "clip_grad_norm_")])
def test_clipping_the_update_does_not_use_is_said_once(capfd, order, kind):
    _run(order)
    err = _err(capfd)
    assert f"tensor_dap: {kind} does not run between loss.backward() and optimizer.step(): at " in err, err
    assert ("of the first 3 updates no clip came after the last backward(), so the optimizer steps with unclipped "
            "gradients") in err
    assert f"the order is loss.backward(), {kind}(...), optimizer.step() (said once)" in err
    assert err.count("does not run between") == 1


@pytest.mark.parametrize("order", ["in order", "accumulation", "no clipping"])
def test_clipping_in_order_or_none_is_not_said(capfd, order):
    _run(order)
    assert "does not run between" not in _err(capfd)


def test_a_closure_that_clips_inside_step_is_not_said(capfd):
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))

    def closure():  # how Lightning runs a step: forward, backward and clipping inside optimizer.step()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        return loss

    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(5):
            optimizer.step(closure)
    assert "does not run between" not in _err(capfd)


def test_a_gan_clipping_its_other_model_only_is_not_said_for_this_one(capfd):
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 8)), nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters())
    with tensor_dap.watch(gen, opt_g, on="raise"), tensor_dap.watch(disc, opt_d, on="raise"):
        for _ in range(5):
            fake = gen(torch.randn(8, 4))
            opt_d.zero_grad()
            (disc(fake.detach()).mean() - disc(torch.randn(8, 8)).mean()).backward()
            nn.utils.clip_grad_norm_(disc.parameters(), 0.01)  # WGAN-style: the critic only, in order
            opt_d.step()
            opt_g.zero_grad()
            (-disc(fake).mean()).backward()  # the generator's backward() comes after the critic's last clip
            opt_g.step()
    assert "does not run between" not in _err(capfd)
