"""One probing forward pass that records the shape flow through every submodule: ``shapes``.

Looking must not change what is looked at: the pass runs under ``no_grad`` in eval mode,
and afterwards every submodule's train/eval flag, every buffer (BatchNorm running stats,
``num_batches_tracked``) and the RNG states are put back exactly as they were.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..format import dtype_name, fmt_shape, short_error
from ..kinds import class_name, is_packed_sequence, is_tensor
from ..nested import first_tensor
from ..state import preserved
from .paths import is_module_path


class ShapesUsageError(ValueError):
    """The ``shapes`` arguments could not be understood; the message says the expected form."""


def split_args(arg: str) -> tuple[str, str]:
    """'model x' / 'model, x' / 'model torch.randn(2, 3)' -> (module expression, input expression)."""
    text = arg.strip()
    usage = "usage: shapes MODULE INPUT   (e.g. 'shapes model x' or 'shapes model (x, mask)')"
    if not text:
        raise ShapesUsageError(usage)
    try:
        tree = ast.parse(text, mode="eval").body
        if isinstance(tree, ast.Tuple) and len(tree.elts) >= 2:
            first = tree.elts[0]
            rest = text[_offset(text, tree.elts[1]):].strip()
            if len(tree.elts) > 2:
                rest = "(" + rest + ")"
            return ast.get_source_segment(text, first) or "", rest
    except SyntaxError:
        pass
    for i, ch in enumerate(text):
        if ch.isspace():
            left, right = text[:i].strip(), text[i:].strip()
            if left and right and (_parses(left) or is_module_path(left)) and _parses(right):
                return left, right
    raise ShapesUsageError(usage)


def _offset(text: str, node: ast.AST) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(line) for line in lines[: node.lineno - 1]) + node.col_offset


def _parses(expr: str) -> bool:
    try:
        ast.parse(expr, mode="eval")
        return True
    except SyntaxError:
        return False


@dataclass(frozen=True)
class LayerRow:
    name: str  # dotted submodule name; "" for the module itself
    kind: str  # class name
    depth: int
    inputs: str  # shapes, e.g. "[4, 3]" or "([4, 3], [4])"
    output: str
    dtype: str  # of the first output tensor
    device: str
    params: int  # own parameters (not counting children)
    error: str | None = None  # the exception this module raised, if any
    # the first tensor in and out, for checks that follow one tensor through the model
    input_shape: tuple[int, ...] | None = None
    input_dtype: str = ""
    input_device: str = ""
    output_shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ShapeFlow:
    rows: tuple[LayerRow, ...]
    error: str | None  # the forward pass failed with this (rows show how far it got)
    total_params: int
    where: str = ""  # the failing line in the user's code: "net.py:14 in forward: x = x.view(-1, 320)"
    explanation: Any = None  # a ShapeExplanation when the failure was a shape error
    # modules never called whose children were (a ModuleDict, a ModuleList): name -> class name, so a table can
    # show the tree a child's name belongs to
    containers: dict[str, str] = field(default_factory=dict)


def describe_shapes(value: Any, depth: int = 0) -> str:
    """Shapes of the tensors inside ``value``, in its structure: '[4, 3]', '([4, 3], None)', with a layout
    other than strided named: '[2708, 2708] sparse_coo' (a GCN's adjacency matrix)."""
    if is_tensor(value):
        layout = str(value.layout).replace("torch.", "").lstrip("_")
        shape = tuple(d if isinstance(d, int) else None for d in value.shape)  # (a jagged dim: ?, as summaries say)
        return fmt_shape(shape) + ("" if layout == "strided" else f" {layout}")
    if depth > 2:
        return "…"
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return _named_shapes(value, depth)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe_shapes(v, depth + 1) for v in value[:8])
        more = ", …" if len(value) > 8 else ""
        return f"({inner}{more})" if isinstance(value, tuple) else f"[{inner}{more}]"
    if isinstance(value, dict):
        items = list(value.items())[:8]
        return "{" + ", ".join(f"{k}: {describe_shapes(v, depth + 1)}" for k, v in items) + "}"
    if value is None:
        return "None"
    return type(value).__name__


def _named_shapes(value: Any, depth: int) -> str:
    """A namedtuple by its fields (``Batch(x=[4, 3], y=[4])``); an RNN's packed input by what it packs:
    ``PackedSequence[10, 16] 3 seqs ≤5 steps`` (its batch_sizes live on the CPU: reading one is no sync)."""
    name = type(value).__name__
    if is_packed_sequence(value):
        try:
            sizes = value.batch_sizes
            return f"{name}{fmt_shape(tuple(value.data.shape))} {int(sizes[0])} seqs ≤{len(sizes)} steps"
        except Exception:  # noqa: BLE001 - an odd or empty one: by its fields below
            pass
    fields = ", ".join(f"{f}={describe_shapes(v, depth + 1)}" for f, v in zip(value._fields[:8], value))
    return f"{name}({fields}{', …' if len(value) > 8 else ''})"


def _describe_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """'[4, 3]' for one argument, '[4, 3], mask=[4]' for several or with keywords."""
    if len(args) == 1 and not kwargs:
        return describe_shapes(args[0])
    return ", ".join([describe_shapes(a, 1) for a in args]
                     + [f"{k}={describe_shapes(v, 1)}" for k, v in kwargs.items()])


def _first_meta(t: Any) -> tuple[tuple[int, ...], str, str] | None:
    """Shape, dtype and device of a tensor (None for no tensor, or one without plain sizes)."""
    try:
        return None if t is None else (tuple(int(d) for d in t.shape), dtype_name(str(t.dtype)), str(t.device))
    except Exception:  # noqa: BLE001 - a nested or otherwise odd tensor without plain sizes
        return None


