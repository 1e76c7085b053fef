"""backward()'s "Trying to backward through the graph a second time": the input that still carries a graph an
earlier backward() freed is named, with the line that handed it to the model, instead of retain_graph=True."""

from __future__ import annotations

import gc
import sys
import weakref

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


def test_the_same_loss_handed_to_backward_again_is_named(capfd):
    """A loss computed once before the loop: the second step's backward() runs into the graph the first freed."""
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="second time") as caught, tensor_dap.watch(model, optimizer, on="raise"):
        loss = model(torch.randn(3, 4)).pow(2).sum()
        for _ in range(2):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    text = _note(caught.value, capfd)
    assert "tensor_dap: `loss` was already handed to backward(), which freed its graph" in text, text
    assert "read `loss.item()`" in text and "shares part" not in text


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
        self.cls, self.reg = nn.Linear(16, 3), nn.Linear(16, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.cls(h), self.reg(h)


def _two_losses(inline_first: bool) -> None:
    torch.manual_seed(0)
    model = TwoHeads()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y, target = torch.randn(32, 8), torch.randint(0, 3, (32,)), torch.randn(32, 1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        optimizer.zero_grad()
        logits, pred = model(x)
        loss_reg = F.mse_loss(pred, target)
        if inline_first:
            F.cross_entropy(logits, y).backward()
        else:
            loss_cls = F.cross_entropy(logits, y)
            loss_cls.backward()
        loss_reg.backward()  # BUG: (loss_cls + loss_reg).backward()


def test_two_losses_sharing_a_trunk_name_the_earlier_one_and_where_they_meet(capfd):
    """A multi-task model's two heads, each loss handed to its own backward(): the first frees the trunk both share.
    The failing backward() also freed the regression head it ran before failing, which is not taken for the cause:
    the node named is the nearest the other loss's graph holds too."""
    with pytest.raises(RuntimeError, match="second time") as caught:
        _two_losses(inline_first=False)
    text = _note(caught.value, capfd)
    assert ("tensor_dap: `loss_reg` shares part of its graph (from TanhBackward0 down) with `loss_cls`, and the "
            "backward() of `loss_cls` before it freed that part") in text, text
    assert "`(loss_cls + loss_reg).backward()`" in text and "already handed" not in text


def test_an_earlier_loss_no_variable_holds_is_still_found(capfd):
    """``F.cross_entropy(...).backward()`` inline: the loss the last backward() went through is kept (its graph is
    spent, so only its nodes are), and found sharing the trunk though no frame names it."""
    with pytest.raises(RuntimeError, match="second time") as caught:
        _two_losses(inline_first=True)
    text = _note(caught.value, capfd)
    assert "`loss_reg` shares part of its graph (from TanhBackward0 down) with a loss whose earlier backward()" \
        in text, text


def test_two_losses_in_a_step_function_are_named_too(capfd):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        optimizer.zero_grad()
        out = model(x)
        main, penalty = F.cross_entropy(out, y), out.pow(2).mean()
        main.backward()
        penalty.backward()
        optimizer.step()
        return main

    with pytest.raises(RuntimeError, match="second time") as caught, \
            tensor_dap.watch(model, optimizer, on="raise") as w:
        w.step(step, torch.randn(8, 8), torch.randint(0, 3, (8,)))
    text = _note(caught.value, capfd)
    assert "`penalty` shares part of its graph (from AddmmBackward0 down) with `main`" in text, text


def test_a_graph_kept_with_retain_graph_is_not_kept_alive_by_the_watch():
    """The last loss backward() went through is held to tell the cases apart; one whose graph backward() kept
    (retain_graph=True) is held weakly, so dropping it frees that graph as it would without a watch."""
    model = nn.Linear(4, 1)
    with tensor_dap.watch(model, on="raise"):
        loss = model(torch.randn(3, 4)).pow(2).sum()
        gone = weakref.ref(loss)
        loss.backward(retain_graph=True)
        del loss
        gc.collect()
        assert gone() is None
        spent = model(torch.randn(3, 4)).sum()
        kept = weakref.ref(spent)
        spent.backward()
        del spent
        gc.collect()
        assert kept() is not None  # a spent graph's loss is held until the next backward() ...
        model(torch.randn(3, 4)).sum().backward()
        gc.collect()
        assert kept() is None  # ... and let go then


def test_a_backward_error_with_no_other_loss_in_sight_gets_no_note(capfd):
    """A loss whose graph runs into nodes freed by a backward() no longer in sight (its loss dropped, another
    backward() in between kept nothing of it): nothing is guessed."""
    model = nn.Linear(4, 4)
    with pytest.raises(RuntimeError, match="second time") as caught, tensor_dap.watch(model, on="raise"):
        h = torch.randn(3, 4, requires_grad=True).tanh()
        h.sum().backward()
        torch.randn(2, requires_grad=True).sum().backward()  # another backward(): the first loss is let go
        (model(torch.ones(3, 4)) * h).sum().backward()
    assert not getattr(caught.value, "__notes__", None)
    assert "tensor_dap:" not in capfd.readouterr().err


def test_an_input_made_in_this_step_is_not_blamed_for_the_carried_one(capfd):
    """The batch is embedded outside the watched GRU, so it carries this step's graph, which the failing backward()
    frees before it reaches the hidden state's old one: only nodes older than the last backward() that returned can
    be what it freed, so `hidden` is named, not `emb`."""
    torch.manual_seed(0)
    embed, rnn, head = nn.Embedding(20, 8), nn.GRU(8, 8), nn.Linear(8, 20)
    optimizer = torch.optim.SGD([*embed.parameters(), *rnn.parameters(), *head.parameters()], lr=0.1)
    hidden = torch.zeros(1, 4, 8)
    with pytest.raises(RuntimeError, match="second time") as caught, tensor_dap.watch(rnn, optimizer, on="raise"):
        for _ in range(3):
            tokens, targets = torch.randint(0, 20, (5, 4)), torch.randint(0, 20, (5, 4))
            emb = embed(tokens)
            out, hidden = rnn(emb, hidden)  # BUG: rnn(emb, hidden.detach())
            loss = F.cross_entropy(head(out).view(-1, 20), targets.view(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    text = _note(caught.value, capfd)
    assert "tensor_dap: `hidden` [1, 4, 8], handed to the model at test_freed_graph.py:" in text, text
    assert "`emb`" not in text
