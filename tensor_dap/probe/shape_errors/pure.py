"""What the explanation may evaluate: plain data reads and a closed list of pure torch operations.

(Factories such as ``torch.randn`` are listed too: they run on the meta device, inside a forked RNG.)

A crash report must change nothing, so the failing line is re-evaluated only where no user code
can run: attribute reads that find plain instance data (an instance ``__dict__``, a slot, an
``nn.Module``'s parameters, buffers and submodules, a module namespace), never a property or any
other descriptor with code; and calls only to the torch functions and tensor methods named here,
which compute shapes on ``meta`` copies. ``Optimizer.step``, a user's method, a property that
consumes a batch: all stay unevaluated (shown as ``?``).
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

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


def tensor_attribute(name: str) -> bool:
    return name in _TENSOR_ATTRIBUTES


def tensor_method(name: str) -> bool:
    """A pure tensor method, or the in-place form of one (harmless on a meta copy)."""
    return name in _TENSOR_METHODS or (name.endswith("_") and name[:-1] in _TENSOR_METHODS)


def torch_function(fn: Any) -> bool:
    """``fn`` is one of the pure torch functions above (by identity: a user function of the same name is not)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        return False
    functional = sys.modules.get("torch.nn.functional")
    return (name in _TORCH_FUNCTIONS and getattr(torch, name, None) is fn) or \
        (functional is not None and name in _FUNCTIONAL and getattr(functional, name, None) is fn)


def indexable(container: Any) -> bool:
    """Built-in containers and torch's own module/parameter containers: indexing them runs no user code."""
    kind = type(container)
    if kind in (list, tuple, dict, str):
        return True
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if kind is torch.Size:
        return True
    return kind.__name__ in _TORCH_CONTAINERS and kind is getattr(torch.nn, kind.__name__, None)


def plain_attribute(obj: Any, name: str) -> Any:
    """``obj.name`` when it is plain data; raises NotPlain when reading it could run code."""
    if isinstance(obj, types.ModuleType):
        namespace = obj.__dict__
        if name in namespace:
            return namespace[name]
        raise NotPlain(name)
    kind = type(obj)
    if kind.__getattribute__ is not object.__getattribute__:
        raise NotPlain(name)
    try:
        found = inspect.getattr_static(obj, name)
    except AttributeError:
        return _module_entry(obj, name)
    owner_dict = _instance_dict(obj)
    if owner_dict is not None and name in owner_dict and owner_dict[name] is found:
        return found  # the instance's own data
    if isinstance(found, (types.MemberDescriptorType,)):  # a __slots__ entry
        return found.__get__(obj, kind)
    if isinstance(found, (types.FunctionType, types.BuiltinFunctionType, staticmethod, classmethod,
                          types.MethodDescriptorType)):
        return getattr(obj, name)  # a bound method (never called unless allowed by name)
    if hasattr(type(found), "__get__"):
        raise NotPlain(name)  # a property, getset or custom descriptor: code on read
    return found  # a plain class attribute


def _instance_dict(obj: Any) -> dict | None:
    try:
        d = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return None
    return d if isinstance(d, dict) else None


def _module_entry(obj: Any, name: str) -> Any:
    """An nn.Module's parameter, buffer or submodule, found as ``Module.__getattr__`` finds it (not a user override)."""
    torch = sys.modules.get("torch")
    module_getattr = getattr(getattr(torch, "nn", None), "Module", None)
    if module_getattr is None or not isinstance(obj, module_getattr) or \
            type(obj).__getattr__ is not module_getattr.__getattr__:
        raise NotPlain(name)
    own = _instance_dict(obj) or {}
    for group in ("_parameters", "_buffers", "_modules"):
        entries = own.get(group)
        if isinstance(entries, dict) and name in entries:
            return entries[name]
    raise NotPlain(name)
