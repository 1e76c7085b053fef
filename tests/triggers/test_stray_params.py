"""Parameters the loss depends on that the model does not hold: a layer built inside forward (said with its line at
the second step), layers in a plain Python list (said at the end of the run when they never changed)."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.triggers import stray_params

pytestmark = pytest.mark.timeout(60)


class BuildsInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        return nn.Linear(16, 4)(h)  # a new head, with new random weights, at every call


class Scale(nn.Module):
    """A user's layer whose own __init__ makes the parameter: the line named is where it is built."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


class BuildsOwnLayerInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Scale(4)(self.inp(x))


class PlainList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = [nn.Linear(16, 16) for _ in range(2)]  # not nn.ModuleList: never registered
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        for block in self.blocks:
            h = torch.relu(block(h))
        return self.out(h)


def _line_of(cls: type, text: str) -> int:
    lines, start = inspect.getsourcelines(cls.forward)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _train(model: nn.Module, steps: int = 4, extra: list[nn.Parameter] = (), others: list = (),
           use_step: bool = False) -> None:
    gen = torch.Generator().manual_seed(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    other = torch.optim.SGD(list(others), lr=0.1) if others else None

    def step(x, y):
        logits = model(x)
        for p in list(extra) + list(others):
            logits = logits * p
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        if other is not None:
            other.zero_grad()
        loss.backward()
        optimizer.step()
        if other is not None:
            other.step()
        return loss

    with tensor_dap.watch(model, optimizer, on="raise") as w:
        for _ in range(steps):
            x, y = torch.randn(16, 8, generator=gen), torch.randint(0, 4, (16,), generator=gen)
            w.step(step, x, y) if use_step else step(x, y)


def _err(capfd) -> str:
    return " ".join(capfd.readouterr().err.split())


@pytest.mark.parametrize("use_step", [False, True], ids=["unchanged loop", "w.step"])
def test_a_layer_built_in_forward_is_named_with_its_line_once(capfd, use_step):
    _train(BuildsInForward(), use_step=use_step)
    err = _err(capfd)
    line = _line_of(BuildsInForward, "nn.Linear(16, 4)(h)")
    assert (f"the loss depends on layers built anew in every step (Linear ×1 at test_stray_params.py:{line} "
            f"`return nn.Linear(16, 4)(h)") in err, err
    assert "build the layer once in __init__" in err
    assert err.count("built anew") == 1  # said once, not every step


def test_a_users_layer_built_in_forward_names_the_forward_not_its_init(capfd):
    _train(BuildsOwnLayerInForward())
    err = _err(capfd)
    line = _line_of(BuildsOwnLayerInForward, "Scale(4)")
    assert f"(Scale ×1 at test_stray_params.py:{line} `return Scale(4)(self.inp(x))`)" in err, err


def test_layers_in_a_plain_list_are_said_at_the_end_with_the_list(capfd):
    model = PlainList()
    before = model.blocks[0].weight.detach().clone()
    _train(model)
    err = _err(capfd)
    assert torch.equal(model.blocks[0].weight, before)  # what the line says: never trained
    assert ("tensor_dap.watch(PlainList): 4 parameters (PlainList.blocks[0].weight, PlainList.blocks[0].bias, "
            "PlainList.blocks[1].weight, PlainList.blocks[1].bias) the loss depends on are outside the model's "
            "parameters and never changed over 3 updates: PlainList.blocks is a plain Python list, whose layers"
            ) in err, err
    assert "nn.ModuleList" in err
    assert "built anew" not in err  # the same layers every step


def test_a_parameter_outside_the_model_that_nothing_updates_is_said(capfd):
    temperature = nn.Parameter(torch.ones(()))
    _train(nn.Sequential(nn.Linear(8, 4)), extra=[temperature])
    err = _err(capfd)
    assert ("1 parameter (a Parameter of shape []) the loss depends on is not the model's and never changed over 3 "
            "updates: "
            "no optimizer updates it") in err, err


def test_parameters_another_optimizer_updates_are_not_said(capfd):
    temperature = nn.Parameter(torch.ones(()))  # a learnable loss parameter with an optimizer of its own
    _train(nn.Sequential(nn.Linear(8, 4)), others=[temperature])
    err = _err(capfd)
    assert "never changed" not in err and "built anew" not in err, err


def test_a_model_holding_all_its_layers_is_not_said(capfd):
    _train(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
    err = _err(capfd)
    assert "the loss depends on" not in err, err


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_a_run_says_it_only_once_updates_had_a_chance_to_change_them(capfd, steps):
    _train(PlainList(), steps=steps)  # followed from the second loss on; two updates after that are needed
    assert ("PlainList.blocks is a plain Python list" in _err(capfd)) == (steps >= 3)


def test_a_gan_crashing_before_its_discriminator_steps_again_says_nothing_of_it(capfd):
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 8)), nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt_g, opt_d = torch.optim.Adam(gen.parameters()), torch.optim.Adam(disc.parameters())
    ones = torch.ones(8, 1)
    with pytest.raises(RuntimeError, match="inplace"), tensor_dap.watch(gen, opt_g, on="raise"):
        fake = gen(torch.randn(8, 4))
        d_loss = F.binary_cross_entropy_with_logits(disc(fake.detach()), 0 * ones)
        g_loss = F.binary_cross_entropy_with_logits(disc(fake), ones)  # its backward needs disc's weights ...
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()  # ... which this update changes in place
        opt_g.zero_grad()
        g_loss.backward()
    assert "never changed" not in _err(capfd)


def test_a_second_watched_model_is_left_to_its_own_watch(capfd):
    torch.manual_seed(0)
    gen, disc = nn.Sequential(nn.Linear(4, 8)), nn.Sequential(nn.Linear(8, 1))
    opt_g = torch.optim.Adam(gen.parameters())
    frozen = torch.optim.SGD(disc.parameters(), lr=0.0)  # the discriminator never changes: its watch's business
    with tensor_dap.watch(disc, frozen, on="raise"), tensor_dap.watch(gen, opt_g, on="raise"):
        for _ in range(4):
            loss = disc(gen(torch.randn(8, 4))).mean()
            opt_g.zero_grad()
            frozen.zero_grad()
            loss.backward()
            opt_g.step()
            frozen.step()
    assert "the loss depends on" not in _err(capfd)


def test_the_registration_hook_lives_one_step_only():
    before = len(nn.modules.module._global_parameter_registration_hooks)
    model = BuildsInForward()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        F.cross_entropy(model(torch.randn(4, 8)), torch.zeros(4, dtype=torch.long)).backward()
        optimizer.step()
        assert len(nn.modules.module._global_parameter_registration_hooks) == before + 1  # armed for the next step
        F.cross_entropy(model(torch.randn(4, 8)), torch.zeros(4, dtype=torch.long)).backward()
        assert len(nn.modules.module._global_parameter_registration_hooks) == before
    assert len(nn.modules.module._global_parameter_registration_hooks) == before


def test_the_graph_read_is_bounded():
    layers = nn.Sequential(*[nn.Linear(2, 2) for _ in range(50)])
    loss = layers(torch.randn(1, 2)).sum()
    assert len(stray_params.graph_params(loss)) == 100
    assert len(stray_params.graph_params(loss, limit=10)) < 100  # a huge graph is read up to its budget
    long = nn.Sequential(*[nn.Linear(2, 2) for _ in range(600)])
    loss = long(torch.randn(1, 2)).sum()
    assert len(stray_params.graph_params(loss)) == 1200
    assert len(stray_params.graph_params(loss, seconds=0.0)) < 1200  # ... and of time
