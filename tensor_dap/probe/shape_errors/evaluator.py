"""Re-evaluate the safe parts of a failing statement, on ``meta`` copies of its tensors.

Names, plain attributes and entries of built-in containers are read from the frame (``pure``
says what is plain), and only the pure torch functions and tensor methods ``pure`` lists run,
on ``meta`` tensors (shapes and dtypes only) and plain data, so nothing is computed, allocated,
mutated or sent to a device, and no user code, property, optimizer step or module forward runs
again. Arithmetic on constants is refused where its result would be huge (``2 ** 2 ** 24``).
Every value is remembered, so the explanation can show each operand's shape.
"""

from __future__ import annotations

import ast
import builtins
import warnings
from typing import Any

from ...summary.tensor import no_torch_function
from . import pure, static
from .static import is_tensor

_DEVICE_MOVES = {"cuda", "cpu", "to", "pin_memory", "mps", "xpu"}
_PURE_BUILTINS = (float, int, abs, round, min, max, bool)
_NUMBERS = (int, float, bool)
_MAX_BITS = 1 << 16  # an integer constant the explanation computes: far above any shape, far below a stall
_DERIVED = {"T", "mT", "H", "mH", "real", "imag"}  # tensor attributes that are new views: taken on the meta copy
_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}



class Unknown(Exception):
    """A sub-expression that is not evaluated (it could have side effects, or an input is unknown)."""


