"""Pure data about the objects around the tensors: optimizers, LR schedulers, data loaders (modules: ``modules``).

Views (the DAP children in VS Code, pdb tables) render these summaries. Reading them never
touches tensor data: only shapes, dtypes, devices and counts.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..format import fmt_bytes, fmt_num, plural
from ..kinds import torch_attr
from .datasets import describe_dataset, sized, try_len
from .held import held_bytes
from .modules import describe_module

def _ordered(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


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
    complete: bool = True  # False: the time limit cut the count; sizes cover what was reached

    @property
    def lrs(self) -> tuple[float | None, ...]:
        return tuple(g.lr for g in self.groups)

    def __str__(self) -> str:
        """``AdamW lr=0.001 1 group 200,960 params state 1.5 MiB step=10``."""
        lrs = _ordered(fmt_num(lr) for lr in self.lrs)
        parts = [self.kind, "lr=" + ",".join(lrs) if lrs else "lr=?"]
        n = len(self.groups)
        parts.append(plural(n, 'group'))
        more = "" if self.complete else "+"
        parts.append(f"{self.params:,}{more} params")
        parts.append(f"state {fmt_bytes(self.state_bytes)}{more}" if self.state_entries else "no state")
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


def describe_optimizer(opt: Any, *, max_ms: float | None = None) -> OptimizerSummary:
    """Learning rates, groups and the size of the optimizer's state (no tensor data is read).

    ``max_ms`` bounds the walk over parameters and state; past it the sizes cover what was reached.
    """
    clock = _Clock(max_ms)
    groups = []
    seen: set[int] = set()
    params = 0
    for i, group in enumerate(opt.param_groups):
        ps = group.get("params", ())
        ps = ps if isinstance(ps, (list, tuple)) else list(ps)
        hyper = tuple((k, _number(v)) for k, v in group.items() if k != "params")
        lr = _number(group.get("lr"))
        elements = 0
        for p in ps:
            if clock.expired():
                break
            n = int(p.numel())
            elements += n
            if id(p) not in seen:
                seen.add(id(p))
                params += n
        groups.append(GroupSummary(i, lr if isinstance(lr, (int, float)) else None, len(ps), elements, hyper))
    state_tensors = state_bytes = 0
    step = None
    for per_param in opt.state.values():
        if clock.expired():
            break
        if not isinstance(per_param, dict):
            continue
        for key, value in per_param.items():
            if hasattr(value, "numel") and hasattr(value, "element_size"):
                if key == "step" and step is None:
                    s = _number(value)
                    step = int(s) if isinstance(s, (int, float)) else None
                state_tensors += 1
                state_bytes += held_bytes(value)
            elif key == "step" and step is None and isinstance(value, (int, float)):
                step = int(value)
    return OptimizerSummary(
        kind=type(opt).__name__, groups=tuple(groups), param_tensors=len(seen), params=params,
        state_entries=len(opt.state), state_tensors=state_tensors, state_bytes=state_bytes, step=step,
        complete=not clock.cut,
    )


class _Clock:
    """A deadline looked at every few hundred items (the clock costs more than one item)."""

    def __init__(self, max_ms: float | None) -> None:
        self.at = None if max_ms is None else time.perf_counter() + max_ms / 1000
        self.items = 0
        self.cut = False

    def expired(self) -> bool:
        self.items += 1
        if self.at is not None and not self.cut and self.items % 256 == 0 and time.perf_counter() > self.at:
            self.cut = True
        return self.cut


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
        parts = [self.kind, f"batch_size={self.batch_size}", f"num_workers={self.num_workers}",
                 f"pin_memory={self.pin_memory}", f"dataset={sized(self.dataset_kind, self.dataset_len)}"]
        if self.batches is not None:
            parts.append(f"{self.batches:,} batches")
        if self.shuffle:
            parts.append("shuffle")
        if self.drop_last:
            parts.append("drop_last")
        return " ".join(parts)


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
        dataset_len=try_len(dataset),
        batches=try_len(loader, owner=dataset),  # a DataLoader's len is its dataset's (or sampler's)
    )



# ---------------------------------------------------------------------------- AMP grad scalers, generators


@dataclass(frozen=True)
class ScalerSummary:
    kind: str
    enabled: bool
    scale: float | None  # None before the first scale() (then it is ``init_scale``)
    init_scale: float | None
    growth_factor: float | None
    backoff_factor: float | None
    growth_interval: int | None
    since_growth: int | None  # unskipped steps since the scale last grew

    def __str__(self) -> str:
        """``GradScaler scale=6.554e4 growth ×2 every 2000 steps (17 since) backoff ×0.5``."""
        if not self.enabled:
            return f"{self.kind} disabled"
        scale = f"scale={fmt_num(self.scale)}" if self.scale is not None else \
            f"scale={fmt_num(self.init_scale)} (initial: not used yet)"
        parts = [self.kind, scale]
        if self.growth_factor is not None:
            growth = f"growth ×{fmt_num(self.growth_factor)} every {self.growth_interval} steps"
            if self.since_growth is not None:
                growth += f" ({self.since_growth} since)"
            parts.append(growth)
        if self.backoff_factor is not None:
            parts.append(f"backoff ×{fmt_num(self.backoff_factor)}")
        return " ".join(parts)


def describe_scaler(scaler: Any) -> ScalerSummary:
    """The loss scale of a ``torch.amp.GradScaler`` and how it grows and backs off (one scalar read)."""
    own = getattr(scaler, "__dict__", {})

    def number(name: str) -> Any:
        value = own.get(name)
        if value is not None and hasattr(value, "item"):
            value = value.item() if value.numel() == 1 else None  # one scalar: the program is paused anyway
        return value

    return ScalerSummary(
        kind=type(scaler).__name__, enabled=bool(own.get("_enabled", False)), scale=number("_scale"),
        init_scale=number("_init_scale"), growth_factor=number("_growth_factor"),
        backoff_factor=number("_backoff_factor"), growth_interval=number("_growth_interval"),
        since_growth=number("_growth_tracker"),
    )


@dataclass(frozen=True)
class GeneratorSummary:
    device: str
    seed: int | None

    def __str__(self) -> str:
        return f"Generator {self.device} seed={self.seed}"


def describe_generator(gen: Any) -> GeneratorSummary:
    """A ``torch.Generator``: its device and the seed it started from."""
    try:
        seed = int(gen.initial_seed())
    except Exception:  # noqa: BLE001 - an odd generator subclass
        seed = None
    return GeneratorSummary(str(getattr(gen, "device", "?")), seed)


# ---------------------------------------------------------------------------- which summary for which object

# kind -> the torch classes it covers (dotted paths, found in sys.modules: nothing here imports torch)
KIND_CLASSES = {
    "module": ("torch.nn.Module",),
    "optimizer": ("torch.optim.Optimizer",),
    "scheduler": ("torch.optim.lr_scheduler.LRScheduler", "torch.optim.lr_scheduler._LRScheduler",
                  "torch.optim.lr_scheduler.ReduceLROnPlateau"),
    "loader": ("torch.utils.data.DataLoader",),
    "dataset": ("torch.utils.data.Dataset",),
    "scaler": ("torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler"),
    "generator": ("torch.Generator",),
}


def classes_of(kind: str) -> tuple[type, ...]:
    return tuple(c for c in (torch_attr(p) for p in KIND_CLASSES[kind]) if isinstance(c, type))


def object_kind(type_object: type) -> str | None:
    """Which summary describes values of this type, or None."""
    for kind in KIND_CLASSES:
        classes = classes_of(kind)
        if classes and issubclass(type_object, classes):
            # a dataset with a repr of its own (its root, its split) says more than its length: left to it
            return None if kind == "dataset" and type_object.__repr__ is not object.__repr__ else kind
    return None


def describe_object(obj: Any, kind: str | None = None, *, max_ms: float | None = None) -> Any:
    """The summary of a module, optimizer, scheduler, loader, dataset, grad scaler or generator; None for anything
    else.

    ``max_ms`` bounds the walk of a module's or an optimizer's tensors (the debugger's per-value budget).
    """
    kind = kind or object_kind(type(obj))
    if kind == "module":
        return describe_module(obj, max_ms=max_ms)
    if kind == "optimizer":
        return describe_optimizer(obj, max_ms=max_ms)
    describe = {"scheduler": describe_scheduler, "loader": describe_loader, "scaler": describe_scaler,
                "generator": describe_generator, "dataset": describe_dataset}.get(kind or "")
    return describe(obj) if describe is not None else None
