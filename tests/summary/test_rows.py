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
    assert rows_text(many) == "all 12 rows along dim 0 hold NaN/Inf"
    assert rows_text(many[:1]) == "1 row of 1 along dim 0 holds NaN/Inf: 0"


def test_a_feature_that_holds_every_nan_is_named_by_its_index(monkeypatch):
    """Tabular data standardized by a zero std: one column NaN in every row; an image batch with one bad channel."""
    x = torch.randn(64, 8)
    x[:, 3] = float("nan")
    assert rows_text(x).endswith("; the NaN/Inf only at index 3 of dim 1 (of 8)")
    images = torch.randn(4, 3, 5, 5)
    images[1:3, 2] = float("inf")
    assert rows_text(images) == \
        "2 rows of 4 along dim 0 hold NaN/Inf: 1, 2; the NaN/Inf only at index 2 of dim 1 (of 3)"
    spread = torch.randn(6, 4)
    spread[0, 0] = spread[1, 1] = spread[2, 2] = float("nan")  # in most columns: no clue, not said
    assert rows_text(spread) == "3 rows of 6 along dim 0 hold NaN/Inf: 0, 1, 2"
    monkeypatch.setattr(rows, "CHUNK", 511)  # x is over the bound: its rows are read in chunks, its columns not
    assert rows_text(x) == "all 64 rows along dim 0 hold NaN/Inf"


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


def test_fully_masked_rows_are_placed_by_the_dims_not_all_hit(monkeypatch):
    """An attention's scores [batch, heads, query, key]: which queries have every key masked, and in which samples."""
    from tensor_dap.summary.rows import masked_rows_text

    scores = torch.randn(2, 3, 4, 5)
    scores[1, :, 0] = float("-inf")  # sample 1, query 0: every head, every key
    scores[0, 2, 1, :4] = float("-inf")  # one key left: not fully masked
    assert masked_rows_text(scores) == \
        "3 of 24 rows along the last dim are entirely -inf: index 1 of dim 0 (of 2); index 0 of dim 2 (of 4)"
    scores[0, 0, 3] = float("-inf")
    assert masked_rows_text(scores.transpose(0, 1).transpose(0, 1)) == (  # strides do not matter
        "4 of 24 rows along the last dim are entirely -inf: indices 0, 3 of dim 2 (of 4)")
    every = torch.full((2, 3), float("-inf"))
    assert masked_rows_text(every) == "2 of 2 rows along the last dim are entirely -inf: every index of every dim"
    assert masked_rows_text(torch.randn(3, 3)) == masked_rows_text(torch.full((4,), float("-inf"))) == ""
    monkeypatch.setattr(rows, "CHUNK", 23)  # over the bound: not read
    assert masked_rows_text(torch.full((4, 6), float("-inf"))) == ""
