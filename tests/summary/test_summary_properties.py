"""describe()'s stats against a float64 numpy reference, over random shapes, dtypes and NaN/Inf."""

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensor_dap import Budget, describe
from tensor_dap.summary._device import packed_stats

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.uint8, torch.int8]

# Chunks far smaller than the tensors, so the chunk merge is exercised on every example.
SMALL_CHUNKS = Budget(exact_elements=None, scan_elements=None, chunk_elements=7, max_ms=None)


# magnitudes per dtype, from near the smallest normal to near the largest finite value
SCALES = {
    torch.float32: [1e-36, 1e-30, 1e-23, 1e-3, 1.0, 50.0, 1e15, 1e30, 1e37],
    torch.float64: [1e-300, 1e-200, 1e-23, 1.0, 1e100, 1e300, 1e307],
    torch.float16: [1e-3, 1.0, 50.0, 1e3],
    torch.bfloat16: [1e-30, 1e-3, 1.0, 50.0, 1e30],
}


@st.composite
def tensors(draw):
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from(FLOATS + INTS))
    n = math.prod(shape)
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    if dtype in INTS:
        lo, hi = (0, 255) if dtype == torch.uint8 else (-100, 100)
        x = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)
    else:
        scale = draw(st.sampled_from(SCALES[dtype]))
        offset = draw(st.sampled_from([0.0, 3.0, -100.0])) if scale <= 1e300 else 0.0
        x = (torch.randn(shape, generator=g, dtype=torch.float64) * scale + offset * scale).to(dtype)
        for value in draw(st.lists(st.sampled_from([math.nan, math.inf, -math.inf]), max_size=3)):
            x.view(-1)[draw(st.integers(0, n - 1))] = value
    if draw(st.booleans()) and x.dim() >= 2:
        x = x.transpose(0, 1)  # non-contiguous
    return x


def reference(x):
    """Moments of the finite values in float64, computed on values rescaled by a power of two (numpy would
    overflow summing values near 1e308, and underflow squaring deviations near 1e-200)."""
    a = x.double().numpy().ravel() if x.dtype != torch.bfloat16 else x.float().double().numpy().ravel()
    finite = a[np.isfinite(a)]
    top = float(np.abs(finite).max()) if finite.size else 0.0
    e = math.frexp(top)[1] if top else 0
    f = np.ldexp(finite, -e)
    return {
        "min": finite.min() if finite.size else None,
        "max": finite.max() if finite.size else None,
        "mean": math.ldexp(float(f.mean()), e) if finite.size else None,
        "std": (math.ldexp(float(f.std(ddof=1)), e) if finite.size > 1 else 0.0) if finite.size else None,
        "nan": int(np.isnan(a).sum()),
        "pos_inf": int(np.isposinf(a).sum()),
        "neg_inf": int(np.isneginf(a).sum()),
        "scale": top or 1.0,
    }


def close(got, want, scale):
    if want is None:
        return got is None
    return got is not None and math.isfinite(got) and abs(got - want) <= 1e-4 * max(abs(want), scale) + 1e-300


def check(s, x):
    ref = reference(x)
    assert s.nan == ref["nan"] and s.pos_inf == ref["pos_inf"] and s.neg_inf == ref["neg_inf"]
    assert s.has_nan == (ref["nan"] > 0)
    assert s.min == ref["min"] and s.max == ref["max"], (s, ref)
    assert close(s.mean, ref["mean"], ref["scale"]), (s.mean, ref["mean"])
    assert close(s.std, ref["std"], ref["scale"]), (s.std, ref["std"])


@settings(max_examples=150, deadline=None)
@given(tensors())
def test_cpu_stats_match_numpy(x):
    check(describe(x, budget=SMALL_CHUNKS), x)


@settings(max_examples=60, deadline=None)
@given(tensors())
def test_default_budget_matches_numpy(x):
    check(describe(x), x)


@settings(max_examples=80, deadline=None)
@given(tensors())
def test_device_path_matches_numpy(x):
    """The packed, one-transfer path used on CUDA, run here on CPU tensors."""
    stats, values = packed_stats(x, Budget.exact(), values_limit=10)
    check(stats, x)
    if x.numel() <= 10:
        flat = x.reshape(-1).double().tolist() if x.dtype != torch.bfloat16 else x.reshape(-1).float().tolist()
        assert all((a == b) or (math.isnan(a) and math.isnan(b)) for a, b in zip(values, flat))


def test_sampled_keeps_exact_range_and_presence():
    x = torch.randn(100_000)
    x[77_777] = float("nan")
    x[12_345] = 1e4
    s = describe(x, budget=Budget(exact_elements=1000, scan_elements=10**6, chunk_elements=100, max_ms=None))
    assert s.sampled and s.stats_count < 2000
    assert s.has_nan  # found by the full scan even though the NaN is outside the sample


