"""Explaining a shape error runs none of the user's code: no dunder, property, metaclass hook or patched torch
function, whatever position the object takes in the failing line; constant arithmetic stays small."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from tensor_dap.probe.shape_errors import explain

pytestmark = pytest.mark.timeout(120)
HARNESS = Path(__file__).resolve().parents[1] / "harness"
CALLS: list = []


def _explain(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the point is to catch what the user's code raises
        before = len(CALLS)
        ex = explain(exc)
        return ex, CALLS[before:]
    raise AssertionError("no exception")


def _ops(frame):
    return {o.expr: o.shape for o in frame.operands if o.kind == "tensor"}


class TripMeta(type):
    def __getattribute__(cls, name):
        CALLS.append(f"meta.{name}")
        return type.__getattribute__(cls, name)

    def __eq__(cls, other):
        CALLS.append("meta.__eq__")
        return False

    def __hash__(cls):
        CALLS.append("meta.__hash__")
        return 0

    def __instancecheck__(cls, obj):
        CALLS.append("meta.__instancecheck__")
        return False


def _trip(name):
    def method(self, *args, **kwargs):
        CALLS.append(name)
        raise TypeError(name)
    return method


_DUNDERS = ["__ne__", "__lt__", "__index__", "__int__", "__float__", "__len__", "__iter__", "__getitem__",
            "__call__", "__neg__", "__pos__", "__invert__", "__add__", "__radd__", "__mul__", "__rmul__",
            "__matmul__", "__rmatmul__", "__pow__", "__rpow__", "__lshift__", "__rlshift__", "__bool__", "__array__",
            "__contains__", "__format__", "__repr__", "__str__", "__dir__", "__reduce_ex__", "__getattr__"]


class Tripwire(metaclass=TripMeta):
    """Records every hook Python could call on it (and any read of an attribute)."""

    w = torch.randn(4, 3)  # a class attribute: reading it through the metaclass would record

    locals().update({name: _trip(name) for name in _DUNDERS})

    def __eq__(self, other):
        CALLS.append("__eq__")
        return False

    def __hash__(self):
        CALLS.append("__hash__")
        return hash("w")  # collides with the key "w" of a dict

    def __getattribute__(self, name):
        CALLS.append(f"getattribute.{name}")
        return object.__getattribute__(self, name)

    @property
    def __class__(self):  # isinstance(obj, torch.Tensor) would read this
        CALLS.append("__class__")
        return torch.Tensor

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        CALLS.append("__torch_function__")
        return NotImplemented


class PropertyTensor(torch.Tensor):
    """A tensor subclass whose metadata are Python properties and methods."""

    @property
    def shape(self):
        CALLS.append("shape")
        return torch.Size([99])

    @property
    def dtype(self):
        CALLS.append("dtype")
        return torch.int8

    @property
    def device(self):
        CALLS.append("device")
        return torch.device("cpu")

    def __len__(self):
        CALLS.append("len")
        return 99

    def size(self, *args):
        CALLS.append("size")
        return torch.Size([99])


def test_a_hostile_object_in_every_position_of_the_failing_line_runs_nothing():
    a, b, t = torch.randn(2, 3), torch.randn(4, 5), Tripwire()
    d = {t: 1, "w": torch.randn(4, 3)}
    lines = [
        lambda: (a @ b, t(a), t.w, t.missing, t[0], a[t], -t, t + 1, 1 + t, t @ a, a @ t, a + t, a == t, len(t)),
        lambda: (a @ b, t ** 2, 2 ** t, 1 << t, torch.zeros(t), torch.zeros((t, 2)), a.view(t), a.view(2, t)),
        lambda: (a @ b, a.reshape([t]), a.expand(t, 3), a[t:], a[:, t], torch.cat([a, t]), float(t), abs(t)),
        lambda: (a @ b, d[t], d["w"], round(t), max(t, 1), a.to(t), a.masked_fill(t, 0.0), t.w @ a, Tripwire.w),
        lambda: a @ b + t(a) + t.w + d["w"] + len(t) + torch.matmul(a, t) + nn.functional.linear(t, a),
    ]
    for line in lines:
        ex, calls = _explain(line)
        assert calls == [], calls
        assert _ops(ex.frames[0])["a"] == (2, 3) and _ops(ex.frames[0])["b"] == (4, 5)


def test_a_callee_is_recognised_by_identity_only():
    class Callable(metaclass=TripMeta):
        def __call__(self, t):
            CALLS.append("call")
            return t

        def __eq__(self, other):  # `callee in (float, int, ...)` would call this
            CALLS.append("__eq__")
            return False

        __hash__ = object.__hash__

        def __getattr__(self, name):  # getattr(callee, "__name__") would call this
            CALLS.append(f"getattr.{name}")
            raise AttributeError(name)

    a, b, e = torch.randn(2, 3), torch.randn(4, 5), Callable()
    for line in (lambda: e(a) @ b, lambda: torch.matmul(e(a), b), lambda: a @ e(b).t()):
        ex, calls = _explain(line)
        assert calls == [] and any(o.kind == "unknown" and o.expr.startswith("e(") for o in ex.frames[0].operands)


def test_a_replaced_torch_function_is_not_called_again(monkeypatch):
    real, calls = torch.matmul, []

    def logged(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "matmul", logged)
    a, b = torch.randn(2, 3), torch.randn(4, 5)
    ex, _ = _explain(lambda: torch.matmul(a, b))
    assert calls == [1]  # the real run only
    assert ex is not None


def test_tensor_metadata_is_read_from_torch_not_from_subclass_properties():
    s = torch.randn(2, 3).as_subclass(PropertyTensor)
    b = torch.randn(4, 5)
    ex, calls = _explain(lambda: (s @ b, len(s), s.shape, s.dtype, s.size(0), s.view(6) + s.T))
    assert calls == []
    assert ex.frames[0].operands[0].shape == (2, 3) and ex.frames[0].operands[0].dtype == "torch.float32"
    assert "s has 3 columns" in ex.frames[0].hint


def test_a_dispatch_subclass_is_left_unknown():
    class Dispatching(torch.Tensor):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            CALLS.append("dispatch")
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")

    x = torch.randn(2, 3).as_subclass(Dispatching)
    ex, calls = _explain(lambda: x @ torch.randn(4, 5))
    assert calls == []
    assert ex.frames[0].operands[0].kind == "unknown"


def test_module_configuration_behind_a_property_or_getattr_is_not_read():
    class Odd(nn.Linear):
        @property
        def in_features(self):
            CALLS.append("in_features")
            return 4

        @in_features.setter
        def in_features(self, value):
            pass

    fc, x = Odd(4, 5), torch.randn(2, 3)
    ex, calls = _explain(lambda: fc(x))
    assert "in_features" not in calls and not any("in_features=" in f.hint for f in ex.frames)


def test_a_user_mapping_given_to_load_state_dict_is_not_read():
    from collections.abc import Mapping

    class Lazy(Mapping):
        def __getitem__(self, key):
            CALLS.append("getitem")
            return torch.zeros(3)

        def __iter__(self):
            CALLS.append("iter")
            return iter(["weight", "bias"])

        def __len__(self):
            return 2

    model = nn.Linear(4, 5)
    ex, calls = _explain(lambda: model.load_state_dict(Lazy()))
    assert ex is not None and calls == []


_HUGE = textwrap.dedent("""
    import json, sys, time, torch
    sys.path.insert(0, sys.argv[1])
    from worst_cases import measure
    from tensor_dap.probe.shape_errors import explain
    a, b, n = torch.randn(2, 3), torch.randn(4, 5), 10 ** 9

    def pow_():  # each is a statement of its own: the explanation evaluates the whole of it
        return a @ b + 2 ** 2 ** 30

    def shift():
        return a @ b + (1 << n)

    def big_base():
        return a @ b * (10 ** 5000) ** 100000

    def squaring():
        return a @ b + ((2 ** 60) ** 60) ** 60 * ((2 ** 60) ** 60) ** 60

    def small():
        return a @ b + (1 >> n) + 2.0 ** -n + 3 ** 40

    lines = {"pow": pow_, "shift": shift, "big base": big_base, "squaring": squaring, "small": small}
    try:
        a @ b  # warm-up: the first explanation imports torch's meta kernels
    except RuntimeError as exc:
        explain(exc)
    for name, line in lines.items():
        try:
            line()
        except RuntimeError as exc:
            ms, extra, ex = measure(exc, explain)
            print(json.dumps({"name": name, "ms": ms, "extra": extra, "ops": [o.shape for o in ex.frames[0].operands]}))
