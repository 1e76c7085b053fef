"""One sentence naming the mismatch of a failing operation: matmul, broadcast, view, dims, state_dict."""

from __future__ import annotations

import ast
import re
from typing import Any

from ...format import fmt_shape, parse_shape, plural
from ...summary.modules import named_tensors
from . import pure, static
from .evaluator import Evaluator
from .collate import collate_hint
from .contracts import contract_hint
from .flattening import flattening_line
from .model import Operand
from .placement import placement_hint
from .ranges import index_hint, range_hint
from .sequences import sequence_hint
from .source import callee_name
from .static import is_module, is_tensor
from .targets import target_hint

_ELEMENTWISE = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
                ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)
_MATMUL_CALLS = {"matmul", "mm", "bmm", "mv", "linear", "baddbmm", "addmm", "einsum", "dot", "inner"}

def _broadcast_hint(a: Operand, b: Operand) -> str:
    sa, sb = a.shape or (), b.shape or ()
    for i in range(1, min(len(sa), len(sb)) + 1):
        da, db = sa[-i], sb[-i]
        if da != db and da != 1 and db != 1:
            return (f"{a.expr} {fmt_shape(sa)} and {b.expr} {fmt_shape(sb)} do not broadcast: "
                    f"dim -{i} is {da} vs {db} (sizes must match or one must be 1)")
    return ""


def _inplace_hint(target: Operand, value: Operand) -> str:
    st, sv = target.shape or (), value.shape or ()
    width = max(len(st), len(sv))
    padded = [(1,) * (width - len(s)) + tuple(s) for s in (st, sv)]
    result = tuple(max(a, b) for a, b in zip(*padded))
    if result != tuple(st):
        return (f"the result would have shape {fmt_shape(result)}, but an in-place operation cannot "
                f"change {target.expr}'s shape {fmt_shape(st)}")
    return ""


def _matmul_hint(a: Operand, b: Operand, linear: bool) -> str:
    sa, sb = a.shape or (), b.shape or ()
    if not sa or not sb:
        return ""
    k = sa[-1]
    if linear:  # F.linear(x, W): x[..., in] against W[out, in]
        inner = sb[-1]
        if k != inner:
            return (f"{a.expr}'s last dim is {k} but {b.expr} {fmt_shape(sb)} expects {inner} "
                    f"input features")
        return ""
    inner = sb[-2] if len(sb) >= 2 else sb[0]
    if k != inner:
        where = "dim -2" if len(sb) >= 2 else "dim 0"
        return (f"{a.expr} {fmt_shape(sa)} @ {b.expr} {fmt_shape(sb)}: the inner dimensions differ, "
                f"{a.expr} has {k} columns (last dim) but {b.expr} has {inner} rows ({where})")
    return ""


def _config(module: Any, name: str) -> Any:
    """A module's plain configuration value (``in_features``), never a property or ``__getattr__`` of its class."""
    try:
        value = pure.plain_attribute(module, name)
    except (pure.NotPlain, AttributeError):
        return None
    return value if static.one_of(value, (int, tuple)) else None


def _module_hint(module: Any, expr: str, arg: Operand) -> str:
    in_features = _config(module, "in_features")
    if in_features is not None and arg.shape and arg.shape[-1] != in_features:
        return f"{expr} expects in_features={in_features}, but {arg.expr} {fmt_shape(arg.shape)} " \
               f"has last dim {arg.shape[-1]}"
    in_channels = _config(module, "in_channels")
    if in_channels is not None and arg.shape is not None:
        dims = len(_config(module, "kernel_size") or ()) or 2
        spatial = ", ".join("DHW"[3 - dims:]) if dims <= 3 else "..."
        ndim = len(arg.shape)
        if ndim not in (dims + 1, dims + 2):
            return (f"{expr} expects a {dims + 1}-D [C, {spatial}] or {dims + 2}-D [N, C, {spatial}] input, "
                    f"but {arg.expr} {fmt_shape(arg.shape)} has {ndim} dims")
        batched = ndim == dims + 2
        channels = arg.shape[1] if batched else arg.shape[0]
        if channels != in_channels:
            hint = f"{expr} expects in_channels={in_channels}, but {arg.expr} {fmt_shape(arg.shape)} " \
                   f"has {channels} channels"
            if not batched:
                hint += (f": a {ndim}-D input is read as one unbatched sample [C, {spatial}]; a batch needs "
                         f"{ndim + 1}-D [N, C, {spatial}]")
                if in_channels == 1:
                    hint += f" (add the channel dim: {arg.expr}.unsqueeze(1))"
            return hint
    return ""


