"""``tensor_dap.StepProfiler``: where each training step's time goes (data, forward, backward, optimizer).

Two changes to a loop: wrap the loader (``for batch in sp.loader(loader)``) and give the
model and optimizer to the constructor; module and optimizer hooks do the rest.

The step is cut at four boundaries: the loader's ``next()`` (data), the model's forward
(forward hooks on the root module), and the optimizer's step (step pre/post hooks).
*Backward* is the time from the end of the forward to the optimizer step: the loss,
``backward()`` and anything else the loop does there. *Other* is the rest of the step.
On a process using CUDA every boundary is a CUDA event, so each phase is GPU time, and
*data* is time the GPU sat waiting for the next batch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Optional

from .clock import Clock, Span
from .tables import seconds, table

PHASES = ("data", "forward", "backward", "optimizer", "other")
DATA_DOMINATES = 0.3  # advice when data loading takes more than this share of the step


@dataclass(frozen=True)
class StepBreakdown:
    steps: int
    seconds: dict[str, float]  # phase -> total seconds over the steps
    total: float

    def fraction(self, phase: str) -> float:
        return self.seconds[phase] / self.total if self.total > 0 else math.nan


class StepProfiler:
    def __init__(self, model: Any = None, optimizer: Any = None, *, device: Optional[str] = None,
                 skip: int = 1) -> None:
        """``skip``: leading steps left out of the report (the first one pays for warm-up)."""
        self._clock = Clock.for_device(device)
        self._skip = skip
        self._marks: dict[str, Any] = {}
        self._spans: list[tuple[str, Span]] = []
        self._steps = 0
        self._loader: Any = None
        self._handles: list[Any] = []
        if model is not None:
            self._handles.append(model.register_forward_pre_hook(lambda *_: self._mark("forward_start")))
            self._handles.append(model.register_forward_hook(lambda *_: self._mark("forward_end")))
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(lambda *_: self._mark("optimizer_start")))
            self._handles.append(optimizer.register_step_post_hook(lambda *_: self._mark("optimizer_end")))

    def _mark(self, name: str) -> None:
        """A boundary inside the current step: the first start and the last end count (gradient accumulation)."""
        if "step_start" not in self._marks or (name.endswith("_start") and name in self._marks):
            return
        self._marks[name] = self._clock.start()

    def loader(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yields ``iterable``'s items; each ``next()`` starts a step and is its data-loading time."""
        self._loader = iterable
        it = iter(iterable)
        while True:
            started = self._clock.start()
            self._close_step(started)
            try:
                batch = next(it)
            except StopIteration:
                self._marks.clear()
                return
            self._marks = {"step_start": started, "data_end": self._clock.start()}
            yield batch

    def _close_step(self, now: Any) -> None:
        m = self._marks
        if "step_start" not in m:
            return
        self._steps += 1
        if self._steps <= self._skip:
            return
        cuts = [("data", "step_start", "data_end")]
        if "forward_start" in m and "forward_end" in m:
            cuts.append(("forward", "forward_start", "forward_end"))
            if "optimizer_start" in m:
                cuts.append(("backward", "forward_end", "optimizer_start"))
        if "optimizer_start" in m and "optimizer_end" in m:
            cuts.append(("optimizer", "optimizer_start", "optimizer_end"))
        for phase, a, b in cuts:
            self._spans.append((phase, self._between(m[a], m[b])))
        self._spans.append(("step", self._between(m["step_start"], now)))

    def _between(self, a: Any, b: Any) -> Span:
        if self._clock.events is None:
            return Span(seconds=b - a)
        return Span(start=a, end=b)

    def breakdown(self) -> StepBreakdown:
        """Totals per phase over the measured steps (waits for their GPU work)."""
        totals = dict.fromkeys(PHASES, 0.0)
        step_total = 0.0
        steps = 0
        for phase, span in self._spans:
            value = span.resolve()
            if phase == "step":
                step_total += value
                steps += 1
            else:
                totals[phase] += value
        totals["other"] = max(0.0, step_total - sum(totals[p] for p in PHASES[:-1]))
        return StepBreakdown(steps, totals, step_total)

    def advice(self, breakdown: Optional[StepBreakdown] = None) -> list[str]:
        """What to change in the DataLoader when data loading dominates the step."""
        b = breakdown or self.breakdown()
        if not b.steps or not b.fraction("data") > DATA_DOMINATES:
            return []
        share = f"data loading takes {b.fraction('data'):.0%} of each step"
        loader = self._loader
        if loader is None or not hasattr(loader, "num_workers"):
            return [f"{share}: load batches in background workers (torch.utils.data.DataLoader(num_workers=...))"]
        tips = []
        if loader.num_workers == 0:
            tips.append(f"num_workers=0 loads every batch in the training process: try "
                        f"num_workers={min(8, os.cpu_count() or 1)}")
        elif not getattr(loader, "persistent_workers", False):
            tips.append("persistent_workers=True keeps the workers alive between epochs instead of restarting them")
        if not getattr(loader, "pin_memory", False) and self._clock.events is not None:
            tips.append("pin_memory=True (with .to(device, non_blocking=True)) overlaps host-to-GPU copies")
        if not tips:
            tips.append("the workers cannot keep up: more num_workers, a larger prefetch_factor, or cheaper "
                        "transforms in the Dataset")
        return [f"{share}: {tip}" for tip in tips]

    def table(self) -> Any:
        b = self.breakdown()
        t = table(f"step time over {b.steps} steps ({seconds(b.total / b.steps) if b.steps else '?'} a step)",
                  "phase", "per step", "share", right=("per step", "share"))
        for phase in PHASES:
            per = b.seconds[phase] / b.steps if b.steps else math.nan
            t.add_row(phase, seconds(per) if b.steps else "?", f"{b.fraction(phase):.0%}" if b.steps else "?")
        return t

    def report(self, file: Optional[IO[str]] = None) -> None:
        """Print the breakdown and any advice."""
        from rich.text import Text

        from ..console import make_console

        console = make_console(file)
        console.print(self.table())
        for tip in self.advice():
            console.print(Text(f"advice: {tip}"))

    def remove(self) -> None:
        """Take the hooks off the model and optimizer."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
