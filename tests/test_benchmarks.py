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


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("mode", "rows"), [
    ("--phases", ("watch (loop)", "fused check alone", "bare hooks (floor)")),  # entries switched between steps
    ("--breakdown", ("model's call: before forward", "optimizer pre-step hook")),  # each hook timed in the step
])
def test_bench_guard_s_diagnostic_modes_run_and_print_their_rows(mode, rows, tmp_path):
    """They reach into watch's and torch's internals (the model's call, the loss tap, the optimizer's hooks):
    a change there must fail here, not in the next session that needs the numbers."""
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "bench_guard.py"), mode, "--quick"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=280, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    table = done.stdout.split("\n")
    for row in rows:
        line = next((text for text in table if text.strip().startswith(row)), None)
        assert line is not None, done.stdout[-2000:]
        assert any(ch.isdigit() for ch in line[len(row) + 2:]), line  # a number, not an empty row
