"""Every benchmark still runs (``--quick``: a few rounds, so its numbers mean nothing here).

The benchmarks are not run by anything else in ``make test``, and a script that calls tensor_dap's
internals breaks silently when they change (bench_launch did). Their timings are not checked (tests
stay deterministic); what they check themselves is: bench_guard and bench_launch exit non-zero when
training numerics differ with the hooks on.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
SCRIPTS = sorted(name for name in os.listdir(BENCHMARKS) if name.startswith("bench_") and name.endswith(".py"))


def test_every_benchmark_is_smoke_tested():
    assert {"bench_guard.py", "bench_launch.py", "bench_summary.py"} <= set(SCRIPTS)


@pytest.mark.timeout(420)
@pytest.mark.parametrize("script", SCRIPTS)
def test_the_benchmark_runs(script, tmp_path):
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, script), "--quick"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=400, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    if script in ("bench_guard.py", "bench_launch.py"):
        assert "bit-identical" in done.stdout and "DIFFERENT" not in done.stdout
    if script in ("bench_guard.py", "bench_launch.py", "bench_monitor.py") and sys.platform.startswith("linux"):
        # timed under a heap the process keeps (it ran itself again with glibc's MALLOC_* set)
        assert "heap: kept by the process" in done.stdout, done.stdout[:2000]
