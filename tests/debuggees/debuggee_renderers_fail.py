"""Debuggee for test_debugpy_renderers: a renderer failure injected for chosen values only.

``describe`` (where the DAP views call it) and ``describe_module`` are patched here,
in the debugged program, to raise for objects marked ``_poison``; every other value renders normally.
The poisoned names sort first, so they are the first values of their type pydevd renders (the
case where pydevd would otherwise disable a provider for the whole type).
"""

import torch
from torch import nn

from tensor_dap.dap import expand as dap_children
from tensor_dap.dap import values as dap_values
from tensor_dap.summary import modules, objects

_describe = dap_values.describe
_describe_module = modules.describe_module


def _poisoned_describe(x, **kwargs):
    if getattr(x, "_poison", False):
        raise RuntimeError("injected failure")
    return _describe(x, **kwargs)


def _poisoned_describe_module(m, **kwargs):
    if getattr(m, "_poison", False):
        raise RuntimeError("injected module failure")
    return _describe_module(m, **kwargs)


dap_values.describe = dap_children.describe = _poisoned_describe
objects.describe_module = modules.describe_module = _poisoned_describe_module


def main() -> None:
    a_poisoned = torch.zeros(3, 4)
    a_poisoned._poison = True
    b_good = torch.arange(5.0)
    c_poisoned = torch.ones(2, 2, dtype=torch.float64)
    c_poisoned._poison = True
    d_good = torch.ones(7, dtype=torch.int32)
    a_model_poisoned = nn.Linear(3, 2)
    a_model_poisoned._poison = True
    b_model_good = nn.Linear(4, 5)
    print("ready", a_poisoned.sum() + b_good.sum() + c_poisoned.sum() + d_good.sum(), flush=True)  # BP-here
    del a_model_poisoned, b_model_good


if __name__ == "__main__":
    main()
