"""A parameter found non-finite as a step begins: written by the optimizer's last update, or by the user's code
between steps (a weight constraint, an EMA, a load_state_dict). Before, every such report blamed the update."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import tensor_dap
from tensor_dap import NonFiniteError
from tensor_dap.triggers.param_writer import update_ruled_out

pytestmark = pytest.mark.timeout(60)


def train(optimizer_of, between_steps=None, steps=6):
    """An unchanged loop; ``between_steps(step, model, optimizer)`` runs after each update, as user code does."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = optimizer_of(model.parameters())
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(steps):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if between_steps is not None:
                between_steps(step, model, optimizer)
    return info.value.report


def max_norm(step, model, optimizer):
    """A max-norm constraint with no epsilon, after a row of the first layer died (all zero) at step 2."""
    with torch.no_grad():
        w = model[0].weight
        if step == 2:
            w[3].zero_()
        w.div_(w.norm(dim=1, keepdim=True))  # 0 / 0 = NaN for the dead row


@pytest.mark.parametrize("optimizer_of", [lambda p: torch.optim.Adam(p, lr=1e-2),
                                          lambda p: torch.optim.SGD(p, lr=1e-2),
                                          lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9)],
                         ids=["Adam", "SGD", "SGD momentum"])
def test_a_weight_constraint_between_steps_is_not_blamed_on_the_update(optimizer_of):
    report = train(optimizer_of, max_norm)
    assert (report.phase, report.module, report.step) == ("optimizer", "0", 2)
    assert report.headline == "a parameter of 0 went non-finite after the update, outside the optimizer"
    assert any("code between optimizer.step() and this forward" in note for note in report.notes)


def scaled_by_zero(step, model, optimizer):
    """A weight scaled by a factor computed as 0 at step 2 (a norm's target divided by a std of 0): Inf, not NaN."""
    with torch.no_grad():
        w = model[2].weight
        w.div_(w.abs().max() * (0.0 if step == 2 else 1.0) + (0.0 if step == 2 else 1e-12))


@pytest.mark.parametrize("optimizer_of, state", [(lambda p: torch.optim.Adam(p, lr=1e-2), True),
                                                 (lambda p: torch.optim.SGD(p, lr=1e-2), False),
                                                 (lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9), True)],
                         ids=["Adam", "SGD", "SGD momentum"])
def test_an_inf_written_between_steps_is_not_blamed_on_the_update(optimizer_of, state):
    """An update makes an Inf only by overflowing, from values near the dtype's largest: these are all below 1."""
    report = train(optimizer_of, scaled_by_zero)
    assert (report.phase, report.module, report.step) == ("optimizer", "2", 2)
    assert report.headline == "a parameter of 2 went non-finite after the update, outside the optimizer"
    said = next(note for note in report.notes if "unlikely to have written this Inf" in note)
    assert "past 3.4e+38 (float32's largest), with lr 0.01" in said and "no finite value left" in said
    assert ("its state for it at most" in said) == state and ("no state kept for it" in said) != state


def test_a_nan_learning_rate_is_the_update_writing_nan():
    """The update did write it: the group's lr went NaN (a schedule dividing by zero)."""
    def schedule(step, model, optimizer):
        if step == 2:
            optimizer.param_groups[0]["lr"] = float("nan")

    report = train(lambda p: torch.optim.SGD(p, lr=1e-2), schedule)
    assert report.phase == "optimizer" and report.step == 3
    assert report.headline.startswith("the optimizer update made a parameter of")
    assert report.diagnosis.startswith("the learning rate is nan, so every update with it makes the parameters")


def test_an_optimizer_state_loaded_with_nan_is_the_diagnosis_of_the_update_it_broke():
    """An optimizer checkpoint saved from a run gone NaN (one value of Adam's exp_avg_sq): the update from finite
    gradients writes NaN into the parameter, and the report said only that the update did."""
    def corrupt(step, model, optimizer):
        if step == 1:  # the checkpoint is loaded between two steps
            state = optimizer.state_dict()
            state["state"][2]["exp_avg_sq"][1, 5] = float("nan")
            optimizer.load_state_dict(state)

    report = train(lambda p: torch.optim.Adam(p, lr=1e-2), corrupt)
    assert report.phase == "optimizer" and report.step == 2 and report.module == "2"
    assert report.diagnosis.startswith("Adam's state for this parameter holds NaN (exp_avg_sq) while the gradients "
                                       "it used were finite"), report.diagnosis


