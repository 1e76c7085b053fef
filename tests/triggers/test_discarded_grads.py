"""Gradients reset before any update (``zero_grad()`` at the top of a gradient-accumulation loop) are said once;
resets after another optimizer stepped on them (a GAN's discriminator) or now and then (a skipped batch) are not."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap

pytestmark = pytest.mark.timeout(60)


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(16, 8)
    return x, (x[:, 0] > 0).long()


@pytest.mark.parametrize("accum, scaler", [(4, False), (2, False), (4, True)], ids=["4", "2", "4, scaler off"])
def test_zero_grad_before_each_micro_batch_is_said_once_with_the_count(capfd, accum, scaler):
    """``scaler``: nanoGPT's way off float16, a ``GradScaler(enabled=False)`` handing the loss and the step through:
    it skips no step, so a reset is not one it skipped."""
    from torch.optim.optimizer import _global_optimizer_post_hooks as hooks

    torch.manual_seed(0)
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    off = torch.amp.GradScaler("cpu", enabled=False) if scaler else None
    before = dict(hooks)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for i in range(8 * accum):
            optimizer.zero_grad()  # the bug: the micro-batches before this one are thrown away
            x, y = _batch()
            loss = F.cross_entropy(model(x), y) / accum
            (off.scale(loss) if off else loss).backward()
            if (i + 1) % accum == 0:
                off.step(optimizer) if off else optimizer.step()
    err = " ".join(capfd.readouterr().err.split())
    assert err.count("zero_grad() reset the gradients") == 1, err
    calls = f"{accum - 1} backward() call{'s' if accum > 2 else ''}"
    assert f"zero_grad() reset the gradients of {calls} before the update of step 1 (and again before step 2)" in err
    assert "Call optimizer.zero_grad() right after optimizer.step()" in err
    assert dict(hooks) == before  # the step counter put on at the first reset is gone with the watch


@pytest.mark.parametrize("how", ["accumulation done right", "a batch skipped now and then"])
def test_resets_that_lose_nothing_every_step_are_not_said(capfd, how):
    from torch.optim.optimizer import _global_optimizer_post_hooks as hooks

    before = dict(hooks)
    torch.manual_seed(0)
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for i in range(32):
            x, y = _batch()
            loss = F.cross_entropy(model(x), y) / 4
            loss.backward()
            if how == "a batch skipped now and then" and i % 8 == 3:
                optimizer.zero_grad()  # a bad batch dropped on purpose: once in a while
                continue
            if how == "a batch skipped now and then" or (i + 1) % 4 == 0:
                optimizer.step()
                optimizer.zero_grad()
    assert "reset the gradients" not in capfd.readouterr().err
    assert dict(hooks) == before  # the step counter (put on at the skipped batch's reset) went with the watch


def test_a_discriminator_reset_after_the_generator_stepped_is_not_said(capfd):
    """DCGAN's order: the generator's loss goes back through the discriminator, the generator's optimizer steps,
    and the next iteration's netD.zero_grad() resets those gradients: used, not thrown away."""
    torch.manual_seed(0)
    netG, netD = nn.Sequential(nn.Linear(4, 8)), nn.Sequential(nn.Linear(8, 1))
    optG, optD = torch.optim.Adam(netG.parameters(), lr=1e-3), torch.optim.Adam(netD.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()
    with tensor_dap.watch(netD, optD, on="raise"):
        for _ in range(12):
            real, fake = torch.randn(16, 8), netG(torch.randn(16, 4))
            netD.zero_grad()
            (bce(netD(real), torch.ones(16, 1)) + bce(netD(fake.detach()), torch.zeros(16, 1))).backward()
            optD.step()
            netG.zero_grad()
            bce(netD(fake), torch.ones(16, 1)).backward()
            optG.step()
    assert "reset the gradients" not in capfd.readouterr().err
