"""Pure data about an ``nn.Module`` and its subtree: parameter counts, dtypes, devices, mode, hooks.

The walk reads the dicts torch keeps (``_modules``, ``_parameters``, ``_buffers``) instead of
calling ``parameters()`` or ``named_modules()``, which a model may override: no user code runs,
and the walk is iterative, so a 10,000-module model cannot recurse too deep. It never touches
tensor data (shapes, dtypes, devices and counts only), and with ``max_ms`` it stops at the time
limit and says so (``complete=False``: counts are what it reached), so a huge model never
freezes the debugger.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..format import dtype_name
from ..kinds import class_name, is_script_module

_HOOK_KINDS = (
    ("forward_pre", "_forward_pre_hooks"),
    ("forward", "_forward_hooks"),
    ("backward_pre", "_backward_pre_hooks"),
    ("backward", "_backward_hooks"),
    ("state_dict", "_state_dict_hooks"),
    ("state_dict_pre", "_state_dict_pre_hooks"),
    ("load_state_dict_pre", "_load_state_dict_pre_hooks"),
    ("load_state_dict_post", "_load_state_dict_post_hooks"),
)
_EXTRA_REPR_MAX = 40  # a longer extra_repr() is noise in a one-line value
_CHECK_EVERY = 256  # entries between two looks at the clock
LIST_LIKE = ("Sequential", "ModuleList", "ParameterList")
DICT_LIKE = ("ModuleDict", "ParameterDict")


@dataclass(frozen=True)
class ModuleSummary:
    kind: str  # class name
    signature: str  # "Linear(784→256)", "Conv2d(3→64, k=3)", "Sequential(3)", "MLP"
    params: int  # elements, shared parameters counted once
    trainable: int
    frozen: int
    param_tensors: int
    param_bytes: int
    buffers: int  # elements
    buffer_bytes: int
    dtypes: tuple[str, ...]  # torch names, in first-seen order (parameters, then buffers)
    devices: tuple[str, ...]
    training: bool
    mode_differs: int  # descendants whose train/eval mode differs from this module's
    children: int  # direct submodules
    descendants: int
    hooks: tuple[tuple[str, int], ...]  # this module's own hooks: (kind, count), non-zero only
    hooks_in_tree: int  # hooks on this module and every descendant
    uninitialized: int = 0  # lazy parameters and buffers (LazyLinear before its first forward): not counted above
    complete: bool = True  # False: the time limit cut the walk; every count covers the modules reached

    @property
    def mode(self) -> str:
        """'train', 'eval', or 'train (2 in eval)' when submodules disagree."""
        mode = "train" if self.training else "eval"
        if self.mode_differs:
            mode += f" ({self.mode_differs} in {'eval' if self.training else 'train'})"
        return mode

    def __str__(self) -> str:
        """``Linear(784→256) 200,960 params f32 cpu train``; ``200,960+ params`` when the walk was cut short."""
        more = "" if self.complete else "+"
        parts = [self.signature]
        if self.uninitialized and not self.param_tensors:
            parts.append("params uninitialized (lazy)")
        elif self.param_tensors:
            parts.append(f"{self.params:,}{more} params")
            if self.frozen:
                parts.append(f"({self.frozen:,} frozen)" if self.trainable else "(all frozen)")
            if self.uninitialized:
                parts.append(f"(+{self.uninitialized} uninitialized)")
        else:
            parts.append("no params" if self.complete else "params not counted (time limit)")
        if self.dtypes:
            parts.append("+".join(dtype_name(d) for d in self.dtypes))
        if self.devices:
            parts.append("+".join(self.devices))
        parts.append(self.mode)
        if self.hooks_in_tree:
            parts.append(f"{self.hooks_in_tree}{more} hook{'s' if self.hooks_in_tree != 1 else ''}")
        return " ".join(parts)


def _own(module: Any, group: str) -> dict:
    """One of the dicts nn.Module keeps (``_modules``, ``_parameters``, ``_buffers``), read without user code
    (a TorchScript module's are torch's wrappers around its C++ module: read through them)."""
    try:
        value = object.__getattribute__(module, "__dict__").get(group)
    except AttributeError:
        return {}
    if isinstance(value, dict):
        return value
    if is_script_module(module):
        if value is None:  # a traced module: the scripted one it wraps holds them
            inner = object.__getattribute__(module, "__dict__").get("_actual_script_module")
            return _own(inner, group) if inner is not None and inner is not module else {}
        try:
            return dict(value.items())
        except Exception:  # noqa: BLE001 - an odd wrapper: nothing listed rather than a failed summary
            return {}
    return {}


def entries(module: Any) -> Iterator[tuple[str, Any, str]]:
    """(name, value, group) of a module's direct submodules, then parameters, then buffers (None entries skipped)."""
    for group in ("_modules", "_parameters", "_buffers"):
        for name, value in _own(module, group).items():
            if value is not None:
                yield name, value, group