def mismatch_hint(ev: Evaluator, node: ast.AST, operands: list[Operand], kind: str = "", message: str = "") -> str:
    """One sentence naming the mismatch: from the operation's own rule, else from the error family."""
    hint = _operation_hint(ev, node, operands)
    if hint:
        return hint
    tensors = [o for o in operands if o.kind == "tensor"]
    if kind == "broadcast":
        pairs = ((a, b) for i, a in enumerate(tensors) for b in tensors[i + 1:])
        return next((h for h in (_broadcast_hint(a, b) for a, b in pairs) if h), "")
    if kind == "dims":
        return _dims_hint(ev, node, tensors, message)
    if kind == "not contiguous":
        return _view_hint(ev, node, tensors, message)
    if kind == "size mismatch":
        return (_state_dict_hint(ev, node) or _view_hint(ev, node, tensors, message) or _norm_hint(message)
                or _chunks_hint(message))
    if kind == "batch of one":
        return _batch_of_one_hint(tensors, message)
    if kind == "out of range":
        return range_hint(ev, node) or index_hint(tensors, message)
    if kind == "loss targets":
        return target_hint(operands, message)
    if kind == "collate":
        return collate_hint(message)
    if kind == "rnn/attention":
        return sequence_hint(operands, message)
    if kind == "batch size":
        return _batch_size_hint(ev, message)
    if kind == "not scalar":
        return _not_scalar_hint(ev, node, tensors)
    if kind in ("devices", "dtypes"):
        return placement_hint(ev, node, operands, "device" if kind == "devices" else "dtype", message)
    return contract_hint(ev, node, kind, message)


_TORCH_SIZE = re.compile(r"torch\.Size\(\[([\d, ]*)\]\)")


def _not_scalar_hint(ev: Evaluator, node: ast.AST, tensors: list[Operand]) -> str:
    """backward() on a loss of many values: its shape, and the loss op's reduction='none' when that made it."""
    loss = next((o for o in tensors if o.shape), None)
    if loss is None or not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return ""
    value = ev.value_of(node.func.value)
    reduction = getattr(getattr(value, "grad_fn", None), "_saved_reduction", None) if is_tensor(value) else None
    why = f" (made by {type(value.grad_fn).__name__[:-len('Backward0')]} with reduction='none')" \
        if reduction == 0 and type(value.grad_fn).__name__.endswith("Backward0") else ""
    return (f"{loss.expr} {fmt_shape(loss.shape)} is not one number{why}: backward() needs a scalar loss "
            f"({loss.expr}.mean(), or .sum()); to weight samples, reduce after weighting")


_BATCH_SIZES = re.compile(r"input batch_size \((\d+)\) to match target batch_size \((\d+)\)")


def _batch_size_hint(ev: Evaluator, message: str) -> str:
    found = _BATCH_SIZES.search(message)
    if found is None:
        return ""
    scores, targets = found.groups()
    line = flattening_line([ev.locals, ev.globals])
    suspect = f": {line}?" if line else "."
    return (f"the scores have {scores} rows but the targets {targets}: the batch dim changed between the batch and "
            f"the loss, usually a view(-1, n) or reshape(-1, n) whose n is not the features per sample{suspect} Write "
            "x.flatten(1) or x.view(x.size(0), -1). Or the targets are another batch's")


def _batch_of_one_hint(tensors: list[Operand], message: str) -> str:
    """A norm's batch statistics in training mode over a single value: say which input, and the two usual causes."""
    found = _TORCH_SIZE.search(message)
    got = parse_shape(found.group(1)) if found else None
    o = next((t for t in tensors if got is not None and t.shape == got), None)
    what = f"{o.expr} {fmt_shape(o.shape)}" if o is not None else \
        f"the input {fmt_shape(got)}" if got is not None else "the input"
    if "spatial element" in message:
        return (f"{what} has a 1×1 feature map, and instance norm in training mode needs more than one value per "
                f"channel: the input is too small for this many downsamplings (or flattened before the norm)")
    return (f"{what} is a batch of one, and batch norm in training mode needs more than one value per channel: "
            f"usually an epoch's last, short batch (DataLoader(..., drop_last=True)); for single samples call "
            f"model.eval() first")


_NORM = re.compile(r"normalized_shape=\[([\d, ]*)\], expected input with shape \[\*, [\d, ]*\], "
                   r"but got input of size ?\[([\d, ]*)\]")


def _norm_hint(message: str) -> str:
    """layer_norm: the input's trailing dims against the normalized shape."""
    found = _NORM.search(message)
    if not found:
        return ""
    normalized, got = (list(parse_shape(g)) for g in found.groups())
    tail = got[-len(normalized):] if normalized else []
    return (f"the input {fmt_shape(tuple(got))} ends in {fmt_shape(tuple(tail))}, but the norm normalizes over "
            f"{fmt_shape(tuple(normalized))}: its last {plural(len(normalized), 'dim')} "
            f"must be {fmt_shape(tuple(normalized))}")


