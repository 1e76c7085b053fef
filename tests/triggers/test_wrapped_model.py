"""A wrapper module that hands attribute writes to the module it wraps, as Lightning Fabric's ``_FabricModule`` does
(``fabric.setup(model, optimizer)``): watch put its capture on the wrapper with ``setattr``, which the wrapper also
gave to the model inside, so the model's call went back to the wrapper's and ``tensor-dap run --guard`` recursed
until RecursionError. Lightning is not a dependency of these tests: the wrapper here does what Fabric's does to
attribute writes (the field trial ran Lightning 2.6's Fabric itself)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensor_dap
from tensor_dap import NonFiniteError

pytestmark = pytest.mark.timeout(120)


class _Forwarding(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self._forward_module = inner
        self._initialized = True

    def forward(self, *args: object) -> torch.Tensor:
        return self._forward_module(*args)

    def __setattr__(self, name: str, value: object) -> None:
        if self.__dict__.get("_initialized") and hasattr(self._forward_module, name):
            setattr(self._forward_module, name, value)  # Fabric: the original module's attribute is set too
        super().__setattr__(name, value)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        return self.fc2(torch.where(h > 0, torch.sqrt(h), 0.0))  # NaN in backward where h < 0


def test_a_wrapper_handing_attribute_writes_inside_is_watched_without_recursion():
    torch.manual_seed(0)
    model = _Forwarding(_Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(8, 6)).pow(2).mean().backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (0, "backward", "SqrtBackward0"), report.headline
    assert "_compiled_call_impl" not in model._forward_module.__dict__  # the model inside keeps its own call


def test_a_re_run_backward_passes_fabric_s_check_that_it_started_the_backward(monkeypatch):
    """Fabric (``bf16-mixed``) hooks the outputs of the model it set up with a check that the backward came through
    ``fabric.backward``, reading a flag of its ``lightning.fabric.wrappers`` module; the re-run's own backward failed
    there. Here a module of that name holds the flag and the wrapper's forward hooks its output as Fabric's does."""
    import sys
    import types

    wrappers = types.ModuleType("lightning.fabric.wrappers")
    wrappers._in_fabric_backward = False
    monkeypatch.setitem(sys.modules, "lightning.fabric.wrappers", wrappers)

    def refuse(grad: torch.Tensor) -> None:
        if not wrappers._in_fabric_backward:
            raise RuntimeError("The current strategy and precision selection requires you to call "
                               "`fabric.backward(loss)` instead of `loss.backward()`.")

    class Checked(_Forwarding):
        def forward(self, *args: object) -> torch.Tensor:
            out = self._forward_module(*args)
            out.register_hook(refuse)
            return out

    def fabric_backward(loss: torch.Tensor) -> None:
        wrappers._in_fabric_backward = True
        try:
            loss.backward()
        finally:
            wrappers._in_fabric_backward = False

    torch.manual_seed(0)
    model = Checked(_Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(3):
            optimizer.zero_grad()
            fabric_backward(model(torch.randn(8, 6)).pow(2).mean())
            optimizer.step()
    report = info.value.report
    assert (report.phase, report.op) == ("backward", "SqrtBackward0"), report.notes
    assert wrappers._in_fabric_backward is False  # put back after the re-run
