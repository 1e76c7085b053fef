"""Every kind of tensor renders without raising, with the right shape, dtype and flags."""

import warnings

import pytest
import torch

from zoo import ZOO, param_with_grad

from tensor_dap import describe, summarize


@pytest.mark.parametrize("name,factory,expected_head,tokens", ZOO, ids=[z[0] for z in ZOO])
def test_zoo_renders(name, factory, expected_head, tokens):
    x = factory()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no non-leaf .grad warnings, no deprecation noise
        line = summarize(x)
    assert line.startswith(expected_head + " ") or line == expected_head, line
    for token in tokens:
        assert token in line, (token, line)
    s = describe(x)
    assert s.numel == x.numel() if not x.is_nested else s.numel > 0
    if name != "freed storage":
        assert s.error is None, s.error


def test_zoo_is_big_enough():
    assert len(ZOO) >= 30


def test_requires_grad_builds_no_graph():
    x = torch.randn(100, requires_grad=True)
    before = x.grad_fn
    describe(x)
    assert x.grad is None and before is None


def test_grad_summary_nested():
    p = param_with_grad()
    s = describe(p)
    assert s.has_grad and s.grad is not None and s.grad.min == 3.0 and s.grad.max == 3.0


def test_non_tensor_does_not_raise():
    s = describe([1, 2, 3])
    assert s.error == "not a tensor" and str(s) == "list (not a tensor)"


def test_failure_degrades_to_note(monkeypatch):
    import tensor_dap.summary._stats as stats

    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(stats, "cpu_stats", boom)
    s = describe(torch.ones(3, 3))
    assert s.shape == (3, 3) and s.error == "RuntimeError: kaboom"
    assert str(s).endswith("<RuntimeError: kaboom>")


def test_json_is_plain_data():
    import json

    s = describe(torch.tensor([1.0, float("nan")]))
    data = json.loads(json.dumps(s.to_dict()))
    assert data["shape"] == [2] and data["has_nan"] is True and data["values"] == [1.0, "nan"]


@pytest.mark.parametrize("name,factory,expected_head,tokens", ZOO, ids=[z[0] for z in ZOO])
def test_json_round_trip(name, factory, expected_head, tokens):
    """What the extension and incident bundles read back is the same summary."""
    import json
    import math

    from tensor_dap import TensorSummary

    s = describe(factory())
    back = TensorSummary.from_dict(json.loads(json.dumps(s.to_dict())))
    assert str(back) == str(s)
    for field in ("min", "max", "mean", "std"):
        a, b = getattr(s, field), getattr(back, field)
        assert a == b or (math.isnan(a) and math.isnan(b)), field
