"""Rich renderables for the debugger's commands and the crash report.

Each function turns one report (pure data from ``tensor_dap.probe`` and ``summary.histogram``)
into something a Console prints. Nothing here computes a statistic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..format import dtype_name, fmt_bytes, fmt_num, fmt_shape, plural, short_path
from ..libraries import is_user_file
from ..probe.display import TensorView
from ..probe.grads import GradReport
from ..probe.memory import MemoryReport
from ..probe.scan import NonFiniteRow, TensorRow
from ..probe.shapes import ShapeFlow
from ..summary import TensorSummary
from ..summary.histogram import Histogram
from ..summary.line import nonfinite_counts
from ..summary.tables import summaries_table, summary_line, summary_table

NAME_WIDTH = 28  # the tensors table's name column: longer names are cut in the middle (``short_path``)
_ALARM = "bold red"
_WARN = "yellow"


def _table(title: str | None = None, **kwargs: Any) -> Table:
    return Table(title=title, title_justify="left", box=None, pad_edge=False, **kwargs)


def view(v: TensorView) -> Any:
    """``p x``: one summary line, or a container's elements one per line."""
    if v.line is not None:
        return Text(v.line)
    if v.single is not None:
        return summary_line(v.single)
    table = _table(show_header=False)
    table.add_column("key", style="bold", no_wrap=True)
    table.add_column("value")
    for key, item in v.rows:
        table.add_row(key, summary_line(item) if isinstance(item, TensorSummary) else Text(item, style="dim"))
    parts: list[Any] = [Text(v.title), table]
    if v.more:
        parts.append(Text(f"… and {v.more} more", style="dim"))
    return Group(*parts)


def tensors(rows: Sequence[TensorRow], extra: int = 0, models: Sequence[tuple[str, str]] = ()) -> Any:
    """``tensors``: every tensor in the frame with its flags, one line each (long summaries end in …);
    ``models`` (name, one-line summary) are listed apart instead of parameter by parameter."""
    parts: list[Any] = []
    if models:
        table = _table(title=f"{plural(len(models), 'model')} (t NAME lists the parameters)")
        table.add_column("name", style="bold", no_wrap=True)
        table.add_column("summary")  # the one column rich may narrow; its lines are cut, not wrapped
        for name, line in models:
            table.add_row(name, _one_line(Text(line)))
        parts.append(table)
    if rows:
        table = _table(title=plural(len(rows) + extra, 'tensor'))
        table.add_column("name", style="bold", no_wrap=True, max_width=NAME_WIDTH)
        table.add_column("flags", no_wrap=True)
        table.add_column("summary")
        for r in rows:
            flags = Text()
            for flag in r.flags:
                style = _ALARM if flag == "NaN/Inf" else _WARN if flag in ("other device", "mixed devices") else "dim"
                flags.append(("" if not flags else " ") + flag, style=style)
            table.add_row(_one_line(Text(short_path(r.name, NAME_WIDTH))), flags, _one_line(summary_line(r.summary)))
        parts.append(table)
    elif not models:
        return Text("no tensors in this frame's locals")
    if extra:
        parts.append(Text(f"… and {extra} more not shown", style="dim"))
    return Group(*parts)


def _one_line(text: Text) -> Text:
    text.no_wrap, text.overflow = True, "ellipsis"
    return text


def nonfinite(rows: Sequence[NonFiniteRow], checked: int) -> Any:
    """``nan``: the tensors holding NaN/Inf, worst first."""
    if not rows:
        return Text(f"no NaN/Inf in {checked} tensors (locals, parameters, buffers, gradients)", style="green")
    table = _table(title=f"NaN/Inf in {len(rows)} of {checked} tensors, worst first")
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("NaN", justify="right")
    table.add_column("+Inf", justify="right")
    table.add_column("-Inf", justify="right")
    table.add_column("bad", justify="right")
    table.add_column("summary")
    for r in rows:
        share = "?" if r.fraction is None else f"{'~' if r.estimated else ''}{100 * r.fraction:.3g}%"
        cells = [Text(text, style=_ALARM if present else "dim") for _, text, present in nonfinite_counts(r.summary)]
        table.add_row(r.name, *cells, share, _one_line(summary_line(r.summary)))
    return table


