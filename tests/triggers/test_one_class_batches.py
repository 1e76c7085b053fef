"""Batches of a single class each (a DataLoader without shuffle=True over data sorted by label): said once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import tensor_dap
from tensor_dap.triggers import loss_tap, one_class_batches

pytestmark = pytest.mark.timeout(60)


def _train(per_class: int, classes: int = 5, shuffle: bool = False, batch: int = 32, ignored: bool = False,
           loss_fn=F.cross_entropy) -> list[int]:
    """Train one epoch; the number of loss listeners after each step."""
    torch.manual_seed(0)
    y = torch.arange(classes).repeat_interleave(per_class)
    if ignored:
        y[1::7] = -100  # padding samples cross_entropy leaves out
    x = torch.randn(len(y), 8)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=shuffle)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    listening = []
    with tensor_dap.watch(model, optimizer, on="raise"):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
            listening.append(len(loss_tap._listeners))
    return listening


def _err(capfd) -> str:
    return " ".join(capfd.readouterr().err.split())


def test_a_loader_over_data_sorted_by_label_is_said_once(capfd):
    _train(per_class=1000)
    err = _err(capfd)
    assert ("tensor_dap: each of the first 8 batches holds a single class (class 0 in every one): a DataLoader "
            "without shuffle=True over data sorted by label") in err, err
    assert err.count("single class") == 1


def test_batches_where_one_class_gives_way_to_the_next_are_told_apart(capfd):
    _train(per_class=100)  # batches 4 and 7 of 32 samples hold two classes
    err = _err(capfd)
    assert ("of the first 8 batches, 6 hold a single class (class 0, then 1, then 2) and 2 hold two, where one class "
            "gives way to the next") in err, err


def test_samples_left_out_by_ignore_index_do_not_count_as_a_class(capfd):
    _train(per_class=1000, ignored=True)
    assert "each of the first 8 batches holds a single class (class 0 in every one)" in _err(capfd)


@pytest.mark.parametrize("kwargs", [dict(shuffle=True), dict(classes=2), dict(batch=8)],
                         ids=["shuffled", "two classes", "small batches"])
def test_shuffled_binary_or_small_batches_are_not_said(capfd, kwargs):
    _train(per_class=1000, **kwargs)
    assert "single class" not in _err(capfd)


def test_the_listener_leaves_after_the_batches_it_reads():
    listening = _train(per_class=1000, shuffle=True)
    assert listening[one_class_batches.BATCHES] < listening[0]  # no loss is read after those


def test_a_loss_that_is_not_a_classification_is_read_once():
    regression = _train(per_class=40, loss_fn=lambda out, y: F.mse_loss(out[:, 0], y.float()))
    classification = _train(per_class=40)
    assert regression[0] == classification[0] - 1  # after the first loss, this check listens no more
