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

from .pdb_display import is_module, is_tensor

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
                        r"too many indices|dimensions? (?:of|but)|expected .* dims?\b|got \d+D", re.IGNORECASE)),
)
_ELEMENTWISE = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
                ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)
_MATMUL_CALLS = {"matmul", "mm", "bmm", "mv", "linear", "baddbmm", "addmm", "einsum", "dot", "inner"}
_DEVICE_MOVES = {"cuda", "cpu", "to", "pin_memory", "mps", "xpu"}
_NEVER_CALL = re.compile(r"^(save|load|manual_seed|seed|set_|use_|compile|backward|register|item$|tolist$|"
                         r"numpy$|share_memory|record_stream|data_ptr|synchronize)")
_CONTAINERS = (list, tuple, dict, str)


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
        if isinstance(node, (ast.BinOp, ast.Call, ast.Subscript, ast.UnaryOp, ast.AugAssign)) \
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
    from .pdb_display import short_repr

    return Operand(text, "value", detail=short_repr(value))


def _module_text(module: Any) -> str:
    extra = ""
    try:
        extra = module.extra_repr()
    except Exception:
        pass
    return f"{type(module).__name__}({extra})" if len(extra) < 100 else type(module).__name__


def _shape_text(shape: tuple[int, ...] | None) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]" if shape is not None else "?"


def _broadcast_hint(a: Operand, b: Operand) -> str:
    sa, sb = a.shape or (), b.shape or ()
    for i in range(1, min(len(sa), len(sb)) + 1):
        da, db = sa[-i], sb[-i]
        if da != db and da != 1 and db != 1:
            return (f"{a.expr} {_shape_text(sa)} and {b.expr} {_shape_text(sb)} do not broadcast: "
                    f"dim -{i} is {da} vs {db} (sizes must match or one must be 1)")
    return ""


def _inplace_hint(target: Operand, value: Operand) -> str:
    st, sv = target.shape or (), value.shape or ()
    width = max(len(st), len(sv))
    padded = [(1,) * (width - len(s)) + tuple(s) for s in (st, sv)]
    result = tuple(max(a, b) for a, b in zip(*padded))
    if result != tuple(st):
        return (f"the result would have shape {_shape_text(result)}, but an in-place operation cannot "
                f"change {target.expr}'s shape {_shape_text(st)}")
    return ""


def _matmul_hint(a: Operand, b: Operand, linear: bool) -> str:
    sa, sb = a.shape or (), b.shape or ()
    if not sa or not sb:
        return ""
    k = sa[-1]
    if linear:  # F.linear(x, W): x[..., in] against W[out, in]
        inner = sb[-1]
        if k != inner:
            return (f"{a.expr}'s last dim is {k} but {b.expr} {_shape_text(sb)} expects {inner} "
                    f"input features")
        return ""
    inner = sb[-2] if len(sb) >= 2 else sb[0]
    if k != inner:
        where = "dim -2" if len(sb) >= 2 else "dim 0"
        return (f"{a.expr} {_shape_text(sa)} @ {b.expr} {_shape_text(sb)}: the inner dimensions differ, "
                f"{a.expr} has {k} columns (last dim) but {b.expr} has {inner} rows ({where})")
    return ""


def _module_hint(module: Any, expr: str, arg: Operand) -> str:
    in_features = getattr(module, "in_features", None)
    if in_features is not None and arg.shape and arg.shape[-1] != in_features:
        return f"{expr} expects in_features={in_features}, but {arg.expr} {_shape_text(arg.shape)} " \
               f"has last dim {arg.shape[-1]}"
    in_channels = getattr(module, "in_channels", None)
    if in_channels is not None and arg.shape and len(arg.shape) >= 2:
        batched = len(arg.shape) > getattr(module, "_conv_dims", len(getattr(module, "kernel_size", ()))) + 1
        channels = arg.shape[1] if batched else arg.shape[0]
        if channels != in_channels:
            return f"{expr} expects in_channels={in_channels}, but {arg.expr} {_shape_text(arg.shape)} " \
                   f"has {channels} channels"
    return ""


def _hint(ev: _Evaluator, node: ast.AST, operands: list[Operand]) -> str:
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
        callee = ev.values.get(id(node.func), (None, ""))[0]
        if is_module(callee) and tensors:
            return _module_hint(callee, ast.unparse(node.func), tensors[0])
        if name in _MATMUL_CALLS and len(tensors) >= 2:
            return _matmul_hint(tensors[0], tensors[1], linear=name == "linear")
    return ""


# ----------------------------------------------------------------------------- the explanation

def explain_frame(tb: Any) -> FrameExplanation | None:
    """The failing operation of one traceback entry and its operands; None without source."""
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
        operands=tuple(operands), hint=_hint(ev, node, operands) if node is not None else "",
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
            fe = explain_frame(entry)
        except Exception:
            continue
        if fe is not None and any(o.kind == "tensor" for o in fe.operands):
            chosen.append(fe)
            break
    user = next((e for e in reversed(entries) if is_user_file(e.tb_frame.f_code.co_filename)), None)
    if user is not None and not any(fe.filename == user.tb_frame.f_code.co_filename and
                                    fe.lineno == user.tb_lineno for fe in chosen):
        try:
            fe = explain_frame(user)
        except Exception:
            fe = None
        if fe is not None:
            chosen.append(fe)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return ShapeExplanation(kind=kind, error=f"{type(exc).__name__}: {first}", frames=tuple(chosen))