class Failed(Exception):
    def __init__(self, node: ast.AST, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.node = node


def meta(value: Any) -> Any:
    """What a torch op is given in place of ``value``: a meta tensor of the same shape, dtype and strides,
    plain data as it is (lists and tuples item by item); Unknown for anything else (a user object's
    ``__index__``, ``__float__`` or ``__radd__`` would run inside the op)."""
    if not pure.plain(value):
        raise Unknown()
    return _meta(value)


def _meta(value: Any) -> Any:
    import torch

    if is_tensor(value):
        try:
            if static.tensor_attribute(value, "layout") != torch.strided:
                raise Unknown()
            return torch.empty_strided(tuple(static.tensor_attribute(value, "shape")), static.tensor_strides(value),
                                       dtype=static.tensor_attribute(value, "dtype"), device="meta")
        except AttributeError as exc:  # a subclass whose dispatch is its own
            raise Unknown() from exc
    if static.one_of(value, (list, tuple)):
        return type(value)(_meta(v) for v in value)
    return value  # plain: checked by meta


def device_text(value: Any, *, real: bool = False) -> str:
    """The device of a tensor, read through torch's C getter; '' for anything else, and for a meta tensor unless
    ``real`` (a value the frame holds, not a meta copy made here: a program's own meta tensor is on meta)."""
    if not is_tensor(value):
        return ""
    try:
        device = static.tensor_attribute(value, "device")
    except AttributeError:
        return ""
    return "" if device.type == "meta" and not real else str(device)


class Evaluator:
    """Evaluates the safe parts of one statement against one frame, remembering every value."""

    def __init__(self, frame: Any) -> None:
        self.locals = frame.f_locals
        self.globals = frame.f_globals
        self.values: dict[int, tuple[Any, str]] = {}  # id(node) -> (value, device of the real inputs)
        self.failed: Failed | None = None

    def run(self, node: ast.AST) -> None:
        try:
            self.ev(node)
        except (Unknown, Failed):
            pass
        except Exception:
            pass  # any surprise only means less to explain

    def ev(self, node: ast.AST) -> Any:
        key = id(node)
        if key in self.values:
            return self.values[key][0]
        try:
            value, device = self._ev(node)
        except Failed as failed:
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
            except (Unknown, Failed) as exc:
                first = first if isinstance(first, Failed) else exc
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
                value = dict.get(scope, node.id, static.MISSING) if static.inherits(scope, dict) else static.MISSING
                if value is not static.MISSING:
                    return value, device_text(value, real=True)
            raise Unknown()
        if isinstance(node, (ast.Tuple, ast.List)):
            items = self.ev_all(node.elts)
            return (tuple(items) if isinstance(node, ast.Tuple) else items), self._inputs_device(node.elts)
        if isinstance(node, ast.Slice):
            parts = [self.ev(p) if p is not None else None for p in (node.lower, node.upper, node.step)]
            return slice(*parts), ""
        if isinstance(node, ast.Attribute):
            base = self.ev(node.value)
            if is_tensor(base) and node.attr in _DERIVED:
                return self._op(node, lambda: getattr(meta(base), node.attr), [node.value])
            value = self._attribute(base, node.attr)
            return value, device_text(value, real=True) or self.device_of(node.value)
        if isinstance(node, ast.Subscript):
            base, index = self.ev_all([node.value, node.slice])
            if is_tensor(base):
                return self._op(node, lambda: meta(base)[meta(index)], [node.value])
            value = _entry(base, index)
            return value, device_text(value)
        if isinstance(node, ast.IfExp):  # x if self.training else None: only the branch the test picks
            value = self.ev(node.body if self._truth(node.test) else node.orelse)
            return value, self.device_of(node.body) or self.device_of(node.orelse)
        if isinstance(node, ast.BoolOp):  # short-circuit, as Python does
            for i, part in enumerate(node.values):
                truth = self._truth(part)
                if i == len(node.values) - 1 or truth == isinstance(node.op, ast.Or):
                    return self.value_of(part), self.device_of(part)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not self._truth(node.operand), ""
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            operand = self.ev(node.operand)
            op = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Invert: lambda v: ~v}[type(node.op)]
            if static.one_of(operand, _NUMBERS):
                return op(operand), ""
            if not is_tensor(operand):
                raise Unknown()  # a user object's __neg__
            return self._op(node, lambda: op(meta(operand)), [node.operand])
        if isinstance(node, ast.BinOp):
            left, right = self.ev_all([node.left, node.right])
            if not (is_tensor(left) or is_tensor(right)):
                if static.one_of(left, _NUMBERS) and static.one_of(right, _NUMBERS):
                    return _arith(node.op, left, right), ""
                raise Unknown()
            return self._op(node, lambda: _arith(node.op, meta(left), meta(right)), [node.left, node.right])
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            left, right = self.ev_all([node.left, node.comparators[0]])
            if not (is_tensor(left) or is_tensor(right)):
                raise Unknown()
            compare = _COMPARE[type(node.ops[0])]
            return self._op(node, lambda: compare(meta(left), meta(right)), [node.left, node.comparators[0]])
        if isinstance(node, ast.Call):
            return self._call(node, torch)
        raise Unknown()

    def _truth(self, node: ast.AST) -> bool:
        """The truth of a plain value (a flag, a number, None); any other object's ``__bool__`` is user code, and a
        tensor's would read its data."""
        value = self.ev(node)
        if value is None or static.one_of(value, _NUMBERS):
            return bool(value)
        raise Unknown()

    def _op(self, node: ast.AST, fn: Any, inputs: list[ast.AST]) -> tuple[Any, str]:
        import torch

        try:
            with torch.random.fork_rng(devices=[]), torch.device("meta"), no_torch_function():
                return fn(), self._inputs_device(inputs)
        except Unknown:
            raise
        except NotImplementedError as exc:  # no meta kernel: unknown, not a culprit
            raise Unknown() from exc
        except Exception as exc:
            raise Failed(node, exc) from exc

    @staticmethod
    def _attribute(base: Any, name: str) -> Any:
        """``base.name`` when it is plain data (see ``pure``), else Unknown."""
        if is_tensor(base):
            if not pure.tensor_attribute(name):
                raise Unknown()
            with no_torch_function(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # .grad of a non-leaf warns
                try:
                    return static.tensor_attribute(base, name)  # torch's getter, not a subclass's property
                except AttributeError as exc:
                    raise Unknown() from exc
        try:
            return pure.plain_attribute(base, name)
        except (pure.NotPlain, AttributeError) as exc:
            raise Unknown() from exc

    def _call(self, node: ast.Call, torch: Any) -> tuple[Any, str]:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise Unknown()
        func = node.func
        if isinstance(func, ast.Attribute):
            base = self.ev(func.value)
            if is_tensor(base):
                if func.attr not in _DEVICE_MOVES and not pure.tensor_method(func.attr):
                    raise Unknown()
                args = self.ev_all(node.args)
                kwargs = dict(zip((k.arg for k in node.keywords), self.ev_all([k.value for k in node.keywords])))
                if func.attr in _DEVICE_MOVES:  # shape-preserving; only a dtype change matters
                    dtypes = [a for a in list(args) + list(kwargs.values()) if static.one_of(a, (torch.dtype,))]
                    return self._op(node, lambda: meta(base).to(dtypes[0]) if dtypes else meta(base),
                                    [func.value])
                return self._op(node, lambda: getattr(meta(base), func.attr)(
                    *[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()}),
                    [func.value, *node.args])
        callee, *args = self.ev_all([func, *node.args])
        kwargs = dict(zip((k.arg for k in node.keywords), self.ev_all([k.value for k in node.keywords])))
        plain_args = all(static.one_of(a, (int, float, str)) for a in [*args, *kwargs.values()])
        if any(callee is b for b in _PURE_BUILTINS) and plain_args:  # identity: a user __eq__ never runs
            return callee(*args, **kwargs), ""  # float('-inf'), int(d / 2): plain numbers
        if callee is len and len(args) == 1 and not kwargs:
            return _length(args[0]), ""
        if not pure.torch_function(callee):
            raise Unknown()  # never run a forward, a step or any other user code again
        return self._op(node, lambda: callee(*[meta(a) for a in args],
                                             **{k: meta(v) for k, v in kwargs.items()}), list(node.args))


def _entry(base: Any, index: Any) -> Any:
    """``base[index]`` for a built-in or torch container and a plain key; Unknown otherwise."""
    if not (pure.indexable(base) and pure.key(index)):
        raise Unknown()
    if static.inherits(base, dict):  # matched by exact type and value: no key's __eq__ or __hash__ runs
        if not static.one_of(index, (int, str, bool, type(None))) or dict.__len__(base) > 100_000:
            raise Unknown()
        for k, v in dict.items(base):
            if type(k) is type(index) and k == index:
                return v
        raise Unknown()
    return base[index]


def _length(value: Any) -> int:
    if is_tensor(value):
        try:
            shape = static.tensor_attribute(value, "shape")
        except AttributeError as exc:
            raise Unknown() from exc
        if not shape:
            raise Unknown()
        return int(shape[0])
    if pure.indexable(value):
        return len(value)
    raise Unknown()


def _bounded(op: ast.operator, a: Any, b: Any) -> None:
    """Refuse integer arithmetic whose result would have more than _MAX_BITS bits (computing it could take
    minutes and gigabytes: ``2 ** 2 ** 24``, ``1 << 10 ** 9``)."""
    if not (static.one_of(a, (int, bool)) and static.one_of(b, (int, bool))):
        return
    if isinstance(op, ast.Pow) and b > 0 and abs(a) > 1 and b * a.bit_length() > _MAX_BITS:
        raise Unknown()
    if isinstance(op, ast.LShift) and b > 0 and a and a.bit_length() + b > _MAX_BITS:
        raise Unknown()
    if isinstance(op, ast.Mult) and a.bit_length() + b.bit_length() > _MAX_BITS:
        raise Unknown()


def _arith(op: ast.operator, a: Any, b: Any) -> Any:
    import operator

    _bounded(op, a, b)

    table = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
             ast.MatMult: operator.matmul, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
             ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
    fn = table.get(type(op))
    if fn is None:
        raise Unknown()
    return fn(a, b)
