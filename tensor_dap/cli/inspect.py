"""``tensor-dap inspect FILE``: summaries of every tensor in a checkpoint, without unpickling code.

The file is untrusted input: it is loaded with ``weights_only=True`` (no code runs), walked
iteratively (a list that contains itself is listed once), every key is escaped before it reaches
the terminal (``format.printable``, and ``rich.text.Text`` so ``[...]`` is never markup), and each
summary is bounded by the default budget, so a crafted broadcast tensor costs no more than a
plain one. A listing that takes longer than a second shows a progress bar on stderr. A file that holds
Python objects (a whole model saved with ``torch.save(model)``, as pytorch/examples do) is refused with
one line that says so; ``--trust`` unpickles it (running code from the file, importable from the file's
folder or the working directory) and lists the state of every module and optimizer in it.
Exit codes: 0 listed; 1 the file cannot be read as a checkpoint (or ``--nonfinite`` found
NaN/Inf); 2 a usage mistake (no such file). A Lightning checkpoint's callbacks keep their best scores at
±inf until they see one (``ModelCheckpoint``'s ``kth_value`` with no ``monitor``): ``--nonfinite`` lists those
apart and does not count them, or every healthy Lightning checkpoint would fail a check.
"""

from __future__ import annotations

import argparse
from typing import Any

PROGRESS_AFTER_S = 1.0
MAX_OTHERS = 500  # values that are not tensors (a step, a config) listed at most
_VALUE_CHARS = 100
_NAMED_BAD = 5  # names of non-finite tensors the listing's last line gives
_PLAIN_LOOK = 100  # items of a list looked at to tell that it holds plain values only
_BATCH = 1000  # rows printed per write
_STEP = 256  # tensors summarized between two progress updates
# Lightning's ModelCheckpoint and EarlyStopping scores, kept under the checkpoint's "callbacks": ±inf until a
# monitored score arrives (inf for mode "min", -inf for "max")
CALLBACK_SCORES = ("kth_value", "best_model_score", "best_score", "current_score")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a file written by torch.save (state dict, tensor, or nested containers)")
    parser.add_argument("--nonfinite", action="store_true", help="list only tensors holding NaN/Inf; exit 1 if any")
    parser.add_argument("--exact", action="store_true",
                        help="exact stats for every tensor (default: large tensors are sampled, marked ≈)")
    parser.add_argument("--trust", action="store_true",
                        help="also unpickle Python objects (a whole model saved with torch.save(model)): this runs "
                             "code from the file, so only for files you trust")


