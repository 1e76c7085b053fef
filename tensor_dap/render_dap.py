"""The Debug Adapter Protocol view: value lines and ordered children for VS Code's Variables panel.

A renderer over summaries (``describe`` for tensors, ``module_summary`` for modules, optimizers,
schedulers and loaders): it arranges what they computed and never computes statistics itself.
Children are ``(name, value, evaluate_name)`` triples in display order, exactly what pydevd's
``get_contents_debug_adapter_protocol`` returns: ``evaluate_name`` is a suffix appended to the
parent's expression (".shape"), a function of the parent's expression, or None.

Nothing here imports torch at import time: the debugpy plugin imports this module only once
torch is loaded, and finds torch's classes in ``sys.modules``.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import dataclasses
import itertools
import os
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any, Callable, Union

from . import module_summary as _ms
from . import summary as _summary
from .budget import DEFAULT_BUDGET, Budget
from .render_text import dtype_name, fmt_bytes, fmt_count, fmt_num, fmt_shape, one_line, short_dtype, stats_text
from .summary import TensorSummary, short_error

EvalName = Union[str, Callable[[str], str], None]
Child = tuple[str, Any, EvalName]

PREVIEW_ELEMENTS = 256  # the most elements a "values" child ever reads
_TEXT_MAX = 240  # longest preview / batch line shown in the panel
_BATCH_ITEMS = 8  # elements of a dict/list batch named in its one-line value

# tensor_dap's own helpers as expressions that evaluate in the user's frame (for "Add to Watch")
_LAZY = "lazy: materialized by the first forward"
_DESCRIBE = "__import__('tensor_dap').describe({})"
_MODULE_FN = "__import__('tensor_dap.module_summary', fromlist=['_']).{}({})"


class Info(str):
    """A leaf shown as plain text: a str subclass, so pydevd shows it without quotes or children."""

    __slots__ = ()


class Node:
    """An expandable display-only node: a value line and its own children."""

    __slots__ = ("children", "text")

    def __init__(self, text: str, children: list[Child]) -> None:
        self.text = text
        self.children = children

    def __repr__(self) -> str:
        return self.text


# ---------------------------------------------------------------------------- what we render


def _torch_attr(path: str) -> Any:
    """A torch class by dotted path, only if torch (and that submodule) is already imported."""
    module_name, _, attr = path.rpartition(".")
    module = sys.modules.get(module_name)
    return getattr(module, attr, None) if module is not None else None


# kind -> the torch classes it renders, checked in this order
_KIND_CLASSES = {
    "tensor": ("torch.Tensor",),
    "module": ("torch.nn.Module",),
    "optimizer": ("torch.optim.Optimizer",),
    "scheduler": ("torch.optim.lr_scheduler.LRScheduler", "torch.optim.lr_scheduler._LRScheduler",
                  "torch.optim.lr_scheduler.ReduceLROnPlateau"),
    "loader": ("torch.utils.data.DataLoader",),
}


def _torch_classes(kind: str) -> tuple[type, ...]:
    return tuple(c for c in (_torch_attr(p) for p in _KIND_CLASSES[kind]) if isinstance(c, type))


def kind_of(type_object: type) -> str | None:
    """Which view renders values of this type: a kind name, or None for pydevd's default."""
    if not isinstance(type_object, type):
        return None
    if issubclass(type_object, Info):
        return "info"
    if issubclass(type_object, (Node, TensorSummary)):
        return "node" if issubclass(type_object, Node) else "stats"
    for kind in _KIND_CLASSES:
        classes = _torch_classes(kind)
        if classes and issubclass(type_object, classes):
            return kind
    if type_object in (list, tuple) or issubclass(type_object, dict) or _field_names(type_object) is not None:
        return "batch"
    return None


def expandable(kind: str | None) -> bool:
    """Kinds whose children this view provides (leaves and batches keep pydevd's own handling)."""
    return kind is not None and kind not in ("info", "batch")


