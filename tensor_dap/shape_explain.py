"""Explain a shape error: which operands of the failing line have which shapes.

Like tensor-sensor, the failing line's AST is re-evaluated piece by piece, but safely:
names, attributes and subscripts of built-in containers are read from the frame, and
every tensor operation runs on ``meta`` copies of the tensors (shapes and dtypes only),
so nothing is computed, allocated, mutated or sent to a device, and no user function or
module forward runs again. The operation that fails on meta tensors, or the one the
interpreter was executing (Python 3.11+ instruction positions), is the culprit; its
operands and their shapes are the explanation.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import os
import re
import sysconfig
from dataclasses import dataclass
from typing import Any

from .pdb_display import is_module, is_tensor, short_repr
from .render_text import fmt_shape

_KINDS = (
    ("matmul", re.compile(r"cannot be multiplied|mat1 and mat2|self and mat2|same reduction dim|"
                          r"Expected size for first two dimensions of batch2|inconsistent tensor size|"
                          r"size mismatch, m1|input and weight", re.IGNORECASE)),
    ("broadcast", re.compile(r"must match the size of tensor b|broadcast|must match the existing size|"
                             r"expanded size of the tensor", re.IGNORECASE)),
    ("size mismatch", re.compile(r"size mismatch|Sizes of tensors must match|is invalid for input of size|"
                                 r"to have \d+ channels|view size is not compatible|shape mismatch|"
                                 r"must match|number of sizes provided", re.IGNORECASE)),
    ("dims", re.compile(r"Dimension out of range|Expected \d+D|expected \d+D|number of dimensions|"
                        r"\d+D (?:or \d+D )?(?:\w+ )?tensor expected|"
                        r"too many indices|dimensions? (?:of|but)|expected .* dims?\b|got \d+D", re.IGNORECASE)),
)
_ELEMENTWISE = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
                ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)
_MATMUL_CALLS = {"matmul", "mm", "bmm", "mv", "linear", "baddbmm", "addmm", "einsum", "dot", "inner"}
_DEVICE_MOVES = {"cuda", "cpu", "to", "pin_memory", "mps", "xpu"}
_NEVER_CALL = re.compile(r"^(save|load|manual_seed|seed|set_|use_|compile|backward|register|item$|tolist$|"
                         r"numpy$|share_memory|record_stream|data_ptr|synchronize)")
_CONTAINERS = (list, tuple, dict, str)
_PURE_BUILTINS = (float, int, abs, round, min, max, bool)
_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def classify(exc: BaseException) -> str | None:
    """'matmul', 'broadcast', 'size mismatch', 'dims', or None when ``exc`` is not a shape error."""
    if not isinstance(exc, (RuntimeError, ValueError, IndexError, TypeError)):
        return None
    text = str(exc)
    for kind, pattern in _KINDS:
        if pattern.search(text):
            return kind
    return None


@dataclass(frozen=True)
class Operand:
    expr: str  # the source text of the sub-expression
    kind: str  # "tensor", "module", "value", "unknown"
    shape: tuple[int, ...] | None = None
    dtype: str = ""
    device: str = ""
    detail: str = ""  # a module's repr or a value's short repr


@dataclass(frozen=True)
class FrameExplanation:
    filename: str
    lineno: int
    function: str
    source: str  # the failing statement (its first lines)
    expr: str  # the failing operation, "" when it could not be pinned down
    operands: tuple[Operand, ...]
    hint: str  # one sentence naming the mismatch, "" when none can be computed


@dataclass(frozen=True)
class ShapeExplanation:
    kind: str
    error: str  # the exception's first line
    frames: tuple[FrameExplanation, ...]  # innermost first


class _Unknown(Exception):
    """A sub-expression that is not evaluated (it could have side effects, or an input is unknown)."""


class _Failed(Exception):
    def __init__(self, node: ast.AST, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.node = node


_LIB_DIRS = tuple(os.path.realpath(p) + os.sep for p in {
    sysconfig.get_paths().get("stdlib", ""), sysconfig.get_paths().get("purelib", ""),
    sysconfig.get_paths().get("platlib", ""), os.path.dirname(os.path.abspath(__file__)),
} if p)


def is_user_file(filename: str) -> bool:
    """Not the standard library, not an installed package, not tensor_dap itself."""
    if not filename or filename.startswith("<"):
        return False
    return not os.path.realpath(filename).startswith(_LIB_DIRS)


def _meta(value: Any) -> Any:
    import torch

    if is_tensor(value):
        if value.device.type == "meta":
            return value
        return torch.empty_like(value, device="meta") if value.layout == torch.strided else _raise_unknown()
    if isinstance(value, (list, tuple)) and any(is_tensor(v) for v in value):
        return type(value)(_meta(v) for v in value) if type(value) in (list, tuple) else _raise_unknown()
    return value


def _raise_unknown() -> Any:
    raise _Unknown()


class _Evaluator:
    """Evaluates the safe parts of one statement against one frame, remembering every value."""

    def __init__(self, frame: Any) -> None:
        self.locals = frame.f_locals
        self.globals = frame.f_globals
        self.values: dict[int, tuple[Any, str]] = {}  # id(node) -> (value, device of the real inputs)
        self.failed: _Failed | None = None

    def run(self, node: ast.AST) -> None:
        try:
            self.ev(node)
        except (_Unknown, _Failed):
            pass
        except Exception:
            pass  # any surprise only means less to explain

    def ev(self, node: ast.AST) -> Any:
        key = id(node)
        if key in self.values:
            return self.values[key][0]
        try:
            value, device = self._ev(node)
        except _Failed as failed:
            if self.failed is None:
                self.failed = failed
            raise
        self.values[key] = (value, device)
        return value

    def ev_all(self, nodes: list[ast.AST]) -> list[Any]:
        """Evaluate every node (so each operand gets its value), then fail like the first that failed."""
        values, first = [], None
        for n in nodes:
            try:
                values.append(self.ev(n))
            except (_Unknown, _Failed) as exc:
                first = first if isinstance(first, _Failed) else exc
                values.append(None)
        if first is not None:
            raise first
        return values

    def value_of(self, node: ast.AST) -> Any:
        """The value ``node`` evaluated to, None when it was not evaluated."""
        return self.values.get(id(node), (None, ""))[0]

    def device_of(self, node: ast.AST) -> str:
        return self.values.get(id(node), (None, ""))[1]

    def _inputs_device(self, nodes: list[ast.AST]) -> str:
        return next((d for d in (self.device_of(n) for n in nodes) if d), "")

    def _ev(self, node: ast.AST) -> tuple[Any, str]:
        import torch

        if isinstance(node, ast.Constant):
            return node.value, ""
        if isinstance(node, ast.Name):
            for scope in (self.locals, self.globals, vars(builtins)):
                if node.id in scope:
                    value = scope[node.id]
                    return value, str(value.device) if is_tensor(value) else ""
            raise _Unknown()
        if isinstance(node, (ast.Tuple, ast.List)):
            items = self.ev_all(node.elts)
            return (tuple(items) if isinstance(node, ast.Tuple) else items), self._inputs_device(node.elts)
        if isinstance(node, ast.Slice):
            parts = [self.ev(p) if p is not None else None for p in (node.lower, node.upper, node.step)]
            return slice(*parts), ""
        if isinstance(node, ast.Attribute):
            base = self.ev(node.value)
            value = getattr(base, node.attr)  # a property raising only makes this unknown
            if is_tensor(value) and value.device.type != "meta":
                return value, str(value.device)
            return value, self.device_of(node.value)
        if isinstance(node, ast.Subscript):
            base, index = self.ev_all([node.value, node.slice])
            if is_tensor(base):
                return self._op(node, lambda: _meta(base)[_meta(index)], [node.value])
            if isinstance(base, _CONTAINERS) or type(base).__name__ in (
                    "Size", "ModuleList", "Sequential", "ModuleDict", "ParameterList", "ParameterDict"):
                value = base[index]
                return value, str(value.device) if is_tensor(value) else ""
            raise _Unknown()
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            operand = self.ev(node.operand)
            op = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Invert: lambda v: ~v}[type(node.op)]
            return self._op(node, lambda: op(_meta(operand)), [node.operand])
        if isinstance(node, ast.BinOp):
            left, right = self.ev_all([node.left, node.right])
            if not (is_tensor(left) or is_tensor(right)):
                if isinstance(left, (int, float)) and isinstance(right, (int, float)):
                    return _arith(node.op, left, right), ""
                raise _Unknown()
            return self._op(node, lambda: _arith(node.op, _meta(left), _meta(right)), [node.left, node.right])
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            left, right = self.ev_all([node.left, node.comparators[0]])
            if not (is_tensor(left) or is_tensor(right)):
                raise _Unknown()
            compare = _COMPARE[type(node.ops[0])]
            return self._op(node, lambda: compare(_meta(left), _meta(right)), [node.left, node.comparators[0]])
        if isinstance(node, ast.Call):
            return self._call(node, torch)
        raise _Unknown()

    def _op(self, node: ast.AST, fn: Any, inputs: list[ast.AST]) -> tuple[Any, str]:
        import torch

        try:
            with torch.random.fork_rng(devices=[]), torch.device("meta"):
                return fn(), self._inputs_device(inputs)
        except _Unknown:
            raise
        except NotImplementedError as exc:  # no meta kernel: unknown, not a culprit
            raise _Unknown() from exc
        except Exception as exc:
            raise _Failed(node, exc) from exc

    def _call(self, node: ast.Call, torch: Any) -> tuple[Any, str]:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise _Unknown()
        func = node.func
        if isinstance(func, ast.Attribute):
            base = self.ev(func.value)
            if is_tensor(base):
                args = self.ev_all(node.args)
                kwargs = dict(zip((k.arg for k in node.keywords), self.ev_all([k.value for k in node.keywords])))
                if func.attr in _DEVICE_MOVES:  # shape-preserving; only a dtype change matters
                    dtypes = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.dtype)]
                    return self._op(node, lambda: _meta(base).to(dtypes[0]) if dtypes else _meta(base),
                                    [func.value])
                if _NEVER_CALL.match(func.attr):
                    raise _Unknown()
                return self._op(node, lambda: getattr(_meta(base), func.attr)(
                    *[_meta(a) for a in args], **{k: _meta(v) for k, v in kwargs.items()}),
                    [func.value, *node.args])
        callee, *args = self.ev_all([func, *node.args])
        kwargs = dict(zip((k.arg for k in node.keywords), self.ev_all([k.value for k in node.keywords])))
        if callee in _PURE_BUILTINS and all(isinstance(a, (int, float, str)) for a in [*args, *kwargs.values()]):
            return callee(*args, **kwargs), ""  # float('-inf'), int(d / 2): plain numbers
        if is_module(callee) or not _is_torch_function(callee):
            raise _Unknown()  # never run a forward or user code again
        return self._op(node, lambda: callee(*[_meta(a) for a in args],
                                             **{k: _meta(v) for k, v in kwargs.items()}), list(node.args))


def _is_torch_function(fn: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__name__", "") or ""
    return callable(fn) and not isinstance(fn, type) and module.split(".")[0] == "torch" \
        and not _NEVER_CALL.match(name)


def _arith(op: ast.operator, a: Any, b: Any) -> Any:
    import operator

    table = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
             ast.MatMult: operator.matmul, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
             ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
    fn = table.get(type(op))
    if fn is None:
        raise _Unknown()
    return fn(a, b)


# ----------------------------------------------------------------------------- source and positions

_TREES: dict[tuple[str, int], ast.Module | None] = {}  # keyed by the source too: files change


def _tree(filename: str, source: str) -> ast.Module | None:
    key = (filename, hash(source))
    if key not in _TREES:
        try:
            _TREES[key] = ast.parse(source)
        except (SyntaxError, ValueError):
            _TREES[key] = None
    return _TREES[key]


def _statement(tree: ast.Module, lineno: int) -> ast.stmt | None:
    """The innermost statement whose lines contain ``lineno``."""
    best = None
    for node in ast.walk(tree):
        contains = isinstance(node, ast.stmt) and node.lineno <= lineno <= (node.end_lineno or node.lineno)
        if contains and (best is None or node.lineno >= best.lineno):
            best = node
    return best


def _position(tb: Any) -> tuple[int, int, int, int] | None:
    """(line, end line, col, end col) of the instruction that raised (Python 3.11+)."""
    code = tb.tb_frame.f_code
    if not hasattr(code, "co_positions"):
        return None
    try:
        pos = list(code.co_positions())[tb.tb_lasti // 2]
    except (IndexError, ValueError):
        return None
    return pos if all(p is not None for p in pos) else None


def _header_exprs(stmt: ast.stmt) -> list[ast.AST]:
    """The expressions a statement evaluates itself (a compound statement's header, not its body)."""
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return [t for t in targets if isinstance(t, ast.Subscript)] + ([stmt.value] if stmt.value else [])
    if isinstance(stmt, ast.AugAssign):
        return [stmt.target, stmt.value]
    if isinstance(stmt, (ast.Expr, ast.Return)):
        return [stmt.value] if stmt.value is not None else []
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.iter]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.Assert):
        return [stmt.test]
    return []