def test_sampled_range_is_exact_when_finite():
    x = torch.randn(100_000)
    x[99_999] = 1e4
    s = describe(x, budget=Budget(exact_elements=1000, scan_elements=10**6, chunk_elements=100, max_ms=None))
    assert s.sampled and s.range_exact and s.max == 1e4


def test_large_mean_offset_is_stable():
    x = torch.randn(10_000, dtype=torch.float64).float() * 1e-2 + 1e4
    s = describe(x, budget=SMALL_CHUNKS)
    ref = x.double().std().item()
    assert abs(s.std - ref) / ref < 1e-3


def test_time_cap_turns_into_a_sample():
    """Past max_ms the remaining chunks are skipped, and the summary says so."""
    x = torch.arange(10_000, dtype=torch.float32)
    s = describe(x, budget=Budget(exact_elements=None, scan_elements=None, chunk_elements=10, max_ms=0))
    assert s.sampled and not s.range_exact and 0 < s.stats_count < 10_000
    assert "μ≈" in str(s) and "x≈[" in str(s)


def test_small_exact_budget_still_spreads_the_sample():
    """The sample covers the whole tensor, not just its first chunk."""
    x = torch.cat([torch.zeros(50_000), torch.ones(50_000)])
    s = describe(x, budget=Budget(exact_elements=2000, scan_elements=None, max_ms=None))
    assert s.sampled and s.stats_count <= 2000 * 2 and 0.3 < s.mean < 0.7


def test_quantized_and_nested_copy_only_the_sample():
    q = torch.quantize_per_tensor(torch.linspace(-1, 1, 100_000), 0.01, 0, torch.qint8)
    s = describe(q, budget=Budget(exact_elements=1000, chunk_elements=4096, max_ms=None))
    assert s.sampled and s.stats_count <= 2048 and s.range_exact and "x∈[-1, 1]" in str(s)
    nested = torch.nested.nested_tensor([torch.ones(100) * i for i in range(100)])
    s = describe(nested, budget=Budget(exact_elements=1000, max_ms=None))
    assert s.sampled and s.stats_count <= 1024 and s.numel == 10_000 and s.range_exact


def test_device_path_samples_with_a_strided_view():
    """Above the exact budget the device path reduces a strided view (no copy) and says so."""
    x = torch.arange(100_000, dtype=torch.float32)
    stats, values = packed_stats(x, Budget(exact_elements=1000, max_ms=None), values_limit=10)
    assert stats.sampled and not stats.range_exact and values is None
    assert 250 <= stats.count <= 1000 and stats.min == 0.0 and stats.max > 90_000
    assert abs(stats.mean - 50_000) < 2_000


def test_huge_float32_values_do_not_overflow_the_std():
    x = torch.tensor([-5e28, -1e27, -3e28] * 5)
    ref = x.double().std().item()
    for s in (describe(x), describe(x, budget=SMALL_CHUNKS), packed_stats(x, Budget.exact())[0]):
        assert abs(s.std - ref) / ref < 1e-4 and abs(s.mean - x.double().mean().item()) < 1e24


def test_time_cap_also_bounds_the_nonfinite_pass():
    """Counting NaN/Inf is cut short by the cap too: presence of what was read is known, counts are estimates."""
    x = torch.full((10_000,), float("nan"))
    x[::7] = float("inf")
    s = describe(x, budget=Budget(exact_elements=None, scan_elements=None, chunk_elements=100, max_ms=0))
    assert s.has_nan and s.has_pos_inf and not s.counts_exact and not s.range_exact
    assert (s.nan, s.pos_inf, s.neg_inf) == (8500, 1500, 0)  # the first chunk: 85 NaN, 15 Inf of 100
    assert "NaN!×≈8500" in str(s)
    x = torch.randn(10_000)
    x[5] = float("nan")  # a rare event in the chunk read is reported as seen, not multiplied up
    s = describe(x, budget=Budget(exact_elements=None, scan_elements=None, chunk_elements=100, max_ms=0))
    assert s.nan == 1 and not s.counts_exact and "NaN!×≈1" in str(s)


def test_finite_moments_beside_nonfinite_values():
    """With NaN/Inf present, mean and std are those of the finite values, on every path."""
    x = torch.tensor([1.0, float("inf"), 3.0, float("nan"), float("-inf")] * 8)
    for s in (describe(x), describe(x, budget=SMALL_CHUNKS), packed_stats(x, Budget.exact())[0]):
        assert abs(s.mean - 2.0) < 1e-6 and abs(s.std - 1.032796) < 1e-6
        assert (s.count if hasattr(s, "count") else s.stats_count) == 16
        assert (s.nan, s.pos_inf, s.neg_inf) == (8, 8, 8)
