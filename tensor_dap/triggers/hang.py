"""Hang watchdog: no optimizer step for a while → every thread's stack on disk, and where each rank waits.

A multi-GPU hang gives no error: one rank waits in a collective for another that is stuck
elsewhere (a data loader, an ``if rank == 0`` branch, a deadlock). ``watchdog(hang_after)``
runs a daemon thread per process; each ``torch.optim`` step (a global post-step hook) resets
its clock (start-up, before the first step, gets ``startup`` seconds, at least
``hang_after``). Until an optimizer has stepped, each ``backward()`` that returns resets it too: a
loop that updates its parameters by hand has no other step to see. Start-up ends at the first
optimizer step or the second ``backward()``, not the first: the first step's collective still
waits for ranks that start slower (a debugger listening, a cold disk). When the clock passes
``hang_after`` seconds, each rank writes ``.tensor_dap/incidents/<UTC time>-hang/rank<N>.txt``
(all its threads' Python stacks) and one line saying where its main thread is; rank 0 then
gathers every rank's line into ``summary.txt``. Nothing is stopped: the run goes on, and the
watchdog re-arms at the next step.

The ranks of one job agree on the folder without communicating (the collectives are what
hangs): the first rank to fire names it in a marker file that the others read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import socket
import statistics
import threading
import time
from collections import deque
from typing import Any, Optional

from ..dist import LaunchRank, launch_rank
from ..console import note
from ..folders import INCIDENTS
from ..format import printable

log = logging.getLogger("tensor_dap.triggers")

GATHER_SECONDS = 10.0  # how long rank 0 waits for the other ranks' reports before summarizing
STARTUP_SECONDS = 300.0  # before the first step: imports, data loading and init_process_group get this long
SUGGEST_AFTER = 50  # steps measured before a suggested --hang-after is printed


def suggested(median_step: float) -> int:
    """A --hang-after that a slow step will not trip: 20 median steps, at least 30 s, rounded up to 10 s."""
    return int(max(30, math.ceil(20 * median_step / 10) * 10))


class Watchdog:
    """See the module docstring. ``hang_after=None`` only measures steps and suggests a value once."""

    def __init__(self, hang_after: Optional[float], *, root: Optional[str] = None,
                 rank: Optional[LaunchRank] = None, suggest: bool = True,
                 startup: float = STARTUP_SECONDS) -> None:
        if hang_after is not None and not (isinstance(hang_after, (int, float)) and hang_after > 0):
            raise ValueError(f"hang_after={hang_after!r}: expected a positive number of seconds")
        self.hang_after = hang_after
        self.startup = max(startup, hang_after or 0.0)  # the allowance before the first step completes
        self.root = os.path.abspath(root or INCIDENTS)
        self.rank = rank or launch_rank()
        self.steps = 0
        self.reports: list[str] = []  # folders written, newest last
        self._suggest = suggest and self.rank.rank == 0
        self._last = time.monotonic()
        self._durations: deque[float] = deque(maxlen=256)
        self._episode = 0
        self._stop = threading.Event()
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._stepped)
        self._optimized = False  # an optimizer has stepped: its steps are the beats from then on
        self._backward_beat = False  # a backward() beat since the last optimizer step (that step's beat)
        self._warm = False  # start-up is over: the clock allows hang_after, not startup
        self._untap: Any = None
        self._thread: Optional[threading.Thread] = None
        if hang_after is not None:
            from .loss_tap import listen

            self._untap = listen(self._backward_done, done=True)
            self._thread = threading.Thread(target=self._run, name="tensor_dap-hang-watchdog", daemon=True)
            self._thread.start()

    def beat(self) -> None:
        """One step completed (called by the optimizer hook; call it yourself in a loop without torch.optim)."""
        self._count()
        self._warm = True

    def _count(self) -> None:
        now = time.monotonic()
        self._durations.append(now - self._last)
        self._last = now
        self.steps += 1
        if self._suggest and self.steps == SUGGEST_AFTER:
            self._suggest = False
            self._say_suggestion()

    def _stepped(self, *_: Any) -> None:
        self._optimized = True
        self._warm = True
        if self._backward_beat:  # this step's backward() beat already (the first optimizer step)
            self._backward_beat = False
            return
        self._count()

    def _backward_done(self, _loss: Any) -> None:
        if not self._optimized:
            self._backward_beat = True
            self._count()
            # The first backward() may be followed by an optimizer step that waits in its first collective for a
            # rank still starting up: start-up ends at a step, or at a second backward() (a loop updating by hand).
            self._warm = self._warm or self.steps >= 2
        elif self._untap is not None:  # optimizer steps from now on: stop listening
            self._untap()
            self._untap = None

    def median_step(self) -> Optional[float]:
        """The median seconds between steps so far (the first interval, with start-up, left out)."""
        recent = list(self._durations)[1:]
        return statistics.median(recent) if recent else None

    def close(self) -> None:
        self._stop.set()
        self._handle.remove()
        if self._untap is not None:
            self._untap()
            self._untap = None
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def __enter__(self) -> Watchdog:  # noqa: PYI034 - no typing_extensions dependency
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------ the watchdog thread
    def _run(self) -> None:
        assert self.hang_after is not None
        fired_at: Optional[int] = None  # step count when it last fired: re-armed by the next step
        while not self._stop.is_set():
            if fired_at is not None and self.steps != fired_at:
                fired_at = None
            idle = time.monotonic() - self._last
            limit = self.hang_after if self._warm else self.startup
            if fired_at is None and idle >= limit:
                fired_at = self.steps
                try:
                    self._fire(idle)
                except Exception as exc:  # noqa: BLE001 - the watchdog must never take the run down
                    log.warning("tensor_dap: hang report failed: %s: %s", type(exc).__name__, exc)
            wait = limit - idle if fired_at is None else self.hang_after
            self._stop.wait(max(0.05, min(wait, self.hang_after)))

    def _fire(self, idle: float) -> None:
        from ..probe.stacks import live_stacks, render, where

        self._episode += 1
        folder = self._folder()
        stacks = live_stacks(skip_current=True)
        here = where(stacks[0]) if stacks else "?"
        r = self.rank
        step = "optimizer step" if self._optimized or not self.steps else "step (backward())"
        header = (f"rank {r.rank} (local rank {r.local_rank}) pid {os.getpid()} on {socket.gethostname()}: "
                  f"no {step} for {idle:.1f} s (after {self.steps} steps)\nmain thread: {here}\n\n")
        path = os.path.join(folder, f"rank{r.rank}.txt")
        with open(path, "w") as f:
            f.write(header + render(stacks))
        with open(os.path.join(folder, f"rank{r.rank}.json"), "w") as f:
            json.dump({"rank": r.rank, "pid": os.getpid(), "host": socket.gethostname(), "where": here,
                       "idle_s": round(idle, 3), "steps": self.steps}, f)
        self.reports.append(folder)
        note(f"{r.prefix}tensor_dap: no {step} for {idle:.0f} s; stacks of every thread in {path}\n"
             f"{r.prefix}  main thread: {here}")
        if r.rank == 0 and r.distributed:
            self._summarize(folder)

    def _folder(self) -> str:
        """This episode's folder, the same for every rank of the job (the first rank to fire names it)."""
        os.makedirs(self.root, exist_ok=True)
        name = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-hang"
        if self.rank.distributed:
            from ..debug.on_demand import runtime_dir

            job = "|".join([os.environ.get("TORCHELASTIC_RUN_ID", ""), os.environ.get("MASTER_ADDR", ""),
                            os.environ.get("MASTER_PORT", ""), str(os.getppid()), self.root])
            key = hashlib.sha1(job.encode()).hexdigest()[:16]
            marker = os.path.join(runtime_dir(), f"hang-{key}-{self._episode}")
            _forget_old_markers(runtime_dir())
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(name)
            except FileExistsError:
                with open(marker) as f:
                    name = f.read().strip() or name
        folder = os.path.join(self.root, name)
        os.makedirs(folder, exist_ok=True)
        return folder

    def _summarize(self, folder: str) -> None:
        """Rank 0: wait (bounded) for every rank's report, then one table of where each rank is."""
        deadline = time.monotonic() + min(GATHER_SECONDS, self.hang_after or GATHER_SECONDS)
        world = self.rank.world_size
        found: dict[int, dict[str, Any]] = {}
        while True:
            for r in range(world):
                if r not in found:
                    try:
                        with open(os.path.join(folder, f"rank{r}.json")) as f:
                            found[r] = json.load(f)
                    except (OSError, ValueError):
                        pass
            if len(found) == world or time.monotonic() > deadline or self._stop.is_set():
                break
            time.sleep(0.1)
        lines = [f"rank {r}: " + (printable(found[r].get("where", "?")) if r in found else
                                  "no report (the process is gone, or its watchdog could not run)")
                 for r in range(world)]
        with open(os.path.join(folder, "summary.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        note("tensor_dap: where each rank is (" + os.path.join(folder, "summary.txt") + ")\n  " + "\n  ".join(lines))

    def _say_suggestion(self) -> None:
        median = self.median_step()
        if median is None:
            return
        value = suggested(median)
        if self.hang_after is None:
            if self.rank.distributed:
                note(f"tensor_dap: median step {median:.3g} s; --hang-after {value} would write every rank's "
                     "stacks if the job stops making steps")
        elif self.hang_after < 5 * median:
            note(f"tensor_dap: --hang-after {self.hang_after:g} is under 5 median steps ({median:.3g} s each): "
                 f"slow steps may be reported as hangs; {value} is a safer value")


def watchdog(hang_after: Optional[float], **kwargs: Any) -> Watchdog:
    """Start a hang watchdog for this process (see ``Watchdog``); ``close()`` it, or use it as a context manager."""
    return Watchdog(hang_after, **kwargs)


def _forget_old_markers(folder: str, age: float = 86400.0) -> None:
    """Markers of jobs long gone (a day old) are removed, so the folder does not grow run after run."""
    now = time.time()
    for name in os.listdir(folder):
        if name.startswith("hang-"):
            path = os.path.join(folder, name)
            try:
                if now - os.path.getmtime(path) > age:
                    os.remove(path)
            except OSError:
                pass