def entry_count(module: Any) -> int:
    groups = ("_modules", "_parameters", "_buffers")
    return sum(sum(1 for v in _own(module, g).values() if v is not None) for g in groups)


def walk_modules(module: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted name, module) for ``module`` and every descendant, each once, depth first (iterative)."""
    seen = {id(module)}
    stack = [(prefix, module)]
    while stack:
        name, m = stack.pop()
        yield name, m
        kids = [(f"{name}.{k}" if name else k, v) for k, v in _own(m, "_modules").items()
                if v is not None and id(v) not in seen]
        seen.update(id(v) for _, v in kids)
        stack.extend(reversed(kids))


def named_tensors(module: Any, limit: int | None = None) -> Iterator[tuple[str, Any, str]]:
    """(state_dict-style name, tensor, "param"/"buffer") for the whole subtree, shared tensors once."""
    seen: set[int] = set()
    count = 0
    for prefix, m in walk_modules(module):
        for group, kind in (("_parameters", "param"), ("_buffers", "buffer")):
            for name, t in _own(m, group).items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield (f"{prefix}.{name}" if prefix else name), t, kind
                count += 1
                if limit is not None and count >= limit:
                    return


def is_uninitialized(t: Any) -> bool:
    """A lazy module's parameter or buffer before its first forward: it has no shape or data yet."""
    parameter = sys.modules.get("torch.nn.parameter")
    mixin = getattr(parameter, "UninitializedTensorMixin", None)
    return isinstance(mixin, type) and isinstance(t, mixin)


def hook_counts(module: Any) -> tuple[tuple[str, int], ...]:
    """(kind, count) of the hooks registered on this one module."""
    counts = []
    own = object.__getattribute__(module, "__dict__") if hasattr(module, "__dict__") else {}
    for kind, attr in _HOOK_KINDS:
        hooks = own.get(attr)
        n = len(hooks) if isinstance(hooks, dict) else 0
        if n:
            counts.append((kind, n))
    return tuple(counts)


def signature(module: Any) -> str:
    """A short constructor-like name: what a reader needs to recognise the layer (plain attributes only)."""
    kind = class_name(module)

    def get(name: str) -> Any:
        return _own_attr(module, name, None)

    if get("in_features") is not None and get("out_features") is not None:
        return f"{kind}({get('in_features') or '?'}→{get('out_features')})"
    if get("in_channels") is not None and get("out_channels") is not None:
        text = f"{kind}({get('in_channels') or '?'}→{get('out_channels')}"
        k, s = get("kernel_size"), get("stride")
        if k is not None:
            text += f", k={_squeeze(k)}"
        if s is not None and any(v != 1 for v in (s if isinstance(s, tuple) else (s,))):
            text += f", s={_squeeze(s)}"
        return text + ")"
    if get("num_embeddings") is not None and get("embedding_dim") is not None:
        return f"{kind}({get('num_embeddings')}×{get('embedding_dim')})"
    if get("input_size") is not None and get("hidden_size") is not None:
        layers = get("num_layers") or 1
        return f"{kind}({get('input_size')}→{get('hidden_size')}{f' ×{layers}' if layers != 1 else ''})"
    if get("embed_dim") is not None and get("num_heads") is not None:
        return f"{kind}({get('embed_dim')}, heads={get('num_heads')})"
    if get("num_features") is not None:  # BatchNorm*, InstanceNorm*
        return f"{kind}({get('num_features')})"
    if get("normalized_shape") is not None:  # LayerNorm, RMSNorm
        return f"{kind}({_squeeze(tuple(get('normalized_shape')))})"
    if get("num_groups") is not None and get("num_channels") is not None:
        return f"{kind}({get('num_groups')}, {get('num_channels')})"
    if kind in LIST_LIKE + DICT_LIKE:
        return f"{kind}({len(_own(module, '_parameters' if kind.startswith('Parameter') else '_modules'))})"
    extra = "" if is_script_module(module) else _torch_extra_repr(module)  # (TorchScript's: its original_name)
    if extra and len(extra) <= _EXTRA_REPR_MAX and "\n" not in extra:
        return f"{kind}({extra})"
    return kind