def _source_text(source: str, stmt: ast.stmt, lineno: int) -> str:
    if _header_exprs(stmt) and not hasattr(stmt, "body"):
        text = ast.get_source_segment(source, stmt) or ""
    else:
        text = ""
    if not text:
        lines = source.splitlines()
        text = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
    lines = text.splitlines()
    return "\n".join(lines[:3]) + (" …" if len(lines) > 3 else "")


def _find_node(stmt: ast.stmt, pos: tuple[int, int, int, int]) -> ast.AST | None:
    for node in ast.walk(stmt):
        if isinstance(node, (ast.BinOp, ast.Call, ast.Subscript, ast.UnaryOp, ast.AugAssign, ast.Compare)) \
                and (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset) == pos:
            return node
    return None


# ----------------------------------------------------------------------------- operands and hints

def _operand_nodes(node: ast.AST) -> tuple[list[ast.AST], list[ast.AST]]:
    """(callee-side nodes, argument nodes) of an operation."""
    if isinstance(node, ast.BinOp):
        return [], [node.left, node.right]
    if isinstance(node, ast.AugAssign):
        return [], [node.target, node.value]
    if isinstance(node, ast.UnaryOp):
        return [], [node.operand]
    if isinstance(node, ast.Compare):
        return [], [node.left, *node.comparators]
    if isinstance(node, ast.Subscript):
        return [node.value], [node.slice]
    if isinstance(node, ast.Call):
        # x in x.view(...) is a tensor operand; self.fc in self.fc(h) is the module called
        callee = [node.func.value, node.func] if isinstance(node.func, ast.Attribute) else [node.func]
        args: list[ast.AST] = []
        for a in list(node.args) + [k.value for k in node.keywords]:
            args += a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a]  # torch.cat([a, b])
        return callee, args
    return [], []


