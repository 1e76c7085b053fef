"""``check_leakage``: does the test split contain what the model was trained on?

Three leaks, each named with example rows: exact duplicate rows across splits (by content,
every column except the id and time columns, so a re-numbered copy is still caught), ids present
in both splits, and test rows older than the newest training row (a random split of data with
a time order). Rows are hashed in chunks (``rowhash``): the memory used is 16 bytes a training row
(its hash, and a sorted copy) plus chunk-sized temporaries, whatever the width of a row.
"""

from __future__ import annotations

from typing import Any

from ..format import plural
from .result import INFO, PROBLEM, WARNING, CheckResult, Finding, names, never_raises, result
from .rowhash import codes, plan, row, row_hashes, same_row
from .tabular import Table, TableError, as_table, numpy, resolve

COLUMNS = ("leak", "test_row", "train_row", "value")
EXAMPLES = 5


def _share(n: int, total: int) -> str:
    return f"{n:,} of {total:,} test rows ({100 * n / total:.3g}%)" if total else f"{n:,} test rows"


def _matches(h_train: Any, h_test: Any) -> Any:
    """Test rows whose hash occurs in train (one sorted copy of the train hashes: 8 bytes a row)."""
    np = numpy()
    if not len(h_train):
        return np.zeros(0, dtype=np.int64)
    sorted_train = np.sort(h_train)
    pos = np.minimum(np.searchsorted(sorted_train, h_test), len(sorted_train) - 1)
    return np.flatnonzero(sorted_train[pos] == h_test)


def _first(h_train: Any, value: Any) -> int:
    """The first train row with this hash (asked for a few examples only)."""
    return int(numpy().flatnonzero(h_train == value)[0])


def _duplicates(train: Table, test: Table, columns: list[str]) -> tuple[list[Finding], list[tuple], dict]:
    hows = plan([train, test], columns)
    h_train, h_test = row_hashes(train, hows), row_hashes(test, hows)
    test_rows = _matches(h_train, h_test)
    examples = []
    for j in test_rows[:EXAMPLES].tolist():
        i = _first(h_train, h_test[j])
        if same_row(row(train, hows, i), row(test, hows, j)):  # 64-bit hashes; the shown rows are compared
            examples.append(("duplicate row", j, i, None))
    n = int(len(test_rows))
    facts = {"duplicate_test_rows": n, "compared_columns": len(columns)}
    if not n:
        return [], [], facts
    shown = ", ".join(f"test {j} = train {i}" for _, j, i, _ in examples)
    return [Finding(PROBLEM, f"test rows {names([str(e[1]) for e in examples], EXAMPLES)}",
                    f"{_share(n, test.rows)} also appear in train, every compared column equal ({shown})",
                    "deduplicate before splitting, or split by a group key (user, patient, source file) so "
                    "copies land on one side")], examples, facts


def _ids(train: Table, test: Table, id_train: str, id_test: str) -> tuple[list[Finding], list[tuple], dict]:
    np = numpy()
    a, b = train.column(id_train), test.column(id_test)
    hows = plan([train, test], [id_train]) if id_train == id_test else {"": "object"}
    kind = next(iter(hows.values()))
    ca = codes(np.asarray(a).reshape(-1, 1), kind).reshape(-1)
    cb = codes(np.asarray(b).reshape(-1, 1), kind).reshape(-1)
    test_rows = _matches(ca, cb)
    if kind == "object":  # hashes: keep the rows whose ids are really equal
        test_rows = test_rows[[same_row([a[_first(ca, cb[j])]], [b[j]]) for j in test_rows.tolist()]]
    n = int(len(test_rows))
    distinct = int(len(np.unique(cb[test_rows]))) if n else 0
    facts = {"test_rows_with_train_id": n, "shared_ids": distinct}
    if not n:
        return [], [], facts
    examples = [("shared id", j, _first(ca, cb[j]), _plain(b[j])) for j in test_rows[:EXAMPLES].tolist()]
    ids = names([repr(e[3]) for e in examples], EXAMPLES)
    return [Finding(PROBLEM, f"{id_test} {ids}", f"{plural(distinct, 'id')} occur in both splits "
                    f"({_share(n, test.rows)})", f"split by {id_test}: every row of one id on one side "
                    "(sklearn's GroupShuffleSplit)")], examples, facts


def _plain(value: Any) -> Any:
    """A numpy/pandas scalar as a plain JSON-friendly value."""
    item = getattr(value, "item", None)
    try:
        value = item() if callable(item) else value
    except Exception:  # noqa: BLE001 - .item() of an odd object
        pass
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def _times(values: Any) -> Any:
    """Comparable times without missing ones: numbers, datetime64, or objects (strings, Timestamps)."""
    np = numpy()
    arr = np.asarray(values)
    if arr.dtype.kind in "Mm":
        return arr, ~np.isnat(arr)
    if arr.dtype.kind in "biuf":
        return arr, ~np.isnan(arr.astype(np.float64))
    ok = np.array([v is not None and not (isinstance(v, float) and v != v) and str(v) not in ("NaT", "<NA>")
                   for v in arr], dtype=bool)
    return arr, ok