def _looks_saved(path: str) -> bool:
    """Whether the file starts as torch.save writes: a zip archive, or (before 1.6, and with
    ``_use_new_zipfile_serialization=False``) a pickle's protocol byte."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return True  # unreadable: the load's own error says why
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from ..format import plural
    from ..console import make_console
    from ..errors import UsageError
    from ..format import first_line, printable

    if not os.path.isfile(args.file):
        raise UsageError(f"no such file: {printable(args.file)}")

    with _Progress(make_console(stderr=True)) as progress:
        try:
            obj = _load(args.file, args.trust)
        except Exception as exc:  # noqa: BLE001 - a corrupt, truncated or hostile file: one line, exit 1
            progress.stop()
            if not _looks_saved(args.file):
                why = "it is neither a zip archive (torch.save) nor a pickle (torch.save before torch 1.6)"
            elif not args.trust and "weights only load failed" in str(exc).lower():
                why = ("it holds Python objects, not only tensors (a whole model saved with torch.save(model)?); "
                       "loading them runs code from the file: add --trust if you trust it")
            else:
                why = first_line(exc)
            print(f"tensor-dap: error: cannot load {printable(args.file)} as a torch checkpoint: {printable(why)}",
                  file=sys.stderr)
            return 1
        rows, others, other_count = _summaries(obj, args.exact, progress)
    scores: list[tuple[str, Any]] = []
    if args.nonfinite:
        bad, rows = [(n, s) for n, s in rows if not isinstance(s, str) and s.nonfinite], []
        for row in bad:
            (scores if _unscored(*row) else rows).append(row)
    console = make_console()
    holding = " holding NaN/Inf" if args.nonfinite else ""
    _print_rows(console, f"{printable(args.file)}: {plural(len(rows), 'tensor')}{holding}", rows)
    if scores:
        _print_rows(console, f"{printable(args.file)}: {plural(len(scores), 'callback score')} at ±inf, where "
                             "Lightning starts them until a monitored score arrives (not counted)", scores)
    if others and not args.nonfinite:  # the step, epoch and config saved beside the weights
        more = f" (the first {len(others)})" if other_count > len(others) else ""
        _print_rows(console, f"{printable(args.file)}: {plural(other_count, 'other value')}{more}", others)
    if not args.nonfinite:  # one NaN among thousands of rows: said at the end, where the reader is
        bad = [name for name, s in rows if not isinstance(s, str) and s.nonfinite and not _unscored(name, s)]
        if bad:
            shown = ", ".join(printable(n) for n in bad[:_NAMED_BAD]) + (", …" if len(bad) > _NAMED_BAD else "")
            console.print(f"{printable(args.file)}: {len(bad)} of {plural(len(rows), 'tensor')} "
                          f"{'holds' if len(bad) == 1 else 'hold'} NaN/Inf: {shown} (--nonfinite lists only those)",
                          markup=False, highlight=False, soft_wrap=True, style="bold red")  # one greppable line
    return 1 if args.nonfinite and rows else 0


def _unscored(name: str, s: Any) -> bool:
    """A Lightning callback's score still at the ±inf it starts from (a single value, no NaN)."""
    parts = name.split(".")
    return (len(parts) >= 3 and parts[0] == "callbacks" and parts[-1] in CALLBACK_SCORES and s.numel == 1
            and not s.has_nan)


def _load(path: str, trust: bool) -> Any:
    """The file's contents: tensors and plain containers only, unless ``trust`` (then the classes a pickled
    model needs are imported from the file's folder or the working directory, as where it was saved)."""
    import os
    import sys

    from ..loading import load_saved

    if trust:
        for folder in (os.getcwd(), os.path.dirname(os.path.abspath(path))):
            if folder not in sys.path:
                sys.path.insert(0, folder)
    return load_saved(path, trusted=trust)


def _open(node: Any, path: str, dotted: bool) -> Any:
    """``nested.children``, and a module or optimizer (in a trusted file) by its state dict."""
    import torch

    from ..nested import children

    if isinstance(node, torch.nn.Module):
        return ((f"{path}.{key}" if path else key, value) for key, value in node.state_dict().items())
    if isinstance(node, torch.optim.Optimizer):
        return children(node.state_dict(), path, dotted)
    if isinstance(node, (list, tuple)) and node and all(map(_plain, node[:_PLAIN_LOOK])):
        return None  # plain values (an optimizer's betas, its parameter ids): one line, not one per value
    return children(node, path, dotted)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, complex, str, bytes))


def _summaries(obj: Any, exact: bool, progress: _Progress) -> tuple[list[tuple[str, Any]], list[tuple[str, str]], int]:
    """((escaped name, summary) of every tensor, (escaped name, value text) of the first ``MAX_OTHERS`` other values,
    how many other values there are). A tensor that is another one again (tied weights: GPT-2's ``lm_head.weight``
    is ``wte.weight``) reads "same tensor as NAME"."""
    import torch

    from ..format import printable
    from ..nested import walk
    from ..summary import Budget, describe_many

    budget = Budget.exact() if exact else None
    found, others, other_count = [], [], 0
    for name, value in walk(obj, dotted=True, expand=_open, keep_unexpanded=True):
        if isinstance(value, torch.Tensor):
            found.append((printable(name) or "<tensor>", value))
            continue
        other_count += 1
        if len(others) < MAX_OTHERS:  # (the rest only counted: a list of a million records costs no text)
            others.append((printable(name) or "<value>", _value_text(value)))
    progress.total(len(found))
    first: dict[Any, str] = {}
    same: dict[int, str] = {}
    for i, (name, t) in enumerate(found):
        key = _identity(t)
        if key is not None and first.setdefault(key, name) != name:
            same[i] = first[key]
    rows: list[tuple[str, Any]] = []
    for i in range(0, len(found), _STEP):
        part = [(j, name, t) for j, (name, t) in enumerate(found[i:i + _STEP], i)]
        summaries = iter(describe_many([t for j, _, t in part if j not in same], budget=budget))
        rows += [(name, f"same tensor as {same[j]}" if j in same else next(summaries)) for j, name, _ in part]
        progress.done(len(rows))
    return rows, others, other_count