def _operand(ev: _Evaluator, node: ast.AST) -> Operand:
    text = ast.unparse(node) if hasattr(ast, "unparse") else type(node).__name__
    key = id(node)
    if key not in ev.values:
        return Operand(text, "unknown")
    value, device = ev.values[key]
    if is_tensor(value):
        real_device = str(value.device) if value.device.type != "meta" else ""
        return Operand(text, "tensor", tuple(int(d) for d in value.shape), str(value.dtype),
                       device or real_device)
    if is_module(value):
        return Operand(text, "module", detail=_module_text(value))
    return Operand(text, "value", detail=short_repr(value))


def _module_text(module: Any) -> str:
    extra = ""
    try:
        extra = module.extra_repr()
    except Exception:
        pass
    if not extra:  # a container (Sequential, a user's model): "Net()" would look empty
        try:
            return f"{type(module).__name__} ({sum(p.numel() for p in module.parameters()):,} parameters)"
        except Exception:
            return type(module).__name__
    return f"{type(module).__name__}({extra})" if len(extra) < 100 else type(module).__name__


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


def _module_hint(module: Any, expr: str, arg: Operand) -> str:
    in_features = getattr(module, "in_features", None)
    if in_features is not None and arg.shape and arg.shape[-1] != in_features:
        return f"{expr} expects in_features={in_features}, but {arg.expr} {fmt_shape(arg.shape)} " \
               f"has last dim {arg.shape[-1]}"
    in_channels = getattr(module, "in_channels", None)
    if in_channels is not None and arg.shape is not None:
        dims = len(getattr(module, "kernel_size", ())) or 2
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


