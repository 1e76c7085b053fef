"""backward()'s "Trying to backward through the graph a second time": the input that still carries a graph an
earlier backward() freed is named, with the line that handed it to the model, instead of retain_graph=True."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap

pytestmark = pytest.mark.timeout(60)


def _note(error: BaseException, capfd) -> str:
    if sys.version_info >= (3, 11):
        return " ".join(getattr(error, "__notes__", None) or [])
    return " ".join(capfd.readouterr().err.split())


class Language(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.rnn, self.out = nn.Embedding(20, 8), nn.LSTM(8, 8), nn.Linear(8, 20)

    def forward(self, tokens, hidden):
        output, hidden = self.rnn(self.emb(tokens), hidden)
        return self.out(output), hidden


def test_an_rnn_hidden_state_carried_without_detach_is_named_at_its_call(capfd):
    """pytorch/examples' word language model without its ``repackage_hidden``: the second step's backward() runs
    into the first step's freed graph through the hidden state the same line rebinds."""
    torch.manual_seed(0)
    model = Language()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hidden = (torch.zeros(1, 4, 8), torch.zeros(1, 4, 8))
    with pytest.raises(RuntimeError, match="backward through the graph a second time") as caught, \
            tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(3):
            tokens, targets = torch.randint(0, 20, (5, 4)), torch.randint(0, 20, (5, 4))
            output, hidden = model(tokens, hidden)  # BUG: hidden = tuple(h.detach() for h in hidden) first
            loss = F.cross_entropy(output.view(-1, 20), targets.view(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    text = _note(caught.value, capfd)
    assert ("tensor_dap: `hidden` (its item [0]) [1, 4, 8], handed to the model at test_freed_graph.py:"
            in text), text
    assert "(`output, hidden = model(tokens, hidden)`) still carries the graph that computed it" in text
    assert "hidden = hidden.detach()" in text and "retain_graph=True would keep" in text


def test_a_gan_fake_batch_not_detached_for_the_discriminator_is_named(capfd):
    """The discriminator's loss reaches the generator's graph (no ``fake.detach()``) and frees it; the generator's
    loss then runs into it. With a watch on each model (``tensor-dap run --guard``), ``fake`` is named."""
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 8), nn.Tanh()), nn.Sequential(nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters())
    real, ones, zeros = torch.randn(6, 8), torch.ones(6, 1), torch.zeros(6, 1)
    with pytest.raises(RuntimeError, match="second time") as caught, tensor_dap.watch(gen, opt_g, on="raise"), \
            tensor_dap.watch(disc, opt_d, on="raise"):
        fake = gen(torch.randn(6, 4))
        d_loss = (F.binary_cross_entropy_with_logits(disc(real), ones)
                  + F.binary_cross_entropy_with_logits(disc(fake), zeros))  # BUG: disc(fake.detach())
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        g_loss = F.binary_cross_entropy_with_logits(disc(fake), ones)
        opt_g.zero_grad()
        g_loss.backward()
    text = _note(caught.value, capfd)
    assert "tensor_dap: `fake` [6, 8], handed to the model at test_freed_graph.py:" in text, text
    assert "netD(fake.detach())" in text


def test_a_loss_backwarded_twice_gets_no_note(capfd):
    """Nothing the model was handed carries a graph: the cause is elsewhere (the same loss twice), so nothing is
    guessed."""
    model = nn.Linear(4, 1)
    with pytest.raises(RuntimeError, match="second time") as caught, tensor_dap.watch(model, on="raise"):
        loss = model(torch.randn(3, 4)).pow(2).sum()
        loss.backward()
        loss.backward()
    assert not getattr(caught.value, "__notes__", None)
    assert "still carries the graph" not in capfd.readouterr().err
