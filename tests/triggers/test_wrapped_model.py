"""A wrapper module that hands attribute writes to the module it wraps, as Lightning Fabric's ``_FabricModule`` does
(``fabric.setup(model, optimizer)``): watch put its capture on the wrapper with ``setattr``, which the wrapper also
gave to the model inside, so the model's call went back to the wrapper's and ``tensor-dap run --guard`` recursed
until RecursionError. Lightning is not a dependency of these tests: the wrapper here does what Fabric's does to
attribute writes (the field trial ran Lightning 2.6's Fabric itself)."""

from __future__ import annotations

from typing import Any, Callable

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


def _report(model: nn.Module, backward: Callable[[torch.Tensor], None] = torch.Tensor.backward) -> Any:
    """The report of watching ``model`` train (its sqrt trap fires at the first step), ``backward`` run on each loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(3):
            optimizer.zero_grad()
            backward(model(torch.randn(8, 6)).pow(2).mean())
            optimizer.step()
    return info.value.report


def test_a_wrapper_handing_attribute_writes_inside_is_watched_without_recursion():
    torch.manual_seed(0)
    model = _Forwarding(_Net())
    report = _report(model)
    assert (report.step, report.phase, report.op) == (0, "backward", "SqrtBackward0"), report.headline
    assert "_compiled_call_impl" not in model._forward_module.__dict__  # the model inside keeps its own call


def test_a_re_run_backward_is_not_stopped_by_fabric_s_check_that_it_started_the_backward(monkeypatch):
    """Fabric (``bf16-mixed``) hooks the outputs of its wrapper's call with a check that the backward came through
    ``fabric.backward``, reading a flag of its ``lightning.fabric.wrappers`` module; a re-run through the wrapper
    failed there. The re-run starts from the outputs of the user's module inside (``dist.called``), which carry no
    such hook. Here a module of that name holds the flag and the wrapper's forward hooks its output as Fabric's does."""
    import sys
    import types

    wrappers = types.ModuleType("lightning.fabric.wrappers")
    wrappers._in_fabric_backward = False
    monkeypatch.setitem(sys.modules, "lightning.fabric.wrappers", wrappers)

    def refuse(grad: torch.Tensor) -> None:
        if not wrappers._in_fabric_backward:
            raise RuntimeError("The current strategy and precision selection requires you to call "
                               "`fabric.backward(loss)` instead of `loss.backward()`.")

    class _FabricModule(_Forwarding):  # (the name Fabric's wrapper has: ``dist.called`` looks through it)
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
    report = _report(_FabricModule(_Net()), fabric_backward)
    assert (report.phase, report.op) == ("backward", "SqrtBackward0"), report.notes
    assert wrappers._in_fabric_backward is False  # as the program left it


FABRIC_LIKE = '''
import torch
from torch import nn

_in_fabric_backward = False


class _FabricModule(nn.Module):
    def __init__(self, module):
        super().__init__()
        self._forward_module = module

    def forward(self, *args):
        return self._forward_module(*args)


def backward(loss):
    global _in_fabric_backward
    _in_fabric_backward = True
    try:
        loss.backward()
    finally:
        _in_fabric_backward = False
'''


def test_fabric_s_wrappers_are_passed_through_to_the_users_lines_and_names(tmp_path, monkeypatch):
    """Fabric's code stands between the user's ``model(x)`` / ``fabric.backward(loss)`` and torch's: the lines named
    are the user's calls, not Fabric's (``precision.py:107  tensor.backward()``), and the modules are named without
    ``_forward_module.``. A package laid out as lightning's (in a site-packages folder) stands in for it here."""
    import importlib
    import sys

    from tensor_dap.libraries import is_pass_through

    site = tmp_path / "site-packages"
    (site / "lightning" / "fabric").mkdir(parents=True)
    (site / "lightning" / "__init__.py").write_text("")
    (site / "lightning" / "fabric" / "__init__.py").write_text("")
    (site / "lightning" / "fabric" / "wrappers.py").write_text(FABRIC_LIKE)
    assert is_pass_through(str(site / "lightning" / "fabric" / "wrappers.py"))
    assert not is_pass_through(str(site / "lightning" / "pytorch" / "trainer.py"))  # the Trainer is the loop
    monkeypatch.syspath_prepend(str(site))
    for name in [n for n in sys.modules if n == "lightning" or n.startswith("lightning.")]:
        monkeypatch.delitem(sys.modules, name)
    wrappers = importlib.import_module("lightning.fabric.wrappers")

    torch.manual_seed(0)
    model = wrappers._FabricModule(nn.Sequential(nn.Linear(6, 8), nn.Linear(8, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    target = torch.zeros(8, dtype=torch.long)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(3):
            logits = model(torch.randn(8, 6) * (1e4 if step == 2 else 1))  # FABRIC-CALL
            loss = torch.nn.functional.nll_loss(torch.log(torch.softmax(logits, -1)), target)
            optimizer.zero_grad()
            wrappers.backward(loss)  # FABRIC-BACKWARD
            optimizer.step()
    report = info.value.report
    assert (report.step, report.op) == (2, "log"), report.headline
    assert report.source["file"] == __file__ and report.source["text"].endswith("# FABRIC-BACKWARD")
    assert "_forward_module" not in report.headline and "_forward_module" not in " ".join(report.notes)