def _packs(*values: Any) -> bool:
    """A PackedSequence among ``values`` (or first in a tuple of them, as an RNN returns it): its data leads with
    the tokens of every sequence, not with the batch, so the batch is not followed through it."""
    for v in values:
        if isinstance(v, tuple) and not hasattr(v, "_fields") and v:
            v = v[0]
        if is_packed_sequence(v):
            return True
    return False


def shape_flow(module: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> ShapeFlow:
    """Run ``module(*args, **kwargs)`` once and record every submodule's input and output shapes."""
    import torch

    kwargs = kwargs or {}
    lazy = [n or type(module).__name__ for n, m in module.named_modules()
            if getattr(m, "has_uninitialized_params", None) and m.has_uninitialized_params()]
    if lazy:  # a probing pass would materialize them: the model would not be the same afterwards
        raise ShapesUsageError(f"shapes: {', '.join(lazy[:3])} still has uninitialized lazy parameters; "
                               "run one real forward pass first")
    names = {id(m): n for n, m in module.named_modules()}
    order: list[Any] = []  # modules in the order they were entered
    seen: dict[int, dict[str, Any]] = {}

    def pre_hook(mod: Any, inputs: Any, kw: dict[str, Any]) -> None:
        if id(mod) not in seen:
            order.append(mod)
            first = inputs[0] if inputs and is_tensor(inputs[0]) else first_tensor((inputs, kw), max_depth=4)
            meta = _first_meta(first)
            if meta is not None and _packs(*inputs, *kw.values()):
                meta = (None, *meta[1:])  # no leading batch dimension to follow
            seen[id(mod)] = {"inputs": _describe_call(inputs, kw), "first_in": meta}

    def post_hook(mod: Any, inputs: Any, output: Any) -> None:
        entry = seen.setdefault(id(mod), {"inputs": describe_shapes(inputs), "first_in": None})
        if "output" not in entry:
            first = output if is_tensor(output) else first_tensor(output, max_depth=3)
            entry["output"] = output_desc(output, first)
            entry["out_shape"] = None if _packs(output) else (_first_meta(first) or (None,))[0]

    def output_desc(output: Any, t: Any) -> tuple[str, str, str]:
        if t is None:
            return describe_shapes(output), "", ""
        return describe_shapes(output), dtype_name(str(t.dtype)), str(t.device)

    handles = []
    error, where, explanation = None, "", None
    with preserved(module):
        try:
            for m in module.modules():
                handles.append(m.register_forward_pre_hook(pre_hook, with_kwargs=True))
                handles.append(m.register_forward_hook(post_hook))
                m.training = False  # eval mode, set as ``preserved`` puts it back: ``eval()`` calls ``train()``,
                # which a model may override with a meaning of its own (mnist_forward_forward's layers train there)
            with torch.no_grad():
                module(*args, **kwargs)
        except Exception as exc:
            error = short_error(exc, limit=None)
            where, explanation = _failure(exc)
        finally:
            for h in handles:
                h.remove()
    unfinished = [m for m in order if "output" not in seen[id(m)]]
    culprit = unfinished[-1] if unfinished and error else None  # the innermost module that raised
    rows = []
    for mod in order:
        name = names.get(id(mod), "?")
        entry = seen[id(mod)]
        out, dtype, device = entry.get("output", ("", "", ""))
        in_shape, in_dtype, in_device = entry["first_in"] or (None, "", "")
        rows.append(LayerRow(
            name=name, kind=class_name(mod), depth=0 if not name else name.count(".") + 1,
            inputs=entry["inputs"], output=out, dtype=dtype, device=device,
            params=sum(p.numel() for p in mod.parameters(recurse=False)),
            error=error if mod is culprit else None,
            input_shape=in_shape, input_dtype=in_dtype, input_device=in_device, output_shape=entry.get("out_shape"),
        ))
    total = sum(p.numel() for p in module.parameters())
    return ShapeFlow(rows=tuple(rows), error=error, total_params=total, where=where, explanation=explanation,
                     containers=_uncalled_parents(module, [r.name for r in rows]))


def _uncalled_parents(module: Any, called: list[str]) -> dict[str, str]:
    """The modules above a called one that were not called themselves (containers), by name."""
    kinds = {name: type(m).__name__ for name, m in module.named_modules()}
    seen = set(called)
    out: dict[str, str] = {}
    for name in called:
        parts = name.split(".") if name else []
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if parent not in seen and parent in kinds:
                out.setdefault(parent, kinds[parent])
    return out


def _failure(exc: BaseException) -> tuple[str, Any]:
    """The innermost line of user code the exception went through, and its shape explanation if any."""
    import linecache

    from ..libraries import is_user_file
    from .shape_errors import explain

    where, tb = "", exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_file(code.co_filename):
            line = linecache.getline(code.co_filename, tb.tb_lineno).strip()
            where = f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}" + (f": {line}" if line else "")
        tb = tb.tb_next
    try:
        explanation = explain(exc)
    except Exception:  # noqa: BLE001 - explaining is a bonus; the error itself is already recorded
        explanation = None
    return where, explanation


def call_args(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """How the ``shapes`` input is passed: a tuple/list is spread, a mapping of str keys (a dict, HF's
    ``BatchEncoding``) becomes keywords. A namedtuple is one argument: an RNN's ``PackedSequence``, a batch
    of the program's own class."""
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return (), dict(value)
    if isinstance(value, (tuple, list)) and not is_tensor(value) and not hasattr(value, "_fields"):
        return tuple(value), {}
    return (value,), {}

