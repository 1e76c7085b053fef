"""No optimizer.zero_grad() between steps: backward() adds to the last step's gradients. Said once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers import loss_tap

pytestmark = pytest.mark.timeout(60)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def _batches(n: int):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 8, generator=gen), torch.randint(0, 2, (16,), generator=gen)) for _ in range(n)]


def _said(capfd) -> str:
    return " ".join(capfd.readouterr().err.split())


def _loop(reset: str, steps: int = 5, micro: int = 1) -> None:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for i, (x, y) in enumerate(_batches(steps * micro)):
            loss = F.cross_entropy(model(x), y) / micro
            if reset == "before backward" and i % micro == 0:
                optimizer.zero_grad()
            elif reset == "in place" and i % micro == 0:
                optimizer.zero_grad(set_to_none=False)
            elif reset == "through .data" and i % micro == 0:
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.data.zero_()  # old code: the version counter does not move
            loss.backward()
            if (i + 1) % micro == 0:
                optimizer.step()
                if reset == "after step":
                    optimizer.zero_grad()


def test_a_loop_that_never_resets_its_gradients_is_told(capfd):
    _loop("never")
    said = _said(capfd)
    assert said.count("were still there") == 1, said
    assert ("the gradients of step 0 were still there when the next step's backward() began, so backward() added "
            "to them") in said
    assert "no optimizer.zero_grad() between steps?" in said


@pytest.mark.parametrize("reset", ["before backward", "after step", "in place", "through .data"])
def test_every_way_of_resetting_them_is_not_told(capfd, reset):
    _loop(reset)
    _loop(reset, steps=3, micro=4)  # gradient accumulation: 4 micro-batches a step, reset once a step
    assert "still there" not in _said(capfd)


def test_a_gan_s_other_model_backward_before_this_ones_reset_is_passed_over(capfd):
    """DCGAN's order: the discriminator's backward() runs before netG.zero_grad(); it does not reach netG."""
    torch.manual_seed(0)
    net_g, net_d = nn.Linear(4, 8), nn.Linear(8, 1)
    opt_g, opt_d = torch.optim.Adam(net_g.parameters()), torch.optim.Adam(net_d.parameters())
    with tensor_dap.watch(net_g, opt_g, on="raise"):
        for _ in range(4):
            fake = net_g(torch.randn(16, 4))
            net_d.zero_grad()
            net_d(fake.detach()).mean().backward()  # leaves net_g's gradients as the last update left them
            opt_d.step()
            net_g.zero_grad()
            (-net_d(fake).mean()).backward()
            opt_g.step()
    assert "still there" not in _said(capfd)


def _bce(logits: torch.Tensor, label: float) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, label))


@pytest.mark.parametrize("set_to_none", [True, False])
def test_a_loss_run_through_a_model_after_its_update_and_reset_before_its_next_is_passed_over(capfd, set_to_none):
    """DCGAN's order, both models watched (``tensor-dap run --break-on-nan``): the generator's loss runs through the
    discriminator after the discriminator's update, adding to its gradients; ``netD.zero_grad()`` resets them
    before its next backward(), so no update uses that sum (pytorch/examples' dcgan was told it was)."""
    torch.manual_seed(0)
    net_g, net_d = nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(net_g.parameters()), torch.optim.Adam(net_d.parameters())
    with tensor_dap.watch(net_g, opt_g, on="raise"), tensor_dap.watch(net_d, opt_d, on="raise"):
        for _ in range(6):
            net_d.zero_grad(set_to_none=set_to_none)
            _bce(net_d(torch.randn(16, 8)), 1.0).backward()
            fake = net_g(torch.randn(16, 4))
            _bce(net_d(fake.detach()), 0.0).backward()
            opt_d.step()
            net_g.zero_grad(set_to_none=set_to_none)
            _bce(net_d(fake), 1.0).backward()  # through net_d, after its update: adds to its gradients
            opt_g.step()
    assert "still there" not in _said(capfd)


def test_the_same_loop_without_the_discriminator_s_reset_is_told(capfd):
    """The sum reaches net_d's next update when nothing resets it: told, of net_d's first update."""
    torch.manual_seed(0)
    net_g, net_d = nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt_g, opt_d = torch.optim.Adam(net_g.parameters()), torch.optim.Adam(net_d.parameters())
    with tensor_dap.watch(net_g, opt_g, on="raise"), tensor_dap.watch(net_d, opt_d, on="raise"):
        for _ in range(6):
            fake = net_g(torch.randn(16, 4))
            _bce(net_d(fake.detach()), 0.0).backward()
            opt_d.step()
            net_g.zero_grad()
            _bce(net_d(fake), 1.0).backward()
            opt_g.step()
    said = _said(capfd)
    assert said.count("were still there") == 1, said
    assert "the gradients of step 0 were still there" in said


def test_nothing_listens_after_the_first_updates():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        listening = []
        for x, y in _batches(6):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            listening.append(len(loss_tap._listeners))
    assert listening[0] > listening[-1]  # the check's two listeners left after its updates
    assert not loss_tap._listeners  # and the watch's own with it


def test_a_model_whose_first_gradient_is_mostly_zero_is_told_too(capfd):
    """A language model's embedding comes first, and its rows for tokens not in the batch get no gradient (found on
    LLMs-from-scratch's GPT with its zero_grad() removed): the gradient looked at must be one that moves."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(1000, 8), nn.Flatten(), nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(4):
            tokens = torch.randint(900, 1000, (16, 4))  # the first 900 rows: no gradient
            F.cross_entropy(model(tokens), torch.randint(0, 4, (16,))).backward()
            optimizer.step()
    assert "no optimizer.zero_grad() between steps?" in _said(capfd)