def _temporal(train: Table, test: Table, t_train: str, t_test: str) -> tuple[list[Finding], list[tuple], dict]:
    np = numpy()
    (a, ok_a), (b, ok_b) = _times(train.column(t_train)), _times(test.column(t_test))
    if not ok_a.any() or not ok_b.any():
        return [Finding(WARNING, t_test, "no times to compare (the column is empty or all missing)")], [], {}
    try:
        newest = max(a[ok_a].tolist()) if a.dtype.kind == "O" else a[ok_a].max()
        older = np.flatnonzero(ok_b & np.array([v < newest if ok else False for v, ok in zip(b.tolist(), ok_b)])) \
            if b.dtype.kind == "O" else np.flatnonzero(ok_b & (b < newest))
        oldest = min(b[ok_b].tolist()) if b.dtype.kind == "O" else b[ok_b].min()
    except TypeError as exc:
        return [Finding(WARNING, t_test, f"cannot order the times of the two splits: {exc}")], [], {}
    n = int(len(older))
    facts = {"older_test_rows": n, "newest_train_time": str(newest), "oldest_test_time": str(oldest)}
    if not n:
        return [], [], facts
    examples = [("older than train", j, None, _plain(b[j])) for j in older[:EXAMPLES].tolist()]
    return [Finding(PROBLEM, t_test, f"{_share(n, test.rows)} are older than the newest training row "
                    f"({newest}); the test split starts at {oldest}",
                    "split by time: train on rows before a cutoff, test on rows after it")], examples, facts


@never_raises("leakage")
def check_leakage(train: Any, test: Any, *, id_column: Any = None, time_column: Any = None) -> CheckResult:
    """Train/test leakage: exact duplicate rows across splits (by content hash), id overlap, and test rows
    older than the newest training row.

    ``train`` and ``test`` are tensors or numpy arrays (rows = first dimension), dataframes (pandas,
    polars: anything with ``columns``), dicts of columns, or tuples such as ``(X, y)``.
    ``id_column`` / ``time_column`` name a column (an integer position for arrays).
    """
    try:
        tr, te = as_table(train), as_table(test)
        id_tr, id_te = (resolve(tr, id_column, "train"), resolve(te, id_column, "test")) if id_column is not None \
            else (None, None)
        t_tr, t_te = (resolve(tr, time_column, "train"), resolve(te, time_column, "test")) \
            if time_column is not None else (None, None)
    except TableError as exc:
        return result("leakage", "cannot read the splits", [Finding(PROBLEM, "", str(exc))])
    facts: dict[str, Any] = {"train_rows": tr.rows, "test_rows": te.rows}
    if not (tr.named and te.named) and len(tr.columns) != len(te.columns):
        return result("leakage", f"train {tr.what} vs test {te.what}", [Finding(
            PROBLEM, "", f"rows have {len(tr.columns)} values in train but {len(te.columns)} in test: not the same "
            "features", "compare splits after the same preprocessing")], facts=facts)
    findings: list[Finding] = []
    rows: list[tuple] = []
    skip = {id_tr, id_te, t_tr, t_te}
    shared = [c for c in tr.columns if c in set(te.columns) and c not in skip]
    only = [c for c in tr.columns if c not in set(te.columns) and c not in skip] + \
        [c for c in te.columns if c not in set(tr.columns) and c not in skip]
    if only:
        findings.append(Finding(WARNING, names(only), "in one split only: left out of the duplicate check",
                                "the splits should have the same columns (and the same preprocessing)"))
    if shared:
        f, r, fa = _duplicates(tr, te, shared)
        findings, rows, facts = findings + f, rows + r, {**facts, **fa}
    elif tr.columns or te.columns:
        findings.append(Finding(WARNING, "", "no column in common: rows cannot be compared"))
    if id_tr is not None:
        f, r, fa = _ids(tr, te, id_tr, id_te)
        findings, rows, facts = findings + f, rows + r, {**facts, **fa}
    if t_tr is not None:
        f, r, fa = _temporal(tr, te, t_tr, t_te)
        findings, rows, facts = findings + f, rows + r, {**facts, **fa}
    if not tr.rows or not te.rows:
        findings.append(Finding(INFO, "", "a split is empty: nothing can leak"))
    checks = ["duplicates"] + (["ids"] if id_tr else []) + (["time"] if t_tr else [])
    summary = f"train {tr.what} vs test {te.what}: {' + '.join(checks)} over {plural(len(shared), 'column')}"
    return result("leakage", summary, findings, columns=COLUMNS, rows=rows, facts=facts)