def _field_names(type_object: type) -> tuple[str, ...] | None:
    """A namedtuple's fields, or a structseq's (``torch.return_types.max``: values, indices); else None."""
    if not issubclass(type_object, tuple):
        return None
    fields = getattr(type_object, "_fields", None)
    if fields is None and hasattr(type_object, "n_sequence_fields"):
        fields = getattr(type_object, "__match_args__", None)  # structseq field names (Python 3.10+)
    return tuple(fields) if isinstance(fields, tuple) else None


# ---------------------------------------------------------------------------- time budget


class Pacer:
    """Keeps one burst of renders (a Variables request) inside a total time budget.

    Each value gets ``per_value``; once renders in the last ``window_s`` seconds have used
    ``burst_ms``, the rest of the burst gets the ``thrifty`` budget (a small sample that says so),
    so a frame full of huge tensors still answers quickly.
    """

    def __init__(self, per_value: Budget, thrifty: Budget, burst_ms: float = 250.0, window_s: float = 1.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.per_value = per_value
        self.thrifty = thrifty
        self.burst_ms = burst_ms
        self.window_s = window_s
        self._clock = clock
        self._spent: collections.deque[tuple[float, float]] = collections.deque()  # (end time, seconds)

    def _recent_ms(self) -> float:
        now = self._clock()
        while self._spent and now - self._spent[0][0] > self.window_s:
            self._spent.popleft()
        return 1000 * sum(s for _, s in self._spent)

    def budget(self) -> Budget:
        return self.thrifty if self._recent_ms() >= self.burst_ms else self.per_value

    def spend(self, seconds: float) -> None:
        self._spent.append((self._clock(), seconds))

    @contextlib.contextmanager
    def paced(self) -> Iterator[Budget]:
        """One render: its budget, computed on the calling thread only, and charged to the burst."""
        start = self._clock()
        try:
            with single_threaded():
                yield self.budget()
        finally:
            self.spend(self._clock() - start)


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Run torch ops on the calling thread alone, then restore the thread count.

    Summaries are memory-bound, so intra-op threads buy little, and on a busy machine (DataLoader
    workers keep running while the program sits at a breakpoint) one descheduled worker stalls every
    parallel op for a scheduler slice: tens of ms per op. Costs well under a microsecond.
    """
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else 1
    if threads <= 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def debugger_pacer() -> Pacer:
    """The debugger's pacing: 20 ms per value (unless TENSOR_DAP_MAX_MS says otherwise), 250 ms a burst."""
    base = DEFAULT_BUDGET
    if not os.environ.get("TENSOR_DAP_MAX_MS"):
        base = dataclasses.replace(base, max_ms=20.0)
    thrifty = Budget(exact_elements=2**16, scan_elements=2**16, chunk_elements=2**16, max_ms=2.0)
    return Pacer(base, thrifty)


# ---------------------------------------------------------------------------- value lines


def value_text(obj: Any, kind: str, context: str | None = None, budget: Budget | None = None) -> str | None:
    """The value VS Code shows for ``obj``; None hands it back to pydevd (a batch without tensors).

    ``context`` is DAP's: "clipboard" (Copy Value) gets the full ``repr``, the Debug Console
    ("repl") the summary line followed by the ``repr``; the panel, hover and Watch get the summary.
    """
    if kind == "info":
        return str.__str__(obj)
    if kind == "node":
        return obj.text
    if kind == "stats":
        return stats_line(obj)
    if kind == "batch":  # Copy Value and the console keep pydevd's full container repr
        return None if context in ("clipboard", "repl") else batch_line(obj)
    if context == "clipboard":
        return repr(obj)
    line = summary_line(obj, kind, budget)
    return f"{line}\n{obj!r}" if context == "repl" else line


def summary_line(obj: Any, kind: str, budget: Budget | None = None) -> str:
    if kind == "tensor" and _ms.is_uninitialized(obj):
        return f"{tensor_head(obj).replace('[?]', '')} ({_LAZY})"
    if kind == "tensor":
        return one_line(_summary.describe(obj, budget=budget))
    return str(_object_summary(obj, kind))


def _object_summary(obj: Any, kind: str) -> Any:
    describe = {"module": _ms.describe_module, "optimizer": _ms.describe_optimizer,
                "scheduler": _ms.describe_scheduler, "loader": _ms.describe_loader}[kind]
    return describe(obj)


def stats_line(s: TensorSummary) -> str:
    """The value of a tensor's ``stats`` child: the numbers, and whether they are exact."""
    if s.error:
        return f"<{s.error}>"
    if not s.has_stats:
        why = next((n for n in s.notes if n in ("meta", "fake")), "empty" if s.numel == 0 else "")
        return f"no values ({why})" if why else "no values"
    tokens = stats_text(s)
    if s.dtype != "torch.bool" and (s.nan is not None or s.nonfinite):
        tokens.append(f"NaN={fmt_count(s.nan, s.has_nan)}")
        tokens.append(f"+Inf={fmt_count(s.pos_inf, s.has_pos_inf)}")
        tokens.append(f"-Inf={fmt_count(s.neg_inf, s.has_neg_inf)}")
    if s.stats_of != "values":
        tokens.append(f"(of {s.stats_of})")
    if s.sampled:
        tokens.append(f"sampled {s.stats_count:,} of {s.numel:,}")
        tokens.append("range exact" if s.range_exact else "range sampled")
    else:
        tokens.append("exact")
    return " ".join(t for t in tokens if t)


def tensor_head(x: Any) -> str:
    """``kind[shape] dtype device`` read from metadata alone (no data): for batch lines and fallbacks."""
    name = {"Tensor": "tensor"}.get(type(x).__name__, type(x).__name__)
    try:
        shape = fmt_shape(tuple(int(d) for d in x.shape))
    except Exception:  # noqa: BLE001 - metadata of a broken value may raise anything
        shape = "[?]"
    parts = [name + shape]
    try:
        dtype = short_dtype(str(x.dtype))
        device = str(x.device)
    except Exception:  # noqa: BLE001 - metadata of a broken value may raise anything
        dtype, device = "?", "?"
    if dtype:
        parts.append(dtype)
    if device not in ("cpu", "meta"):
        parts.append(device)
    return " ".join(parts)


def batch_line(batch: Any) -> str | None:
    """``{'input': tensor[32, 784], 'label': tensor[32] i64}``: a batch's tensors by their heads.

    None when none of the first items is a tensor, so every other container keeps pydevd's repr.
    """
    tensor_types = _torch_classes("tensor")
    if not tensor_types:
        return None
    fields = _field_names(type(batch))
    if isinstance(batch, dict):
        items = [(repr(k), v) for k, v in _first(batch.items())]
    elif fields is not None:
        items = [(f, v) for f, v in _first(zip(fields, batch))]
    else:
        items = [(None, v) for v in _first(batch)]
    if not any(isinstance(v, tensor_types) for _, v in items):
        return None

    def show(v: Any) -> str:
        if isinstance(v, tensor_types):
            return tensor_head(v)
        text = repr(v) if isinstance(v, (int, float, bool, str, type(None))) else type(v).__name__
        return text if len(text) <= 40 else text[:37] + "..."

    parts = [show(v) if k is None else f"{k}{'=' if fields is not None else ': '}{show(v)}"
             for k, v in items]
    if len(batch) > len(items):
        parts.append(f"… {len(batch) - len(items)} more")
    open_, close = ("{", "}") if isinstance(batch, dict) else ("[", "]") if isinstance(batch, list) else ("(", ")")
    prefix = "" if fields is None else _type_name(type(batch))
    return _clip(prefix + open_ + ", ".join(parts) + ("," if type(batch) is tuple and len(batch) == 1 else "")
                 + close)


def _type_name(type_object: type) -> str:
    """``torch.return_types.max`` as torch's own repr names it; a user's namedtuple by its name."""
    module = getattr(type_object, "__module__", "")
    return f"{module}.{type_object.__name__}" if module == "torch.return_types" else type_object.__name__


def _first(iterable: Any) -> list:
    return list(itertools.islice(iterable, _BATCH_ITEMS))


def _clip(text: str) -> str:
    return text if len(text) <= _TEXT_MAX else text[:_TEXT_MAX - 1] + "…"


def fallback_text(obj: Any, exc: BaseException) -> str:
    """What a value shows when its view failed: still names the value, and says why."""
    try:
        tensor_types = _torch_classes("tensor")
        head = tensor_head(obj) if tensor_types and isinstance(obj, tensor_types) else type(obj).__name__
    except Exception:  # noqa: BLE001 - metadata of a broken value may raise anything
        head = "?"
    return f"{head} (tensor_dap could not render this value: {short_error(exc)})"


def fallback_children(obj: Any, exc: BaseException) -> list[Child]:
    """Children of a value whose view failed: the error, then whatever metadata still reads."""
    children: list[Child] = [("error", Info(short_error(exc)), None)]
    for name in ("shape", "dtype", "device"):
        try:
            children.append((name, Info(str(getattr(obj, name))), _bound("." + name)))
        except Exception:  # noqa: BLE001, S110 - metadata of a broken value may raise anything
            pass
    return children


# ---------------------------------------------------------------------------- children


def children(obj: Any, kind: str, budget: Budget | None = None) -> list[Child]:
    """The ordered children of ``obj`` for its kind, their Watch expressions bound to the parent's as a whole."""
    return [(name, value, _bound(evaluate_name)) for name, value, evaluate_name in _children(obj, kind, budget)]


def _bound(evaluate_name: EvalName) -> EvalName:
    """pydevd appends a child's suffix to the parent's expression as text: `weight - weight.grad` +
    `.shape` would watch `weight.grad.shape`'s difference. Parenthesize a parent that is not one operand."""
    if evaluate_name is None or evaluate_name == "":
        return evaluate_name
    if callable(evaluate_name):
        return lambda parent: evaluate_name(_operand(parent))
    return lambda parent: _operand(parent) + evaluate_name


def _operand(expression: str) -> str:
    """``expression`` as one operand: names, attributes, subscripts and calls as they are, the rest in parentheses."""
    try:
        node = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        return f"({expression})"
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.List, ast.Dict)):
        return expression
    return f"({expression})"


