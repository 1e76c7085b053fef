"""check_label_leakage: a feature that predicts the label perfectly is named; chance and near misses are not."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tensor_dap import check_label_leakage

pd = pytest.importorskip("pandas")
pytestmark = pytest.mark.timeout(120)


def _data(n=1000, seed=0, classes=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = np.column_stack([rng.normal(size=n), rng.integers(0, 20, n), rng.uniform(size=n), y + rng.normal(size=n)])
    return x, y, rng


def test_clean_features_including_an_informative_but_noisy_one():
    x, y, _ = _data()  # column 3 tracks the label, with noise: useful, not a leak
    r = check_label_leakage(x, y)
    assert r.verdict == "ok", r.findings
    assert r.facts["columns_checked"] == 4 and r.facts["classes"] == 3


def test_planted_copies_shifted_separable_and_sorted_index():
    x, y, rng = _data()
    order = np.argsort(y, kind="stable")  # a dataset stored sorted by class, with its row number as a feature
    planted = np.column_stack([x, y.astype(float) * 2 - 7, y + rng.uniform(0, 0.9, len(y))])
    planted, y_sorted = planted[order], y[order]
    planted = np.column_stack([planted, np.arange(len(y))])
    r = check_label_leakage(planted, y_sorted)
    assert set(r.subjects) == {"4", "5", "6"}, r.findings
    by = {f.subject: f for f in r.findings}
    assert "sorted by it, the labels form 3 blocks" in by["5"].message and "by chance: about 1e-" in by["5"].message
    rules = {(row[0], row[1]) for row in r.rows}
    assert ("6", "threshold") in rules and all(row[2] < -6 for row in r.rows)


def test_lookup_codes_in_a_frame_with_the_label_by_name():
    x, y, rng = _data(classes=4)
    codes = np.array(["A17", "B02", "C99", "D00"])[(y * 3 + 1) % 4]  # an opaque code, one per outcome
    df = pd.DataFrame({"code": codes, "age": rng.integers(18, 90, len(y)), "target": y,
                       "zip": rng.choice([f"Z{i}" for i in range(40)], len(y))})
    r = check_label_leakage(df, "target")
    assert r.subjects == ("code",) and "each of its 4 values always comes with the same label" in r.findings[0].message
    assert r.facts["columns_checked"] == 3  # the label column itself is not a feature


def test_continuous_target_copied_in_another_unit():
    rng = np.random.default_rng(3)
    price = rng.lognormal(3, 1, 2000)
    df = pd.DataFrame({"rooms": rng.integers(1, 6, 2000), "area": rng.normal(80, 20, 2000), "price_k": price / 1000})
    r = check_label_leakage(df, pd.Series(price))
    assert r.subjects == ("price_k",) and "rises or falls" in r.findings[0].message
    df["price_k"] = price / 1000 + rng.normal(0, 0.05, 2000)  # a noisy proxy is not a perfect one
    assert check_label_leakage(df, pd.Series(price)).verdict == "ok"


def test_exact_copy_is_called_a_copy_and_tensors_one_hot_labels_work():
    x, y, _ = _data()
    r = check_label_leakage(torch.from_numpy(np.column_stack([x, y])), torch.from_numpy(y))
    assert r.subjects == ("4",) and "(a copy of the label)" in r.findings[0].message
    one_hot = torch.nn.functional.one_hot(torch.from_numpy(y), 3)
    assert check_label_leakage(torch.from_numpy(np.column_stack([x, y])), one_hot).subjects == ("4",)


def test_small_or_duplicated_data_and_constant_labels_do_not_alarm():
    x, y, _ = _data(n=12, classes=2)
    leak = np.column_stack([x, y])
    assert check_label_leakage(leak, y).verdict == "ok"  # 12 rows: a perfect split happens by chance too often
    big_x, big_y, _ = _data(n=500, classes=2)
    twice = np.vstack([big_x, big_x]), np.concatenate([big_y, big_y])  # every row twice: no lookup evidence
    r = check_label_leakage(*twice)
    assert r.verdict == "ok" and r.facts["duplicate_rows_ignored"] == 500
    constant = check_label_leakage(big_x, np.zeros(500))
    assert constant.verdict == "warning" and "single value" in constant.findings[0].message
    assert check_label_leakage(big_x, big_y[:10]).verdict == "problem"  # lengths differ: said, not raised


def test_missing_labels_are_left_out_and_nan_features_are_one_value():
    x, y, _ = _data(n=800, classes=2)
    labels = y.astype(float)
    labels[:5] = np.nan
    feature = np.where(y == 1, np.nan, 1.0)  # "missing" exactly when the label is 1
    r = check_label_leakage(np.column_stack([x, feature]), labels)
    assert r.subjects == ("4",) and any("5 rows without a label" in f.message for f in r.findings)


def test_time_limit_stops_and_says_so():
    x, y, _ = _data(n=2000)
    r = check_label_leakage(np.tile(x, (1, 50)), y, time_limit=0.0)
    assert r.verdict == "warning" and "1 of 200 columns checked" in r.findings[0].message


@settings(max_examples=40, deadline=None, derandomize=True)
@given(n=st.integers(20, 3000), minority=st.sampled_from([0.5, 0.2, 0.05, 0.01, 0.002]),
       classes=st.integers(2, 6), seed=st.integers(0, 2**31))
def test_random_features_never_flagged(n, minority, classes, seed):
    """Independent features of every kind (continuous, a few values, many values, ties, all-zero) against
    labels of any balance: the chance bound keeps the false-alarm rate near alpha per column."""
    rng = np.random.default_rng(seed)
    p = np.full(classes, (1 - minority) / (classes - 1))
    p[0] = minority
    y = rng.choice(classes, n, p=p / p.sum())
    x = np.column_stack([rng.normal(size=n), rng.integers(0, 3, n), rng.integers(0, max(2, n // 4), n),
                         np.round(rng.normal(size=n), 1), np.zeros(n), np.arange(n)])
    assert check_label_leakage(x, y).verdict != "problem"
