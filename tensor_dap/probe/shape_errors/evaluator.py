"""Re-evaluate the safe parts of a failing statement, on ``meta`` copies of its tensors.

Names, plain attributes and entries of built-in containers are read from the frame (``pure``
says what is plain), and only the pure torch functions and tensor methods ``pure`` lists run,
on ``meta`` tensors (shapes and dtypes only), so nothing is computed, allocated, mutated or sent
to a device, and no user code, property, optimizer step or module forward runs again. Every
value is remembered, so the explanation can show each operand's shape.
"""

from __future__ import annotations

import ast
import builtins
import warnings
from typing import Any

from ...kinds import is_tensor
from ...summary.tensor import no_torch_function
from . import pure

_DEVICE_MOVES = {"cuda", "cpu", "to", "pin_memory", "mps", "xpu"}
_PURE_BUILTINS = (float, int, abs, round, min, max, bool)
_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}



class Unknown(Exception):
    """A sub-expression that is not evaluated (it could have side effects, or an input is unknown)."""


class Failed(Exception):
    def __init__(self, node: ast.AST, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.node = node


def meta(value: Any) -> Any:
    import torch

    if is_tensor(value):
        if value.device.type == "meta":
            return value
        return torch.empty_like(value, device="meta") if value.layout == torch.strided else _raise_unknown()
    if isinstance(value, (list, tuple)) and any(is_tensor(v) for v in value):
        return type(value)(meta(v) for v in value) if type(value) in (list, tuple) else _raise_unknown()
    return value


def _raise_unknown() -> Any:
    raise Unknown()


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
                if node.id in scope:
                    value = scope[node.id]
                    return value, str(value.device) if is_tensor(value) else ""
            raise Unknown()
        if isinstance(node, (ast.Tuple, ast.List)):
            items = self.ev_all(node.elts)
            return (tuple(items) if isinstance(node, ast.Tuple) else items), self._inputs_device(node.elts)
        if isinstance(node, ast.Slice):
            parts = [self.ev(p) if p is not None else None for p in (node.lower, node.upper, node.step)]
            return slice(*parts), ""
        if isinstance(node, ast.Attribute):
            base = self.ev(node.value)
            value = self._attribute(base, node.attr)
            if is_tensor(value) and value.device.type != "meta":
                return value, str(value.device)
            return value, self.device_of(node.value)
        if isinstance(node, ast.Subscript):
            base, index = self.ev_all([node.value, node.slice])
            if is_tensor(base):
                return self._op(node, lambda: meta(base)[meta(index)], [node.value])
            if pure.indexable(base) and not is_tensor(index):
                value = base[index]
                return value, str(value.device) if is_tensor(value) else ""
            raise Unknown()
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            operand = self.ev(node.operand)
            op = {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Invert: lambda v: ~v}[type(node.op)]
            return self._op(node, lambda: op(meta(operand)), [node.operand])
        if isinstance(node, ast.BinOp):
            left, right = self.ev_all([node.left, node.right])
            if not (is_tensor(left) or is_tensor(right)):
                if isinstance(left, (int, float)) and isinstance(right, (int, float)):
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
                return getattr(base, name)
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
                    dtypes = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.dtype)]
                    return self._op(node, lambda: meta(base).to(dtypes[0]) if dtypes else meta(base),
                                    [func.value])
                return self._op(node, lambda: getattr(meta(base), func.attr)(
                    *[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()}),
                    [func.value, *node.args])
        callee, *args = self.ev_all([func, *node.args])
        kwargs = dict(zip((k.arg for k in node.keywords), self.ev_all([k.value for k in node.keywords])))
        if callee in _PURE_BUILTINS and all(isinstance(a, (int, float, str)) for a in [*args, *kwargs.values()]):
            return callee(*args, **kwargs), ""  # float('-inf'), int(d / 2): plain numbers
        if callee is len and len(args) == 1 and not kwargs and (is_tensor(args[0]) or pure.indexable(args[0])):
            return len(args[0]), ""
        if not pure.torch_function(callee):
            raise Unknown()  # never run a forward, a step or any other user code again
        return self._op(node, lambda: callee(*[meta(a) for a in args],
                                             **{k: meta(v) for k, v in kwargs.items()}), list(node.args))


def _arith(op: ast.operator, a: Any, b: Any) -> Any:
    import operator

    table = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
             ast.MatMult: operator.matmul, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
             ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
    fn = table.get(type(op))
    if fn is None:
        raise Unknown()
    return fn(a, b)