def _children(obj: Any, kind: str, budget: Budget | None = None) -> list[Child]:
    if kind == "tensor" and _ms.is_uninitialized(obj):
        return uninitialized_children(obj)
    if kind == "tensor":
        return tensor_children(obj, _summary.describe(obj, budget=budget))
    if kind == "stats":
        return stats_children(obj)
    if kind == "node":
        return list(obj.children)
    if kind == "module":
        return module_children(obj, _ms.describe_module(obj))
    if kind == "optimizer":
        return optimizer_children(obj, _ms.describe_optimizer(obj))
    if kind == "scheduler":
        return scheduler_children(obj, _ms.describe_scheduler(obj))
    if kind == "loader":
        return loader_children(obj, _ms.describe_loader(obj))
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
    if s.notes:
        out.append(("notes", Info(", ".join(s.notes)), None))
    if s.error:
        out.append(("error", Info(s.error), None))
    if _previewable(s):
        index = preview_index(s.shape)
        out.append(("values", preview(x, index), _index_suffix(index, s.shape)))
    return out


def uninitialized_children(x: Any) -> list[Child]:
    """A lazy parameter has no shape or data yet: only what it will be created as."""
    return [("dtype", Info(str(x.dtype)), ".dtype"), ("device", Info(str(x.device)), ".device"),
            ("requires_grad", bool(x.requires_grad), ".requires_grad"),
            ("notes", Info(f"uninitialized ({_LAZY})"), None)]


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


