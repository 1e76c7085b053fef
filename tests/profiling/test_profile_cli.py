"""``tensor-dap profile``: each mode on a small real training script, its file read back with its own tool."""

from __future__ import annotations

import json
import pstats
import re

import line_profiler
import pytest

from profiled import run_folder, tensor_dap


def _manifest(folder):
    data = json.loads((folder / "profile.json").read_text())
    assert data["kind"] == "tensor_dap.profiling" and data["version"] == 1
    for name in data["files"]:
        assert (folder / name).is_file(), name
    return data


def test_cpu_mode_writes_a_pstats_file(train_script, tmp_path):
    r = tensor_dap("profile", "--mode", "cpu", train_script, "3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "final loss" in r.stdout  # the program's stdout is its own
    folder = run_folder(tmp_path)
    stats = pstats.Stats(str(folder / "cprofile.prof"))
    names = {(file.rsplit("/", 1)[-1], name) for file, _, name in stats.stats}
    assert ("train.py", "train_step") in names
    calls = [v[1] for (file, _, name), v in stats.stats.items() if name == "train_step"]
    assert calls == [3]
    assert "top functions by cumulative time" in r.stderr and f"{folder.name}/cprofile.prof" in r.stderr
    assert _manifest(folder)["argv"] == ["3"]


def test_cpu_tables_leave_the_import_machinery_out_of_cumulative_time(tmp_path):
    """Each import's frames are as large as the import by cumulative time: on minGPT they filled 7 of the 15 rows."""
    (tmp_path / "slowmod.py").write_text("import time\ntime.sleep(0.05)\n\ndef work():\n    return sum(range(10**5))\n")
    (tmp_path / "main.py").write_text("import slowmod\nprint(slowmod.work())\n")
    r = tensor_dap("profile", "--mode", "cpu", "--top", "40", "main.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cumulative = r.stderr[r.stderr.index("top functions by cumulative time"):r.stderr.index("top functions by own")]
    assert not any(f in cumulative for f in ("importlib", "builtins.__import__", "builtins.exec")), cumulative
    assert re.search(r"slowmod\.py:1 <module>", cumulative) and re.search(r"main\.py:1 <module>", cumulative)
    saved = pstats.Stats(str(run_folder(tmp_path) / "cprofile.prof"))
    assert any(file.startswith("<frozen importlib") for file, _, _ in saved.stats)  # the file keeps everything


def test_runs_never_overwrite_each_other_and_out_chooses_the_parent(train_script, tmp_path):
    out = tmp_path / "profiles here"
    first = tensor_dap("profile", "--mode", "cpu", "--out", out, train_script, "1", cwd=tmp_path)
    second = tensor_dap("profile", "--mode", "cpu", "--out", out, train_script, "1", cwd=tmp_path)
    assert first.returncode == second.returncode == 0, second.stderr
    runs = sorted(out.iterdir())
    assert len(runs) == 2 and all((r / "cprofile.prof").is_file() for r in runs)


def test_line_mode_profiles_script_functions_methods_and_module_functions(train_script, tmp_path):
    r = tensor_dap("profile", "--mode", "line", "--function", "train_step", "--function", "Helper.scale",
                   "--function", "torch.nn.functional:cross_entropy", train_script, "4", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    stats = line_profiler.load_stats(str(run_folder(tmp_path) / "line.lprof"))
    by_name = {name: lines for (_, _, name), lines in stats.timings.items()}
    assert {name.rsplit(".", 1)[-1] for name in by_name} == {"train_step", "scale", "cross_entropy"}
    by_name = {name.rsplit(".", 1)[-1]: lines for name, lines in by_name.items()}
    source = train_script.read_text().splitlines()
    hits = {source[line - 1].strip(): n for line, n, _ in by_name["train_step"]}
    assert hits["loss.backward()"] == 4  # the line numbers are the file's own
    scale = {source[line - 1].strip(): n for line, n, _ in by_name["scale"]}
    assert scale["total += v * i"] == 4 * 50
    assert "loss.backward()" in r.stderr


def test_line_mode_reports_names_never_found(train_script, tmp_path):
    r = tensor_dap("profile", "--mode", "line", "--function", "train_step", "--function", "no_such_fn",
                   "--function", "never_imported_mod:f", train_script, "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "no function no_such_fn in" in r.stderr and "never imported never_imported_mod" in r.stderr
    nothing = tensor_dap("profile", "--mode", "line", "--function", "train_stp", train_script, "1", cwd=tmp_path)
    assert nothing.returncode == 2
    assert nothing.stderr.strip().splitlines()[-1].startswith("tensor-dap: error: no function was profiled")


def test_line_mode_with_no_function_named_profiles_the_script_whole(train_script, tmp_path):
    """nanoGPT's training loop is at the top level of train.py: with no --function (and no @profile) the script's
    module-level code is profiled with every function it defines, so its loop's lines show."""
    r = tensor_dap("profile", "--mode", "line", train_script, "3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "final loss" in r.stdout and "no --function: train.py profiled whole" in " ".join(r.stderr.split())
    stats = line_profiler.load_stats(str(run_folder(tmp_path) / "line.lprof"))
    by_name = {name: lines for (_, _, name), lines in stats.timings.items()}
    assert {"<module>", "train_step", "Helper.scale"} <= set(by_name), set(by_name)
    source = train_script.read_text().splitlines()
    hits = {source[line - 1].strip(): n for line, n, _ in by_name["<module>"]}
    assert hits["loss = train_step(x, y)"] == 3 and hits["for i in range(steps):"] == 4
    assert re.search(r"train\.py:1 <module> +total", r.stderr)


def test_a_function_defined_again_at_each_call_is_profiled_once(tmp_path):
    """A closure made at each step (LBFGS's closure, a hook factory): each new function was added to line_profiler
    again, ~3 ms and growing, 67 s for 20,000. Named, every call is traced through the first one's profiled code;
    the whole script leaves nested functions to the line that calls them."""
    (tmp_path / "nest.py").write_text("def outer(i):\n    def inner(x):\n        return x + i\n    return inner(1)\n\n"
                                      "s = sum(outer(i) for i in range(3000))\nprint(s)\n")
    named = tensor_dap("profile", "--mode", "line", "--function", "outer.inner", "nest.py", cwd=tmp_path)
    assert named.returncode == 0 and named.stdout.strip() == str(sum(range(1, 3001))), named.stderr
    stats = line_profiler.load_stats(str(run_folder(tmp_path) / "line.lprof"))
    lines = {name: {line: n for line, n, _ in rows} for (_, _, name), rows in stats.timings.items()}
    assert lines["outer.<locals>.inner"][3] == 3000, lines  # every closure's call, through the one profiled code
    whole = tensor_dap("profile", "--mode", "line", "nest.py", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    stats = line_profiler.load_stats(str(run_folder(tmp_path) / "line.lprof"))
    names = {name for _, _, name in stats.timings}
    assert names == {"<module>", "outer"}, names
    outer = next(rows for (_, _, name), rows in stats.timings.items() if name == "outer")
    assert {line: n for line, n, _ in outer}[4] == 3000


def test_line_mode_profiles_a_dash_m_module_whole(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "loop.py").write_text(
        "def f(i):\n    return i * 2\n\nfor i in range(3):\n    f(i)\nprint('ok')\n")
    r = tensor_dap("profile", "--mode", "line", "-m", "pkg.loop", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    stats = line_profiler.load_stats(str(run_folder(tmp_path) / "line.lprof"))
    by_name = {name: dict((line, n) for line, n, _ in lines) for (_, _, name), lines in stats.timings.items()}
    assert by_name["<module>"][5] == 3 and by_name["f"][2] == 3, by_name
    assert "no --function: pkg.loop profiled whole" in " ".join(r.stderr.split())


def test_line_mode_decorators(tmp_path):
    (tmp_path / "deco.py").write_text(
        "import tensor_dap\n\n@tensor_dap.profile\ndef a(n):\n    return sum(range(n))\n\n"
        "@profile\ndef b(n):\n    return n * 2\n\nprint(a(10), b(3))\n")
    r = tensor_dap("profile", "--mode", "line", "deco.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "45 6"
    stats = line_profiler.load_stats(str(run_folder(tmp_path) / "line.lprof"))
    assert {name for _, _, name in stats.timings} == {"a", "b"}


def test_line_table_keeps_one_row_a_line_and_drops_the_function_s_indentation(tmp_path):
    """minGPT's attention has comments longer than the terminal: they wrapped onto rows of their own."""
    comment = "# " + "a comment longer than any terminal " * 6
    (tmp_path / "long.py").write_text(
        "import tensor_dap\n\nclass Net:\n    @tensor_dap.profile\n    def f(self, n):\n"
        f"        total = sum(range(n))  {comment}\n        for i in range(3):\n            total += i\n"
        "        return total\n\nprint(Net().f(10))\n")
    r = tensor_dap("profile", "--mode", "line", "long.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stderr.splitlines() if re.match(r"\s*\d+\s+\d+\s", line)]
    assert [int(row.split()[0]) for row in rows] == [6, 7, 8, 9], r.stderr  # every line a row, nothing between
    table = r.stderr[r.stderr.index(rows[0]):r.stderr.index(rows[-1])]
    assert "longer than any terminal" in rows[0] and rows[0].rstrip().endswith("…") and table.count("\n") == 3
    source = [re.split(r"\s\d+\.\d\s{2}", row, maxsplit=1)[1].rstrip() for row in rows]  # after "% time"
    assert source[0].startswith("total = sum(range(n))") and source[2] == "    total += i"  # the body's indent only


def test_torch_mode_writes_a_chrome_trace_of_the_step_window(train_script, tmp_path):
    r = tensor_dap("profile", "--mode", "torch", "--wait", "1", "--warmup", "1", "--active", "2", train_script, "8",
                   cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    folder = run_folder(tmp_path)
    trace = json.loads((folder / "torch.trace.json").read_text())
    names = {e.get("name", "") for e in trace["traceEvents"]}
    steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
    assert len(steps) == 2  # only the active steps: the trace stays small however long the run
    assert "aten::addmm" in names and "aten::mm" in names
    assert any(e.get("args", {}).get("Input Dims") for e in trace["traceEvents"] if e.get("name") == "aten::addmm")
    assert "top operators by self CPU time, steps 4–5 (counted by optimizer.step())" in r.stderr


def test_torch_mode_records_a_stepless_program_whole(tmp_path):
    (tmp_path / "infer.py").write_text("import torch\nx = torch.randn(16, 16)\nprint(float((x @ x).sum()) != 0)\n")
    r = tensor_dap("profile", "--mode", "torch", "infer.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    names = {e.get("name") for e in json.loads((run_folder(tmp_path) / "torch.trace.json").read_text())["traceEvents"]}
    assert "aten::mm" in names and "the whole run" in r.stderr


def test_memory_mode_writes_memory_json(train_script, tmp_path):
    r = tensor_dap("profile", "--mode", "memory", train_script, "6", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads((run_folder(tmp_path) / "memory.json").read_text())
    assert data["version"] == 1 and data["kind"] == "tensor_dap.memory"
    assert data["program"] == str(train_script)
    assert isinstance(data["peak_rss_bytes"], int) and data["peak_rss_bytes"] > 10**7
    assert data["tracemalloc_peak_bytes"] >= data["snapshot_bytes"] > 0
    assert data["cuda"] is None  # no GPU here
    for site in data["sites"]:
        assert set(site) >= {"file", "line", "function", "size_bytes", "count", "traceback"}
        assert all(set(f) == {"file", "line"} for f in site["traceback"])
    hoard = [s for s in data["sites"] if s["file"] == str(train_script)]
    assert hoard and hoard[0]["size_bytes"] > 6 * 20000 * 24 // 2  # the list the loop keeps is found, on its line
    assert train_script.read_text().splitlines()[hoard[0]["line"] - 1].strip().startswith("hoard.append")
    ops = {s["op"] for s in data["torch_cpu"]["sites"]}
    assert "aten::addmm" in ops or "aten::mm" in ops


MANY_OPS = """\
import torch

hoard = []
w = torch.zeros(4, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for step in range(8):
    x = w
    for _ in range(100):  # small ops: the profiler's window holds thousands of events
        x = x * 1.0001
    x.sum().backward()
    opt.step()
    opt.zero_grad()
    hoard.append(bytearray(100_000))
"""


def test_memory_mode_leaves_the_profiler_s_own_objects_out(tmp_path):
    """The torch profiler's window, read back, is megabytes of Python objects (17 MiB here, against the program's
    0.8): it is read after tracemalloc stops, so the peak and the snapshot are the program's (before, both were
    the profiler's, and reading them under tracing took seconds per hundred ops)."""
    (tmp_path / "many_ops.py").write_text(MANY_OPS)
    r = tensor_dap("profile", "--mode", "memory", "many_ops.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads((run_folder(tmp_path) / "memory.json").read_text())
    hoard = 8 * 100_000
    assert data["snapshot_bytes"] < 3 * hoard and data["tracemalloc_peak_bytes"] < 3 * hoard, data
    top = data["sites"][0]
    assert (top["line"], top["size_bytes"] > hoard // 2) == (MANY_OPS.splitlines().index(
        "    hoard.append(bytearray(100_000))") + 1, True)
    assert "aten::mul" in {s["op"] for s in data["torch_cpu"]["sites"]}  # the window is still read


def test_a_crash_still_writes_the_profile_and_keeps_the_exit_code(train_script, tmp_path):
    r = tensor_dap("profile", "--mode", "cpu", train_script, "2", "--crash", cwd=tmp_path)
    assert r.returncode == 1
    assert "RuntimeError: boom after training" in r.stderr
    folder = run_folder(tmp_path)
    assert pstats.Stats(str(folder / "cprofile.prof")).total_calls > 0
    assert json.loads((folder / "profile.json").read_text())["exit_code"] == 1


@pytest.mark.parametrize("args, message", [
    (("--mode", "cpu", "missing.py"), "no such script"),
    (("--mode", "cpu"), "missing script"),
    (("--mode", "gpu", "x.py"), "invalid choice"),
    (("--mode", "line", "--function", "a:b:c!", "train.py"), "expected [MODULE:]NAME"),
    (("--mode", "cpu", "--function", "f", "train.py"), "--function is for --mode line"),
    (("--mode", "torch", "--active", "0", "train.py"), "--active must be at least 1"),
    (("--mode", "torch", "--warmup", "0", "train.py"), "--warmup must be at least 1"),
    (("--mode", "cpu", "-m", "no_such_module_here"), "no module named"),
])
def test_bad_invocations_are_one_line_exit_2(train_script, tmp_path, args, message):
    r = tensor_dap("profile", *args, cwd=train_script.parent)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("tensor-dap: error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert message in r.stderr
    assert not (train_script.parent / ".tensor_dap").exists()  # nothing ran, nothing was written


def test_unwritable_output_folder(train_script, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = tensor_dap("profile", "--mode", "cpu", "--out", blocker / "sub", train_script, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("tensor-dap: error: cannot write profiles to")
    assert "final loss" not in r.stdout  # the program did not run