""")


def test_constant_arithmetic_is_bounded_in_time_and_memory(tmp_path):
    script = tmp_path / "huge.py"  # a file: the explanation reads the failing line's source
    script.write_text(_HUGE)
    r = subprocess.run([sys.executable, str(script), str(HARNESS)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    results = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(results) == 5
    for d in results:
        assert d["ms"] < 500 and d["extra"] < 20 * 2**20, d  # computed, 2**2**30 alone is 128 MiB and seconds
        assert [2, 3] in d["ops"] and [4, 5] in d["ops"], d


class IndexTensor(torch.Tensor):
    def __index__(self):
        CALLS.append("__index__")
        return 1


def test_a_tensor_subclass_used_as_a_number_or_bound_runs_nothing():
    a, b = torch.randn(2, 3), torch.randn(4, 5)
    i = torch.tensor(1).as_subclass(IndexTensor)
    ex, calls = _explain(lambda: (a @ b, a[i:], [1, 2, 3][i], a.view(i, -1), torch.zeros(i)))
    assert calls == [] and _ops(ex.frames[0]) == {"a": (2, 3), "b": (4, 5)}


def test_a_huge_list_in_the_frame_is_not_walked():
    a, b = torch.randn(2, 3), torch.randn(4, 5)
    rows = [[0.0] * 1000 for _ in range(10_000)]  # 10^7 numbers
    import time

    try:
        (a @ b, torch.tensor(rows))
    except RuntimeError as exc:
        start = time.perf_counter()
        ex = explain(exc)
        assert time.perf_counter() - start < 0.5 and _ops(ex.frames[0]) == {"a": (2, 3), "b": (4, 5)}