def _hint(ev: _Evaluator, node: ast.AST, operands: list[Operand], kind: str = "", message: str = "") -> str:
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
    if kind == "size mismatch":
        return _state_dict_hint(ev, node) or _view_hint(ev, node, tensors, message)
    return ""


def _operation_hint(ev: _Evaluator, node: ast.AST, operands: list[Operand]) -> str:
    tensors = [o for o in operands if o.kind == "tensor"]
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and len(tensors) == 2:
        if isinstance(node, ast.AugAssign) and isinstance(node.op, _ELEMENTWISE):
            return _broadcast_hint(tensors[0], tensors[1]) or _inplace_hint(tensors[0], tensors[1])
        if isinstance(node.op, ast.MatMult):
            return _matmul_hint(tensors[0], tensors[1], linear=False)
        if isinstance(node.op, _ELEMENTWISE):
            return _broadcast_hint(tensors[0], tensors[1])
    if isinstance(node, ast.Call):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else \
            node.func.id if isinstance(node.func, ast.Name) else ""
        callee = ev.value_of(node.func)
        if is_module(callee) and tensors:
            return _module_hint(callee, ast.unparse(node.func), tensors[0])
        if name in _MATMUL_CALLS and len(tensors) >= 2:
            return _matmul_hint(tensors[0], tensors[1], linear=name == "linear")
    return ""


