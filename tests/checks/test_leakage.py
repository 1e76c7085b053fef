"""check_leakage on tensors, numpy arrays, pandas frames and dicts: clean splits stay quiet, planted leaks are named."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from tensor_dap import check_leakage

pd = pytest.importorskip("pandas")
pytestmark = pytest.mark.timeout(120)


def _split(n=600, d=6, seed=0):
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(n, d))
    return data[: n * 3 // 4], data[n * 3 // 4:]


def test_numpy_clean_split_and_planted_duplicates():
    train, test = _split()
    assert check_leakage(train, test).verdict == "ok"
    test = test.copy()
    test[[5, 40, 77]] = train[[0, 100, 200]]
    r = check_leakage(train, test)
    assert r.verdict == "problem" and r.facts["duplicate_test_rows"] == 3
    assert [(row[1], row[2]) for row in r.rows] == [(5, 0), (40, 100), (77, 200)]
    assert "3 of 150 test rows (2%)" in r.findings[0].message and r.findings[0].subject == "test rows 5, 40, 77"


def test_values_compare_by_value_across_dtypes_signed_zero_and_nan():
    train = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int64)
    test = np.array([[3.0, 4.0], [3.5, 4.0]])  # 3 == 3.0: an int split and a float split of the same data
    assert check_leakage(train, test).facts["duplicate_test_rows"] == 1
    a = np.array([[0.0, np.nan], [1.0, 2.0]])
    b = np.array([[-0.0, float("nan")], [1.0, 2.5]])
    r = check_leakage(a, b)
    assert r.facts["duplicate_test_rows"] == 1 and r.rows[0][1:3] == (0, 0)
    # float32 0.1 is not float64 0.1: not the same value, so not a duplicate
    assert check_leakage(np.array([[0.1]]), np.array([[0.1]], dtype=np.float32)).verdict == "ok"


def test_image_tensors_bf16_tuples_and_tensor_datasets():
    torch.manual_seed(0)
    images, labels = torch.randn(200, 1, 8, 8), torch.randint(0, 10, (200,))
    test_x, test_y = torch.randn(50, 1, 8, 8), torch.randint(0, 10, (50,))
    assert check_leakage(images, test_x).verdict == "ok"
    test_x[7], test_y[7] = images[3], labels[3]
    r = check_leakage(images.bfloat16(), test_x.bfloat16())
    assert r.facts["duplicate_test_rows"] == 1 and r.facts["compared_columns"] == 64
    both = check_leakage(TensorDataset(images, labels), (test_x, test_y))  # (X, y): the label is compared too
    assert both.facts["duplicate_test_rows"] == 1 and both.facts["compared_columns"] == 65
    test_y[7] = (labels[3] + 1) % 10  # same image, another label: not the same row any more
    assert check_leakage(TensorDataset(images, labels), (test_x, test_y)).verdict == "ok"
    sparse = check_leakage(torch.eye(6).to_sparse(), torch.eye(6)[[1, 4]] * torch.tensor([[1.0], [2.0]]))
    assert sparse.facts["duplicate_test_rows"] == 1 and sparse.rows[0][1:3] == (0, 1)


def _frame(n=400, seed=1):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "user": np.arange(n),
        "when": pd.date_range("2024-01-01", periods=n, freq="h"),
        "amount": rng.normal(size=n),
        "city": rng.choice(["Oslo", "Lima", "Pune"], n),
        "count": pd.array(rng.integers(0, 5, n), dtype="Int64"),
        "label": rng.integers(0, 2, n),
    })


def test_pandas_time_ordered_split_is_clean():
    df = _frame()
    df.loc[3, "count"] = pd.NA  # nullable ints with a missing value hash like any other value
    r = check_leakage(df.iloc[:300], df.iloc[300:], id_column="user", time_column="when")
    assert r.verdict == "ok", r.findings
    assert r.facts["test_rows_with_train_id"] == 0 and r.facts["older_test_rows"] == 0
    assert r.facts["compared_columns"] == 4  # user and when are not content


def test_pandas_random_split_leaks_in_time_and_renumbered_copies_are_found():
    df = _frame()
    shuffled = df.sample(frac=1.0, random_state=0)
    train, test = shuffled.iloc[:300], shuffled.iloc[300:].copy()
    copies = train.iloc[:4].copy()
    copies["user"] += 10_000  # the same rows under new ids: caught by content, not by id
    test = pd.concat([test, copies])
    r = check_leakage(train, test, id_column="user", time_column="when")
    assert r.facts["duplicate_test_rows"] == 4 and r.facts["test_rows_with_train_id"] == 0
    assert r.facts["older_test_rows"] > 50
    when = next(f for f in r.findings if f.subject == "when")
    assert "older than the newest training row" in when.message


def test_pandas_id_overlap_named_and_columns_in_one_split_only():
    df = _frame()
    train, test = df.iloc[:300], df.iloc[280:].drop(columns=["count"]).copy()
    test["amount"] += 1000.0  # different content, same ids
    r = check_leakage(train, test, id_column="user")
    ids = next(f for f in r.findings if f.subject.startswith("user"))
    assert ids.level == "problem" and "20 ids occur in both splits" in ids.message and "280" in ids.subject
    only = next(f for f in r.findings if f.subject == "count")
    assert only.level == "warning" and "one split only" in only.message
    assert r.facts["duplicate_test_rows"] == 0


def test_string_ids_dict_of_columns_and_bad_inputs():
    train = {"id": np.array(["a1", "b2", "c3"], dtype=object), "x": np.array([1.0, 2.0, 3.0])}
    test = {"id": np.array(["c3", "d4"], dtype=object), "x": np.array([9.0, 8.0])}
    r = check_leakage(train, test, id_column="id")
    assert r.facts["shared_ids"] == 1 and r.rows[0][3] == "c3"
    assert check_leakage(np.zeros((4, 3)), np.zeros((2, 5))).findings[0].message.startswith("rows have 3 values")
    missing = check_leakage(_frame(), _frame(), time_column="nope")
    assert missing.verdict == "problem" and "no column 'nope'" in missing.findings[0].message
    assert check_leakage(torch.zeros(3, 2, device="meta"), torch.zeros(3, 2)).verdict == "problem"
    assert check_leakage(np.zeros((0, 3)), np.zeros((4, 3))).verdict == "ok"


def test_hashing_memory_is_bounded_on_a_large_split():
    """128 MB of training rows: the check's own allocations stay a fraction of that (its hashes, 16 bytes a
    training row, and chunk-sized temporaries), where hashing rows as Python tuples or np.unique(axis=0) copy it all."""
    code = textwrap.dedent("""
        import tracemalloc, torch
        from tensor_dap import check_leakage
        train = torch.randn(2_000_000, 16)  # 128 MB, allocated by torch: not traced
        test = torch.cat([torch.randn(1000, 16), train[:10]])
        tracemalloc.start()
        r = check_leakage(train, test)
        peak = tracemalloc.get_traced_memory()[1]
        print(r.facts["duplicate_test_rows"], peak)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr
    found, peak = map(int, out.stdout.split())
    assert found == 10
    assert peak < 48 * 2**20, f"peak {peak / 2**20:.0f} MiB for 128 MiB of rows"


def test_duplicate_count_agrees_with_a_pandas_merge():
    """pandas as the oracle: test rows that also occur in train, over many random splits with repeated rows
    (ints, floats, strings, missing values)."""
    rng = np.random.default_rng(5)
    for trial in range(20):
        n = int(rng.integers(20, 300))
        df = pd.DataFrame({"a": rng.integers(0, 4, n), "b": rng.choice([0.5, 1.5, np.nan], n),
                           "c": rng.choice(["x", "y"], n)})
        mask = rng.random(n) < 0.7
        train, test = df[mask], df[~mask]
        expected = test.merge(train.drop_duplicates(), how="inner").shape[0] if len(test) else 0
        assert check_leakage(train, test).facts["duplicate_test_rows"] == expected, trial
