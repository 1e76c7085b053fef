"""The value histogram counts right where it counts everything, says so where it samples, and keeps its deadline."""

import math
import warnings

import pytest
import torch

from tensor_dap.summary.histogram import SAMPLE, histogram


def _same(view):
    got, want = histogram(view), histogram(view.contiguous())
    assert (got.edges, got.counts, got.total, got.nonfinite, got.sampled) == \
        (want.edges, want.counts, want.total, want.nonfinite, want.sampled), (got, want)
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("make", [
    lambda b: b[:, :1].expand(-1, 7),
    lambda b: b.unsqueeze(1).expand(-1, 5, -1),
    lambda b: b.t().unsqueeze(0).expand(3, -1, -1)[:, ::2],
    lambda b: b.unfold(0, 2, 1),  # small overlapping views: every read counted
    lambda b: b.reshape(-1).as_strided((6, 4), (1, 1)),
], ids=["column", "middle", "transposed", "unfold", "as_strided"])
def test_views_count_like_their_materialized_copy(make, dtype):
    base = (torch.randn(4, 3, generator=torch.Generator().manual_seed(1)) * 5).to(dtype)
    if dtype.is_floating_point:
        base[1, 0] = float("nan")
    h = _same(make(base))
    assert not h.sampled and h.total + h.nonfinite == make(base).numel()


def test_a_broadcast_view_far_larger_than_its_storage_is_counted_exactly():
    h = histogram(torch.arange(4.0).reshape(4, 1, 1).expand(4, 2**20, 2**10), bins=4)
    assert not h.sampled and h.counts == (2**30,) * 4 and h.total == 2**32


def test_large_and_overlapping_tensors_are_sampled_and_say_so():
    x = torch.randn(10 * SAMPLE, generator=torch.Generator().manual_seed(2))
    for view in (x, x.reshape(10, -1).t(), x[: 2**21].as_strided((2**20, 2**20), (1, 1)), x.unfold(0, 64, 1)):
        h = histogram(view)
        assert h.sampled and h.total <= SAMPLE
        mean = sum(c * (lo + hi) / 2 for c, lo, hi in zip(h.counts, h.edges, h.edges[1:])) / h.total
        assert abs(mean) < 0.1  # a spread sample of N(0, 1), not one corner of it


def test_quantized_and_nested_tensors_get_a_histogram():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.quantize_per_tensor(torch.tensor([-1.0, 0.0, 0.0, 2.0]), 0.5, 0, torch.qint8)
        nested = torch.nested.nested_tensor([torch.tensor([1.0, 2.0]), torch.tensor([3.0, float("nan"), 4.0])])
    h = histogram(q, bins=3)
    assert h.counts == (1, 2, 1) and not h.sampled
    h = histogram(nested, bins=3)
    assert h.total == 4 and h.nonfinite == 1 and sum(h.counts) == 4


def test_the_deadline_cuts_the_count_short_and_marks_it_sampled():
    x = torch.randn(4 * SAMPLE)
    h = histogram(x, max_ms=0.0)  # past the deadline from the start: one chunk is still read
    assert h.sampled and 0 < h.total < SAMPLE
    assert math.isclose(sum(h.counts), h.total)
