"""The one script runner: a program runs as __main__ with its own argv, path, exit code and crash handling."""

import sys

import pytest

from tensor_dap import runner
from tensor_dap.errors import UsageError


def _script(tmp_path, body, name="prog.py"):
    path = tmp_path / name
    path.write_text(body)
    return path


def test_script_runs_as_main_with_its_argv_and_folder_on_path(tmp_path, capsys):
    (tmp_path / "helper.py").write_text("VALUE = 41\n")
    path = _script(tmp_path, "import sys, helper\nassert __name__ == '__main__'\n"
                             "print(sys.argv, helper.VALUE + 1)\n")
    saved = sys.argv[:]
    assert runner.run(runner.script_target(str(path)), ["--lr", "3"]) == 0
    assert capsys.readouterr().out.strip() == f"{[str(path), '--lr', '3']} 42"
    assert sys.argv == saved and str(tmp_path) not in sys.path


def test_exit_codes(tmp_path, capsys):
    assert runner.run(runner.script_target(str(_script(tmp_path, "raise SystemExit(3)"))), []) == 3
    assert runner.run(runner.script_target(str(_script(tmp_path, "raise SystemExit('bye')"))), []) == 1
    assert "bye" in capsys.readouterr().err
    assert runner.run(runner.script_target(str(_script(tmp_path, "raise KeyboardInterrupt"))), []) == 130


def test_a_crash_goes_to_the_handler(tmp_path):
    seen = []
    target = runner.script_target(str(_script(tmp_path, "raise ValueError('boom')")))
    assert runner.run(target, [], on_crash=lambda exc: seen.append(exc) or 7) == 7
    assert isinstance(seen[0], ValueError)


def test_module_target(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys\nprint('main of mypkg', sys.argv[1:])\n")
    monkeypatch.chdir(tmp_path)
    target = runner.module_target("mypkg")
    assert target.label == "mypkg"
    assert runner.run(target, ["a"]) == 0
    assert capsys.readouterr().out.strip() == "main of mypkg ['a']"


def test_missing_targets_are_usage_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="no such script"):
        runner.script_target(str(tmp_path / "missing.py"))
    with pytest.raises(UsageError, match="missing script"):
        runner.script_target(None)
    with pytest.raises(UsageError, match="no module named 'nope_not_here'"):
        runner.module_target("nope_not_here")
    (tmp_path / "no_main").mkdir()
    (tmp_path / "no_main" / "__init__.py").write_text("raise SystemExit('imported: the check must not run it')\n")
    with pytest.raises(UsageError, match="'no_main' is a package with no __main__ module"):
        runner.module_target("no_main")


KEEPS_ITS_CODE = '''
import sys, weakref, sink
def step():
    return sys._getframe().f_code
sink.refs += [weakref.ref(sys._getframe().f_code), weakref.ref(step())]
if "--crash" in sys.argv:
    raise ValueError("boom")
'''


@pytest.mark.parametrize("how", ["script", "module", "crash"])
def test_the_programs_code_outlives_its_run(tmp_path, monkeypatch, how):
    """torch's profiler reads Python frame names from their code objects after the program has ended: code freed
    by then came back as garbage (pytorch/pytorch#136040) and lost a window's every event, in about one loaded run
    in forty. The module's code (and every function in it) lives on, as python's own __main__ does."""
    import gc
    import types

    sink = types.ModuleType("sink")
    sink.refs = []
    monkeypatch.setitem(sys.modules, "sink", sink)
    monkeypatch.chdir(tmp_path)
    _script(tmp_path, KEEPS_ITS_CODE, "keeps_code.py")
    target = runner.module_target("keeps_code") if how == "module" else runner.script_target("keeps_code.py")
    code = runner.run(target, ["--crash"] if how == "crash" else [], on_crash=lambda exc: 5)
    assert code == (5 if how == "crash" else 0)
    gc.collect()
    assert len(sink.refs) == 2 and all(ref() is not None for ref in sink.refs), sink.refs
    assert {ref().co_name for ref in sink.refs} == {"<module>", "step"}
