"""``kind_of``: is a tensor NaN, Inf or finite, with temporaries bounded whatever its size, strides or
broadcasting (localization asks it of every op's output; an expanded attention mask may be 8 GiB wide)."""

from __future__ import annotations

import pytest
import torch

from tensor_dap.triggers import finite
from tensor_dap.triggers.finite import kind_of


@pytest.fixture
def small_slices(monkeypatch):
    """Slices of 64 elements: the bounded path runs on tensors small enough to build every case."""
    monkeypatch.setattr(finite, "SLICE_ELEMENTS", 64)


def planted(shape, where, value, dtype=torch.float32):
    t = torch.randn(shape).to(dtype)
    t.view(-1)[where] = value
    return t


@pytest.mark.parametrize("make, expected", [
    (lambda: torch.randn(50, 40), None),
    (lambda: planted((50, 40), -1, float("nan")), "nan"),  # the very last element
    (lambda: planted((50, 40), 777, float("inf")), "inf"),
    (lambda: planted((50, 40), 0, float("-inf")), "inf"),
    (lambda: torch.tensor([float("inf"), float("-inf")] * 100), "inf"),  # their sum is NaN: still Inf only
    (lambda: torch.full((300,), 6e4, dtype=torch.float16), None),  # the sum overflows: finite all the same
    (lambda: planted((50, 40), 5, float("nan")).t(), "nan"),  # transposed: not contiguous
    (lambda: planted((3, 500), 570, float("inf"))[:, ::7], "inf"),  # strided
    (lambda: planted((2, 3, 400), 2399, float("nan")), "nan"),  # rows larger than a slice
    (lambda: torch.complex(torch.randn(300), planted((300,), 299, float("inf"))), "inf"),
])
def test_large_tensors_are_read_in_slices_exactly(small_slices, make, expected):
    t = make()
    assert kind_of(t) == expected
    finite.SLICE_ELEMENTS = 1 << 30  # the one-pass answer agrees
    assert kind_of(t) == expected


def test_slices_cover_every_element_once_within_the_limit():
    t = torch.arange(2 * 3 * 500, dtype=torch.float32).reshape(2, 3, 500).transpose(0, 2)
    pieces = list(finite.slices(t, 64))
    assert all(p.numel() <= 64 or p.dim() == 1 and p.numel() <= 64 for p in pieces)
    seen = torch.cat([p.reshape(-1) for p in pieces]).sort().values
    assert torch.equal(seen, torch.arange(t.numel(), dtype=torch.float32))


def test_a_broadcast_mask_is_read_by_its_own_values(small_slices, monkeypatch):
    """An expanded tensor is checked on the memory it has, not on the 2**31 elements it shows."""
    sliced = []
    real = finite.slices
    monkeypatch.setattr(finite, "slices", lambda t, limit: sliced.append(t.numel()) or real(t, limit))
    mask = torch.zeros(1, 1, 8, 8)
    mask[..., 3, :] = float("-inf")
    wide = mask.expand(32, 16, 8, 8).expand(32, 16, 8, 8)
    huge = torch.zeros(1).expand(2**31)
    assert finite._distinct(wide).numel() == 64 and finite._distinct(huge).numel() == 1
    assert kind_of(wide) == "inf" and kind_of(huge) is None
    assert sliced == []  # 64 values of its own: read in one pass, never sliced


@pytest.mark.parametrize("layout", [torch.jagged, torch.strided])
def test_nested_and_sparse_tensors_are_read_by_what_they_store(layout):
    """A nested tensor read as finite whatever it held: a NaN born in an op on a batch of sequences was blamed
    on the first op after it that returned a plain tensor (``unbind``)."""
    clean = [torch.randn(3, 4), torch.randn(5, 4)]
    assert kind_of(torch.nested.nested_tensor(clean, layout=layout)) is None
    bad = [clean[0], planted((5, 4), 7, float("nan"))]
    assert kind_of(torch.nested.nested_tensor(bad, layout=layout)) == "nan"
    assert kind_of(planted((6, 6), 8, float("inf")).to_sparse()) == "inf"
    assert kind_of(planted((6, 6), 8, float("nan")).to_sparse_csr()) == "nan"
    assert kind_of(torch.eye(6).to_sparse_csc()) is None