def preview(x: Any, index: tuple[int, ...]) -> Any:
    """The leading ``index`` block of ``x`` as a display node; reads only that block (a view)."""
    import torch

    with torch.no_grad():
        data = _summary.plain_view(x).detach()  # a subclass's overrides must not run
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
    return _values_node(values, label)


def _values_node(values: Any, label: str = "") -> Any:
    if not isinstance(values, list):
        return values
    kids: list[Child] = [(str(i), _values_node(v), f"[{i}]") for i, v in enumerate(values)]
    return Node(_clip(label + _nested_text(values)), kids)


def _nested_text(values: Any) -> str:
    if isinstance(values, list):
        return "[" + ", ".join(_nested_text(v) for v in values) + "]"
    return fmt_num(values)


def stats_children(s: TensorSummary) -> list[Child]:
    """The numbers behind a stats line, each watchable on the summary (``describe(x).min``)."""
    out: list[Child] = []
    if s.has_stats:
        suffix = "" if s.stats_of == "values" else f" (of {s.stats_of})"
        out += [
            ("min" + suffix, s.min, ".min"),
            ("max" + suffix, s.max, ".max"),
            ("mean" + suffix, s.mean, ".mean"),
            ("std" + suffix, s.std, ".std"),
        ]
        if s.nan is not None:
            out += [("NaN count", s.nan, ".nan"), ("+Inf count", s.pos_inf, ".pos_inf"),
                    ("-Inf count", s.neg_inf, ".neg_inf")]
        out += [
            ("sampled", s.sampled, ".sampled"),
            ("elements used", s.stats_count, ".stats_count"),
            ("range exact", s.range_exact, ".range_exact"),
        ]
    if s.error:
        out.append(("error", Info(s.error), ".error"))
    return out