_CHUNKS = re.compile(r"can't divide axis of length (\d+) in chunks of (\d+)")
_DIVISORS_TRIED = 10_000  # the sizes that divide an axis are looked for below this: an image's, exactly


def _chunks_hint(message: str) -> str:
    """einops splitting an axis into groups (a ViT's ``'b c (h p1) (w p2) -> ...'``) that do not divide it."""
    found = _CHUNKS.search(message)
    if not found:
        return ""
    length, chunk = map(int, found.groups())
    fits = [d for d in range(2, min(length, _DIVISORS_TRIED)) if length % d == 0][:6]  # (a flattened axis may be huge)
    return (f"the pattern splits an axis of length {length} into groups of {chunk}, and {length} is not a multiple "
            f"of {chunk}: an image size the patch size does not divide? Resize or pad it to "
            f"{-(-length // chunk) * chunk}" + (f", or use a size that divides {length} ({', '.join(map(str, fits))})"
                                               if fits else ""))


def _operation_hint(ev: Evaluator, node: ast.AST, operands: list[Operand]) -> str:
    tensors = [o for o in operands if o.kind == "tensor"]
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and len(tensors) == 2:
        if isinstance(node, ast.AugAssign) and isinstance(node.op, _ELEMENTWISE):
            return _broadcast_hint(tensors[0], tensors[1]) or _inplace_hint(tensors[0], tensors[1])
        if isinstance(node.op, ast.MatMult):
            return _matmul_hint(tensors[0], tensors[1], linear=False)
        if isinstance(node.op, _ELEMENTWISE):
            return _broadcast_hint(tensors[0], tensors[1])
    if isinstance(node, ast.Call):
        name, callee = callee_name(node.func), ev.value_of(node.func)
        if is_module(callee) and tensors:
            return _module_hint(callee, ast.unparse(node.func), tensors[0])
        if name in _MATMUL_CALLS and len(tensors) >= 2:
            return _matmul_hint(tensors[0], tensors[1], linear=name == "linear")
    return ""


def _call_value(ev: Evaluator, node: ast.AST) -> tuple[str, Any, list[Any]]:
    """(method or function name, the object it is called on, evaluated positional arguments)."""
    if not isinstance(node, ast.Call):
        return "", None, []
    on = ev.value_of(node.func.value) if isinstance(node.func, ast.Attribute) else None
    return callee_name(node.func), on, [ev.value_of(a) for a in node.args]


def _state_dict_hint(ev: Evaluator, node: ast.AST) -> str:
    """module.load_state_dict(sd): which entries differ in shape, checkpoint vs model."""
    name, module, args = _call_value(ev, node)
    if name != "load_state_dict" or not is_module(module) or not isinstance(node, ast.Call):
        return ""
    loaded = args[0] if args else next((ev.value_of(k.value) for k in node.keywords if k.arg == "state_dict"), None)
    if not static.inherits(loaded, dict):  # a state_dict is a dict; a user Mapping's __getitem__ is user code
        return ""
    entries = {k: v for k, v in dict.items(loaded) if static.one_of(k, (str,)) and is_tensor(v)}
    own = {name: t for name, t, _ in named_tensors(module, limit=100_000)}
    shared = [k for k in own if k in entries]
    shapes = {k: (_shape(entries[k]), _shape(own[k])) for k in shared}
    differ = [k for k in shared if None not in shapes[k] and shapes[k][0] != shapes[k][1]]
    if not differ:
        return ""
    shown = "; ".join(f"{k}: checkpoint {fmt_shape(shapes[k][0])} vs model {fmt_shape(shapes[k][1])}"
                      for k in differ[:5])
    more = f"; … {len(differ) - 5} more" if len(differ) > 5 else ""
    return f"{len(differ)} of {len(shared)} tensors differ in shape: {shown}{more}"


def _shape(t: Any) -> tuple | None:
    try:
        return tuple(static.tensor_attribute(t, "shape"))
    except AttributeError:
        return None


def _sizes(args: list[Any]) -> list[int] | None:
    """view(2, 3) / view((2, 3)) / view(torch.Size) -> [2, 3].

    Exact ints only: an int subclass's methods are user code."""
    import torch

    if len(args) == 1 and static.one_of(args[0], (tuple, list, torch.Size)):
        args = list(args[0])
    return [int(a) for a in args] if args and all(static.one_of(a, (int,)) for a in args) else None


