"""backward()'s "element 0 of tensors does not require grad and does not have a grad_fn": the note says which of
the usual causes it is (a frozen model, a forward with gradients off, a loss taken off the graph)."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap

pytestmark = pytest.mark.timeout(60)


def _fails(case: str, capfd) -> str:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    if case == "frozen":
        model.requires_grad_(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
    with pytest.raises(RuntimeError, match="does not require grad") as caught, \
            tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(2):
            if case == "no_grad":
                with torch.no_grad():  # BUG: the training loss inside an evaluation block
                    loss = F.cross_entropy(model(x), y)
            else:
                out = model(x)  # LINE forward
                loss = F.cross_entropy(out, y)
                if case == "item":
                    loss = torch.tensor(loss.item())  # BUG: a new tensor, with no graph
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    if sys.version_info >= (3, 11):
        return " ".join(getattr(caught.value, "__notes__", None) or [])
    return " ".join(capfd.readouterr().err.split())


def test_a_frozen_model_is_said_to_be_frozen(capfd):
    text = _fails("frozen", capfd)
    assert "every parameter of Sequential has requires_grad=False, so nothing in it can learn" in text, text


def test_a_loss_computed_under_no_grad_is_said_to_be(capfd):
    text = _fails("no_grad", capfd)
    assert "no forward of Sequential ran with gradients on in this step" in text, text
    assert "outside torch.no_grad()" in text


def test_a_loss_taken_off_the_graph_names_the_forward_that_made_one(capfd):
    import inspect

    lines, start = inspect.getsourcelines(_fails)
    line = start + next(i for i, text in enumerate(lines) if "# LINE forward" in text)
    text = _fails("item", capfd)
    assert (f"while the forward of Sequential at test_no_graph.py:{line} (`out = model(x)`) made one: the loss was "
            "computed from values taken off it (`.item()`") in text, text


@pytest.mark.parametrize("case", ["decorated", "item"])
def test_a_step_function_without_a_graph_gets_the_causes_it_can_tell(capfd, case):
    """``w.step`` does not see the forwards one by one: a step run with gradients off is said so (they are still off
    at backward()); otherwise both remaining causes are."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if case == "item":
            loss = torch.tensor(loss.item())  # BUG: a new tensor, with no graph
        loss.backward()
        optimizer.step()
        return loss

    with pytest.raises(RuntimeError, match="does not require grad") as caught, \
            tensor_dap.watch(model, optimizer, on="raise") as w:
        w.step(torch.no_grad()(step) if case == "decorated" else step)  # BUG (decorated): the whole step without grad
    text = (" ".join(getattr(caught.value, "__notes__", None) or []) if sys.version_info >= (3, 11)
            else " ".join(capfd.readouterr().err.split()))
    if case == "decorated":
        assert "gradients are off where backward() is called, so the forward of Sequential before it made none" in text
    else:
        assert "ran under torch.no_grad() / torch.inference_mode(), or the loss was computed from values taken off" \
            in text, text