_LIST_LIKE = ("Sequential", "ModuleList", "ParameterList")
_DICT_LIKE = ("ModuleDict", "ParameterDict")


def _attr_suffix(owner: Any, name: str) -> str:
    """How to reach a submodule, parameter or buffer from its module's expression."""
    kind = type(owner).__name__
    if kind in _LIST_LIKE and name.isdigit():
        return f"[{name}]"
    if name.isidentifier() and not _is_keyword(name):
        return "." + name
    return f"[{name!r}]" if kind in _DICT_LIKE else f".__getattr__({name!r})"


def _is_keyword(name: str) -> bool:
    import keyword

    return keyword.iskeyword(name)


def _module_fn(fn: str) -> Callable[[str], str]:
    return lambda parent: _MODULE_FN.format(fn, parent)


def _after(prefix: Callable[[str], str], suffix: str) -> Callable[[str], str]:
    return lambda parent: prefix(parent) + suffix


def module_children(m: Any, ms: _ms.ModuleSummary) -> list[Child]:
    """Submodules by name, then its own parameters and buffers, then counts, dtypes, devices, mode, hooks."""
    out: list[Child] = []
    for group in ("_modules", "_parameters", "_buffers"):
        for name, value in (getattr(m, group, None) or {}).items():
            if value is not None:
                out.append((name, value, _attr_suffix(m, name)))
    summary = _module_fn("describe_module")
    params = f"{ms.params:,}"
    if ms.param_tensors:
        params += f" in {ms.param_tensors} tensors ({fmt_bytes(ms.param_bytes)}): {ms.trainable:,} trainable"
        params += f", {ms.frozen:,} frozen"
    if ms.uninitialized:
        lazy = f"{ms.uninitialized} tensor{'s' if ms.uninitialized != 1 else ''} uninitialized"
        params = (params + f"; {lazy}") if ms.param_tensors else f"{lazy} ({_LAZY[6:]})"
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
        kids.append(("params", opt.param_groups[g.index]["params"], "['params']"))
        text = f"lr={fmt_num(g.lr)} {g.param_tensors} tensors ({g.params:,} params)"
        groups.append((str(g.index), Node(text, kids), f"[{g.index}]"))
    out.append(("param_groups", Node(f"{len(s.groups)} group{'s' if len(s.groups) != 1 else ''}", groups),
                ".param_groups"))
    state = (f"{s.state_entries} params with state, {s.state_tensors} tensors ({fmt_bytes(s.state_bytes)})"
             if s.state_entries else "empty (no step taken yet)")
    out.append(("state", Info(state), _after(summary, ".state_bytes")))
    if s.step is not None:
        out.append(("step", s.step, _after(summary, ".step")))
    out.append(("defaults", getattr(opt, "defaults", None), ".defaults"))
    return out


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