def _call_value(ev: _Evaluator, node: ast.AST) -> tuple[str, Any, list[Any]]:
    """(method or function name, the object it is called on, evaluated positional arguments)."""
    if not isinstance(node, ast.Call):
        return "", None, []
    args = [ev.value_of(a) for a in node.args]
    if isinstance(node.func, ast.Attribute):
        return node.func.attr, ev.value_of(node.func.value), args
    return (node.func.id if isinstance(node.func, ast.Name) else ""), None, args


def _state_dict_hint(ev: _Evaluator, node: ast.AST) -> str:
    """module.load_state_dict(sd): which entries differ in shape, checkpoint vs model."""
    from collections.abc import Mapping

    name, module, args = _call_value(ev, node)
    if name != "load_state_dict" or not is_module(module) or not isinstance(node, ast.Call):
        return ""
    loaded = args[0] if args else next((ev.value_of(k.value) for k in node.keywords if k.arg == "state_dict"), None)
    if not isinstance(loaded, Mapping):
        return ""
    own = dict(module.named_parameters())
    own.update((k, v) for k, v in module.named_buffers() if v is not None)
    shared = [k for k in own if k in loaded and is_tensor(loaded[k])]
    differ = [k for k in shared if tuple(loaded[k].shape) != tuple(own[k].shape)]
    if not differ:
        return ""
    shown = "; ".join(f"{k}: checkpoint {fmt_shape(tuple(loaded[k].shape))} vs model "
                      f"{fmt_shape(tuple(own[k].shape))}" for k in differ[:5])
    more = f"; … {len(differ) - 5} more" if len(differ) > 5 else ""
    return f"{len(differ)} of {len(shared)} tensors differ in shape: {shown}{more}"


def _sizes(args: list[Any]) -> list[int] | None:
    """view(2, 3) / view((2, 3)) / view(torch.Size) -> [2, 3]."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = list(args[0])
    return [int(a) for a in args] if args and all(isinstance(a, int) for a in args) else None


def _view_hint(ev: _Evaluator, node: ast.AST, tensors: list[Operand], message: str) -> str:
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


def _by_parameter(ev: _Evaluator, node: ast.AST, tensors: list[Operand]) -> dict[str, Operand]:
    """The tensor operands of a function call under the callee's parameter names (target=..., input=...)."""
    import inspect

    if not isinstance(node, ast.Call):
        return {}
    callee = ev.value_of(node.func)
    try:
        bound = inspect.signature(callee).bind_partial(*node.args, **{k.arg: k.value for k in node.keywords})
    except (TypeError, ValueError):
        return {}
    by_text = {o.expr: o for o in tensors}
    unparse = getattr(ast, "unparse", None)
    return {p: by_text[unparse(n)] for p, n in bound.arguments.items()
            if unparse is not None and isinstance(n, ast.AST) and unparse(n) in by_text}


