"""``check_label_leakage``: a feature column that predicts the label perfectly.

"Perfectly" has to mean more than "every value maps to one label": a continuous feature whose
values are all distinct satisfies that trivially. So each column is sorted (O(n log n)); equal
feature values must always share one label, and then one of three simple rules must get every
row right where chance would almost never allow it:

* threshold: along the sorted column the labels form one block per class (a copy of the label,
  a rescaled or shifted copy, the row order of a dataset sorted by label);
* monotone: for numeric labels, the label rises (or falls) with the column (a continuous target
  copied under another name, in another unit);
* lookup: the column's values repeat, and every repeated value always comes with the same label
  (a code that encodes the outcome). Values seen once carry no evidence and must be rare (≤ 1%).

"Almost never by chance" is a probability under labels independent of the column, computed
exactly from the class counts: P(threshold) = c!·∏nₖ!/n!, P(monotone) = 2·∏nₖ!/n!,
P(lookup) = ∏ over groups of Σₖ pₖ^size. A column is flagged when that probability is below
``alpha`` (default 1e-6), so small samples and imbalanced labels do not raise false alarms.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ..format import plural
from .result import INFO, PROBLEM, WARNING, CheckResult, Finding, never_raises, result
from .rowhash import codes, how, plan, row_hashes
from .tabular import TableError, as_table, numpy, resolve

COLUMNS = ("column", "rule", "log10_chance", "detail")
SINGLETONS = 0.01  # the lookup rule tolerates this share of values seen once


def _labels(labels: Any) -> tuple[Any, Any, bool, Any]:
    """(class index per row, rows with a label, ordered, class values) for 1-D or multi-column labels."""
    np = numpy()
    table = as_table(labels)
    if len(table.columns) == 1:
        y = table.column(table.columns[0])
        kind = how(y.dtype.kind)
        if kind in ("int", "float", "time"):
            key = codes(y.reshape(-1, 1), kind).reshape(-1).view(np.int64) if kind == "time" else y
            present = ~np.isnan(key) if kind == "float" else np.ones(len(y), dtype=bool)
            values, inverse = np.unique(key[present], return_inverse=True)
            return inverse, present, True, values
        key = codes(y.reshape(-1, 1), "object").reshape(-1)
        present = np.array([v is not None and not (isinstance(v, float) and v != v) for v in y], dtype=bool)
    else:  # one-hot or multi-label rows: each distinct row is a class
        key = row_hashes(table, plan([table], list(table.columns)))
        present = np.ones(table.rows, dtype=bool)
    values, inverse = np.unique(key[present], return_inverse=True)
    return inverse, present, False, values


def _sort_key(x: Any) -> tuple[Any, bool]:
    """A sortable numeric key for a column, and whether its order means anything (False for categories)."""
    np = numpy()
    kind = how(x.dtype.kind)
    if kind in ("int", "float"):
        return x.astype(np.float64) if kind == "float" else x.astype(np.int64), True
    if kind == "time":
        return x.view(np.int64) if x.dtype.itemsize == 8 else x.astype("datetime64[ns]").view(np.int64), True
    return np.unique(codes(x.reshape(-1, 1), "object").reshape(-1), return_inverse=True)[1], False


def _log_lookup(sizes: Any, p: Any) -> float:
    """log P(every group of these sizes is pure) with labels drawn independently at frequencies ``p``."""
    np = numpy()
    sizes, counts = np.unique(sizes[sizes > 1], return_counts=True)
    if len(p) > 64:  # Σ pₖ^m ≤ p_max^(m-1): an upper bound, so never more alarms than the exact value
        return float(np.sum(counts * (sizes - 1) * math.log(p.max())))
    return float(sum(c * math.log(np.sum(p ** m)) for m, c in zip(sizes.tolist(), counts.tolist())))


def _rules(key: Any, ordered: bool, y: Any, counts: Any, y_ordered: bool) -> list[tuple[str, float, str]]:
    """(rule, log probability by chance, detail) for each rule this column satisfies exactly."""
    np = numpy()
    n, c = len(y), len(counts)
    order = np.argsort(key, kind="stable")
    ks, ys = key[order], y[order]
    same = ks[1:] == ks[:-1]
    if key.dtype.kind == "f":
        same |= np.isnan(ks[1:]) & np.isnan(ks[:-1])
    change = ys[1:] != ys[:-1]
    if np.any(same & change):
        return []  # one feature value, two labels: no rule on this column alone gets every row right
    log_multinomial = float(np.sum([math.lgamma(k + 1) for k in counts.tolist()])) - math.lgamma(n + 1)
    found = []
    runs = 1 + int(change.sum())
    if ordered and runs == c:
        found.append(("threshold", math.lgamma(c + 1) + log_multinomial,
                      f"sorted by it, the labels form {plural(c, 'block')}, one per class"))
    if ordered and y_ordered and c > 2:
        step = np.diff(ys)
        if np.all(step >= 0) or np.all(step <= 0):
            found.append(("monotone", math.log(2) + log_multinomial, "the label rises or falls with it on every row"))
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    sizes = np.diff(np.append(starts, n))
    if np.sum(sizes == 1) <= SINGLETONS * n and len(sizes) < n:
        found.append(("lookup", _log_lookup(sizes, counts / n),
                      f"each of its {len(sizes):,} values always comes with the same label"))
    return found


@never_raises("label_leakage")
def check_label_leakage(features: Any, labels: Any, *, alpha: float = 1e-6, time_limit: float = 30.0) -> CheckResult:
    """Feature columns that predict the label perfectly (see the module's doc for what "perfectly" means).

    ``features``: a tensor or array (columns = everything after the first dimension), a dataframe or a
    dict of columns. ``labels``: one value (or one row, e.g. one-hot) per feature row, or the name or
    position of the label column inside ``features``. Stops after ``time_limit`` seconds, saying so.
    """
    np = numpy()
    try:
        table = as_table(features)
        label_name = None
        if isinstance(labels, (str, int)) and not isinstance(labels, bool):
            label_name = resolve(table, labels, "features")
            labels = table.column(label_name)
        y, present, y_ordered, classes = _labels(labels)
    except TableError as exc:
        return result("label_leakage", "cannot read the features or labels", [Finding(PROBLEM, "", str(exc))])
    if len(present) != table.rows:
        return result("label_leakage", "features and labels differ in length", [Finding(
            PROBLEM, "", f"{table.rows:,} feature rows but {len(present):,} labels")])
    columns = [c for c in table.columns if c != label_name]
    # identical rows are one piece of evidence, not several: a duplicated dataset would make every column
    # look like a lookup table of the label
    distinct = np.zeros(table.rows, dtype=bool)
    distinct[np.unique(row_hashes(table, plan([table], columns)), return_index=True)[1]] = True
    keep = present & distinct
    y = y[distinct[present]]
    counts = np.bincount(y, minlength=len(classes))
    summary = f"{plural(len(columns), 'column')} of {table.what} against {plural(len(classes), 'class', 'classes')}"
    if np.count_nonzero(counts) < 2:
        return result("label_leakage", summary, [Finding(WARNING, "", "the label has a single value: "
                                                         "every feature predicts it, nothing to check")])
    deadline = time.monotonic() + time_limit
    findings, rows, checked = [], [], 0
    for name in columns:
        if checked and time.monotonic() > deadline:
            findings.append(Finding(WARNING, "", f"stopped after {time_limit:g} s: {checked} of {len(columns)} "
                                    "columns checked", "pass time_limit=... to check them all"))
            break
        checked += 1
        x = np.asarray(table.column(name))[keep]
        key, ordered = _sort_key(x)
        flagged = [(rule, log_p / math.log(10), detail) for rule, log_p, detail in
                   _rules(key, ordered, y, counts[counts > 0], y_ordered) if log_p < math.log(alpha)]
        rows += [(name, rule, round(log10, 1), detail) for rule, log10, detail in flagged]
        if flagged:
            rule, log10, detail = flagged[0]  # threshold reads easiest, then monotone, then lookup
            copy = " (a copy of the label)" if y_ordered and x.dtype.kind in "biuf" and \
                np.array_equal(x, classes[y]) else ""
            findings.append(Finding(PROBLEM, name, f"predicts the label on every row{copy}: {detail} "
                                    f"(by chance: about 1e{log10:.0f})", "a feature computed from the label or "
                                    "from the future? drop it, or rebuild it from data available at prediction time"))
    if not present.all():
        findings.append(Finding(INFO, "", f"{plural(int((~present).sum()), 'row')} without a label left out"))
    return result("label_leakage", summary, findings, columns=COLUMNS, rows=rows,
                  facts={"columns_checked": checked, "classes": int(np.count_nonzero(counts)), "rows": int(keep.sum()),
                         "duplicate_rows_ignored": int((present & ~distinct).sum()), "alpha": alpha})