def _torch_extra_repr(module: Any) -> str:
    """``extra_repr()`` when torch itself defines it for this class; a user's own is user code and not run."""
    kind = type(module)
    defined_in = type.__dict__["__dict__"].__get__(kind).get("__module__")
    if not (type(defined_in) is str and defined_in.startswith("torch.")):
        return ""  # a subclass's properties would run inside torch's extra_repr (it reads self.in_features)
    method = getattr(kind, "extra_repr", None)
    if not (getattr(method, "__module__", "") or "").startswith("torch."):
        return ""
    try:
        return str(method(module))
    except Exception:  # noqa: BLE001 - an odd subclass may break torch's own formatting
        return ""


def _squeeze(v: Any) -> str:
    if isinstance(v, tuple) and v and all(x == v[0] for x in v):
        return str(v[0])
    return str(v)


def describe_module(module: Any, *, max_ms: float | None = None) -> ModuleSummary:
    """Parameter counts, dtypes, devices, mode and hooks of a module and its whole subtree.

    ``max_ms`` bounds the walk (the debugger passes its per-value budget); past it the summary
    covers the modules reached and says ``complete=False``.
    """
    deadline = None if max_ms is None else time.perf_counter() + max_ms / 1000
    training = bool(_own_attr(module, "training", True))
    seen: set[int] = set()
    params = trainable = param_tensors = param_bytes = buffers = buffer_bytes = 0
    lazy = mode_differs = descendants = hooks_in_tree = visited = 0
    kinds: dict[str, dict[str, None]] = {k: {} for k in ("_parameters", "_buffers", "lazy")}  # dtypes in this order
    places: dict[str, dict[str, None]] = {k: {} for k in kinds}
    complete = True
    for _, m in walk_modules(module):
        visited += 1
        if deadline is not None and visited % _CHECK_EVERY == 0 and time.perf_counter() > deadline:
            complete = False
        if not complete:
            break
        if m is not module:
            descendants += 1
            mode_differs += bool(_own_attr(m, "training", training)) != training
        hooks_in_tree += sum(n for _, n in hook_counts(m))
        for group in ("_parameters", "_buffers"):
            for t in _own(m, group).values():
                visited += 1
                if deadline is not None and visited % _CHECK_EVERY == 0 and time.perf_counter() > deadline:
                    complete = False
                    break
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                where = "lazy" if is_uninitialized(t) else group
                kinds[where][str(t.dtype)] = None
                places[where][str(t.device)] = None
                if where == "lazy":
                    lazy += 1
                    continue
                n = int(t.numel())
                if group == "_parameters":
                    params += n
                    trainable += n if t.requires_grad else 0
                    param_tensors += 1
                    param_bytes += n * t.element_size()
                else:
                    buffers += n
                    buffer_bytes += n * t.element_size()
            if not complete:
                break
    return ModuleSummary(
        kind=class_name(module), signature=signature(module), params=params, trainable=trainable,
        frozen=params - trainable, param_tensors=param_tensors, param_bytes=param_bytes, buffers=buffers,
        buffer_bytes=buffer_bytes, dtypes=_ordered(kinds), devices=_ordered(places), training=training,
        mode_differs=mode_differs, children=sum(1 for v in _own(module, "_modules").values() if v is not None),
        descendants=descendants, hooks=hook_counts(module), hooks_in_tree=hooks_in_tree, uninitialized=lazy,
        complete=complete,
    )


def _ordered(groups: dict[str, dict[str, None]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for names in groups.values() for name in names))


def _own_attr(obj: Any, name: str, default: Any) -> Any:
    """An attribute from the instance's own dict (no property of the user's runs); a TorchScript module keeps its
    attributes (``training``, ``in_features``) in its C++ module."""
    try:
        own = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return default
    if name not in own and is_script_module(obj):
        inner = own.get("_actual_script_module")  # a traced module: the scripted one it wraps
        if inner is not None and inner is not obj:
            return _own_attr(inner, name, default)
        try:
            return own["_c"].getattr(name) if own["_c"].hasattr(name) else default
        except Exception:  # noqa: BLE001 - no C++ module there: as a plain module
            return default
    return own.get(name, default)
