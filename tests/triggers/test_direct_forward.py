"""A loop that calls ``model.forward(x)`` skips nn.Module's call, where the unchanged loop's capture is: the report
still names the module holding the non-finite gradient, and says why the step has no bundle and how to get one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap.errors import NonFiniteError

pytestmark = pytest.mark.timeout(60)


class LogNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.log(self.fc1(x)))  # NaN where fc1's output is negative


@pytest.mark.parametrize("direct", [True, False])
def test_a_forward_called_directly_is_said_to_be_why_nothing_replays(tmp_path, monkeypatch, direct):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = LogNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 8), torch.randint(0, 3, (8,))
    with pytest.raises(NonFiniteError) as caught, tensor_dap.watch(model, optimizer, on="raise"):
        optimizer.zero_grad()
        out = model.forward(x) if direct else model(x)  # BUG (direct): model(x)
        F.cross_entropy(out, y).backward()
        optimizer.step()
    notes = " ".join(caught.value.report.notes)
    said = "no call of the watched model was seen in it: called as `model.forward(x)`?"
    if direct:
        assert said in notes and "write `model(x)`" in notes, notes
    else:
        assert said not in notes and caught.value.report.bundle is not None
