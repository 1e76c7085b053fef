"""``--mode torch``: torch.profiler over a step window → a Chrome trace and a table of the top operators.

The trace records input shapes, memory and Python stacks, and opens in Perfetto,
chrome://tracing, TensorBoard's profiler plugin or the VS Code extension. Traces above
``GZIP_ABOVE`` bytes are written gzipped (``torch.trace.json.gz``), which all of them read.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
from dataclasses import dataclass
from typing import Any

from ..format import fmt_shape
from .output import TRACE, TRACE_GZ
from .recorder import Options, Recorder
from .backward_sites import Attribution, is_node_record
from .memory_sites import def_line
from .tables import plain, seconds, table, where
from .window import NO_DEVICE_TIME, StepWindow, unreadable

GZIP_ABOVE = 16 * 2**20
# how torch names a Python call recorded with with_stack (when its flag is missing)
_PY_CALL = re.compile(r"^(<built-in (method|function) |nn\.Module: |.+\(\d+\): )")


@dataclass(frozen=True)
class FunctionRow:
    """The operators' self time in one function of the program (its ``def`` line), and the costliest of them."""

    file: str
    line: int
    function: str | None
    self_cpu_s: float
    self_device_s: float
    ops: tuple[tuple[str, float], ...]  # (operator, share of the function's time), the largest first
    backward: bool = False  # the operators autograd ran for what this function's forward made


@dataclass(frozen=True)
class OpRow:
    name: str
    calls: int
    self_cpu_s: float
    self_device_s: float
    input_shapes: str


