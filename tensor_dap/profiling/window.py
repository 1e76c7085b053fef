"""A torch.profiler over a window of training steps, so a long run never makes a giant trace.

Steps are counted by ``tensor_dap.step()``, or, when the program never calls it, by
optimizer steps (torch's global optimizer hook): those of the first optimizer to step, so a
GAN's two optimizers make one step per iteration; with no optimizer at all (a loop that
updates its parameters by hand), by ``backward()`` calls on a loss, which ``tensor-dap
profile`` passes on (``marks.backward_returned``). From the start of the program until the
first step the profiler records everything (the *prelude*); at the first step the prelude
stops and a scheduled profiler skips ``wait`` steps, warms up for ``warmup`` and records
``active``. A stronger mark takes over when it first comes (``tensor_dap.step()`` over
optimizer steps over ``backward()``): that mark ends step 1 and the window starts over from
it, so the steps recorded are the steps named however many optimizer steps or backward calls
a step makes. A program that marks no step at all is recorded whole; one that ends before the
window is recorded from its start to the end of its first step (the prelude) rather than by
the fragment after its last step. The prelude stops early once the process has grown by
``PRELUDE_MAX_GROWTH`` (checked at module calls, at most every ``CHECK_EVERY_S``): the profiler's
events live in memory, and a long stepless run recorded whole filled it; the window still
starts at the first step.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import weakref
from typing import Any, Callable, ContextManager, Iterator

from ..dynamo import global_forward_pre_hook
from ..format import fmt_bytes
from . import marks

OnTrace = Callable[[Any, str], None]  # (the finished torch profiler, what it covers)
# bytes the process may grow while the prelude records: its events are compact while recorded, but reading them
# back takes about ten times as much (word_language_model's generate.py: 0.37 GiB recording, 4.3 GB peak after)
PRELUDE_MAX_GROWTH = 256 * 2**20
CHECK_EVERY_S = 0.5
STRENGTH = {"backward": 0, "optimizer": 1, "explicit": 2}  # which step marks win when a program makes several
STEP_1_END = "the end of step 1"  # where the prelude ends, unless a stronger mark or its memory bound says otherwise
CALLS = {"backward": "backward()", "optimizer": "optimizer.step()", "explicit": "tensor_dap.step()"}
# torch's profiler (kineto) reads its log level once, as it first starts; past its last level, it logs nothing
KINETO_LOG_LEVEL, KINETO_SILENT = "KINETO_LOG_LEVEL", "6"
# what a profile says where no GPU time came back although CUDA is there (kineto's errors were quieted too)
NO_DEVICE_TIME = ("no GPU time was recorded although CUDA is available: if the program ran on the GPU, torch's "
                  f"CUDA profiler (CUPTI) did not start; run with {KINETO_LOG_LEVEL}=4 to see its errors")


@contextlib.contextmanager
def quiet_profiler_log() -> Iterator[None]:
    """Around the profiler's first start: kineto writes a line at every start and stop ("USDT: ...
    profiler_start") into the program's stderr, and its level that hides those hides its errors as well
    (``NO_DEVICE_TIME`` says where that matters). The variable is put back after, so the program's own
    subprocesses log as they would; a level the user set stays."""
    if KINETO_LOG_LEVEL in os.environ:
        yield
        return
    os.environ[KINETO_LOG_LEVEL] = KINETO_SILENT
    try:
        yield
    finally:
        os.environ.pop(KINETO_LOG_LEVEL, None)


_spent = [False]  # c10's line about a block of unknown size was spent in this process


def start_quietly(profiler: Any) -> None:
    """The profiler's first start, with torch's lines about itself, not about the program, kept out of the program's
    stderr: kineto's (``quiet_profiler_log``), and c10's "Memory block of unknown size was allocated before the
    profiling started", which a memory profile logs once a process, at the first block it sees freed but not
    allocated (every program frees one: torch's own, from its import). That one is spent here on a block of ours,
    with stderr pointed at /dev/null only while that block is freed."""
    import torch

    spend = not _spent[0] and getattr(profiler, "profile_memory", False)
    block = [torch.empty(16)] if spend else []  # allocated before the profiler starts
    with quiet_profiler_log():
        profiler.start()
    if not spend:
        return
    _spent[0] = True  # (memory mode starts a profiler to warm up, then its window's: c10 says it once)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            block.clear()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def unreadable(exc: BaseException) -> str:
    """The note for a window whose events torch could not read back: that part of a profile is left out."""
    return (f"torch's profiler could not read back its events ({type(exc).__name__}: {str(exc)[:120]}), a known "
            "torch bug when with_stack=True recorded Python code freed during the window (pytorch/pytorch#136040): "
            "left out of this profile; the rest of it stands")


class StepWindow:
    def __init__(self, profiler_kwargs: dict[str, Any], wait: int, warmup: int, active: int, on_trace: OnTrace,
                 aside: Callable[[], ContextManager[Any]] = contextlib.nullcontext) -> None:
        """``aside``: a context around the profiler's own work at step boundaries (memory mode keeps
        the profiler's allocations out of its peak)."""
        self.kwargs = profiler_kwargs
        self.aside = aside
        # at least one warm-up step: a window that starts recording with no warm-up crashed the process
        # in about one run in five (torch 2.13's Python tracer, segfaulting while its events were read)
        self.wait, self.warmup, self.active = wait, max(1, warmup), active
        self.first = 2 + wait + self.warmup  # the first recorded step: the prelude ends with step 1
        self.on_trace = on_trace
        self.steps = 0
        self.counted_by: str | None = None  # "explicit" (tensor_dap.step), "optimizer" or "backward"
        self.delivered = False
        self._prelude: Any = None
        self._kept_prelude: Any = None
        self._prelude_end = STEP_1_END
        self._window: Any = None
        self._hook: Any = None
        self._pacer: Any = None  # the first optimizer to step (a weak reference): only its steps count
        self._optimizers: set[int] = set()  # the ids of every optimizer seen stepping
        self._stepping = 0  # optimizer steps running now (their pre-step hook ran, their post-step hook not yet)
        self._pre_hook: Any = None
        self._growth_check: Any = None  # a global module pre-hook while the prelude records: its memory bound
        self._next_check = 0.0
        self._memory_at_start = 0
        self.max_growth = PRELUDE_MAX_GROWTH

    def start(self) -> None:
        import torch.profiler
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._hook = register_optimizer_step_post_hook(self._optimizer_stepped)
        self._pre_hook = register_optimizer_step_pre_hook(self._optimizer_stepping)
        marks.add_step_listener(self._on_step)
        # no Python stacks in the prelude: torch's Python tracer keeps frame names as pointers into code
        # objects, and the import-time code a prelude spans is freed before the trace is read, so the
        # names came back as garbage (UnicodeDecodeError; pytorch/pytorch#130622, fixed after torch 2.13)
        self._prelude = torch.profiler.profile(**{**self.kwargs, "with_stack": False})
        self._growth_check = global_forward_pre_hook(self._check_growth)
        start_quietly(self._prelude)
        self._memory_at_start = _memory()  # (after the profiler's own start-up)
        self._next_check = time.monotonic() + CHECK_EVERY_S

    def _check_growth(self, *_: Any) -> None:
        """The prelude of a run that marks no step is cut once the process has grown by ``max_growth``."""
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + CHECK_EVERY_S
        if self._prelude is None or _memory() - self._memory_at_start <= self.max_growth:
            return
        self._stop_checking()
        with self.aside():
            self._prelude.stop()
        self._kept_prelude, self._prelude = self._prelude, None
        self._prelude_end = f"where the process had grown by {fmt_bytes(self.max_growth)} (the prelude's memory bound)"

    def _stop_checking(self) -> None:
        if self._growth_check is not None:
            self._growth_check.remove()
            self._growth_check = None

    def _optimizer_stepping(self, *_: Any) -> None:
        self._stepping += 1  # backward() inside step(), in a closure (LBFGS), is no step of its own

    def _optimizer_stepped(self, optimizer: Any, *_: Any) -> None:
        """A GAN steps two optimizers per iteration: only the first one to step (while it lives) counts steps."""
        self._stepping = max(0, self._stepping - 1)
        self._optimizers.add(id(optimizer))
        pacer = self._pacer() if self._pacer is not None else None
        if pacer is None:
            self._pacer = weakref.ref(optimizer)
        elif pacer is not optimizer:
            return
        marks.optimizer_stepped()

    def _on_step(self, source: str) -> None:
        counted_by = self.counted_by
        if counted_by is not None and STRENGTH[source] < STRENGTH[counted_by]:
            return  # a weaker mark than the one counting: a backward() before an optimizer step
        if source == "backward" and self._stepping:
            return  # evaluating an optimizer's closure: the optimizer step it belongs to is the mark
        if source == "explicit" and counted_by != "explicit":
            self._remove_hook()  # the program marks its own steps: optimizer steps no longer count
        self.counted_by = source
        with self.aside():
            if counted_by is not None and counted_by != source:
                self._recount(counted_by)
            else:
                self.steps += 1
                self._advance()

    def _recount(self, weaker: str) -> None:
        """The first stronger mark after weaker ones were counted: it ends step 1, the window restarts."""
        if self.delivered:  # the window ran out before the program first marked a step: it is what it says
            return
        window, self._window = self._window, None  # its trace (if any) is of steps counted the wrong way
        if window is not None:
            window.stop()
        if self._prelude_end == STEP_1_END:  # the prelude ended at the first mark, the weakest
            self._prelude_end = f"its first {CALLS[weaker]} (in step 1)"
        self.steps = 1
        self._start_window()

    def _advance(self) -> None:
        if self.steps == 1:
            self._stop_checking()
            if self._prelude is not None:
                self._prelude.stop()
                self._kept_prelude, self._prelude = self._prelude, None
            self._start_window()
        elif self._window is not None:
            self._window.step()
            if self.delivered:  # the window is done: drop the profiler and its events
                self._window.stop()
                self._window = None

    def _start_window(self) -> None:
        import torch.profiler

        schedule = torch.profiler.schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1)
        self._window = torch.profiler.profile(**self.kwargs, schedule=schedule, on_trace_ready=self._window_ready)
        self._window.start()

    def _window_ready(self, prof: Any) -> None:
        if self.delivered or prof is not self._window:  # a window dropped by _recount or stop
            return
        self.delivered = True
        last = min(self.first + self.active - 1, self.steps)
        optimizers = len(self._optimizers)
        by = CALLS[self.counted_by or "explicit"]
        if self.counted_by == "optimizer" and optimizers > 1:
            by += f" of the first of {optimizers} optimizers"
        elif self.counted_by == "backward":
            by += " on a loss: no optimizer stepped"
        self._kept_prelude = None
        self.on_trace(prof, f"steps {self.first}–{last} (counted by {by})" if last > self.first
                      else f"step {self.first} (counted by {by})")

    def _remove_hook(self) -> None:
        for hook in (self._hook, self._pre_hook):
            if hook is not None:
                hook.remove()
        self._hook = self._pre_hook = None

    def stop(self) -> None:
        """Stop recording; deliver the window, or the prelude when the window never recorded a whole step."""
        marks.remove_step_listener(self._on_step)
        self._remove_hook()
        self._stop_checking()
        if self._prelude is not None:
            self._prelude.stop()
            self.delivered = True
            self.on_trace(self._prelude, "the whole run (it marked no step: call tensor_dap.step() to record a window)")
            return
        if self._window is not None:
            if self.steps >= self.first:
                self._window.stop()  # delivers a window cut short by the end of the program
            else:  # only what ran after the last step: not the step it would be named after
                window, self._window = self._window, None
                window.stop()
        if not self.delivered and self._kept_prelude is not None:
            self.delivered = True
            if not self.steps:  # the prelude was cut by its memory bound
                self.on_trace(self._kept_prelude, f"the start of the run to {self._prelude_end} (it marked no step: "
                                                  "call tensor_dap.step() to record a window)")
                return
            self.on_trace(self._kept_prelude, f"the start of the run to {self._prelude_end} (it ended after "
                                              f"{self.steps} steps, before the window of steps {self.first}"
                                              f"–{self.first + self.active - 1})")


def _memory() -> int:
    """The process's resident memory now, in bytes (its peak where the OS gives no current figure; 0 unknown)."""
    from ..probe.memory import process_memory

    rss, peak = process_memory()
    return rss or peak or 0
