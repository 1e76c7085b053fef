"""backward()'s "modified by an inplace operation" error, when the tensor is a parameter an update changed since the
forward: the error is told which parameter and which update."""

from __future__ import annotations

import contextlib
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap

pytestmark = pytest.mark.timeout(60)


def _explanation(error: BaseException, capfd) -> str:
    notes = getattr(error, "__notes__", None)
    if sys.version_info >= (3, 11):
        assert notes, "the explanation goes under the error's own message"
        return " ".join(notes)
    return " ".join(capfd.readouterr().err.split())


def _gan(watch_both: bool):
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 8))
    disc = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters())
    ones = torch.ones(8, 1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as caught:
        with tensor_dap.watch(gen, opt_g, on="raise"), (tensor_dap.watch(disc, opt_d, on="raise") if watch_both
                                                         else contextlib.nullcontext()):
            fake = gen(torch.randn(8, 4))
            d_loss = F.binary_cross_entropy_with_logits(disc(fake.detach()), 0 * ones)
            g_loss = F.binary_cross_entropy_with_logits(disc(fake), ones)  # saves disc's weights for its backward
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()  # BUG: changes them in place before the generator's backward()
            opt_g.zero_grad()
            g_loss.backward()
    return caught.value


def test_a_gan_stepping_its_discriminator_first_is_told_which_parameter_and_update(capfd):
    text = _explanation(_gan(watch_both=True), capfd)
    assert ("the tensor backward() needs is disc's parameter '2.weight' [1, 16] (torch saved its transpose), changed "
            "in place after this loss's forward (its version went from 1 to 2): Adam.step() ran between the forward "
            "and this backward()") in text, text
    assert "in a GAN, run the generator's backward() before the discriminator's step()" in text


def test_an_unwatched_discriminator_is_named_by_its_shape(capfd):
    text = _explanation(_gan(watch_both=False), capfd)
    assert "the tensor backward() needs is a parameter of shape [1, 16]" in text, text
    assert "an optimizer.step() updating it ran between the forward and this backward()" in text


def test_step_before_backward_on_one_model_is_told_without_the_gan_advice(capfd):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="inplace") as caught, tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(2):  # the first step has no gradients yet: it skips every parameter
            loss = F.cross_entropy(model(torch.randn(4, 8)), torch.zeros(4, dtype=torch.long))
            optimizer.zero_grad(set_to_none=False)
            optimizer.step()  # BUG: before backward(); zero gradients move nothing, but the version does
            loss.backward()
    text = _explanation(caught.value, capfd)
    assert "model's parameter '2.weight' [4, 16] (torch saved its transpose)" in text, text
    assert "SGD.step() ran between the forward and this backward()" in text
    assert "GAN" not in text


def test_an_activation_changed_in_place_is_left_to_torchs_own_message(capfd):
    layer = nn.Linear(4, 4)
    with pytest.raises(RuntimeError, match="inplace") as caught, tensor_dap.watch(layer, on="raise"):
        out = torch.sigmoid(layer(torch.randn(2, 4)))
        out.add_(1)  # sigmoid saved its output: not a parameter, nothing to add
        out.sum().backward()
    assert not getattr(caught.value, "__notes__", None)
    assert "tensor_dap: the tensor backward() needs" not in capfd.readouterr().err