def grads(report: GradReport) -> Any:
    """``grads``: per-parameter gradient norms with flags, then the total norm."""
    if not report.rows:
        return Text(f"{report.module} has no trainable parameters")
    if report.count("no grad") == len(report.rows):
        n = len(report.rows)
        return Text(f"no gradients yet: none of the {plural(n, 'trainable parameter')} of {report.module} "
                    "has a .grad (run loss.backward() first, or they were cleared by zero_grad(set_to_none=True))",
                    style=_WARN)
    table = _table(title=f"gradients of {report.module}")
    table.add_column("parameter", style="bold", no_wrap=True)
    table.add_column("shape")
    table.add_column("grad norm", justify="right")
    table.add_column("flag")
    for r in report.rows:
        style = _ALARM if r.flag in ("NaN/Inf", "exploding", "error") else _WARN if r.flag else None
        table.add_row(r.name, fmt_shape(r.shape), "-" if r.norm is None else fmt_num(r.norm),
                      Text(r.flag, style=style))
    counts = [f"{report.count(f)} {f}" for f in ("no grad", "zero", "vanishing", "exploding", "NaN/Inf")
              if report.count(f)]
    footer = Text(f"total norm {fmt_num(report.total_norm)}" if report.total_norm is not None
                  else "total norm -")
    if counts:
        footer.append("   " + ", ".join(counts), style=_WARN)
    if report.frozen:
        footer.append(f"   ({report.frozen} frozen parameters not shown)", style="dim")
    return Group(table, footer)


def shape_flow(flow: ShapeFlow, title: str = "") -> Any:
    """``shapes``: the torchinfo-like table of one forward pass."""
    table = _table(title=title or None)
    table.add_column("module", no_wrap=True)
    table.add_column("type", style="bold")
    table.add_column("input")
    table.add_column("output")
    table.add_column("dtype")
    table.add_column("device")
    table.add_column("params", justify="right")
    shown: set[str] = set()
    for r in flow.rows:
        parts = r.name.split(".") if r.name else []
        for depth in range(1, len(parts)):  # a container never called (ModuleDict, ModuleList): its row, once
            parent = ".".join(parts[:depth])
            if parent in flow.containers and parent not in shown:
                shown.add(parent)
                table.add_row("  " * depth + parts[depth - 1], flow.containers[parent], Text("not called", style="dim"),
                              "", "", "", "")
        name = "  " * r.depth + (parts[-1] if parts else "(model)")
        out = Text(r.output) if not r.error else Text("✗ " + r.error, style=_ALARM)
        table.add_row(name, r.kind, r.inputs, out, r.dtype, r.device, f"{r.params:,}" if r.params else "")
    footer = Text(f"{flow.total_params:,} parameters; module state (mode, buffers, RNG) restored")
    if flow.error:
        footer = Text(f"forward pass failed: {flow.error}", style=_ALARM)
    return Group(table, footer)


def memory(report: MemoryReport) -> Any:
    """``mem``: process and device memory, then the largest tensors in view."""
    table = _table(title="memory")
    table.add_column("where", style="bold")
    table.add_column("now", justify="right")
    table.add_column("reserved", justify="right")
    table.add_column("peak", justify="right")
    table.add_column("total", justify="right")

    def b(n: int | None) -> str:
        return "-" if n is None else fmt_bytes(n)

    table.add_row("process RSS", b(report.rss), "", b(report.peak_rss), "")
    for d in report.devices:
        table.add_row(d.device, b(d.allocated), b(d.reserved), b(d.peak_allocated), b(d.total))
    parts: list[Any] = [table]
    if report.cuda_note:
        parts.append(Text(report.cuda_note, style="dim"))
    if report.largest:
        big = _table(title="largest tensors in this frame")
        big.add_column("name", style="bold", no_wrap=True)
        big.add_column("size", justify="right")
        big.add_column("shape")
        big.add_column("device")
        for name, n, device, shape in report.largest:
            big.add_row(name, fmt_bytes(n), fmt_shape(shape), device)
        parts.append(big)
    return Group(*parts)


_BAR = 32
_EIGHTHS = " ▏▎▍▌▋▊▉"


