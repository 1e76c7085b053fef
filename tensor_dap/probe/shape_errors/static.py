"""Reading a user's objects without running their code: ``type(x)``, its types' MROs and dicts, torch's C getters.

The obvious ways to look at an object all can call into it: ``isinstance`` reads ``obj.__class__``
(a property, a ``__getattribute__``), ``==``, ``in`` and hashing call ``__eq__``/``__hash__``,
``getattr`` runs properties, ``__getattr__`` and a metaclass's ``__getattribute__``, and a tensor
subclass can override ``shape`` with a Python property. Here ``type(x)`` is the only question asked
of an instance; a type's MRO and namespace are read through ``type``'s own C descriptors; objects
are compared by identity; and tensor metadata comes from ``torch._C.TensorBase``'s getters.
"""

from __future__ import annotations

import types
from typing import Any

from ...kinds import torch_attr

_MRO = type.__dict__["__mro__"].__get__  # the C getter: a metaclass's __getattribute__ never runs
_NAMESPACE = type.__dict__["__dict__"].__get__
MISSING = object()


def mro(kind: type) -> tuple:
    return _MRO(kind)


def lookup(kind: type, name: str) -> Any:
    """What ``kind.name`` resolves to in its MRO's namespaces, unbound; MISSING if nothing defines it."""
    for entry in _MRO(kind):
        namespace = _NAMESPACE(entry)
        if name in namespace:  # a type's namespace is a dict with str keys: no user __eq__ runs
            return namespace[name]
    return MISSING


def inherits(obj: Any, cls: Any) -> bool:
    """``isinstance(obj, cls)`` from ``type(obj)``'s MRO alone (no ``__class__`` read, no ``__instancecheck__``)."""
    return cls is not None and any(entry is cls for entry in _MRO(type(obj)))


def one_of(obj: Any, kinds: tuple) -> bool:
    """``type(obj)`` is exactly one of ``kinds`` (compared by identity)."""
    kind = type(obj)
    return any(kind is k for k in kinds)


def is_tensor(obj: Any) -> bool:
    """``kinds.is_tensor`` by MRO alone (no ``__class__`` read)."""
    return inherits(obj, torch_attr("torch.Tensor"))


def is_module(obj: Any) -> bool:
    """``kinds.is_module`` by MRO alone (no ``__class__`` read)."""
    return inherits(obj, torch_attr("torch.nn.Module"))


def own_dispatch(t: Any) -> bool:
    """A tensor subclass with a ``__torch_dispatch__`` of its own (not torch's): even its sizes may be Python."""
    import torch

    found = lookup(type(t), "__torch_dispatch__")
    if found is torch._C._disabled_torch_dispatch_impl:
        return False
    module = _NAMESPACE(_owner(type(t), "__torch_dispatch__")).get("__module__")
    return not (type(module) is str and (module == "torch" or module.startswith("torch.")))


def _owner(kind: type, name: str) -> type:
    return next(entry for entry in _MRO(kind) if name in _NAMESPACE(entry))


def tensor_attribute(t: Any, name: str) -> Any:
    """``t.name`` through ``torch._C.TensorBase``'s own getter (a subclass's Python ``shape`` property does
    not run), with ``__torch_function__`` disabled. Raises AttributeError for a subclass whose dispatch
    is its own (its metadata can be computed by its code) or a name TensorBase does not define."""
    import torch

    getter = _NAMESPACE(torch._C.TensorBase).get(name)
    if getter is None or type(getter) is not types.GetSetDescriptorType or own_dispatch(t):
        raise AttributeError(name)
    with torch._C.DisableTorchFunctionSubclass():
        return getter.__get__(t)


def tensor_strides(t: Any) -> tuple:
    import torch

    if own_dispatch(t):
        raise AttributeError("stride")
    with torch._C.DisableTorchFunctionSubclass():
        return tuple(torch._C.TensorBase.stride(t))
