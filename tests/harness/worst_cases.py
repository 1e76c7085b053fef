"""Tensors whose logical size, layout or dtype make a summary expensive, and how to measure one.

Shared by tests/summary/test_summary_bounded.py (run in a subprocess, at a size CI affords)
and benchmarks/bench_summary.py (the worst-case table). Each case is built lazily: a factory
taking a size scale (1.0 is the benchmark's size).

Run as a script, it prints one JSON line per case: ``{"name", "ms", "thrifty_ms", "extra", "storage", "line",
"hist_ms", "hist_extra", "hist_sampled", "hist_total"}``, where ``thrifty_ms`` is the debugger's cheaper
budget (used once a Variables request has spent its share), ``extra`` the peak resident memory
above what the process held before the summary (Linux: the peak is reset through
/proc/self/clear_refs before each case), and ``hist_*`` the same for the value histogram that
``stats x`` and the tensor inspector show (``hist_total`` None when there is none).
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from typing import Callable

import torch


def _quantized(n: int) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.randn(n), 0.05, 0, torch.qint8)


def _nested(components: int) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.randn(8) for _ in range(components)])


def _nan_inside(n: int) -> torch.Tensor:
    x = torch.randn(n)
    x[n // 3] = float("nan")
    return x


def cases(scale: float = 1.0) -> dict[str, Callable[[], torch.Tensor]]:
    """name -> factory. ``scale`` shrinks the dense cases (the broadcast and strided ones stay hostile)."""
    big = max(2**16, int(2**24 * scale))
    return {
        "broadcast mask [32,16,2048,2048]": lambda: torch.ones(32, 1, 1, 2048).expand(32, 16, 2048, 2048),
        "scalar expand [2^31, 2^31]": lambda: torch.tensor(1.0).expand(2**31, 2**31),
        "row expand [2^20, 1024] bf16": lambda: torch.randn(1, 1024, dtype=torch.bfloat16).expand(2**20, 1024),
        "unfold 16x16 patches": lambda: torch.randn(1, 3, 224, 224).unfold(2, 16, 1).unfold(3, 16, 1),
        "as_strided overlap [2^20, 2^20]": lambda: torch.randn(2**21).as_strided((2**20, 2**20), (1, 1)),
        "as_strided gaps [2^19, 2^19]": lambda: torch.randn(5 * 2**19).as_strided((2**19, 2**19), (3, 2)),
        "quantized qint8": lambda: _quantized(big),
        "nested 65,536 components": lambda: _nested(max(1024, int(65536 * scale))),
        "int64": lambda: torch.randint(0, 1000, (big,)),
        "bf16": lambda: torch.randn(big, dtype=torch.bfloat16),
        "sampled-large f32 with NaN": lambda: _nan_inside(max(big, int(10**8 * scale))),
        "transposed f64 [4096, 2^12+1]": lambda: torch.randn(2**12 + 1, 4096, dtype=torch.float64).t(),
        "channels-last f16 [64,64,56,56]": lambda: torch.randn(64, 64, 56, 56, dtype=torch.float16).to(
            memory_format=torch.channels_last),
        "column expand int64 [2^16, 2^16]": lambda: torch.arange(2**16).unsqueeze(1).expand(2**16, 2**16),
        "complex64 every other [2^22]": lambda: torch.randn(2**23, dtype=torch.complex64)[::2],
    }


def storage_bytes(x: torch.Tensor) -> int:
    try:
        return int(x.untyped_storage().nbytes())
    except Exception:  # noqa: BLE001 - a nested tensor's storage may not be reachable this way
        return int(x.numel() * x.element_size())


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))


def measure(x: torch.Tensor, fn: Callable[[torch.Tensor], object]) -> tuple[float, int, object]:
    """(ms, peak extra bytes, result) of ``fn(x)``."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident size to the current one
    before = _status("VmRSS")
    start = time.perf_counter()
    result = fn(x)
    ms = (time.perf_counter() - start) * 1000
    return ms, max(0, _status("VmHWM") - before), result


def main(scale: float, names: list[str]) -> None:
    from tensor_dap import describe
    from tensor_dap.dap.pacing import debugger_pacer
    from tensor_dap.summary.histogram import histogram

    thrifty = debugger_pacer().thrifty  # what the debugger uses once a Variables request has spent its share
    describe(torch.randn(3000))  # warm-up: lazy imports, allocator
    histogram(torch.randn(3000))
    for name, make in cases(scale).items():
        if names and name not in names:
            continue
        x = make()
        ms, extra, summary = measure(x, describe)
        thrifty_ms, _, _ = measure(x, lambda t: describe(t, budget=thrifty))
        hist_ms, hist_extra, h = measure(x, histogram)
        print(json.dumps({"name": name, "ms": ms, "thrifty_ms": thrifty_ms, "extra": extra,
                          "storage": storage_bytes(x), "line": str(summary), "sampled": summary.sampled,
                          "range_exact": summary.range_exact, "numel": summary.numel, "hist_ms": hist_ms,
                          "hist_extra": hist_extra, "hist_sampled": h.sampled if h else None,
                          "hist_total": h.total if h else None}), flush=True)
        del x


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0, sys.argv[2:])
