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


def test_a_parameter_the_program_writes_between_forward_and_backward_is_not_blamed_on_the_optimizer(capfd):
    """A WGAN's weight clipping (or an embedding row zeroed) put between the forward and backward(): no update ran,
    so the optimizer is not named; the watch saw the forward and no step after it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="inplace") as caught, tensor_dap.watch(model, optimizer, on="raise"):
        for step in range(3):
            loss = F.cross_entropy(model(torch.randn(4, 8)), torch.zeros(4, dtype=torch.long))
            optimizer.zero_grad()
            if step == 2:
                with torch.no_grad():
                    model[2].weight.clamp_(-0.01, 0.01)  # BUG: the clipping belongs after the update
            loss.backward()
            optimizer.step()
    text = _explanation(caught.value, capfd)
    assert "model's parameter '2.weight' [4, 16] (torch saved its transpose)" in text, text
    assert "with no optimizer step since that forward: the program wrote it" in text
    assert "SGD.step()" not in text and "ran between" not in text


def test_an_activation_changed_in_place_outside_the_model_is_said_to_be_there(capfd):
    """The unchanged loop re-runs the model's forward only: when that changes nothing in place, the op is in the
    loss computation, and the note says so rather than naming a line it did not see."""
    layer = nn.Linear(4, 4)
    with pytest.raises(RuntimeError, match="inplace") as caught, tensor_dap.watch(layer, on="raise"):
        out = torch.sigmoid(layer(torch.randn(2, 4)))
        out.add_(1)  # sigmoid saved its output: not a parameter, and not in the model
        out.sum().backward()
    text = _explanation(caught.value, capfd)
    assert "the tensor backward() needs is the output of sigmoid [2, 4], changed in place before backward()" in text
    assert "Re-running this step's forward changes nothing in place" in text
    assert "between the model's output and backward()" in text


def test_w_step_reruns_the_whole_step_and_finds_the_op_in_the_loss_computation(capfd):
    """``w.step`` re-runs the step function (the loss computation with it) on copies of its inputs, the update
    refused: an in-place op outside the model is named with its line, and the update has not run twice."""
    torch.manual_seed(0)
    layer = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    before = layer.weight.detach().clone()

    def step(x):
        out = torch.sigmoid(layer(x))
        out.add_(1)  # LINE w.step
        optimizer.zero_grad()
        out.sum().backward()
        optimizer.step()

    with pytest.raises(RuntimeError, match="inplace") as caught, tensor_dap.watch(layer, optimizer, on="raise") as w:
        w.step(step, torch.randn(2, 4))
    text = _explanation(caught.value, capfd)
    import inspect

    lines, start = inspect.getsourcelines(step)
    line = start + next(i for i, t in enumerate(lines) if "# LINE w.step" in t)
    assert (f"the tensor backward() needs is the output of sigmoid [2, 4] at test_inplace_crash.py:{line - 1} "
            f"(`out = torch.sigmoid(layer(x))`), changed in place by add_ at test_inplace_crash.py:{line} "
            "(`out.add_(1)`)") in text, text
    assert "found by re-running this step)" in text
    assert torch.equal(layer.weight, before) and layer.weight.grad is None


class Gated(nn.Module):
    """A small attention-like block with the in-place bug chosen by ``bug``."""

    def __init__(self, bug: str):
        super().__init__()
        self.bug = bug
        self.proj = nn.Linear(8, 8)
        self.norm = nn.BatchNorm1d(8)
        self.drop = nn.Dropout(0.5)
        self.act = nn.ReLU(inplace=True)
        self.out = nn.Linear(8, 3)
        self.rnn = nn.LSTM(8, 8)

    def forward(self, x):
        h = self.drop(self.norm(self.proj(x)))
        if self.bug == "relu-after-sigmoid":
            h = torch.sigmoid(h)
            h = self.act(h)  # LINE relu-after-sigmoid
        elif self.bug == "masked-softmax":
            scores = torch.softmax(h @ h.T, dim=-1)
            scores.masked_fill_(torch.eye(len(x), dtype=torch.bool), 0.0)  # LINE masked-softmax
            h = scores @ h
        elif self.bug == "view":
            h = torch.exp(h)
            h.view(-1)[:4].zero_()  # LINE view
        elif self.bug == "lstm":
            out, _ = self.rnn(h.unsqueeze(0))
            out.clamp_(-0.5, 0.5)  # LINE lstm
            h = out.squeeze(0)
        elif self.bug == "batch":
            h = self.proj(x)  # saves x for its weight's gradient
            x /= 2  # LINE batch
        return self.out(h)


def _line_of(marker: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(Gated.forward)
    return start + next(i for i, text in enumerate(lines) if f"# LINE {marker}" in text)


@pytest.mark.parametrize("bug, what, op, fix", [
    ("relu-after-sigmoid", "the output of sigmoid [6, 8]", "relu (inplace=True) in act (ReLU)", "without inplace=True"),
    ("masked-softmax", "the output of softmax [6, 6]", "masked_fill_", "use masked_fill and keep its result"),
    ("view", "the output of exp [6, 8]", "zero_", "x = x.clone()"),
    ("batch", "a tensor [6, 8] that no op of the graph made (an input or a buffer)", "div_", "x = x / y"),
    ("lstm", "the output of lstm [1, 6, 8] in rnn (LSTM)", "clamp_", "use clamp and keep its result"),
])
def test_an_activation_changed_in_place_in_the_model_is_named_with_its_line(capfd, bug, what, op, fix):
    """Re-running the step's forward watching every op's version counters finds the op that changed the tensor
    torch names only by its node and shape, with another forward in the same step; the program's state
    (BatchNorm's statistics, the RNG, the batch) is as the crash left it."""
    torch.manual_seed(0)
    model = Gated(bug)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        optimizer.zero_grad()
        model(torch.randn(6, 8)).sum()  # a forward of the same step whose loss is never backward()'d
        x = torch.randn(6, 8)
        loss = F.cross_entropy(model(x), torch.zeros(6, dtype=torch.long))
        state = (torch.get_rng_state(), model.norm.running_mean.clone(), x.clone())
        with pytest.raises(RuntimeError, match="inplace") as caught:
            loss.backward()
    text = _explanation(caught.value, capfd)
    here = f"test_inplace_crash.py:{_line_of(bug)}"
    assert f"the tensor backward() needs is {what}" in text, text
    assert f"changed in place by {op} at {here}" in text, text
    assert fix in text, text
    if bug in ("relu-after-sigmoid", "masked-softmax", "view", "lstm"):  # the line that made it, quoted
        assert f"{what} at test_inplace_crash.py:{_line_of(bug) - 1} (`" in text, text
    assert torch.equal(torch.get_rng_state(), state[0]) and torch.equal(model.norm.running_mean, state[1])
    assert torch.equal(x, state[2])  # the re-run changed a copy of the batch, not the batch again


def test_an_activation_shaped_like_a_parameter_is_not_taken_for_it(capfd):
    """A [16, 16] tanh output changed in place while fc1's [16, 16] weight sits at the same version: torch names an
    op's node (Tanh), which a parameter (saved as it is, or as its transpose's view) never is."""
    torch.manual_seed(0)
    fc1, fc2 = nn.Linear(16, 16), nn.Linear(16, 2)
    model = nn.Sequential(fc1, nn.Tanh(), fc2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def forward(x):
        h = torch.tanh(fc1(x))
        h += 1  # BUG
        return fc2(h)

    model.forward = forward
    with pytest.raises(RuntimeError, match="inplace") as caught, tensor_dap.watch(model, optimizer, on="raise"):
        loss = F.cross_entropy(model(torch.randn(16, 16)), torch.zeros(16, dtype=torch.long))
        assert fc1.weight._version == 1  # (its initialization's in-place fill): the version torch names now
        optimizer.zero_grad()
        loss.backward()
    text = _explanation(caught.value, capfd)
    assert "the tensor backward() needs is the output of tanh [16, 16]" in text, text
    assert "parameter" not in text and "changed in place by add_" in text
