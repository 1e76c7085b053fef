"""The ordered children of a tensor, module, optimizer, scheduler, loader or grad scaler in the Variables panel.

Each child carries an ``evaluate_name``, so "Add to Watch" works on it; the expressions for
tensor_dap's own helpers go through names exported from ``tensor_dap`` itself, never a module path.
Long lists (a module's entries, a group's parameters) are paged (``nodes.paged``).
"""

from __future__ import annotations

import itertools
import keyword
import warnings
from typing import Any, Callable

from ..format import dtype_name, fmt_bytes, fmt_num, fmt_shape, plural
from ..summary import Budget, TensorSummary, describe, plain_view
from ..summary import modules as _modules
from ..summary import objects as _ms
from ..summary.held import sparse_members
from ..summary.tensor import no_torch_function
from ..summary.transformed import unwrapped
from .nodes import LAZY, Child, Info, Node, bound, clip, paged

PREVIEW_ELEMENTS = 256  # the most elements a "values" child ever reads

# tensor_dap's own helpers as expressions that evaluate in the user's frame (for "Add to Watch")
_DESCRIBE = "__import__('tensor_dap').describe({})"
_EXPORTED_FN = "__import__('tensor_dap').{}({})"

def children(obj: Any, kind: str, budget: Budget | None = None) -> list[Child]:
    """The ordered children of ``obj`` for its kind, their Watch expressions bound to the parent's as a whole."""
    return [(name, value, bound(evaluate_name)) for name, value, evaluate_name in _children(obj, kind, budget)]


def _children(obj: Any, kind: str, budget: Budget | None = None) -> list[Child]:
    max_ms = budget.max_ms if budget is not None else None
    if kind == "tensor" and _modules.is_uninitialized(obj):
        return uninitialized_children(obj)
    if kind == "tensor":
        with no_torch_function():
            return tensor_children(obj, describe(obj, budget=budget))
    if kind == "stats":
        return stats_children(obj)
    if kind == "node":
        return obj.children
    if kind == "module":
        return module_children(obj, _modules.describe_module(obj, max_ms=max_ms))
    if kind == "optimizer":
        return optimizer_children(obj, _ms.describe_optimizer(obj, max_ms=max_ms))
    if kind == "scheduler":
        return scheduler_children(obj, _ms.describe_scheduler(obj))
    if kind == "loader":
        return loader_children(obj, _ms.describe_loader(obj))
    if kind == "scaler":
        return scaler_children(_ms.describe_scaler(obj))
    return []


def tensor_children(x: Any, s: TensorSummary) -> list[Child]:
    """shape, dtype, device, stats, grad, autograd flags, layout, sizes and a bounded values preview."""
    out: list[Child] = [
        ("shape", Info(fmt_shape(s.shape)), _unbind_shapes if "nested" in s.notes else ".shape"),
        ("dtype", Info(s.dtype), ".dtype"),
        ("device", Info(s.device), ".device"),
        ("stats", s, _DESCRIBE.format),
    ]
    if s.is_leaf or _retains_grad(x):
        with warnings.catch_warnings():  # a non-leaf that retains grad is fine; never warn in the debugger
            warnings.simplefilter("ignore")
            out.append(("grad", x.grad, ".grad"))
    else:
        out.append(("grad", Info("None (non-leaf: call .retain_grad() before backward to keep it)"), None))
    out += [
        ("requires_grad", s.requires_grad, ".requires_grad"),
        ("is_leaf", s.is_leaf, ".is_leaf"),
        ("grad_fn", Info(s.grad_fn or "None"), ".grad_fn"),
        ("layout", Info(s.layout), ".layout"),
    ]
    if s.stride is not None:
        out.append(("stride", Info(str(s.stride)), ".stride()"))
        out.append(("is_contiguous", s.is_contiguous, ".is_contiguous()"))
    out.append(("numel", s.numel, ".numel()"))
    out.append(("nbytes", Info(f"{fmt_bytes(s.nbytes)} ({s.nbytes:,} bytes)"),
                ".nbytes" if s.layout == "strided" else None))
    if s.storage_bytes is not None:
        out.append(("storage", Info(f"{fmt_bytes(s.storage_bytes)} ({s.storage_bytes:,} bytes)"),
                    ".untyped_storage().nbytes()"))
    if s.nnz is not None:
        out.append(("nnz", s.nnz, "._nnz()"))
        out += _sparse_members(x)
    if s.notes:
        out.append(("notes", Info(", ".join(s.notes)), None))
    if s.error:
        out.append(("error", Info(s.error), None))
    if _previewable(s):
        data, transforms = unwrapped(x)  # inside vmap / grad: the values they wrap
        if any(t.startswith("vmap") for t in transforms):  # every sample's, the batch a dim of its own: no expression
            index = preview_index(tuple(data.shape))  # in the frame gives them (it evaluates to one sample's)
            out.append(("values", preview(data, index, prefix=f"{' '.join(transforms)}, every sample: "), None))
        else:
            index = preview_index(s.shape)
            out.append(("values", preview(data, index), _index_suffix(index, s.shape)))
    return out


