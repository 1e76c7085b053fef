"""Which samples of a batch hold NaN/Inf (``summary.rows``): exact, read a bounded chunk at a time."""

from __future__ import annotations

import torch

from tensor_dap.summary import rows
from tensor_dap.summary.rows import nonfinite_rows, rows_text


def test_rows_are_found_in_chunks_that_keep_rows_whole(monkeypatch):
    monkeypatch.setattr(rows, "CHUNK", 40)  # 4 rows of 10 elements a chunk
    x = torch.randn(30, 2, 5)
    for r, where in ((3, (0, 1)), (4, (1, 4)), (17, (0, 0)), (29, (1, 2))):
        x[(r, *where)] = float("nan") if r % 2 else float("-inf")
    assert nonfinite_rows(x) == ([3, 4, 17, 29], 4, True)
    assert nonfinite_rows(x.transpose(1, 2)) == ([3, 4, 17, 29], 4, True)  # not contiguous
    assert nonfinite_rows(x, shown=2) == ([3, 4], 4, True)
    assert rows_text(x) == "4 rows of 30 along dim 0 hold NaN/Inf: 3, 4, 17, 29"
    many = torch.full((12, 3), float("inf"))
    assert rows_text(many) == "12 rows of 12 along dim 0 hold NaN/Inf: 0, 1, 2, 3, 4, 5, 6, 7, …"


def test_a_tensor_too_large_to_read_whole_is_cut_short_and_says_so(monkeypatch):
    monkeypatch.setattr(rows, "CHUNK", 40)
    monkeypatch.setattr(rows, "SCANNED", 100)  # 3 chunks of 40
    x = torch.zeros(100, 10)
    x[[1, 50, 99]] = float("nan")
    assert nonfinite_rows(x) == ([1], 1, False)
    assert rows_text(x) == "1 row among the first rows read along dim 0 holds NaN/Inf: 1"


def test_nothing_to_tell_is_said_as_nothing():
    assert rows_text(torch.randn(4, 3)) == ""
    for odd in (torch.tensor(float("nan")), torch.tensor([1, 2]), torch.eye(3).to_sparse(),
                torch.empty(3, 2, device="meta"), torch.zeros(0, 4), "not a tensor"):
        assert nonfinite_rows(odd) is None and rows_text(odd) == ""
    assert nonfinite_rows(torch.tensor([1.0, float("inf"), 2.0])) == ([1], 1, True)  # a 1-d batch: its elements