def _bar(count: int, top: int) -> str:
    eighths = round(_BAR * 8 * count / top) if top else 0
    if count and not eighths:
        eighths = 1
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def histogram(h: Histogram) -> Any:
    """Horizontal bars, one per bin, labelled with the bin's range (or its integer value)."""
    table = _table(show_header=False)
    table.add_column("bin", justify="right", no_wrap=True)
    table.add_column("bar", no_wrap=True)
    table.add_column("count", justify="right")
    top = max(h.counts) if h.counts else 0
    for i, c in enumerate(h.counts):
        lo, hi = h.edges[i], h.edges[i + 1]
        label = fmt_num(round(lo + 0.5)) if h.integer else f"[{fmt_num(lo)}, {fmt_num(hi)})"
        table.add_row(label, Text(_bar(c, top), style="cyan"), str(c))
    notes = [f"{h.total:,} finite values"]
    if h.sampled:
        notes.append("strided sample")
    if h.nonfinite:
        notes.append(f"{h.nonfinite:,} NaN/Inf left out")
    return Group(table, Text(", ".join(notes), style="dim"))


def stats(expr: str, s: TensorSummary, h: Histogram | None) -> Any:
    """``stats x``: every field of the summary, then the value histogram."""
    parts: list[Any] = [summary_line(s), summary_table(s, title=expr)]
    if h is not None:
        parts += [Text("histogram", style="bold"), histogram(h)]
    return Group(*parts)


def dtype_device(dtype: str, device: str) -> str:
    """'bf16 cuda:0' / 'f32 cpu': both always shown where operands are compared."""
    return f"{dtype_name(dtype)} {device}"


def _log_text(text: str, style: str = "") -> Text:
    """A line that is never re-wrapped: a traceback or an error message must stay copy-pasteable and greppable
    (print it with ``crop=False``)."""
    return Text(text, style=style, no_wrap=True, overflow="ignore")


# the explained errors that are not about shapes
_TITLES = {"batch size": "Batch size mismatch", "devices": "Device mismatch", "dtypes": "Dtype mismatch",
           "not scalar": "Loss not scalar", "out of range": "Out of range", "probabilities": "Not probabilities",
           "leaf in place": "Parameter changed in place", "ambiguous": "Ambiguous truth value",
           "loss targets": "Targets do not fit the scores", "collate": "Batch not made", "one value": "Not one value",
           "too small": "Input too small"}


def explanation(ex: Any) -> Any:
    """A ShapeExplanation: per frame, the failing line, its operands' shapes, and the mismatch."""
    title = _TITLES.get(ex.kind, f"Shape error ({ex.kind})")
    parts: list[Any] = [_log_text(f"{title}: {ex.error}", style=_ALARM)]
    for i, fe in enumerate(ex.frames):
        where = "at" if i == 0 else "called from"
        parts.append(_log_text(f"{where} {fe.filename}:{fe.lineno} in {fe.function}", style="bold"))
        parts.append(_log_text("    " + fe.source.replace("\n", "\n    ")))
        if fe.operands:
            table = _table(show_header=False)
            table.add_column("operand", style="bold", no_wrap=True)
            table.add_column("shape", no_wrap=True)
            table.add_column("what")
            for o in fe.operands:
                if o.kind == "tensor":
                    table.add_row("    " + o.expr, fmt_shape(o.shape),
                                  dtype_device(o.dtype, o.device) if o.device else dtype_name(o.dtype))
                elif o.kind == "module":
                    table.add_row("    " + o.expr, "", o.detail)
                else:
                    table.add_row("    " + o.expr, "?", Text("not re-evaluated", style="dim"))
            parts.append(table)
        # a library frame's hint (named by torch's parameters: `input`, `target`) only where no frame of the user's
        # code below says it in the user's own names
        if fe.hint and (is_user_file(fe.filename) or not any(f.hint for f in ex.frames[i + 1:])):
            parts.append(_log_text("    → " + fe.hint, style=_WARN))
    return Group(*parts)


def crash(report: Any) -> Any:
    """The crash report: traceback, the failing frame's tensors, the shape explanation."""
    parts: list[Any] = [_log_text(report.traceback.rstrip("\n"))]
    if getattr(report, "hint", ""):
        parts.append(Text(report.hint, style="yellow"))
    if report.tensors:
        parts.append(Text(""))
        parts.append(Text(f"tensors in {report.frame}", style="bold"))
        parts.append(summaries_table(report.tensors))
        if report.more_tensors:
            parts.append(Text(f"… and {report.more_tensors} more (t in the post-mortem lists them)", style="dim"))
    if report.explanation is not None and report.explanation.frames:
        parts.append(Text(""))
        parts.append(explanation(report.explanation))
    if getattr(report, "advice", ""):
        parts.append(Text(""))
        parts.append(Text(report.advice, style="yellow"))
    return Group(*parts)
