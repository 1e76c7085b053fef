"""tensor_dap's global module hooks where ``torch.compile`` runs: run as plain Python, and no torch warning about
hooks the user never installed (``tensor-dap run --guard`` on nanoGPT's ``model = torch.compile(model)``)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from tensor_dap.dynamo import global_forward_pre_hook

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def calls_of_a_compiled_model(register) -> tuple[list[str], list[str]]:
    """(the warnings a compiled model's calls gave, the modules the hook saw) with a hook ``register`` put on."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = torch.compile(model, backend="eager")
    seen: list[str] = []
    handle = register(lambda module, args: seen.append(type(module).__name__))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", append=True)  # every call's warning, after the filters already there
            for _ in range(2):
                compiled(torch.randn(3, 4)).sum().backward()
    finally:
        handle.remove()
    return [str(w.message) for w in caught if "global hooks" in str(w.message)], seen


def test_a_global_hook_of_ours_fires_inside_a_compiled_model_without_torchs_warning():
    warned, seen = calls_of_a_compiled_model(global_forward_pre_hook)
    assert not warned
    assert seen.count("Linear") == 4 and "OptimizedModule" in seen  # run inside the compiled model, as documented


def test_the_warning_silenced_is_the_one_torch_gives_for_such_hooks():
    """The control: the same hook put on by torch's own function makes torch warn, at every call."""
    warnings.filters[:] = [f for f in warnings.filters if "global hooks" not in str(f[1] and f[1].pattern)]
    warned, _ = calls_of_a_compiled_model(torch.nn.modules.module.register_module_forward_pre_hook)
    assert len(warned) == 2 and warned[0].startswith("Using `torch.compile(module)` when there are global hooks")
