"""An unchanged loop that calls its model under ``torch.autocast``: the re-run, made from the optimizer's hook outside
that region, ran the forward in float32, where a float16 overflow does not happen, and the report said only
"non-finite loss". Each captured forward keeps the autocast regions it ran in and is re-run in them (the bundle
keeps them too); the user's run is untouched."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensor_dap
from tensor_dap import NonFiniteError

pytestmark = pytest.mark.timeout(120)


def _run(model: nn.Module, optimizer: torch.optim.Optimizer, capture: bool | str) -> NonFiniteError:
    gen = torch.Generator().manual_seed(1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=capture):
        for step in range(4):
            x = torch.randn(16, 8, generator=gen) * (3e5 if step == 2 else 100)
            with torch.autocast("cpu", dtype=torch.float16):
                out = model(x)
            loss = out.float().pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return info.value


def _model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.0)  # (the weights stay: only the batch overflows)


def test_a_float16_overflow_in_a_forward_called_under_autocast_is_named(tmp_path):
    model, optimizer = _model()
    report = _run(model, optimizer, str(tmp_path)).report
    assert (report.step, report.phase, report.module, report.op) == (2, "forward", "0", "linear"), report.headline
    assert report.diagnosis.startswith("float16 overflow")
    assert not torch.is_autocast_enabled("cpu")  # the re-run's region is left
    replayed = tensor_dap.replay(report.bundle, model, optimizer=optimizer, on="log")  # the bundle keeps the region
    assert replayed is not None and (replayed.module, replayed.op) == ("0", "linear")
