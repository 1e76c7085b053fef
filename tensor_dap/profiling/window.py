"""A torch.profiler over a window of training steps, so a long run never makes a giant trace.

Steps are counted by ``tensor_dap.step()``, or, when the program never calls it, by
optimizer steps (torch's global optimizer hook). From the start of the program until the
first step the profiler records everything (the *prelude*); at the first step the prelude
stops and a scheduled profiler skips ``wait`` steps, warms up for ``warmup`` and records
``active``. A program that marks no step at all is recorded whole; one that ends before the
window is recorded from its start to the end of its first step.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Optional

from . import marks

OnTrace = Callable[[Any, str], None]  # (the finished torch profiler, what it covers)


class StepWindow:
    def __init__(self, profiler_kwargs: dict[str, Any], wait: int, warmup: int, active: int, on_trace: OnTrace,
                 aside: Callable[[], ContextManager[Any]] = contextlib.nullcontext, prelude: bool = True) -> None:
        """``aside``: a context around the profiler's own work at step boundaries (memory mode keeps
        the profiler's allocations out of its peak); ``prelude=False`` records nothing before the first step."""
        self.kwargs = profiler_kwargs
        self.prelude = prelude
        self.aside = aside
        self.wait, self.warmup, self.active = wait, warmup, active
        self.on_trace = on_trace
        self.steps = 0
        self.counted_by: Optional[str] = None  # "explicit" (tensor_dap.step) or "optimizer"
        self.delivered = False
        self._prelude: Any = None
        self._kept_prelude: Any = None
        self._window: Any = None
        self._hook: Any = None

    def start(self) -> None:
        import torch.profiler
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._hook = register_optimizer_step_post_hook(lambda *_: marks.optimizer_stepped())
        marks.add_step_listener(self._on_step)
        if self.prelude:
            self._prelude = torch.profiler.profile(**self.kwargs)
            self._prelude.start()

    def _on_step(self, source: str) -> None:
        if source == "explicit" and self.counted_by != "explicit":
            self.counted_by = "explicit"  # the program marks its own steps: optimizer steps no longer count
            self._remove_hook()
        elif source == "optimizer" and self.counted_by == "explicit":
            return
        self.counted_by = self.counted_by or source
        self.steps += 1
        with self.aside():
            self._advance()

    def _advance(self) -> None:
        if self.steps == 1:
            import torch

            if self._prelude is not None:
                self._prelude.stop()
                self._kept_prelude, self._prelude = self._prelude, None
            schedule = torch.profiler.schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1)
            self._window = torch.profiler.profile(**self.kwargs, schedule=schedule, on_trace_ready=self._window_ready)
            self._window.start()
        elif self._window is not None:
            self._window.step()
            if self.delivered:  # the window is done: drop the profiler and its events
                self._window.stop()
                self._window = None

    def _window_ready(self, prof: Any) -> None:
        if self.delivered:
            return
        self.delivered = True
        first = 2 + self.wait + self.warmup  # the prelude ends with step 1
        last = min(first + self.active - 1, self.steps)
        by = "tensor_dap.step()" if self.counted_by == "explicit" else "optimizer.step()"
        self._kept_prelude = None
        self.on_trace(prof, f"steps {first}–{last} (counted by {by})" if last > first else f"step {first}")

    def _remove_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def stop(self) -> None:
        """Stop recording; deliver the window, or the prelude when the window never recorded."""
        marks.remove_step_listener(self._on_step)
        self._remove_hook()
        if self._prelude is not None:
            self._prelude.stop()
            self.delivered = True
            self.on_trace(self._prelude, "the whole run (it marked no step: call tensor_dap.step() to record a window)")
            return
        if self._window is not None:
            self._window.stop()  # delivers a window cut short by the end of the program
        if not self.delivered and self._kept_prelude is not None:
            self.delivered = True
            first = 2 + self.wait + self.warmup
            self.on_trace(self._kept_prelude, f"the start of the run to the end of step 1 (it ended after "
                                              f"{self.steps} steps, before the window of steps {first}"
                                              f"–{first + self.active - 1})")
