"""Tensors inside torch.func transforms (vmap's batched tensors, grad's wrappers): torch refuses to read their values
there, so a summary reads the values they wrap, and says so; a tensor that escaped its transform still reads."""

from __future__ import annotations

import torch
from torch.func import grad, vmap

from tensor_dap.summary import describe, summarize
from tensor_dap.summary.transformed import plain, unwrapped


def test_a_batched_tensor_is_summarized_over_every_sample_with_its_logical_shape():
    seen = {}

    def per_sample(x: torch.Tensor) -> torch.Tensor:
        seen["x"], seen["y"] = describe(x), describe(x / 0)  # a row of zeros gives NaN, the rest ±Inf
        return x.sum()

    batch = torch.arange(12.0).reshape(3, 4) - 4  # sample 1 holds the one 0
    vmap(per_sample)(batch)
    x, y = seen["x"], seen["y"]
    assert x.error is None and x.shape == (4,) and x.numel == 4 and "vmap ×3" in x.notes
    assert (x.min, x.max) == (-4.0, 7.0)  # over the three samples
    assert x.values is None  # twelve values for a shape of four would mislead
    assert y.error is None and (y.nan, y.pos_inf, y.neg_inf) == (1, 7, 4)


def test_grad_wrappers_nested_in_vmap_are_named_from_the_outside_in_and_read():
    lines = []

    def loss(w: torch.Tensor) -> torch.Tensor:
        lines.append(summarize(w))
        return (w * 2).sum()

    vmap(grad(loss))(torch.arange(10.0).reshape(2, 5))
    assert lines == ["tensor[5] func.grad vmap ×2 x∈[0, 9] μ=4.5 σ=3.028 grad"]  # both samples' values


def test_a_tensor_that_escaped_its_transform_still_reads_and_plain_keeps_other_values():
    escaped = []
    vmap(grad(lambda w: escaped.append(w * 3) or (w * 3).sum()))(torch.ones(2, 5))
    (t,) = escaped
    assert torch._C._functorch.is_functorch_wrapped_tensor(t)
    inner, notes = unwrapped(t)
    assert notes == ("func.grad", "vmap ×2") and inner.shape == (2, 5) and bool((inner == 3).all())
    assert describe(t).error is None and describe(t).max == 3.0
    plain_tensor = torch.zeros(2)
    assert plain(plain_tensor) is plain_tensor and plain(3) == 3
    out = plain((t, [t], "x"))
    assert out[0].shape == (2, 5) and out[1][0].shape == (2, 5) and out[2] == "x"
    from collections import namedtuple

    Pair = namedtuple("Pair", "a b")
    kept = Pair(plain_tensor, 1)
    assert plain(kept) is kept  # nothing wrapped: as it came
    both = plain(Pair(t, 2))
    assert type(both) is Pair and both.a.shape == (2, 5) and both.b == 2
    maxed = torch.max(torch.arange(6.0).reshape(2, 3), 1)  # torch.return_types: as it came
    assert plain(maxed) is maxed

