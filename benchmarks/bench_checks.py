"""Cost of the data checks on large splits: check_leakage and check_label_leakage vs the naive ways and pandas.

Run: .venv/bin/python benchmarks/bench_checks.py [--quick]

Duplicate rows across splits (N train rows × 16 float32 columns, N/5 test rows, 100 planted copies):
  * tensor_dap.check_leakage: 64-bit row hashes in chunks, one sorted copy of the train hashes;
  * naive: a Python set of row tuples (what people write first);
  * pandas: DataFrame.merge on every column (the best-known one-liner), when pandas is installed.
Time and the peak of traced allocations (tracemalloc: numpy and Python objects; the input
tensors themselves are not counted) are measured side by side in one run; all three must
find the same 100 rows.

Label leakage (N rows × 8 columns, one planted leak): tensor_dap.check_label_leakage against
pandas' groupby(column).label.nunique() per column, which answers only "does every value map to
one label" (and flags every continuous column, its values being distinct).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from typing import Any, Callable

import numpy as np
import torch

from tensor_dap import check_label_leakage, check_leakage


def measure(fn: Callable[[], Any]) -> tuple[Any, float, int]:
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return out, elapsed, peak


def splits(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    train = torch.randn(n, 16, generator=gen)
    test = torch.randn(n // 5, 16, generator=gen)
    test[::(n // 5) // 100][:100] = train[:100]
    return train, test


def naive(train: torch.Tensor, test: torch.Tensor) -> int:
    seen = set(map(tuple, train.tolist()))
    return sum(tuple(row) in seen for row in test.tolist())


def by_pandas(train: torch.Tensor, test: torch.Tensor) -> int:
    import pandas as pd

    a, b = pd.DataFrame(train.numpy()), pd.DataFrame(test.numpy())
    return len(b.merge(a.drop_duplicates(), how="inner"))


def leakage(n: int) -> None:
    train, test = splits(n)
    data_mb = (train.numel() + test.numel()) * 4 / 2**20
    print(f"duplicates: {n:,} train rows, {n // 5:,} test rows, 16 float32 columns ({data_mb:.0f} MiB of data)")
    rows = [("tensor_dap.check_leakage", lambda: check_leakage(train, test).facts["duplicate_test_rows"]),
            ("naive set of tuples", lambda: naive(train, test))]
    try:
        import pandas  # noqa: F401

        rows.append(("pandas merge", lambda: by_pandas(train, test)))
    except ImportError:
        pass
    results = [(name, *measure(fn)) for name, fn in rows]
    base = results[0]
    for name, found, seconds, peak in results:
        print(f"  {name:26s} {seconds:7.2f} s  peak {peak / 2**20:7.0f} MiB  found {found}"
              f"  ({seconds / base[2]:.1f}× the time, {peak / max(base[3], 1):.1f}× the memory of tensor_dap)")
    assert len({r[1] for r in results}) == 1, "the three ways disagree"


def label_leakage(n: int) -> None:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 5, n)
    x = rng.normal(size=(n, 8))
    x[:, 5] = y * 10 + rng.uniform(0, 1, n)  # separable: a leak
    print(f"label leakage: {n:,} rows, 8 columns, 5 classes, one leaking column")
    r, seconds, peak = measure(lambda: check_label_leakage(x, y))
    print(f"  {'tensor_dap':26s} {seconds:7.2f} s  peak {peak / 2**20:7.0f} MiB  flagged {list(r.subjects)}")
    try:
        import pandas as pd
    except ImportError:
        return
    frame = pd.DataFrame(x).assign(label=y)

    def nunique() -> list[str]:
        return [str(c) for c in range(8) if frame.groupby(c)["label"].nunique().max() == 1]

    flagged, seconds_pd, peak_pd = measure(nunique)
    print(f"  {'pandas groupby nunique':26s} {seconds_pd:7.2f} s  peak {peak_pd / 2**20:7.0f} MiB  "
          f"flagged {flagged}  ({seconds_pd / seconds:.1f}× the time; every distinct-valued column looks perfect)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller splits")
    args = parser.parse_args()
    n = 100_000 if args.quick else 500_000
    leakage(n)
    label_leakage(n)


if __name__ == "__main__":
    main()
