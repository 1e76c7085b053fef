"""Where the memory went: process RSS, CUDA allocator counters, and the frame's largest tensors.

Reading CUDA counters never initializes CUDA: a process that has not touched the GPU
would otherwise pay for a new context (hundreds of MiB) just to be told it uses nothing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from ..format import plural
from ..summary.held import held_bytes

LARGEST = 5


@dataclass(frozen=True)
class DeviceMemory:
    device: str  # "cuda:0"
    allocated: int
    reserved: int
    peak_allocated: int
    total: int | None


@dataclass(frozen=True)
class MemoryReport:
    rss: int | None  # bytes resident now
    peak_rss: int | None
    devices: tuple[DeviceMemory, ...]
    cuda_note: str  # why no device rows: "CUDA not available", "CUDA not initialized", ""
    largest: tuple[tuple[str, int, str, tuple[int | None, ...]], ...]  # (name, bytes, device, shape)


def process_memory() -> tuple[int | None, int | None]:
    """(VmRSS, VmHWM) in bytes from /proc (Linux), else the peak from getrusage."""
    rss = peak = None
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    value = int(line.split()[1]) * 1024
                    if line.startswith("VmRSS:"):
                        rss = value
                    else:
                        peak = value
    except OSError:
        try:
            import resource

            maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            peak = maxrss if sys.platform == "darwin" else maxrss * 1024  # bytes on macOS, KiB elsewhere
        except (ImportError, OSError):
            pass
    return rss, peak


def _cuda_devices() -> tuple[tuple[DeviceMemory, ...], str]:
    """Allocator counters of the devices this process uses (the current one, and any holding memory).

    Only allocator statistics and device properties are read: neither creates a CUDA context on a
    device the process never touched (``mem_get_info`` would, so free memory is not shown).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return (), "torch not imported"
    cuda = torch.cuda
    if not cuda.is_available():
        return (), "CUDA not available"
    if not cuda.is_initialized():
        return (), "CUDA not initialized in this process"
    try:
        current = cuda.current_device()
    except Exception:
        current = None
    devices, unused = [], 0
    for i in range(cuda.device_count()):
        try:
            allocated, reserved = cuda.memory_allocated(i), cuda.memory_reserved(i)
            peak = cuda.max_memory_allocated(i)
        except Exception:
            continue
        if i != current and not (allocated or reserved or peak):
            unused += 1
            continue
        try:
            total = cuda.get_device_properties(i).total_memory
        except Exception:
            total = None
        devices.append(DeviceMemory(device=f"cuda:{i}", allocated=allocated, reserved=reserved,
                                    peak_allocated=peak, total=total))
    note = f"{plural(unused, 'other CUDA device')} unused by this process" if unused else ""
    return tuple(devices), note


def memory_report(found: list[tuple[str, Any]] | None = None) -> MemoryReport:
    """The process's memory now; ``found`` (name, tensor) pairs give the largest tensors in view."""
    rss, peak = process_memory()
    devices, note = _cuda_devices()
    sized = sorted(((name, held_bytes(t), t) for name, t in found or ()), key=lambda r: -r[1])
    largest = tuple((name, n, str(t.device), tuple(d if isinstance(d, int) else None for d in t.shape))  # (jagged: ?)
                    for name, n, t in sized[:LARGEST])
    return MemoryReport(rss=rss, peak_rss=peak, devices=devices, cuda_note=note, largest=largest)
