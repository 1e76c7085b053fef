"""The time a cProfile run spent importing, taken out function by function (``profiling.import_time``), read
from real cProfile data: a package in a ``site-packages`` folder (a library to ``libraries``) that is slow to
import, imported lazily from a user's function, as torch.optim imports dynamo inside ``AdamW()``."""

from __future__ import annotations

import cProfile
import json
import pstats
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiled import run_folder, tensor_dap

from tensor_dap.profiling.import_time import ImportTime, importing

IMPORT_S, WORK_S = 0.2, 0.1


@pytest.fixture
def slow_library(tmp_path, monkeypatch):
    """A library that sleeps while imported, under a fresh name (nothing imported it before)."""
    name = f"slowlib_{tmp_path.name.replace('-', '_')}"
    package = tmp_path / "site-packages" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"import time\ntime.sleep({IMPORT_S})\n\ndef f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    yield name
    sys.modules.pop(name, None)


def _setup(name):
    module = __import__(name)  # (as ``import`` does: importlib's frames below this one)
    return module.f


def _work():
    time.sleep(WORK_S)


def _train(name):
    f = _setup(name)
    _work()
    return f()


def _profiled(name):
    profile = cProfile.Profile()
    profile.runcall(_train, name)
    return pstats.Stats(profile).stats


def _key(stats, name):
    return next(k for k in stats if k[2] == name and k[0] == __file__)


def test_a_lazy_import_is_taken_out_of_the_function_that_ran_it(slow_library):
    stats = _profiled(slow_library)
    imports = ImportTime(stats)
    setup, work, train = (_key(stats, n) for n in ("_setup", "_work", "_train"))
    assert stats[setup][3] >= IMPORT_S  # cProfile: the import's time is inside _setup's cumulative
    assert imports.cumulative(setup) < IMPORT_S / 4  # taken out
    assert imports.cumulative(work) == pytest.approx(stats[work][3])  # nothing imported there: all of it
    assert imports.cumulative(train) == pytest.approx(stats[train][3] - stats[setup][3], abs=IMPORT_S / 4)
    spent, profiled = imports.total()
    assert IMPORT_S <= spent < IMPORT_S + WORK_S / 2 and profiled >= IMPORT_S + WORK_S
    body = next(k for k in stats if k[2] == "<module>" and slow_library in k[0])
    assert importing(body) and imports.inside[body] == 1.0
    sleep = next(k for k in stats if "time.sleep" in k[2])  # called inside the import and by _work: split
    assert imports.own(sleep) == pytest.approx(stats[sleep][2] * WORK_S / (WORK_S + IMPORT_S), rel=0.25)


def test_a_run_with_no_imports_keeps_every_second():
    profile = cProfile.Profile()
    profile.runcall(_work)
    stats = pstats.Stats(profile).stats
    imports = ImportTime(stats)
    work = _key(stats, "_work")
    assert imports.cumulative(work) == stats[work][3] and imports.total()[0] == 0.0


def _table(stderr, title):
    section = stderr[stderr.index(title):]
    rows = {}
    for line in section.splitlines()[2:]:
        m = re.match(r"\s*([\d.]+) (s|ms|µs|ns)\s+[\d.]+ (?:s|ms|µs|ns)\s+\d+\s+(.+?)\s*$", line)
        if not m:
            break
        rows[m.group(3)] = float(m.group(1)) * {"s": 1, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}[m.group(2)]
    return rows


def _profile_main(slow_library, tmp_path):
    """``tensor-dap profile --mode cpu`` of a script whose setup() imports the slow library, then works."""
    (tmp_path / "main.py").write_text(
        "import time\n\ndef setup():\n"
        f"    import {slow_library}\n    return {slow_library}.f\n\n"
        f"def work():\n    time.sleep({WORK_S})\n\nsetup()\nwork()\n")
    r = tensor_dap("profile", "--mode", "cpu", "main.py", cwd=tmp_path, paths=[tmp_path / "site-packages"])
    assert r.returncode == 0, r.stderr
    return r