def _sparse_members(x: Any) -> list[Child]:
    """A sparse tensor's stored values and indices, each a tensor to open (its own summary and values)."""
    try:
        return list(sparse_members(x))
    except Exception:  # noqa: BLE001 - a sparse subclass without them: the summary above stands
        return []


def uninitialized_children(x: Any) -> list[Child]:
    """A lazy parameter has no shape or data yet: only what it will be created as."""
    return [("dtype", Info(str(x.dtype)), ".dtype"), ("device", Info(str(x.device)), ".device"),
            ("requires_grad", bool(x.requires_grad), ".requires_grad"),
            ("notes", Info(f"uninitialized ({LAZY})"), None)]


def _unbind_shapes(parent: str) -> str:  # a strided nested tensor has no .shape
    return f"[t.shape for t in {parent}.unbind()]"


def _retains_grad(x: Any) -> bool:
    try:
        return bool(x.retains_grad)
    except Exception:  # noqa: BLE001 - a subclass may not have it
        return False


def _previewable(s: TensorSummary) -> bool:
    return (s.error is None and s.layout == "strided" and s.numel > 0 and s.shape is not None
            and None not in s.shape and not any(n in ("meta", "fake", "nested") for n in s.notes))


def preview_index(shape: tuple[int, ...], limit: int = PREVIEW_ELEMENTS) -> tuple[int, ...]:
    """How many leading entries of each dim the preview keeps: at most ``limit`` elements, balanced
    across dims (small dims are kept whole first, the rest share what is left)."""
    counts = [1] * len(shape)
    remaining = limit
    order = sorted(range(len(shape)), key=lambda d: shape[d])
    for i, d in enumerate(order):
        dims_left = len(order) - i
        share = max(1, int(remaining ** (1.0 / dims_left) + 1e-9))
        counts[d] = max(1, min(shape[d], share))
        remaining = max(1, remaining // counts[d])
    return tuple(counts)


def _index_suffix(index: tuple[int, ...], shape: tuple[int, ...]) -> str:
    if tuple(index) == tuple(shape):
        return ""  # the whole tensor: the parent's own expression
    return "[" + ", ".join(":" if n == full else f":{n}" for n, full in zip(index, shape)) + "]"


def preview(x: Any, index: tuple[int, ...], prefix: str = "") -> Any:
    """The leading ``index`` block of ``x`` as a display node, its label after ``prefix``; reads only that block."""
    import torch

    with torch.no_grad():
        data = plain_view(x).detach()  # a subclass's overrides must not run
        block = data[tuple(slice(0, n) for n in index)] if index else data
        if block.is_quantized:
            block = block.dequantize()
        block = block.cpu()  # the block only (one small transfer), converted where float64 always exists
        if block.is_complex():
            block = block.to(torch.complex128)
        elif block.dtype.is_floating_point:
            block = block.to(torch.float64)
        elif block.dtype != torch.bool:
            block = block.to(torch.int64)  # tolist() does not know every small or unsigned int type
        values = block.tolist()
    shown = "×".join(str(n) for n in index)
    whole = "×".join(str(n) for n in x.shape)
    label = f"first {shown} of {whole}: " if index and tuple(index) != tuple(x.shape) else ""
    return _values_node(values, prefix + label)


def _values_node(values: Any, label: str = "") -> Any:
    if not isinstance(values, list):
        return values
    kids: list[Child] = [(str(i), _values_node(v), f"[{i}]") for i, v in enumerate(values)]
    return Node(clip(label + _nested_text(values)), kids)


def _nested_text(values: Any) -> str:
    if isinstance(values, list):
        return "[" + ", ".join(_nested_text(v) for v in values) + "]"
    return fmt_num(values)


def stats_children(s: TensorSummary) -> list[Child]:
    """The numbers behind a stats line, each watchable on the summary (``describe(x).min``)."""
    out: list[Child] = []
    if s.has_stats:
        suffix = "" if s.stats_of == "values" else f" (of {s.stats_of})"
        finite = " (finite values)" if s.nonfinite else ""
        out += [
            ("min" + suffix, s.min, ".min"),
            ("max" + suffix, s.max, ".max"),
            ("mean" + suffix + finite, s.mean, ".mean"),
            ("std" + suffix + finite, s.std, ".std"),
        ]
        if s.nan is not None:
            estimated = "" if s.counts_exact else " (estimated)"
            out += [(f"NaN count{estimated}", s.nan, ".nan"), (f"+Inf count{estimated}", s.pos_inf, ".pos_inf"),
                    (f"-Inf count{estimated}", s.neg_inf, ".neg_inf")]
        out += [
            ("sampled", s.sampled, ".sampled"),
            ("elements used", s.stats_count, ".stats_count"),
            ("range exact", s.range_exact, ".range_exact"),
        ]
    if s.error:
        out.append(("error", Info(s.error), ".error"))
    return out


def _attr_suffix(owner: Any, name: str) -> str:
    """How to reach a submodule, parameter or buffer from its module's expression."""
    kind = type(owner).__name__
    if kind in _modules.LIST_LIKE and name.isdigit():
        return f"[{name}]"
    if name.isidentifier() and not _is_keyword(name):
        return "." + name
    return f"[{name!r}]" if kind in _modules.DICT_LIKE else f".__getattr__({name!r})"


def _is_keyword(name: str) -> bool:
    return keyword.iskeyword(name)


def _module_fn(fn: str) -> Callable[[str], str]:
    return lambda parent: _EXPORTED_FN.format(fn, parent)


def _after(prefix: Callable[[str], str], suffix: str) -> Callable[[str], str]:
    return lambda parent: prefix(parent) + suffix


def module_children(m: Any, ms: _modules.ModuleSummary) -> list[Child]:
    """Submodules by name, then its own parameters and buffers, then counts, dtypes, devices, mode, hooks."""
    def entries(start: int, stop: int) -> list[Child]:
        return [(name, value, _attr_suffix(m, name))
                for name, value, _ in itertools.islice(_modules.entries(m), start, stop)]

    out: list[Child] = paged(_modules.entry_count(m), entries)
    summary = _module_fn("describe_module")
    params = f"{ms.params:,}" + ("" if ms.complete else "+ (counted until the time limit; Watch it for all)")
    if ms.param_tensors:
        params += f" in {ms.param_tensors} tensors ({fmt_bytes(ms.param_bytes)}): {ms.trainable:,} trainable"
        params += f", {ms.frozen:,} frozen"
    if ms.uninitialized:
        lazy = f"{plural(ms.uninitialized, 'tensor')} uninitialized"
        params = (params + f"; {lazy}") if ms.param_tensors else f"{lazy} ({LAZY[6:]})"
    out.append(("params", Info(params), _after(summary, ".params")))
    if ms.buffers:
        out.append(("buffers", Info(f"{ms.buffers:,} ({fmt_bytes(ms.buffer_bytes)})"), _after(summary, ".buffers")))
    out.append(("dtypes", Info(", ".join(dtype_name(d) for d in ms.dtypes) or "none"),
                _after(summary, ".dtypes")))
    out.append(("devices", Info(", ".join(ms.devices) or "none"), _after(summary, ".devices")))
    out.append(("mode", Info(ms.mode), ".training"))
    hooks = ", ".join(f"{n} {kind}" for kind, n in ms.hooks) or "none"
    if ms.hooks_in_tree > sum(n for _, n in ms.hooks):
        hooks += f" ({ms.hooks_in_tree} in the whole subtree)"
    out.append(("hooks", Info(hooks), _after(summary, ".hooks")))
    return out


def _scalar_or_list(values: tuple[Any, ...]) -> Any:
    return values[0] if len(values) == 1 else Info("[" + ", ".join(
        fmt_num(v) if isinstance(v, (int, float)) else str(v) for v in values) + "]")


def optimizer_children(opt: Any, s: _ms.OptimizerSummary) -> list[Child]:
    """Learning rate(s), the param groups with their settings, the state size and step."""
    summary = _module_fn("describe_optimizer")
    out: list[Child] = [
        ("class", Info(s.kind), lambda parent: f"type({parent}).__name__"),
        ("lr", _scalar_or_list(s.lrs), ".param_groups[0]['lr']" if len(s.lrs) == 1 else _after(summary, ".lrs")),
    ]
    groups: list[Child] = []
    for g in s.groups:
        kids: list[Child] = [(k, v, f"[{k!r}]") for k, v in g.hyper]
        kids.append(("params", _params_node(opt.param_groups[g.index]["params"]), "['params']"))
        text = f"lr={fmt_num(g.lr)} {g.param_tensors} tensors ({g.params:,} params)"
        groups.append((str(g.index), Node(text, kids), f"[{g.index}]"))
    out.append(("param_groups", Node(plural(len(s.groups), 'group'), groups),
                ".param_groups"))
    state = (f"{s.state_entries} params with state, {s.state_tensors} tensors ({fmt_bytes(s.state_bytes)})"
             if s.state_entries else "empty (no step taken yet)")
    out.append(("state", Info(state), _after(summary, ".state_bytes")))
    if s.step is not None:
        out.append(("step", s.step, _after(summary, ".step")))
    out.append(("defaults", getattr(opt, "defaults", None), ".defaults"))
    return out


def _params_node(params: Any) -> Any:
    """A group's parameter list: pydevd's own list view when short, paged when long."""
    if not isinstance(params, list) or len(params) <= 100:
        return params

    def entries(start: int, stop: int) -> list[Child]:
        return [(str(i), params[i], f"[{i}]") for i in range(start, stop)]

    return Node(f"list of {len(params):,} parameters", lambda: paged(len(params), entries))


def scaler_children(s: _ms.ScalerSummary) -> list[Child]:
    """The scale and its growth/backoff settings, each watchable on the scaler's own attributes."""
    if not s.enabled:
        return [("enabled", False, ".is_enabled()")]
    return [
        ("scale", s.scale if s.scale is not None else Info(f"{fmt_num(s.init_scale)} (initial: not used yet)"),
         ".get_scale()"),
        ("enabled", s.enabled, ".is_enabled()"),
        ("growth_factor", s.growth_factor, ".get_growth_factor()"),
        ("backoff_factor", s.backoff_factor, ".get_backoff_factor()"),
        ("growth_interval", s.growth_interval, ".get_growth_interval()"),
        ("steps since growth", s.since_growth, "._growth_tracker"),
    ]


def scheduler_children(sched: Any, s: _ms.SchedulerSummary) -> list[Child]:
    """Current lr and step, the base lrs and the optimizer it drives."""
    out: list[Child] = [
        ("lr", _scalar_or_list(s.lrs), ".get_last_lr()" + ("[0]" if len(s.lrs) == 1 else "")),
        ("step", s.step, ".last_epoch"),
    ]
    if s.base_lrs:
        out.append(("base_lrs", _scalar_or_list(s.base_lrs), ".base_lrs" + ("[0]" if len(s.base_lrs) == 1 else "")))
    out += [(k, v, "." + k) for k, v in s.extra]
    out.append(("optimizer", getattr(sched, "optimizer", None), ".optimizer"))
    return out


def loader_children(loader: Any, s: _ms.LoaderSummary) -> list[Child]:
    """Batch size, workers, pinning, dataset and its length."""
    sampler = type(getattr(loader, "sampler", None)).__name__
    out: list[Child] = [
        ("batch_size", s.batch_size, ".batch_size"),
        ("num_workers", s.num_workers, ".num_workers"),
        ("pin_memory", s.pin_memory, ".pin_memory"),
        ("drop_last", s.drop_last, ".drop_last"),
        ("sampler", Info(sampler + (" (shuffle)" if s.shuffle else "")), ".sampler"),
        ("dataset", getattr(loader, "dataset", None), ".dataset"),
        ("dataset_len", s.dataset_len if s.dataset_len is not None else Info("unknown (no __len__)"),
         (lambda parent: f"len({parent}.dataset)") if s.dataset_len is not None else None),
    ]
    if s.batches is not None:
        out.append(("batches", s.batches, lambda parent: f"len({parent})"))
    return out