def _identity(t: Any) -> Any:
    """What makes two loaded tensors the same one (their storage, offset, shape, strides, dtype); None when
    that cannot be told (no storage: meta, sparse, empty)."""
    import torch

    try:
        if t.layout != torch.strided or not t.numel():
            return None
        ptr = t.untyped_storage().data_ptr()
        if not ptr:
            return None
        return (t.device, ptr, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
    except Exception:  # noqa: BLE001 - a tensor subclass or layout without a plain storage
        return None


def _value_text(value: Any) -> str:
    """A value that is not a tensor, as one escaped line: plain values (and lists of them) as Python writes them,
    cut short; others by their type and size."""
    from ..format import plain_repr, printable

    plain = plain_repr(value, _VALUE_CHARS)  # a long list: its first items (bounded)
    if plain is not None:
        text = printable(plain)
        return text if len(text) <= _VALUE_CHARS else text[:_VALUE_CHARS - 1] + "…"
    try:
        size = f" of {len(value)}"
    except Exception:  # noqa: BLE001 - no length
        size = ""
    return printable(f"{type(value).__name__}{size}")


class _Progress:
    """A transient progress bar on stderr, shown only once the work has taken PROGRESS_AFTER_S on a terminal:
    a spinner while the file loads, then tensors summarized out of how many."""

    def __init__(self, console: Any) -> None:
        import threading

        self.console = console
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task: Any = None
        self._total: int | None = None
        self._completed = 0
        self._stopped = False
        self._timer = threading.Timer(PROGRESS_AFTER_S, self._show)
        self._timer.daemon = True

    def __enter__(self) -> _Progress:
        if self.console.is_terminal:
            self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _show(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

        with self._lock:
            if self._stopped:
                return
            self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 console=self.console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("loading the checkpoint" if self._total is None else "summarizing",
                                            total=self._total, completed=self._completed)

    def total(self, n: int) -> None:
        with self._lock:
            self._total = n
            if self._bar is not None:
                self._bar.update(self._task, description="summarizing", total=n)

    def done(self, n: int) -> None:
        with self._lock:
            self._completed = n
            if self._bar is not None:
                self._bar.update(self._task, completed=n)

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._stopped = True
            if self._bar is not None:
                self._bar.stop()
                self._bar = None


def _print_rows(console: Any, title: str, rows: list[tuple[str, Any]]) -> None:
    """A title, then ``name  summary`` per tensor (or ``name  text``), names padded to one column: written in
    batches, never re-wrapped (a long name or summary stays one greppable line), NaN/Inf alarms in red."""
    from rich.text import Text

    from ..summary.line import alarms, one_line

    console.print(Text(title, style="bold"), soft_wrap=True)
    width = min(60, max((len(n) for n, _ in rows), default=0))
    for i in range(0, len(rows), _BATCH):
        batch = rows[i:i + _BATCH]
        text = Text("\n".join(n.ljust(width) + "  " + (s if isinstance(s, str) else one_line(s)) for n, s in batch))
        tokens = {token for _, s in batch if not isinstance(s, str) for token in alarms(s)}
        if tokens:  # an empty word list would match everywhere
            text.highlight_words(tokens, style="bold red")
        console.print(text, soft_wrap=True, crop=False)
