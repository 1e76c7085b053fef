"""``--mode memory``: where the memory went, from what each tool can honestly see.

- **Python objects** (tracemalloc): live bytes by line of the program, at the largest moment
  seen (a snapshot is taken whenever traced memory grows 25% past the last one, checked
  every 50 ms, and at a step when it grew at all and the last is over a second old), and
  the exact tracemalloc peak.
- **The whole process**: peak RSS (the operating system's number: every allocation).
- **torch on CPU**: tracemalloc does not see tensor memory (torch allocates it in C). The
  torch profiler's memory events over the step window say which operators, called from
  which of your functions, allocated how many bytes (read back once tracemalloc has stopped:
  they are the profiler's objects, not the program's).
- **torch on CUDA**: the caching allocator's peak and current numbers, ``memory_summary()``,
  and a snapshot with allocation stacks (``cuda_snapshot.pickle``) for pytorch.org/memory_viz.
"""

from __future__ import annotations

import contextlib
import threading
import time
import tracemalloc
from typing import Any, Iterator, Optional

from ..format import fmt_bytes
from . import marks
from .backward_sites import Attribution
from .memory_sites import Site, def_line, peak_rss, torch_sites, tracemalloc_sites
from .output import CUDA_SNAPSHOT, MEMORY, write_json
from .recorder import Recorder
from .tables import plain, table, where
from .window import StepWindow, start_quietly, unreadable

GROWTH = 1.25  # a new snapshot when traced memory exceeds the last one by this factor
POLL_S = 0.05
MIN_INTERVAL_S = 1.0  # between snapshots taken at steps for growth below GROWTH
SITES_KEPT = 50  # in memory.json; the table shows --top
SNAPSHOT_ENTRIES = 100_000  # CUDA allocation history kept for the snapshot
# traces made by the profilers themselves (any frame in them), not by the program; the session's
# own frames are outside every trace, so only the recorder's modules are named
_PROFILER_FILES = ("*/torch/profiler/*", "*/torch/autograd/profiler*", "*/tensor_dap/profiling/window.py",
                   "*/tensor_dap/profiling/memory*.py", tracemalloc.__file__)