def _view_hint(ev: Evaluator, node: ast.AST, tensors: list[Operand], message: str) -> str:
    """x.view(...) / x.reshape(...): the element count against the requested shape, or contiguity."""
    name, base, args = _call_value(ev, node)
    if name not in ("view", "reshape") or not is_tensor(base) or not tensors:
        return ""
    src = tensors[0]
    if "view size is not compatible" in message:
        return (f"{src.expr} is not contiguous (a transpose/permute/expand view); use {src.expr}.reshape(...) "
                f"or {src.expr}.contiguous().view(...)")
    sizes = _sizes(args)
    if sizes is None or src.shape is None:
        return ""
    numel = 1
    for d in src.shape:
        numel *= d
    known = 1
    for d in sizes:
        known *= d if d != -1 else 1
    asked = f"{name}({', '.join(str(d) for d in sizes)})"
    if -1 in sizes:
        return (f"{src.expr} {fmt_shape(src.shape)} has {numel} elements, which {asked} cannot split: "
                f"{numel} is not a multiple of {known}")
    return f"{src.expr} {fmt_shape(src.shape)} has {numel} elements, but {asked} needs {known}"


_NDIMS = re.compile(r"\b(\d+)-?D\b")
_GOT_NDIM = re.compile(r"got (\d+)-?D", re.IGNORECASE)
_GOT_SHAPE = re.compile(r"input of size:? \[([\d, ]*)\]", re.IGNORECASE)
_NOUN = re.compile(r"(\w+) (?:tensor|input)\b", re.IGNORECASE)
_RANGE = re.compile(r"range of \[(-?\d+), (-?\d+)\], but got (-?\d+)")
_INDICES = re.compile(r"too many indices for tensor of dimension (\d+)")


def _by_parameter(ev: Evaluator, node: ast.AST, tensors: list[Operand]) -> dict[str, Operand]:
    """The tensor operands of a function call under the callee's parameter names (target=..., input=...)."""
    import inspect

    if not isinstance(node, ast.Call):
        return {}
    callee = ev.value_of(node.func)
    if not pure.torch_function(callee):
        return {}  # inspect.signature reads __signature__, __wrapped__, __call__: user code on a user object
    try:
        bound = inspect.signature(callee).bind_partial(*node.args, **{k.arg: k.value for k in node.keywords})
    except (TypeError, ValueError):
        return {}
    by_text = {o.expr: o for o in tensors}
    unparse = getattr(ast, "unparse", None)
    return {p: by_text[unparse(n)] for p, n in bound.arguments.items()
            if unparse is not None and isinstance(n, ast.AST) and unparse(n) in by_text}


def _dims_hint(ev: Evaluator, node: ast.AST, tensors: list[Operand], message: str) -> str:
    """A tensor with the wrong number of dims: which operand, how many it has, how many were expected."""
    found = _RANGE.search(message)
    if found:
        lo, hi, got = (int(g) for g in found.groups())
        o = next((t for t in tensors if t.shape is not None and len(t.shape) == hi + 1), None)
        return "" if o is None else \
            f"{o.expr} {fmt_shape(o.shape)} has {hi + 1} dims (valid dims are {lo}..{hi}), but dim {got} was asked for"
    found = _INDICES.search(message)
    if found:
        o = next((t for t in tensors if t.shape is not None and len(t.shape) == int(found.group(1))), None)
        return "" if o is None else f"{o.expr} {fmt_shape(o.shape)} has {found.group(1)} dims, but is indexed with more"
    got = _GOT_NDIM.search(message)
    got_ndim = int(got.group(1)) if got else None
    expected = sorted({int(d) for d in _NDIMS.findall(message)} - ({got_ndim} if got_ndim is not None else set()))
    if not expected:
        return ""
    shape = _GOT_SHAPE.search(message)
    got_shape = parse_shape(shape.group(1)) if shape else None
    named = {**{o.expr: o for o in tensors}, **_by_parameter(ev, node, tensors)}
    nouns = [n.lower() for n in _NOUN.findall(message)]
    candidates = [
        next((t for t in tensors if got_shape is not None and t.shape == got_shape), None),
        next((named[n] for n in nouns if n in named), None),
        next((t for t in tensors if got_ndim is not None and t.shape is not None and len(t.shape) == got_ndim), None),
        next((t for t in tensors if t.shape is not None and len(t.shape) not in expected), None),
    ]
    o = next((c for c in candidates if c is not None and c.shape is not None), None)
    if o is None:
        return ""
    wanted = " or ".join(f"{d}-D" for d in expected)
    return f"{o.expr} {fmt_shape(o.shape)} has {len(o.shape)} dims, but {wanted} is expected" + _targets_fix(o, message)


def _targets_fix(o: Operand, message: str) -> str:
    """cross_entropy / nll_loss handed class targets of two dims: the usual two causes, each with its line."""
    if "multi-target not supported" not in message or o.shape is None or len(o.shape) != 2:
        return ""
    if o.shape[1] == 1:
        return f": class ids in a column; pass {o.expr}.squeeze(1) (or .view(-1))"
    return (f": one-hot targets? pass the class ids, {o.expr}.argmax(1) (or, for soft labels, float "
            f"probabilities of the scores' shape)")
