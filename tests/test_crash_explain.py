"""Shape-error explanations: the operands of the failing line and their shapes, evaluated safely."""

import pytest
import torch
from torch import nn

from tensor_dap.shape_explain import classify, explain

pytestmark = pytest.mark.timeout(60)


def _explain(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the point is to catch what the user's code raises
        return explain(exc)
    raise AssertionError("no exception")


def _ops(frame):
    return {o.expr: o.shape for o in frame.operands if o.kind == "tensor"}


def test_matmul_names_operands_and_inner_dims():
    x, w = torch.randn(4, 3), torch.randn(4, 5)

    def step():
        h = x * 2
        return h @ w

    ex = _explain(step)
    assert ex.kind == "matmul"
    frame = ex.frames[0]
    assert frame.source == "return h @ w" and frame.function == "step"
    assert _ops(frame) == {"h": (4, 3), "w": (4, 5)}
    assert "h has 3 columns" in frame.hint and "w has 4 rows" in frame.hint


def test_broadcast_with_computed_operand():
    x = torch.randn(4, 3)
    ex = _explain(lambda: x + torch.ones(4, 4) * 2)
    assert ex.kind == "broadcast"
    assert _ops(ex.frames[0]) == {"x": (4, 3), "torch.ones(4, 4) * 2": (4, 4)}
    assert "dim -1 is 3 vs 4" in ex.frames[0].hint


def test_module_call_explained_in_library_frame_and_user_frame():
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU())
    x = torch.randn(2, 3)
    ex = _explain(lambda: model(x))
    inner, outer = ex.frames
    assert inner.filename.endswith("linear.py")
    assert _ops(inner) == {"input": (2, 3), "self.weight": (5, 4), "self.bias": (5,)}
    assert "input's last dim is 3" in inner.hint
    assert outer.filename == __file__ and _ops(outer) == {"x": (2, 3)}
    assert any(o.kind == "module" and o.expr == "model" for o in outer.operands)


def test_linear_module_hint_and_cat_operands():
    fc = nn.Linear(4, 5)
    x, w = torch.randn(2, 3), torch.randn(2, 5)
    ex = _explain(lambda: fc(x.view(2, 3)))
    assert "fc expects in_features=4" in ex.frames[-1].hint
    ex = _explain(lambda: torch.cat([x, w.t()], dim=0))
    assert ex.kind == "size mismatch" and _ops(ex.frames[0]) == {"x": (2, 3), "w.t()": (5, 2)}


def test_inplace_broadcast_hint():
    def step():
        a = torch.zeros(3)
        a += torch.ones(4, 3)

    ex = _explain(step)
    assert "cannot change a's shape [3]" in ex.frames[0].hint


def test_reevaluation_runs_no_forward_and_allocates_nothing():
    calls = []

    class Counting(nn.Module):
        def forward(self, x):
            calls.append(1)
            return x

    model = Counting()
    w = torch.randn(7, 5)

    def step():
        # torch.randn(10**6, 10**6) would need 4 TB: it is only ever evaluated on the meta device
        return model(torch.ones(2, 3)) @ w + torch.randn(10**6, 10**6).sum()

    ex = _explain(step)
    assert calls == [1]  # the original call only
    frame = ex.frames[0]
    assert frame.expr == "model(torch.ones(2, 3)) @ w"
    assert _ops(frame) == {"w": (7, 5)}  # the module's output is not recomputed
    assert [o.kind for o in frame.operands] == ["unknown", "tensor"]


def test_not_a_shape_error():
    assert classify(KeyError("x")) is None
    assert classify(RuntimeError("CUDA out of memory")) is None
    try:
        raise ValueError("bad learning rate")
    except ValueError as exc:
        assert explain(exc) is None