class MemoryRecorder(Recorder):
    mode = "memory"

    def start(self) -> None:
        import torch  # before tracemalloc starts: importing torch is not the program's memory

        self._torch = torch
        self._cuda = torch.cuda.is_available()
        self._peak = 0  # tracemalloc's peak, folded in before every reset
        self._snapshot: Optional[tracemalloc.Snapshot] = None
        self._snapshot_size = 0
        self._snapshot_at = 0.0
        self._site_cache: Optional[list[Site]] = None
        self._outside = 0  # live bytes of the snapshot with no line of the program in their traceback
        self._torch_sites: list[Site] = []
        self._trace: Any = None  # the window's profiler, read once tracemalloc has stopped
        self._torch_covers = "no step was marked (call tensor_dap.step() at the end of each step)"
        self._cuda_info: Optional[dict[str, Any]] = None
        self._lock = threading.Lock()
        self._aside = False  # the profiler's own work runs (``_not_counted``): no snapshot of it
        self._done = threading.Event()
        self._window: Optional[StepWindow] = None
        if self._cuda:
            self._start_cuda_history()
        else:
            o = self.options
            self._window = StepWindow(dict(profile_memory=True, with_stack=True), o.wait, o.warmup, o.active,
                                      self._on_trace, aside=self._not_counted)
        if self._window is not None:  # the profiler's first start initializes a lot: minutes under tracemalloc
            warm = torch.profiler.profile(profile_memory=True)
            start_quietly(warm)
            warm.stop()

        marks.add_step_listener(self._on_step)
        tracemalloc.start(self.options.frames)
        if self._window is not None:
            self._window.start()
        self._poller = threading.Thread(target=self._poll, name="tensor_dap memory", daemon=True)
        self._poller.start()

    def _start_cuda_history(self) -> None:
        try:
            self._torch.cuda.memory._record_memory_history(max_entries=SNAPSHOT_ENTRIES)
            self._history = True
        except Exception as exc:  # noqa: BLE001 - numbers without the snapshot are still worth having
            self._history = False
            self.notes.append(f"no CUDA allocation history: {exc}")

    @contextlib.contextmanager
    def _not_counted(self) -> Iterator[None]:
        """The profiler's own work at step boundaries stays out of the peak and of the snapshots."""
        with self._lock:
            self._aside = True
            if tracemalloc.is_tracing():
                self._peak = max(self._peak, tracemalloc.get_traced_memory()[1])
        try:
            yield
        finally:
            with self._lock:
                self._aside = False
                if tracemalloc.is_tracing():
                    tracemalloc.reset_peak()

    def _maybe_snapshot(self, at_step: bool = False) -> None:
        """A new snapshot on 25% growth, or at a step when memory grew at all and the last is over a second old."""
        with self._lock:
            if self._aside or not tracemalloc.is_tracing():
                return
            current = tracemalloc.get_traced_memory()[0]
            grew = current > self._snapshot_size * GROWTH
            if at_step and current > self._snapshot_size and time.monotonic() - self._snapshot_at > MIN_INTERVAL_S:
                grew = True
            if grew:
                self._snapshot_at = time.monotonic()
                self._snapshot = tracemalloc.take_snapshot()  # filtered once, at the end: filtering is slow
                self._snapshot_size = current

    def _poll(self) -> None:
        while not self._done.wait(POLL_S):
            self._maybe_snapshot()

    def _on_step(self, source: str) -> None:
        self._maybe_snapshot(at_step=True)

    def _on_trace(self, prof: Any, covers: str) -> None:
        """The window's profiler is read back once tracemalloc has stopped (``_read_window``): its events are not
        the program's objects, and reading them under tracing took 30 s for 3 steps of 300 small ops (torch matches
        each event with every memory record in its time span, in Python). Until then torch holds them in C++."""
        self._trace = prof
        self._torch_covers = covers

    def _read_window(self) -> None:
        prof, self._trace = self._trace, None
        if prof is None:
            return
        try:
            self._torch_sites = torch_sites(prof, SITES_KEPT, Attribution(list(prof.events())).named)
        except Exception as exc:  # noqa: BLE001 - torch's own parsing failed: the rest of the profile stands
            self.notes.append(unreadable(exc))

    def stop(self) -> None:
        self._done.set()
        self._poller.join()
        marks.remove_step_listener(self._on_step)
        self._maybe_snapshot()
        with self._lock:
            self._peak = max(self._peak, tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        if self._window is not None:
            self._window.stop()
            self._read_window()
        if self._cuda:
            self._cuda_info = self._read_cuda()
        self._peak_rss = peak_rss()

    def _read_cuda(self) -> dict[str, Any]:
        cuda = self._torch.cuda
        snapshot = None
        if self._history:
            try:
                cuda.memory._dump_snapshot(str(self.folder / CUDA_SNAPSHOT))
                snapshot = CUDA_SNAPSHOT
            except Exception as exc:  # noqa: BLE001
                self.notes.append(f"could not write the CUDA snapshot: {exc}")
            with contextlib.suppress(Exception):
                cuda.memory._record_memory_history(enabled=None)
        return {"device": f"cuda:{cuda.current_device()}", "max_allocated_bytes": int(cuda.max_memory_allocated()),
                "allocated_bytes": int(cuda.memory_allocated()), "reserved_bytes": int(cuda.memory_reserved()),
                "max_reserved_bytes": int(cuda.max_memory_reserved()), "summary": cuda.memory_summary(abbreviated=True),
                "snapshot": snapshot}

    def _sites(self) -> list[Site]:
        if self._snapshot is None:
            return []
        if self._site_cache is None:
            skip = [tracemalloc.Filter(False, p, all_frames=True) for p in _PROFILER_FILES]
            kept = self._snapshot.filter_traces(skip)
            self._site_cache, self._outside = tracemalloc_sites(kept, SITES_KEPT)
        return self._site_cache

    def write(self) -> list[str]:
        program = self.target.path or self.target.module or ""
        data = {
            "version": 1, "kind": "tensor_dap.memory", "program": program, "peak_rss_bytes": self._peak_rss,
            "tracemalloc_peak_bytes": self._peak, "measure": "live Python bytes at the largest snapshot",
            "snapshot_bytes": self._snapshot_size, "sites": [s.to_dict() for s in self._sites()],
            "outside_program_bytes": self._outside,
            "cuda": self._cuda_info,
            "torch_cpu": None if self._cuda else {
                "measure": "bytes allocated by torch operators on the CPU (not live bytes)",
                "covers": self._torch_covers, "sites": [s.to_dict() for s in self._torch_sites]},
        }
        write_json(self.folder / MEMORY, data)
        return [MEMORY] + ([CUDA_SNAPSHOT] if self._cuda_info and self._cuda_info.get("snapshot") else [])

    def render(self) -> list[Any]:
        top = self.options.top
        head = table("memory", "measure", "bytes", right=("bytes",))
        head.add_row("peak RSS (whole process)", fmt_bytes(self._peak_rss) if self._peak_rss else "?")
        head.add_row("tracemalloc peak (Python objects)", fmt_bytes(self._peak))
        if self._cuda_info:
            head.add_row(f"CUDA max allocated ({self._cuda_info['device']})",
                         fmt_bytes(self._cuda_info["max_allocated_bytes"]))
            head.add_row("CUDA max reserved", fmt_bytes(self._cuda_info["max_reserved_bytes"]))
        sites = self._sites()[:top]
        out: list[Any] = [head, _site_table(f"largest live Python allocations by line of the program (snapshot of "
                                            f"{fmt_bytes(self._snapshot_size)}, {fmt_bytes(self._outside)} of it "
                                            f"outside the program's lines)", sites)]
        if not self._cuda:
            title = f"torch CPU allocations by operator, {self._torch_covers} (bytes allocated, not live)"
            out.append(_site_table(title, self._torch_sites[:top], ops=True))
        return out


def _site_table(title: str, sites: list[Site], ops: bool = False) -> Any:
    # torch names a Python caller by where its function starts, not the line that ran: say so in the header
    columns = ("bytes", "count") + (("operator", "in (file:line of the def)") if ops else ("where",))
    t = table(title, *columns, right=("bytes", "count"))
    for s in sites:
        place = where(s.file, def_line(s.line, s.function) if ops else s.line or None, s.function, s.backward)
        t.add_row(fmt_bytes(s.size_bytes), str(s.count), *((plain(s.op),) if ops else ()), place)
    return t
