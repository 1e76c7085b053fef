"""What kind of object is this (a tensor, a module), answered without importing torch.

The debugpy plugin and the pdb load in programs that may never import torch; asking
``sys.modules`` instead of importing keeps them free for such programs.
"""

from __future__ import annotations

import sys
from typing import Any


def torch_attr(path: str) -> Any:
    """A torch object by dotted path ('torch.nn.Module'), or None unless that module is already imported."""
    module_name, _, attr = path.rpartition(".")
    module = sys.modules.get(module_name)
    return getattr(module, attr, None) if module is not None else None


def is_tensor(value: Any) -> bool:
    """True for a torch.Tensor (any subclass)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def is_module(value: Any) -> bool:
    """True for a torch.nn.Module."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def is_packed_sequence(value: Any) -> bool:
    """True for an RNN's packed input (``torch.nn.utils.rnn.PackedSequence``): a namedtuple whose data leads with
    the tokens of every sequence, not with the batch, and whose ``batch_sizes`` torch keeps on the CPU."""
    packed = torch_attr("torch.nn.utils.rnn.PackedSequence")
    return isinstance(packed, type) and isinstance(value, packed)


def is_script_module(value: Any) -> bool:
    """True for a scripted or traced module (``torch.jit``): it keeps its attributes, parameters and submodules in
    C++, behind wrappers that are not dicts."""
    jit = torch_attr("torch.jit.ScriptModule")
    return isinstance(jit, type) and isinstance(value, jit)


def class_name(module: Any) -> str:
    """The name of ``module``'s class as its author wrote it: a scripted or traced module is a
    ``RecursiveScriptModule`` or ``TracedModule`` whose ``original_name`` is the user's class."""
    if is_script_module(module):
        try:
            original = getattr(module, "original_name", None)
        except Exception:  # noqa: BLE001 - a ScriptModule subclass's own property: its class name then
            original = None
        if isinstance(original, str) and original:
            return original
    return type(module).__name__
