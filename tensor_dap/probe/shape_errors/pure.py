"""What the explanation may evaluate: plain data reads and a closed list of pure torch operations.

(Factories such as ``torch.randn`` are listed too: they run on the meta device, inside a forked RNG.)

A crash report must change nothing, so the failing line is re-evaluated only where no user code
can run: attribute reads that find plain instance data (an instance ``__dict__``, a slot, an
``nn.Module``'s parameters, buffers and submodules, a module namespace), never a property or any
other descriptor with code; and calls only to the torch functions and tensor methods named here,
which compute shapes on ``meta`` copies. ``Optimizer.step``, a user's method, a property that
consumes a batch: all stay unevaluated (shown as ``?``). Objects are looked at only through
``static`` (their type's namespaces, identity, torch's C getters), and only plain data (``plain``)
is ever handed to a torch operation, so no ``__index__``, ``__eq__`` or ``__radd__`` of theirs runs.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from . import static

_TENSOR_ATTRIBUTES = frozenset({
    "shape", "dtype", "device", "ndim", "T", "mT", "H", "mH", "real", "imag", "data", "grad", "layout",
    "is_cuda", "requires_grad", "is_leaf",
})
_TENSOR_METHODS = frozenset("""
view view_as reshape reshape_as permute transpose swapaxes t unsqueeze squeeze flatten unflatten expand expand_as
repeat repeat_interleave tile contiguous narrow select index_select gather scatter scatter_add split chunk unbind
flip roll movedim diagonal tril triu masked_fill masked_select where clone detach
matmul mm bmm mv dot inner outer baddbmm addmm addbmm addmv einsum
add sub subtract mul multiply div divide true_divide floor_divide remainder fmod pow neg abs exp log log1p sqrt
rsqrt sin cos tanh sigmoid relu softmax log_softmax clamp clip maximum minimum
sum mean std var norm amax amin max min argmax argmin prod cumsum cumprod logsumexp all any sort topk
eq ne lt le gt ge logical_and logical_or logical_not
float double half bfloat16 long int short bool byte char type_as size dim numel nelement
new_zeros new_ones new_empty new_full zero_ fill_ copy_
""".split())
_TORCH_FUNCTIONS = frozenset("""
matmul mm bmm mv dot inner outer einsum tensordot baddbmm addmm addbmm addmv cdist
cat concat concatenate stack hstack vstack dstack column_stack
add sub subtract mul multiply div divide true_divide pow neg abs exp log sqrt tanh sigmoid relu softmax log_softmax
clamp clip maximum minimum where masked_fill
reshape flatten unflatten transpose permute swapaxes movedim squeeze unsqueeze narrow select index_select gather
split chunk unbind tile repeat_interleave flip roll broadcast_to broadcast_tensors diagonal tril triu
sum mean std var norm amax amin max min argmax argmin prod cumsum logsumexp
eq ne lt le gt ge logical_and logical_or logical_not
zeros_like ones_like empty_like full_like zeros ones empty full rand randn randint arange linspace eye tensor
conv1d conv2d conv3d layer_norm group_norm batch_norm embedding
""".split())
_FUNCTIONAL = frozenset("""
linear bilinear conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d
avg_pool1d avg_pool2d avg_pool3d max_pool1d max_pool2d max_pool3d adaptive_avg_pool1d adaptive_avg_pool2d
adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d
cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy
binary_cross_entropy_with_logits kl_div cosine_similarity pairwise_distance
softmax log_softmax relu gelu silu leaky_relu elu tanh sigmoid dropout
layer_norm batch_norm group_norm instance_norm embedding one_hot pad interpolate normalize
scaled_dot_product_attention unfold fold pixel_shuffle
""".split())
# torch containers whose own __getitem__ only looks an entry up
_TORCH_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict")


class NotPlain(Exception):
    """Reading this could run code: a property, a custom descriptor, a ``__getattr__``."""


_PLAIN_ITEMS = 10_000  # items of the lists/tuples handed to a torch op: more is not plain shape data
_PLAIN_DEPTH = 4
_SLICE_PARTS = (int, bool, type(None))


def tensor_attribute(name: str) -> bool:
    return name in _TENSOR_ATTRIBUTES


def tensor_method(name: str) -> bool:
    """A pure tensor method, or the in-place form of one (harmless on a meta copy)."""
    return name in _TENSOR_METHODS or (name.endswith("_") and name[:-1] in _TENSOR_METHODS)


def plain(value: Any) -> bool:
    """Data a torch op may take without calling back into user code: tensors, exact built-in scalars,
    torch's dtype/device/layout/Size, and lists/tuples of them (at most _PLAIN_ITEMS items in all, nested
    at most _PLAIN_DEPTH deep, so checking a frame's huge list costs nothing either)."""
    torch = sys.modules.get("torch")
    scalars = (int, float, bool, complex, str, type(None), type(Ellipsis))
    if torch is not None:
        scalars += (torch.dtype, torch.device, torch.layout, torch.memory_format, torch.Size)
    stack, seen = [(value, 0)], 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > _PLAIN_ITEMS:
            return False
        if static.one_of(item, scalars) or static.is_tensor(item):
            continue
        if static.one_of(item, (slice,)):
            if not all(static.one_of(part, _SLICE_PARTS) for part in (item.start, item.stop, item.step)):
                return False  # a tensor bound would be read through its (overridable) __index__
        elif static.one_of(item, (list, tuple)) and depth < _PLAIN_DEPTH and len(item) <= _PLAIN_ITEMS - seen:
            stack += [(v, depth + 1) for v in item]
        else:
            return False
    return True


