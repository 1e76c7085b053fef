"""Pure data about the objects around the tensors: modules, optimizers, LR schedulers, data loaders.

Views (the DAP children in VS Code, pdb tables) render these summaries; none of them walks a
model itself. Reading them never touches tensor data: only shapes, dtypes, devices and counts,
so a 50-module model summarizes in well under a millisecond per module.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..format import dtype_name, fmt_bytes, fmt_num

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

    @property
    def mode(self) -> str:
        """'train', 'eval', or 'train (2 in eval)' when submodules disagree."""
        mode = "train" if self.training else "eval"
        if self.mode_differs:
            mode += f" ({self.mode_differs} in {'eval' if self.training else 'train'})"
        return mode

    def __str__(self) -> str:
        """``Linear(784→256) 200,960 params f32 cpu train``."""
        parts = [self.signature]
        if self.uninitialized and not self.param_tensors:
            parts.append("params uninitialized (lazy)")
        elif self.param_tensors:
            parts.append(f"{self.params:,} params")
            if self.frozen:
                parts.append(f"({self.frozen:,} frozen)" if self.trainable else "(all frozen)")
            if self.uninitialized:
                parts.append(f"(+{self.uninitialized} uninitialized)")
        else:
            parts.append("no params")
        if self.dtypes:
            parts.append("+".join(dtype_name(d) for d in self.dtypes))
        if self.devices:
            parts.append("+".join(self.devices))
        parts.append(self.mode)
        if self.hooks_in_tree:
            parts.append(f"{self.hooks_in_tree} hook{'s' if self.hooks_in_tree != 1 else ''}")
        return " ".join(parts)


def _unique_tensors(tensors: Iterable[Any]) -> list[Any]:
    seen, out = set(), []
    for t in tensors:
        if t is not None and id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def is_uninitialized(t: Any) -> bool:
    """A lazy module's parameter or buffer before its first forward: it has no shape or data yet."""
    parameter = sys.modules.get("torch.nn.parameter")
    mixin = getattr(parameter, "UninitializedTensorMixin", None)
    return isinstance(mixin, type) and isinstance(t, mixin)


def _nbytes(t: Any) -> int:
    return int(t.numel()) * int(t.element_size())


