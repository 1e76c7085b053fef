"""`tensor-dap demo`: every planted bug caught by the real tool, the files it names open with their own tools."""

import json
import os
import pstats
import re
import subprocess
import sys
import time

import pytest
from rich.console import Console

from tensor_dap.demo import tour
from tensor_dap.demo.scenario import Outcome, Scenario
from tensor_dap.demo.train import BUG_STEP


def demo(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tensor_dap", "demo", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "200"})


@pytest.fixture(scope="module")
def whole_tour(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    start = time.perf_counter()
    r = demo("--dir", str(root), cwd=root)
    return r, root, time.perf_counter() - start


def test_every_planted_bug_is_caught_and_said(whole_tour):
    r, root, took = whole_tour
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "16 of 16 planted bugs caught, 2 of 2 files written" in out
    for scenario in tour.SCENARIOS:
        assert re.search(rf"^{re.escape(scenario.name)}\s+✓ ", out, re.M), scenario.name
    assert took < 60  # the promise on 2 CPU cores (about 14 s measured)


def test_each_scenario_names_what_the_tool_found(whole_tour):
    out = " ".join(whole_tour[0].stdout.split())  # lines wrap at the console's width
    assert f"NaN born in div in the forward of encoder.2 (Standardize), step {BUG_STEP}" in out
    assert "at train.py:" in out and "/ std" in out
    assert re.search(r"Inf born in div in the forward of codes \(Codebook\), step 0, written into the buffer "
                     r"codes\.embed \(the loss still [\d.]+\)", out)
    assert "self.embed.copy_(self.total / self.count)" in out
    assert "column 4: predicts the label on every row" in out
    assert "40 of 200 test rows (20%) also appear in train" in out
    assert re.search(r"head: weight, bias on (meta|cuda\S*), the rest of the model on cpu", out)
    assert re.search(r"data loading takes \d+% of each step: num_workers=0", out)
    assert "saved from a DataParallel/DistributedDataParallel wrapper" in out
    assert "head.weight, head.bias never changed: in no param group of SGD" in out  # the loss fell all the same
    assert "in eval mode from step 6: its Dropout is off" in out
    assert re.search(r"sigmoid's output changed in place by relu \(inplace=True\) in act \(ReLU\) at "
                     r"silent_scenarios\.py:\d+, under torch's error", out)
    assert "torch said: [torch.FloatTensor [32, 32]], which is output 0 of Sigmoid" in out
    assert "`total_loss` holds 128 steps' graphs at step 128, named with its function" in out
    assert re.search(r"the rate is [\d.e+-]+ at step 128: StepLR stepped 128 times, once per batch", out)
    assert re.search(r"`scores` \[32, 4\] holds -?[\d.]+…[\d.]+, not probabilities: use BCEWithLogitsLoss", out)
    assert "→ `scores` [32, 4] holds" in out  # the crash report's own lines, whole


def test_the_files_it_names_open_with_their_own_tools(whole_tour):
    import line_profiler

    _, root, _ = whole_tour
    bundle = next((root / ".tensor_dap" / "incidents").iterdir())
    report = json.loads((bundle / "report.json").read_text())
    assert (report["step"], report["module"], report["op"]) == (BUG_STEP, "encoder.2", "div")
    assert report["source"]["file"].endswith("train.py")
    demo_dir = next((root / ".tensor_dap" / "demo").iterdir())
    prof = next(demo_dir.glob("profiles/*/cprofile.prof"))
    assert any(func[2] == "train" for func in pstats.Stats(str(prof)).stats)
    lprof = next(demo_dir.glob("profiles/*/line.lprof"))
    assert any(key[2] == "train" for key in line_profiler.load_stats(str(lprof)).timings)
    assert next(demo_dir.glob("runs/demo/events.out.tfevents.*")).stat().st_size > 0
    out = "".join(whole_tour[0].stdout.split())
    for path in (bundle, prof, lprof):
        assert "".join(str(path).split()) in out  # the summary says where each file is


def test_list_one_scenario_and_bad_names(tmp_path):
    listed = demo("--list", cwd=tmp_path)
    assert listed.returncode == 0 and all(s.name in listed.stdout for s in tour.SCENARIOS)
    one = demo("checkpoint", "--dir", str(tmp_path), cwd=tmp_path)
    assert one.returncode == 0 and "1 of 1 planted bugs caught" in one.stdout and "nan" not in one.stdout.split()
    bad = demo("nope", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("tensor-dap: error: no demo scenario named 'nope'")
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_missed_bug_makes_the_exit_code_1(tmp_path):
    """The exit code is the tour's verdict: one scenario whose tool misses (or fails) is enough."""
    missed = Scenario("missed", "a bug the tool does not see", "nothing", lambda ctx: Outcome(False, ["nothing found"]))

    def broken(ctx):
        raise RuntimeError("the tool crashed")

    crashed = Scenario("crashed", "a scenario that fails", "nothing", broken)
    console = Console(file=open("/dev/null", "w"), width=120)
    caught = tour.BY_NAME["checkpoint"]
    assert tour.run([caught], tmp_path, console) == 0
    assert tour.run([caught, missed], tmp_path, console) == 1
    assert tour.run([crashed], tmp_path, console) == 1


def test_help_says_what_the_demo_is():
    """`tensor-dap --help` describes the demo as the tour it is, not the tensor summaries it once was."""
    done = subprocess.run([sys.executable, "-m", "tensor_dap", "--help"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})
    line = next(ln for ln in done.stdout.splitlines() if ln.strip().startswith("demo "))
    assert "bugs planted on purpose, each caught by the real tool" in line and "zoo" not in done.stdout