def torch_function(fn: Any) -> bool:
    """``fn`` is one of the pure torch functions above, by identity (a user function of the same name is
    not, nor a user's replacement of ``torch.matmul``); ``fn`` itself is never asked anything."""
    found = _allowed().get(id(fn))
    return found is not None and found is fn


def _allowed() -> dict:
    """id -> function for the allow-list, as torch defines them now (only C functions and torch's own code)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    root = os.path.dirname(getattr(torch, "__file__", None) or "")
    out = {}
    functional = sys.modules.get("torch.nn.functional")
    for module, names in ((torch, _TORCH_FUNCTIONS), (functional, _FUNCTIONAL)):
        namespace = vars(module) if module is not None else {}
        for name in names:
            fn = namespace.get(name)
            if static.one_of(fn, (types.BuiltinFunctionType,)) or (
                    static.one_of(fn, (types.FunctionType,)) and root and
                    fn.__code__.co_filename.startswith(root + os.sep)):
                out[id(fn)] = fn
    return out


def indexable(container: Any) -> bool:
    """Built-in containers and torch's own module/parameter containers: indexing them runs no user code."""
    if static.one_of(container, (list, tuple, dict, str)):
        return True
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    kinds = [torch.Size] + [getattr(torch.nn, name, None) for name in _TORCH_CONTAINERS]
    return static.one_of(container, tuple(k for k in kinds if k is not None))


def key(index: Any) -> bool:
    """An index into a built-in container that hashes and compares as built-in data (no ``__eq__``/``__index__``)."""
    if static.one_of(index, (int, bool, str, type(None))):
        return True
    if static.one_of(index, (slice,)):
        return plain(index)
    return static.one_of(index, (tuple,)) and len(index) <= 16 and all(key(i) for i in index)


_GET = types.FunctionType.__get__  # binding a function: C code, nothing of the function runs


def plain_attribute(obj: Any, name: str) -> Any:
    """``obj.name`` when it is plain data; raises NotPlain when reading it could run code."""
    if static.inherits(obj, types.ModuleType):
        namespace = types.ModuleType.__dict__["__dict__"].__get__(obj)
        value = dict.get(namespace, name, static.MISSING) if static.one_of(namespace, (dict,)) else static.MISSING
        if value is static.MISSING:
            raise NotPlain(name)
        return value
    kind = type(obj)
    if static.lookup(kind, "__getattribute__") is not object.__dict__["__getattribute__"]:
        raise NotPlain(name)
    found = static.lookup(kind, name)
    descriptor = static.lookup(type(found), "__get__") if found is not static.MISSING else static.MISSING
    data_descriptor = descriptor is not static.MISSING and (
        static.lookup(type(found), "__set__") is not static.MISSING or
        static.lookup(type(found), "__delete__") is not static.MISSING)
    if data_descriptor:
        if static.one_of(found, (types.MemberDescriptorType,)):
            return found.__get__(obj, kind)  # a __slots__ entry
        raise NotPlain(name)  # a property, getset or custom descriptor: code on read
    own = _instance_dict(obj)
    if own is not None:
        value = dict.get(own, name, static.MISSING)
        if value is not static.MISSING:
            return value  # the instance's own data
    if found is static.MISSING:
        return _module_entry(obj, name)
    if static.one_of(found, (types.FunctionType,)):
        return _GET(found, obj, kind)  # a bound method (never called unless allowed by name)
    if descriptor is not static.MISSING:
        raise NotPlain(name)  # classmethod, a C method, a user descriptor: not plain data
    return found  # a plain class attribute


def _instance_dict(obj: Any) -> dict | None:
    """The instance's ``__dict__``, read only through the C slot that ``object`` provides."""
    slot = static.lookup(type(obj), "__dict__")
    if not static.one_of(slot, (types.GetSetDescriptorType,)):
        return None
    d = slot.__get__(obj)
    return d if static.one_of(d, (dict,)) else None


def _module_entry(obj: Any, name: str) -> Any:
    """An nn.Module's parameter, buffer or submodule, found as ``Module.__getattr__`` finds it (not a user override)."""
    torch = sys.modules.get("torch")
    module_class = getattr(getattr(torch, "nn", None), "Module", None)
    if module_class is None or not static.inherits(obj, module_class) or \
            static.lookup(type(obj), "__getattr__") is not static.lookup(module_class, "__getattr__"):
        raise NotPlain(name)
    own = _instance_dict(obj) or {}
    for group in ("_parameters", "_buffers", "_modules"):
        entries = dict.get(own, group)
        if static.one_of(entries, (dict,)):
            value = dict.get(entries, name, static.MISSING)
            if value is not static.MISSING:
                return value
    raise NotPlain(name)