def _dims_hint(ev: _Evaluator, node: ast.AST, tensors: list[Operand], message: str) -> str:
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
    got_shape = tuple(int(d) for d in shape.group(1).replace(" ", "").split(",") if d) if shape else None
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
    return f"{o.expr} {fmt_shape(o.shape)} has {len(o.shape)} dims, but {wanted} is expected"


# ----------------------------------------------------------------------------- the explanation

def explain_frame(tb: Any, kind: str = "", message: str = "") -> FrameExplanation | None:
    """The failing operation of one traceback entry and its operands; None without source.

    ``kind`` (from ``classify``) and the error ``message`` pick the hint when the operation alone cannot.
    """
    frame = tb.tb_frame
    filename, lineno = frame.f_code.co_filename, tb.tb_lineno
    lines = linecache.getlines(filename, frame.f_globals)
    if not lines:
        return None
    source = "".join(lines)
    tree = _tree(filename, source)
    stmt = _statement(tree, lineno) if tree is not None else None
    if stmt is None:
        return None
    ev = _Evaluator(frame)
    for expr in _header_exprs(stmt):
        ev.run(expr)
    pos = _position(tb)
    node = _find_node(stmt, pos) if pos else None
    if node is None and isinstance(stmt, ast.AugAssign) and pos and pos[0] == stmt.lineno:
        node = stmt
    if node is None and ev.failed is not None:
        node = ev.failed.node
    if node is None:  # fall back to the outermost call of the statement (e.g. a module's forward)
        node = next((n for e in _header_exprs(stmt) for n in ast.walk(e) if isinstance(n, ast.Call)), None)
    if node is not None:
        ev.run(node)  # AugAssign and targets are not evaluated on their own
        callee, args = _operand_nodes(node)
        operands = [o for o in (_operand(ev, n) for n in callee) if o.kind in ("tensor", "module")]
        operands += [o for o in (_operand(ev, n) for n in args) if o.kind in ("tensor", "module", "unknown")]
        expr = ast.unparse(node) if not isinstance(node, ast.AugAssign) else _source_text(source, stmt, lineno)
    else:
        operands, expr = [], ""
    return FrameExplanation(
        filename=filename, lineno=lineno, function=frame.f_code.co_name,
        source=_source_text(source, stmt, lineno), expr=expr if node is not None else "",
        operands=tuple(operands), hint=_hint(ev, node, operands, kind, message) if node is not None else "",
    )


def _entries(tb: Any) -> list[Any]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def explain(exc: BaseException, tb: Any = None) -> ShapeExplanation | None:
    """Explain ``exc`` if it is a shape error: the innermost frame with tensor operands, and the
    innermost frame of the user's own code when that is a different one."""
    kind = classify(exc)
    if kind is None:
        return None
    entries = _entries(tb if tb is not None else exc.__traceback__)
    chosen: list[FrameExplanation] = []
    for entry in reversed(entries):
        try:
            fe = explain_frame(entry, kind, str(exc))
        except Exception:
            continue
        if fe is not None and any(o.kind == "tensor" for o in fe.operands):
            chosen.append(fe)
            break
    user = next((e for e in reversed(entries) if is_user_file(e.tb_frame.f_code.co_filename)), None)
    if user is not None and not any(fe.filename == user.tb_frame.f_code.co_filename and
                                    fe.lineno == user.tb_lineno for fe in chosen):
        try:
            fe = explain_frame(user, kind, str(exc))
        except Exception:
            fe = None
        if fe is not None:
            chosen.append(fe)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return ShapeExplanation(kind=kind, error=f"{type(exc).__name__}: {first}", frames=tuple(chosen))

