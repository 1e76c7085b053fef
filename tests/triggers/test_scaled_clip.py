"""Gradients clipped while a GradScaler still scales them (no ``scaler.unscale_(optimizer)`` before the clip): said
once; the documented order (unscale, then clip) and a disabled scaler are not."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap

pytestmark = pytest.mark.timeout(60)


def _amp_loop(clip, unscale: bool, enabled: bool = True, steps: int = 4) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=enabled)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    with tensor_dap.watch(model, optimizer):
        for _ in range(steps):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            if unscale:
                scaler.unscale_(optimizer)
            clip(model.parameters())
            scaler.step(optimizer)
            scaler.update()


def test_clipping_by_norm_before_unscale_is_said_once_with_the_scale(capfd):
    _amp_loop(lambda p: torch.nn.utils.clip_grad_norm_(p, 1.0), unscale=False)
    err = capfd.readouterr().err
    assert err.count("still scales") == 1, err
    assert ("tensor_dap: clip_grad_norm_(max_norm=1) ran on gradients the GradScaler still scales (x65536): the norm "
            "it measures is 65536 times too big") in err
    assert "Call scaler.unscale_(optimizer) before clipping" in err


def test_clipping_by_value_before_unscale_is_said(capfd):
    _amp_loop(lambda p: torch.nn.utils.clip_grad_value_(p, 0.5), unscale=False)
    assert "clip_grad_value_(clip_value=0.5) ran on gradients the GradScaler still scales" in capfd.readouterr().err


@pytest.mark.parametrize("unscale, enabled", [(True, True), (False, False)])
def test_unscaled_or_unscaled_by_nothing_is_not_said(capfd, unscale, enabled):
    _amp_loop(lambda p: torch.nn.utils.clip_grad_norm_(p, 1.0), unscale=unscale, enabled=enabled)
    assert "still scales" not in capfd.readouterr().err