def _ordered(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def hook_counts(module: Any) -> tuple[tuple[str, int], ...]:
    """(kind, count) of the hooks registered on this one module."""
    counts = []
    for kind, attr in _HOOK_KINDS:
        n = len(getattr(module, attr, None) or ())
        if n:
            counts.append((kind, n))
    return tuple(counts)


def signature(module: Any) -> str:
    """A short constructor-like name: what a reader needs to recognise the layer."""
    kind = type(module).__name__

    def get(name: str) -> Any:
        return getattr(module, name, None)

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
    if hasattr(module, "__len__") and kind in ("Sequential", "ModuleList", "ModuleDict", "ParameterList",
                                               "ParameterDict"):
        return f"{kind}({len(module)})"
    try:
        extra = module.extra_repr()
    except Exception:  # noqa: BLE001 - user code (extra_repr, __len__) may raise anything
        extra = ""
    if extra and len(extra) <= _EXTRA_REPR_MAX and "\n" not in extra:
        return f"{kind}({extra})"
    return kind


def _squeeze(v: Any) -> str:
    if isinstance(v, tuple) and v and all(x == v[0] for x in v):
        return str(v[0])
    return str(v)


def describe_module(module: Any) -> ModuleSummary:
    """Parameter counts, dtypes, devices, mode and hooks of a module and its whole subtree."""
    params = _unique_tensors(module.parameters())
    buffers = _unique_tensors(module.buffers())
    lazy = [t for t in params + buffers if is_uninitialized(t)]
    params = [p for p in params if not is_uninitialized(p)]
    buffers = [b for b in buffers if not is_uninitialized(b)]
    trainable = sum(int(p.numel()) for p in params if p.requires_grad)
    total = sum(int(p.numel()) for p in params)
    descendants = [m for name, m in module.named_modules() if m is not module]
    return ModuleSummary(
        kind=type(module).__name__,
        signature=signature(module),
        params=total,
        trainable=trainable,
        frozen=total - trainable,
        param_tensors=len(params),
        param_bytes=sum(_nbytes(p) for p in params),
        buffers=sum(int(b.numel()) for b in buffers),
        buffer_bytes=sum(_nbytes(b) for b in buffers),
        dtypes=_ordered(str(t.dtype) for t in params + buffers + lazy),
        devices=_ordered(str(t.device) for t in params + buffers + lazy),
        training=bool(module.training),
        mode_differs=sum(1 for m in descendants if bool(m.training) != bool(module.training)),
        children=sum(1 for _ in module.children()),
        descendants=len(descendants),
        hooks=hook_counts(module),
        hooks_in_tree=sum(n for m in [module] + descendants for _, n in hook_counts(m)),
        uninitialized=len(lazy),
    )


# ---------------------------------------------------------------------------- optimizers


@dataclass(frozen=True)
class GroupSummary:
    index: int
    lr: float | None
    param_tensors: int
    params: int  # elements
    hyper: tuple[tuple[str, Any], ...]  # every setting but "params", in the group's own order


@dataclass(frozen=True)
class OptimizerSummary:
    kind: str
    groups: tuple[GroupSummary, ...]
    param_tensors: int
    params: int
    state_entries: int  # parameters with optimizer state
    state_tensors: int
    state_bytes: int
    step: int | None  # from the first parameter's "step" state, when the optimizer keeps one

    @property
    def lrs(self) -> tuple[float | None, ...]:
        return tuple(g.lr for g in self.groups)

    def __str__(self) -> str:
        """``AdamW lr=0.001 1 group 200,960 params state 1.5 MiB step=10``."""
        lrs = _ordered(fmt_num(lr) for lr in self.lrs)
        parts = [self.kind, "lr=" + ",".join(lrs) if lrs else "lr=?"]
        n = len(self.groups)
        parts.append(f"{n} group{'s' if n != 1 else ''}")
        parts.append(f"{self.params:,} params")
        parts.append(f"state {fmt_bytes(self.state_bytes)}" if self.state_entries else "no state")
        if self.step is not None:
            parts.append(f"step={self.step}")
        return " ".join(parts)


def _number(v: Any) -> Any:
    """A 0-dim tensor (lr or step kept as a tensor) as a Python number; anything else unchanged."""
    item = getattr(v, "item", None)
    if item is not None and getattr(v, "ndim", None) == 0 and getattr(v, "device", None) is not None:
        if getattr(v.device, "type", "cpu") in ("cpu",):
            return item()
        return f"tensor on {v.device}"  # reading it would synchronize the device
    return v


def describe_optimizer(opt: Any) -> OptimizerSummary:
    """Learning rates, groups and the size of the optimizer's state (no tensor data is read)."""
    groups = []
    all_params: list[Any] = []
    for i, group in enumerate(opt.param_groups):
        ps = list(group.get("params", ()))
        all_params.extend(ps)
        hyper = tuple((k, _number(v)) for k, v in group.items() if k != "params")
        lr = _number(group.get("lr"))
        groups.append(GroupSummary(i, lr if isinstance(lr, (int, float)) else None, len(ps),
                                   sum(int(p.numel()) for p in ps), hyper))
    unique = _unique_tensors(all_params)
    state_tensors = state_bytes = 0
    step = None
    for per_param in opt.state.values():
        if not isinstance(per_param, dict):
            continue
        for key, value in per_param.items():
            if hasattr(value, "numel") and hasattr(value, "element_size"):
                if key == "step" and step is None:
                    s = _number(value)
                    step = int(s) if isinstance(s, (int, float)) else None
                state_tensors += 1
                state_bytes += _nbytes(value)
            elif key == "step" and step is None and isinstance(value, (int, float)):
                step = int(value)
    return OptimizerSummary(
        kind=type(opt).__name__,
        groups=tuple(groups),
        param_tensors=len(unique),
        params=sum(int(p.numel()) for p in unique),
        state_entries=len(opt.state),
        state_tensors=state_tensors,
        state_bytes=state_bytes,
        step=step,
    )


# ---------------------------------------------------------------------------- LR schedulers


@dataclass(frozen=True)
class SchedulerSummary:
    kind: str
    lrs: tuple[Any, ...]  # the last computed learning rate of every group
    step: int | None  # last_epoch: how many times step() ran
    base_lrs: tuple[Any, ...]
    extra: tuple[tuple[str, Any], ...]  # scheduler-specific state worth seeing (ReduceLROnPlateau)

    def __str__(self) -> str:
        """``CosineAnnealingLR lr=0.0009755 step=3``."""
        lrs = _ordered(fmt_num(v) if isinstance(v, (int, float)) else str(v) for v in self.lrs)
        parts = [self.kind, "lr=" + ",".join(lrs) if lrs else "lr=?"]
        if self.step is not None:
            parts.append(f"step={self.step}")
        parts.extend(f"{k}={fmt_num(v) if isinstance(v, float) else v}" for k, v in self.extra)
        return " ".join(parts)


def describe_scheduler(sched: Any) -> SchedulerSummary:
    """Current learning rate(s) and step of an LR scheduler."""
    last = getattr(sched, "_last_lr", None)
    if last is None:
        try:
            last = sched.get_last_lr()
        except Exception:  # noqa: BLE001 - custom schedulers may not implement it
            last = None
    if last is None:
        opt = getattr(sched, "optimizer", None)
        last = [g.get("lr") for g in getattr(opt, "param_groups", ())]
    lrs = tuple(_number(v) for v in last)
    step = getattr(sched, "last_epoch", None)
    extra = []
    for key in ("best", "num_bad_epochs", "patience", "cooldown_counter"):
        if type(sched).__name__ == "ReduceLROnPlateau" and hasattr(sched, key):
            extra.append((key, _number(getattr(sched, key))))
    return SchedulerSummary(
        kind=type(sched).__name__,
        lrs=lrs,
        step=int(step) if isinstance(step, int) else None,
        base_lrs=tuple(_number(v) for v in getattr(sched, "base_lrs", ()) or ()),
        extra=tuple(extra),
    )


# ---------------------------------------------------------------------------- data loaders


@dataclass(frozen=True)
class LoaderSummary:
    kind: str
    batch_size: int | None
    num_workers: int
    pin_memory: bool
    drop_last: bool
    shuffle: bool | None  # None for a custom sampler
    dataset_kind: str
    dataset_len: int | None  # None for an iterable dataset without __len__
    batches: int | None

    def __str__(self) -> str:
        """``DataLoader batch_size=32 num_workers=0 pin_memory=False dataset=TensorDataset(1,000) 32 batches``."""
        size = f"({self.dataset_len:,})" if self.dataset_len is not None else "(len ?)"
        parts = [self.kind, f"batch_size={self.batch_size}", f"num_workers={self.num_workers}",
                 f"pin_memory={self.pin_memory}", f"dataset={self.dataset_kind}{size}"]
        if self.batches is not None:
            parts.append(f"{self.batches:,} batches")
        if self.shuffle:
            parts.append("shuffle")
        if self.drop_last:
            parts.append("drop_last")
        return " ".join(parts)


def _try_len(obj: Any) -> int | None:
    try:
        return len(obj)
    except Exception:  # noqa: BLE001 - user code (extra_repr, __len__) may raise anything
        return None


def describe_loader(loader: Any) -> LoaderSummary:
    """Batch size, workers, pinning and dataset length of a DataLoader."""
    dataset = getattr(loader, "dataset", None)
    sampler = type(getattr(loader, "sampler", None)).__name__
    shuffle = {"RandomSampler": True, "SequentialSampler": False}.get(sampler)
    return LoaderSummary(
        kind=type(loader).__name__,
        batch_size=getattr(loader, "batch_size", None),
        num_workers=int(getattr(loader, "num_workers", 0) or 0),
        pin_memory=bool(getattr(loader, "pin_memory", False)),
        drop_last=bool(getattr(loader, "drop_last", False)),
        shuffle=shuffle,
        dataset_kind=type(dataset).__name__,
        dataset_len=_try_len(dataset),
        batches=_try_len(loader),
    )