class TorchRecorder(Recorder):
    mode = "torch"

    @staticmethod
    def check_options(options: Options) -> None:
        import torch.profiler  # noqa: F401 - fails here, before the program runs, if torch is broken

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity

        self._cuda = torch.cuda.is_available()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._cuda else [])
        kwargs = dict(activities=activities, record_shapes=True, profile_memory=True, with_stack=True)
        self._files: list[str] = []
        self._rows: list[OpRow] = []
        self._functions: list[FunctionRow] = []
        self._covers = ""
        o = self.options
        self._window = StepWindow(kwargs, o.wait, o.warmup, o.active, self._on_trace)
        self._window.start()

    def _on_trace(self, prof: Any, covers: str) -> None:
        self._covers = covers
        path = self.folder / TRACE
        try:
            prof.export_chrome_trace(str(path))
            if path.stat().st_size > GZIP_ABOVE:
                with open(path, "rb") as src, gzip.open(self.folder / TRACE_GZ, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.remove(path)
                self._files = [TRACE_GZ]
            else:
                self._files = [TRACE]
        except Exception as exc:  # noqa: BLE001 - the table below may still be useful
            self.notes.append(f"could not write the trace: {exc}")
        try:
            python = _not_operators(prof)  # (one pass over the events, for both tables)
            self._rows = top_ops(prof, self._cuda, python)
            self._functions = by_function(prof, self._cuda, python)
            if self._cuda and self._rows and not any(r.self_device_s for r in self._rows):
                self.notes.append(NO_DEVICE_TIME)
        except Exception as exc:  # noqa: BLE001 - as above: the trace file may still be there
            self.notes.append(unreadable(exc))
        self.notes.append(f"recorded {covers}")

    def stop(self) -> None:
        self._window.stop()

    def write(self) -> list[str]:
        return list(self._files)

    def render(self) -> list[Any]:
        rows = self._rows[: self.options.top]
        columns = ["self CPU"] + (["self CUDA"] if self._cuda else []) + ["calls", "operator", "input shapes"]
        t = table(f"top operators by self {'CUDA' if self._cuda else 'CPU'} time, {self._covers}", *columns,
                  right=("self CPU", "self CUDA", "calls"))
        for r in rows:
            cells = [seconds(r.self_cpu_s)] + ([seconds(r.self_device_s)] if self._cuda else [])
            t.add_row(*cells, str(r.calls), plain(r.name), plain(r.input_shapes))
        if not self._functions:
            return [t]
        mine = table(f"torch time by your function (the operators it ran; backward's as the backward of the "
                     f"function whose forward made them), {self._covers}", *columns[:-3], "function",
                     "its costliest operators", right=("self CPU", "self CUDA"))
        for f in self._functions[: self.options.top]:
            cells = [seconds(f.self_cpu_s)] + ([seconds(f.self_device_s)] if self._cuda else [])
            ops = ", ".join(f"{name} {share:.0%}" for name, share in f.ops)
            place = where(f.file, def_line(f.line, f.function), f.function, f.backward)
            mine.add_row(*cells, place, plain(ops))
        return [t, mine]


def _not_operators(prof: Any) -> set[str]:
    """Names of the events that ``with_stack`` adds for Python calls (``file.py(12): fn``, ``<built-in
    method …>``, ``nn.Module: Linear_0``), among them the profiler's and tensor_dap's own frames:
    key_averages keeps no flag for them, the events do."""
    return {e.name for e in prof.events() if getattr(e, "is_python_function", False) or _PY_CALL.match(e.name)}


def _operator(name: str, python: set[str]) -> bool:
    """An operator or a range of the program: not a step range (it encloses everything else), an allocator
    record or a Python call."""
    return not (name.startswith(("ProfilerStep", "[memory]")) or name in python or _PY_CALL.match(name))


def _device_s(e: Any) -> float:
    """An event's self time on the device, in seconds (torch before 2.4 calls it CUDA time)."""
    name = "self_device_time_total" if hasattr(e, "self_device_time_total") else "self_cuda_time_total"
    return (getattr(e, name, 0) or 0) / 1e6  # (the old name is read only where the new one is missing: it warns)


def top_ops(prof: Any, cuda: bool, python: set[str] | None = None) -> list[OpRow]:
    """Operators (aten::…, other registered ops, the program's record_function ranges) grouped by
    name and input shapes, the most expensive first (self time, µs → s). ``python``: ``_not_operators``."""
    python = _not_operators(prof) if python is None else python
    rows = []
    for e in prof.key_averages(group_by_input_shape=True):
        if not _operator(e.key, python):
            continue
        shapes = ", ".join(fmt_shape(s) for s in (e.input_shapes or []) if s)
        rows.append(OpRow(e.key, int(e.count), e.self_cpu_time_total / 1e6, _device_s(e), shapes))
    rows.sort(key=lambda r: -(r.self_device_s if cuda else r.self_cpu_s))
    return rows


def by_function(prof: Any, cuda: bool, python: set[str] | None = None, ops_shown: int = 3) -> list[FunctionRow]:
    """Operators' self time summed by the innermost function of the program above them (``user_frame``: a
    model's ``forward``, the training loop): where in the user's own code the time in torch goes, which the
    operator table cannot say. Backward's operators count as the backward of the function whose forward made
    their autograd node (``backward_sites``), apart from its forward; the optimizer's where ``step()`` was called,
    as that function's call of it (``train_step (AdamW.step)``)."""
    from torch.autograd import DeviceType

    python = _not_operators(prof) if python is None else python
    events = list(prof.events())
    attribution = Attribution(events)
    grouped: dict[tuple[tuple[str, int, Any], bool], dict[str, list[float]]] = {}
    for e in events:
        if not _operator(e.name, python):
            continue
        if getattr(e, "device_type", DeviceType.CPU) != DeviceType.CPU:
            continue  # a GPU kernel: its time is in the self device time of the operator that launched it
        found, backward = attribution.named(e)
        frame = found or ("<no function of yours>", 0, None)
        times = grouped.setdefault((frame, backward), {}).setdefault(e.name, [0, 0])
        times[0] += e.self_cpu_time_total / 1e6
        times[1] += _device_s(e)
    rows = []
    key = 1 if cuda else 0
    for ((file, line, function), backward), ops in grouped.items():
        cpu, dev = sum(t[0] for t in ops.values()), sum(t[1] for t in ops.values())
        total = dev if cuda else cpu
        if not total:
            continue
        # (autograd's node records, engine overhead, count in the total but are not operators to name)
        costly = sorted(((op, t) for op, t in ops.items() if not is_node_record(op)), key=lambda kv: -kv[1][key])
        costly = costly[:ops_shown]
        rows.append(FunctionRow(file, line, function, cpu, dev, tuple((op, t[key] / total) for op, t in costly),
                                backward))
    rows.sort(key=lambda r: -(r.self_device_s if cuda else r.self_cpu_s))
    return rows
