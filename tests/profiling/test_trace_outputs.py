"""--mode torch and memory outputs.

The top-ops table holds operators, big traces are gzipped, -m runs, the CUDA snapshot loads.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import pstats
import re
import subprocess
import sys

import pytest
import torch
from profiled import ROOT, run_folder, tensor_dap

from tensor_dap.profiling import trace

SCRIPT = '''
import torch
import tensor_dap
from torch import nn

model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 16)
for i in range(6):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    tensor_dap.step()
'''


TOP_OPS = '''
import json
import torch
import tensor_dap
from torch import nn
from tensor_dap.profiling import trace
from tensor_dap.profiling.window import StepWindow

got = []
kwargs = dict(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
              with_stack=True)
window = StepWindow(kwargs, 0, 0, 2, lambda prof, covers: got.append([r.name for r in trace.top_ops(prof, False)]))
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
window.start()
for _ in range(4):
    with torch.profiler.record_function("my_loss"):
        loss = model(torch.randn(8, 16)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    tensor_dap.step()
window.stop()
print(json.dumps(got[0]))
'''


def test_top_ops_rows_are_operators(tmp_path):
    """Under the step window with Python stacks on, the table ranks operators and the program's ranges, never
    Python calls (the profiler's own frames, tensor_dap's window, built-in methods, nn.Module calls).
    In a process of its own: torch's Python tracer is not safe in a process that imported much while tracing."""
    (tmp_path / "top_ops.py").write_text(TOP_OPS)
    r = subprocess.run([sys.executable, "top_ops.py"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stderr
    names = set(json.loads(r.stdout.splitlines()[-1]))
    assert {"aten::addmm", "my_loss"} <= names
    python = re.compile(r"\.py\b|\(\d+\): |^<|^nn\.Module|_record_function|_start_trace|tensor_dap")
    assert not [n for n in names if python.search(n)], names


def _profile_torch(tmp_path, gzip_above):
    """``tensor-dap profile --mode torch`` in a process of its own, with the gzip threshold set to ``gzip_above``."""
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "run.py").write_text(f"import sys\nfrom tensor_dap.profiling import trace\n"
                                     f"trace.GZIP_ABOVE = {gzip_above}\nfrom tensor_dap.cli import main\n"
                                     f"sys.exit(main(['profile', '--mode', 'torch', 'train.py']))\n")
    r = subprocess.run([sys.executable, "run.py"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                       env={**os.environ, "PYTHONPATH": ROOT, "NO_COLOR": "1"})
    assert r.returncode == 0, r.stderr
    return run_folder(tmp_path)


def test_a_trace_above_the_threshold_is_written_gzipped(tmp_path):
    folder = _profile_torch(tmp_path, 10_000)  # this small run's trace is ~100 KB: over it
    assert not (folder / "torch.trace.json").exists()
    with gzip.open(folder / "torch.trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert "aten::addmm" in names and any(n.startswith("ProfilerStep#") for n in names)
    manifest = json.loads((folder / "profile.json").read_text())
    assert "torch.trace.json.gz" in manifest["files"] and "torch.trace.json" not in manifest["files"]


def test_a_trace_below_the_threshold_stays_plain_json(tmp_path):
    folder = _profile_torch(tmp_path, trace.GZIP_ABOVE)
    assert not (folder / "torch.trace.json.gz").exists()
    assert 0 < (folder / "torch.trace.json").stat().st_size < trace.GZIP_ABOVE
    events = json.loads((folder / "torch.trace.json").read_text())["traceEvents"]
    assert "aten::addmm" in {e.get("name") for e in events}


def test_profile_a_module_with_dash_m(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("import sys\n\n\ndef work(n):\n    return sum(i * i for i in range(n))\n\n\n"
                                  "if __name__ == '__main__':\n    print(work(int(sys.argv[1])), sys.argv[0])\n")
    r = tensor_dap("profile", "--mode", "cpu", "-m", "pkg.train", "20000", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == str(sum(i * i for i in range(20000)))  # ran as __main__ with its argv
    folder = run_folder(tmp_path)
    assert folder.name.endswith("pkg.train")
    stats = pstats.Stats(str(folder / "cprofile.prof"))
    assert any(name == "work" and file.endswith("pkg/train.py") for file, _, name in stats.stats)
    manifest = json.loads((folder / "profile.json").read_text())
    assert manifest["exit_code"] == 0 and manifest["program"] == "-m pkg.train"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_memory_mode_writes_a_cuda_snapshot_pytorch_can_read(tmp_path):
    (tmp_path / "gpu.py").write_text("import torch\nkeep = torch.randn(1024, 1024, device='cuda')\n"
                                     "for _ in range(3):\n    y = keep @ keep\n")
    r = tensor_dap("profile", "--mode", "memory", "gpu.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    folder = run_folder(tmp_path)
    data = json.loads((folder / "memory.json").read_text())
    assert data["cuda"]["snapshot"] == "cuda_snapshot.pickle"
    assert data["cuda"]["max_allocated_bytes"] >= 1024 * 1024 * 4
    with open(folder / "cuda_snapshot.pickle", "rb") as f:
        snapshot = pickle.load(f)  # what torch.cuda.memory._dump_snapshot writes and memory_viz opens
    assert {"segments", "device_traces"} <= set(snapshot)
    assert sum(s["allocated_size"] for s in snapshot["segments"]) >= 1024 * 1024 * 4  # `keep` is live
    allocs = [e for trace_ in snapshot["device_traces"] for e in trace_ if e["action"] == "alloc"]
    assert any(fr["filename"].endswith("gpu.py") for e in allocs for fr in e["frames"])


def test_memory_sites_are_lines_of_the_program(train_script, tmp_path):
    """Not the import machinery (``<frozen importlib._bootstrap_external>``), not the ``bin/tensor-dap``
    launcher, not the standard library or tensor_dap: what has no line of the program is counted apart."""
    from tensor_dap.libraries import is_user_file

    r = tensor_dap("profile", "--mode", "memory", train_script, "4", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads((run_folder(tmp_path) / "memory.json").read_text())
    files = {s["file"] for s in data["sites"]}
    assert files == {str(train_script)}, files  # this script allocates nothing anywhere else of its own
    assert all(is_user_file(f) for f in files)
    assert data["outside_program_bytes"] > 0  # tensor_dap's and the interpreter's own live bytes, counted apart
    assert "outside the program's lines" in " ".join(r.stderr.split())
    torch_sites = data["torch_cpu"]["sites"]  # autograd's allocations: the backward of the function that ran the model
    assert any(s.get("backward") and s["function"] == "train_step" for s in torch_sites), (torch_sites, r.stderr)
    assert any(not s.get("backward") and s["function"] == "train_step" for s in torch_sites), (torch_sites, r.stderr)
    assert "train_step (backward)" in r.stderr


BY_FUNCTION = '''
import torch
import tensor_dap
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        return torch.tanh(self.fc(x)) @ torch.ones(64, 8)


def batch():  # made with gradients on, just before the forward: its operators carry the first node's number
    return torch.stack([torch.randn(64) for _ in range(32)])


def train_step(net, opt, x):
    opt.zero_grad()
    loss = sum([net(x).sum() for _ in range(2)])  # a comprehension: counted as train_step
    loss.backward()
    opt.step()


net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for i in range(6):
    train_step(net, opt, batch())
    tensor_dap.step()
'''


def test_torch_time_is_told_by_the_program_s_own_functions(tmp_path):
    """The operator table says aten::mm, not whose: the second table sums operators' self time by the innermost
    function of the program above them, its dotted name and def line, with its costliest operators; backward's
    count as the backward of the function whose forward made their autograd nodes (they ran under the backward()
    call: they counted there), the optimizer's as the call of step() in the function that called it."""
    (tmp_path / "train.py").write_text(BY_FUNCTION)
    r = tensor_dap("profile", "--mode", "torch", "train.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not re.search(r"tensor_dap/\S+:\d+: \w*Warning", r.stderr), r.stderr  # (torch 2.13's deprecated names)
    table = r.stderr[r.stderr.index("torch time by your function"):]
    row = r"^\s*[\d.]+ (?:s|ms|µs|ns)\s+(train\.py(?::\d+)? \S+(?: \((?:backward|SGD\.\w+)\))?)\s+(.*)$"
    rows = {m.group(1): m.group(2) for m in re.finditer(row, table, re.M)}
    lines = BY_FUNCTION.splitlines()
    forward, step, made = (next(i for i, line in enumerate(lines, 1) if line.strip().startswith(f"def {name}("))
                           for name in ("forward", "train_step", "batch"))
    net, loop = f"train.py:{forward} Net.forward", f"train.py:{step} train_step"
    update = f"{loop} (SGD.step)"  # the optimizer's operators: its call in train_step, apart from train_step's own
    allowed = {net, f"{net} (backward)", loop, f"{loop} (backward)", f"train.py:{made} batch", update,
               f"{loop} (SGD.zero_grad)"}  # no batch (backward)
    assert {net, f"{net} (backward)", loop, update} <= set(rows) <= allowed, table
    assert re.match(r"aten::(tanh|addmm|mm)", rows[net]), rows
    assert re.match(r"aten::(mm|tanh_backward|sum)", rows[f"{net} (backward)"]), rows  # tanh's and the matmuls'
    assert "backward" not in rows[net] and re.match(r"(aten::\w+|Optimizer.step#SGD.step)", rows[update]), rows
    assert "SGD" not in rows.get(loop, "")  # the loop's own row holds none of the update's operators
    assert "evaluate_function" not in table  # autograd's node records: in the totals, not named as operators
    assert "<listcomp>" not in table and "Linear.forward" not in table  # torch's own modules are not the user's


LAMBDA = '''
import torch
import tensor_dap
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.mlpf = lambda x: torch.tanh(self.fc(x))  # makemore's MLP forward, called by every forward

    def forward(self, x):
        return self.mlpf(x).sum()


block = Block()
for i in range(6):
    block(torch.randn(256, 64)).backward()
    tensor_dap.step()
'''


def test_a_lambda_called_by_forward_is_named_where_it_was_written_not_as_the_init_that_made_it(tmp_path):
    (tmp_path / "train.py").write_text(LAMBDA)
    r = tensor_dap("profile", "--mode", "torch", "train.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    table = r.stderr[r.stderr.index("torch time by your function"):]
    line = next(i for i, text in enumerate(LAMBDA.splitlines(), 1) if "lambda x:" in text)
    found = re.search(rf"^\s*[\d.]+ (?:s|ms|µs|ns)\s+train\.py:{line} Block\.__init__\.<lambda>\s+aten::(tanh|addmm)",
                      table, re.M)
    assert found, table
    assert not re.search(r"Block\.__init__(?!\.<lambda>)", table), table  # __init__ itself ran no operator


# BY_FUNCTION with Adam, and its steps counted by optimizer.step(): no tensor_dap.step()
UNMARKED_ADAM = BY_FUNCTION.replace("    tensor_dap.step()\n", "").replace(".SGD(", ".Adam(").replace("range(6)",
                                                                                                 "range(7)")


def test_the_last_step_s_update_is_the_optimizer_s_where_optimizer_steps_count_the_steps(tmp_path):
    """With no tensor_dap.step(), the window closes in torch's post-step hook, inside the last update's record,
    which then ends before its operators: they went to the loop's own row (makemore's said ``aten::sqrt``)."""
    (tmp_path / "train.py").write_text(UNMARKED_ADAM)
    r = tensor_dap("profile", "--mode", "torch", "train.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    table = r.stderr[r.stderr.index("torch time by your function"):]
    assert "counted by optimizer.step()" in table, table
    rows = {m.group(1): m.group(2) for m in re.finditer(
        r"^\s*[\d.]+ (?:s|ms|µs|ns)\s+(train\.py:\d+ train_step(?: \([\w.]+\))?)\s+(.*)$", table, re.M)}
    update = next((ops for name, ops in rows.items() if name.endswith("(Adam.step)")), None)
    assert update is not None and re.search(r"aten::(sqrt|lerp_|addcdiv_|mul_|_to_copy|add_)", update), table
    own = next((ops for name, ops in rows.items() if name.endswith("train_step")), "")
    # backward's seed only (and the loop's own ``sum([...])``, whose int 0 is promoted: aten::to, aten::_to_copy)
    assert not re.search(r"aten::(sqrt|lerp_|addcdiv_|mul_|add_)", own), table


QUIET = '''
import os, subprocess, sys
import torch
from torch import nn

model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    opt.zero_grad()
    model(torch.ones(3, 4)).sum().backward()
    opt.step()
print("level", os.environ.get("KINETO_LOG_LEVEL"))
print("the program's own line", file=sys.stderr)
child = "import torch\\nwith torch.profiler.profile():\\n    torch.ones(2).sum()\\n"
subprocess.run([sys.executable, "-c", child])  # the program's own profiler, in a process of its own
'''


@pytest.mark.parametrize("mode", ["torch", "memory"])
def test_the_profiler_s_own_log_stays_out_of_the_program_s_output(tmp_path, mode):
    """kineto writes "USDT: ... profiler_start" and "profiler_stop" on stderr at each start and stop: quieted for
    the profile's own profiler, while the program's environment, as its subprocesses get it, is left as it was.
    c10's "Memory block of unknown size was allocated before the profiling started" (once a process, about torch's
    own blocks) is spent before the program runs; the program's own stderr stays."""
    (tmp_path / "train.py").write_text(QUIET)
    r = tensor_dap("profile", "--mode", mode, "train.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "level None" in r.stdout
    assert "unknown size" not in r.stderr and "the program's own line" in r.stderr, r.stderr
    # the child's profiler logs as it would without tensor_dap: one start and one stop, no more
    assert r.stderr.count("profiler_start") == 1 and r.stderr.count("profiler_stop") == 1, r.stderr


def test_a_level_the_user_set_for_the_profiler_s_log_stays(tmp_path):
    (tmp_path / "train.py").write_text(QUIET)
    r = tensor_dap("profile", "--mode", "torch", "train.py", cwd=tmp_path, env={"KINETO_LOG_LEVEL": "5"})
    assert r.returncode == 0, r.stderr
    assert "level 5" in r.stdout
    assert r.stderr.count("profiler_start") > 1, r.stderr  # the profile's own starts are logged too


def test_a_trace_with_no_device_time_under_cuda_says_how_to_see_the_profiler_s_errors(tmp_path):
    """Quieting kineto hides its errors too: where CUDA is there and the trace came back with no GPU time (CUPTI
    refused: no permission for performance counters, a driver mismatch), the profile says how to see them. The CPU
    trace stands in for one that lost its GPU kernels (no GPU here), CUDA's availability is set by hand."""
    from tensor_dap import runner
    from tensor_dap.profiling.recorder import Options
    from tensor_dap.profiling.window import NO_DEVICE_TIME

    recorder = trace.TorchRecorder(tmp_path, runner.Target("train.py"), Options())
    recorder._files, recorder._rows, recorder._functions = [], [], []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(64, 64).mm(torch.ones(64, 64))
    for cuda, told in ((False, False), (True, True)):
        recorder._cuda, recorder.notes = cuda, []
        recorder._on_trace(prof, "steps 1-3")
        assert (NO_DEVICE_TIME in recorder.notes) is told, recorder.notes