def test_a_nan_state_is_not_blamed_where_the_gradients_were_not_all_checked():
    """Read every few steps (``every`` > 1), an unchecked update may have used NaN gradients, which put NaN in the
    state too: the state is then no evidence."""
    from tensor_dap.triggers.param_writer import update_diagnosis

    p = nn.Parameter(torch.ones(3))
    adam = torch.optim.Adam([p], lr=0.1)
    p.grad = torch.ones(3)
    adam.step()
    adam.state[p]["exp_avg_sq"][0] = float("nan")
    assert update_diagnosis(adam, p, checked=False) is None
    assert update_diagnosis(adam, p, checked=True).startswith("Adam's state for this parameter holds NaN")


def test_what_rules_the_update_out():
    p = nn.Parameter(torch.ones(3))
    adam = torch.optim.Adam([p], lr=0.1)
    p.grad = torch.ones(3)
    adam.step()
    with torch.no_grad():
        p[0] = math.nan
    assert update_ruled_out(adam, p)  # finite state, hyperparameters and gradients: the update gives no NaN
    adam.state[p]["exp_avg_sq"][1] = math.inf
    assert not update_ruled_out(adam, p)  # state gone non-finite: the update may have written it
    adam.state[p]["exp_avg_sq"][1] = 1.0
    adam.param_groups[0]["eps"] = 0.0
    assert not update_ruled_out(adam, p)  # m / (sqrt(v) + 0) is 0 / 0 for a value never updated
    adam.param_groups[0]["eps"] = 1e-8
    with torch.no_grad():
        p[0] = math.inf
    assert update_ruled_out(adam, p)  # an Inf: an overflow, which values of ~1 and lr 0.1 cannot make
    with torch.no_grad():
        p[1] = 1e37
    assert not update_ruled_out(adam, p)  # near float32's largest already: the update may have overflowed
    with torch.no_grad():
        p[1] = 1.0
    adam.param_groups[0]["lr"] = 10.0
    assert not update_ruled_out(adam, p)  # an update larger than what it reads: it may have overflowed
    adam.param_groups[0]["lr"] = 0.1
    adam.state[p]["exp_avg"][2] = 1e36
    assert not update_ruled_out(adam, p)  # (and the same for huge state)
    assert not update_ruled_out(adam, nn.Parameter(torch.full((2,), math.nan)))  # not this optimizer's
    assert not update_ruled_out(object(), p)  # not a torch.optim optimizer: nothing can be told


def test_a_float16_model_with_adam_s_default_eps_is_the_update_writing_nan_and_says_why(tmp_path):
    """model.half() for memory (LLMs-from-scratch's GPT, tried): Adam adds its eps=1e-8 in float16, where it is 0, so
    the first update divides 0 by 0 for the embedding rows of tokens not in the batch. The state and hyperparameters
    are all finite: the rule that an update cannot write a NaN from them holds only where eps survives the dtype."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 50)).half()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    tokens = torch.randint(0, 10, (4, 6))  # rows 10..49 of the embedding get a gradient of exactly 0
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=str(tmp_path)):
        for _ in range(3):
            loss = nn.functional.cross_entropy(model(tokens).flatten(0, 1).float(), tokens.flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    report = info.value.report
    assert (report.phase, report.module, report.step) == ("optimizer", "0", 0)
    assert report.headline == "the optimizer update made a parameter of 0 non-finite"
    assert report.diagnosis.startswith("AdamW's eps=1e-08 is 0 in float16, so its update divides 0 by 0")
    assert "torch.autocast" in report.diagnosis and "eps=1e-4" in report.diagnosis
    with pytest.raises(NonFiniteError) as again:  # the bundle's step, in another session: the same verdict
        tensor_dap.replay(report.bundle, model, optimizer=optimizer, on="raise")
    assert again.value.report.diagnosis == report.diagnosis


@pytest.mark.parametrize("dtype, eps, fused, lost", [
    (torch.float16, 1e-8, False, True), (torch.float16, 1e-4, False, False), (torch.float32, 1e-8, False, False),
    (torch.bfloat16, 1e-8, False, False), (torch.float16, 1e-8, True, False)])
def test_an_eps_is_lost_only_where_it_rounds_to_zero_in_the_parameter_s_own_arithmetic(dtype, eps, fused, lost):
    from tensor_dap.triggers.param_writer import vanishing_eps

    p = nn.Parameter(torch.zeros(3, dtype=dtype))
    optimizer = torch.optim.Adam([p], eps=eps)
    optimizer.param_groups[0]["fused"] = fused  # (a fused update computes in float32; set as torch records it)
    assert (vanishing_eps(optimizer, p) == eps) if lost else vanishing_eps(optimizer, p) is None