def test_the_cpu_summary_shows_your_code_without_the_imports(slow_library, tmp_path):
    """A short profiled run is mostly imports (nanoGPT's 30 steps: 0.5 s of 4.8 s): the tables show the rest."""
    r = _profile_main(slow_library, tmp_path)
    said = re.search(r"imports took ([\d.]+) (s|ms) of the", r.stderr)
    assert said and float(said.group(1)) * (1 if said.group(2) == "s" else 1e-3) >= IMPORT_S, r.stderr
    yours = _table(r.stderr, "your code by cumulative time")
    assert yours["main.py:7 work"] >= WORK_S and yours["main.py:3 setup"] < IMPORT_S / 4, r.stderr
    cumulative = _table(r.stderr, "top functions by cumulative time")
    assert not any(slow_library in place or "cpu.py" in place for place in cumulative), r.stderr
    saved = pstats.Stats(str(run_folder(tmp_path) / "cprofile.prof"))  # the file keeps the import
    assert any(slow_library in file and name == "<module>" for file, _, name in saved.stats)


def test_a_string_the_program_execs_is_its_code_not_an_import():
    """nanoGPT runs its config files with exec(open(...).read()): a "<string>" module body, the program's own."""
    profile = cProfile.Profile()
    profile.runcall(exec, compile("import time\ntime.sleep(0.05)\n", "<string>", "exec"), {})
    stats = pstats.Stats(profile).stats
    body = next(k for k in stats if k[0] == "<string>" and k[2] == "<module>")
    assert not importing(body) and ImportTime(stats).cumulative(body) >= 0.05
    assert importing(("<frozen posixpath>", 1, "<module>"))  # a frozen standard module: imported


def test_the_extension_gets_the_same_split_as_json(slow_library, tmp_path):
    """``python -m tensor_dap.profiling.import_json``: what the VS Code profile page leaves out, computed here."""
    _profile_main(slow_library, tmp_path)
    prof = run_folder(tmp_path) / "cprofile.prof"
    r = subprocess.run([sys.executable, "-m", "tensor_dap.profiling.import_json", str(prof)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    split = json.loads(r.stdout)
    assert split["format"] == "tensor_dap.profiling.import_json" and split["version"] == 1
    assert IMPORT_S <= split["importing"] < split["profiled"]
    rows = {(Path(file).name, name): (own, cumulative) for file, _, name, own, cumulative in split["functions"]}
    assert rows[("main.py", "work")][1] >= WORK_S and rows[("main.py", "setup")][1] < IMPORT_S / 4
    assert not any(slow_library in file or Path(file).name == "cpu.py" or name == "<built-in method builtins.exec>"
                   for file, _, name, *_ in split["functions"])  # module bodies, the profiler, exec: left out
    (tmp_path / "notes.prof").write_text("not a profile\n")
    bad = subprocess.run([sys.executable, "-m", "tensor_dap.profiling.import_json", str(tmp_path / "notes.prof")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("tensor-dap: error: ") and len(bad.stderr.splitlines()) == 1


def test_functions_calling_each_other_inside_an_import_are_import(tmp_path, monkeypatch):
    """``inspect.getmodule`` and ``getabsfile`` call each other, as torch's op namespaces reach their own
    ``__getattr__`` again: run only by module bodies, such a cycle is import time, not the program's."""
    name = f"cyclelib_{tmp_path.name.replace('-', '_')}"
    package = tmp_path / "site-packages" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import time\n\ndef a(n):\n    time.sleep(0.02)\n    return b(n) if n else 0\n\n"
        "def b(n):\n    time.sleep(0.02)\n    return a(n - 1)\n\ndef f():\n    return 1\n\na(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    try:
        stats = _profiled(name)
    finally:
        sys.modules.pop(name, None)
    cycle = [next(k for k in stats if k[2] == fn and name in k[0]) for fn in ("a", "b")]
    for first in cycle:  # the walk meets the cycle at either function first (pstats' order is the profiler's)
        ordered = {first: stats[first], **{k: v for k, v in stats.items() if k != first}}
        imports = ImportTime(ordered)
        for key in cycle:
            assert imports.inside[key] == pytest.approx(1.0), (first[2], key[2])
            assert imports.cumulative(key) == pytest.approx(0.0, abs=1e-6)
        spent, profiled = imports.total()
        rest = sum(imports.own(k) for k in stats)  # the two estimates agree: what is left is _work's sleep
        assert rest == pytest.approx(profiled - spent, abs=0.02) and rest >= WORK_S


def test_durations_keep_three_digits_in_a_unit_that_fits():
    """A function left with a sliver of its time once imports are taken out reads in ns, not "0.000221 µs"."""
    from tensor_dap.profiling.tables import seconds

    assert [seconds(v) for v in (2.5, 0.0123, 4.5e-5, 7.1e-8, 0.0)] == ["2.5 s", "12.3 ms", "45 µs", "71 ns", "0 µs"]
