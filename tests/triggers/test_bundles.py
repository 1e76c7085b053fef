"""Incident bundles and replay: atomic writes, safe loading (weights_only), hostile report.json files.

A bundle is a file from disk that may come from anywhere: ``tensor-dap replay`` must show any
string in it escaped (no terminal escape sequence acts, no ``[/...]`` is parsed as markup) and
refuse a damaged file in one line (exit 1); ``tensor_dap.replay`` must load it without running
pickled code unless told ``trusted=True``.
"""

from __future__ import annotations

import collections
import json
import os
import pickle
from pathlib import Path

import planted
import pytest
import torch

import tensor_dap
from tensor_dap import NonFiniteError
from tensor_dap.cli import main
from tensor_dap.triggers.incident import BundleError, read_bundle
from tensor_dap.triggers.report import to_text

pytestmark = pytest.mark.timeout(60)


def assert_same_state(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def bundle_of(bug, tmp_path, **kw):
    _, exc = planted.train(bug, on="raise", capture=str(tmp_path), **kw)
    assert exc is not None and exc.report.bundle
    return exc.report


def test_bundle_is_written_atomically_and_never_overwritten(tmp_path):
    root = tmp_path / "incidents"
    paths = [bundle_of("inf_input", root).bundle for _ in range(2)]
    assert len(set(paths)) == 2 and all(os.path.dirname(p) == str(root) for p in paths)
    assert sorted(os.listdir(root)) == sorted(os.path.basename(p) for p in paths)  # no leftover temp dirs
    assert os.path.basename(paths[0]).endswith(f"-step{planted.BUG_STEP}")
    for path in paths:
        assert sorted(os.listdir(path)) == ["report.json", "report.txt", "state.pt"]
        data = json.loads(Path(path, "report.json").read_text())
        assert (data["step"], data["phase"], data["module"], data["version"]) == (planted.BUG_STEP, "input", "inp", 3)
        assert data["bundle"] == path and data["mode"] == "step"
        assert "tensor-dap replay " + path in Path(path, "report.txt").read_text()
        state = torch.load(os.path.join(path, "state.pt"), weights_only=True)  # no pickled code in a bundle
        assert state["step"] == planted.BUG_STEP and set(state["rng"]) >= {"python", "torch", "numpy"}
        assert torch.isinf(state["args"][0]).any()  # the step's own batch
        assert state["optimizer"]["state"]  # momentum buffers from before the step


def test_a_failed_bundle_write_leaves_nothing_behind(tmp_path):
    from tensor_dap.triggers.incident import write_bundle
    from tensor_dap.triggers.report import Report

    report = Report("nonfinite", "x", step=3)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        write_bundle(report, step=3, args=(lambda: None,), root=str(tmp_path))  # a lambda cannot be pickled
    assert os.listdir(tmp_path) == [] and report.bundle is None


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("bug", ["backward_nan", "log_zero"])
def test_replay_reproduces_the_failure_from_the_bundle(tmp_path, bug):
    original = bundle_of(bug, tmp_path)
    model, optimizer, _, step_fn = planted.build(bug, seed=123)  # different weights: replay restores them
    with pytest.raises(NonFiniteError) as info:
        tensor_dap.replay(original.bundle, model, step_fn, optimizer, on="raise")
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op, report.source) == (
        original.step, original.phase, original.module, original.op, original.source)
    assert report.op == ("SqrtBackward0" if bug == "backward_nan" else "log")
    saved = torch.load(os.path.join(original.bundle, "state.pt"), weights_only=True)["model"]
    assert_same_state(model.state_dict(), saved)  # left in the pre-step state


Batch = collections.namedtuple("Batch", "x y")


def test_a_bundle_holding_python_objects_needs_trusted(tmp_path):
    """A namedtuple batch cannot be stored in safe types: it goes to objects.pt, loaded only when trusted."""
    model, optimizer, batch, step_fn = planted.build("log_zero")
    with pytest.raises(NonFiniteError) as info, \
            tensor_dap.watch(model, optimizer, on="raise", capture=str(tmp_path)) as w:
        for step in range(8):
            w.step(lambda b: step_fn(b.x, b.y), Batch(*batch(step)))
    path = info.value.report.bundle
    assert "objects.pt" in os.listdir(path) and any("trusted=True" in n for n in info.value.report.notes)
    assert torch.load(os.path.join(path, "state.pt"), weights_only=True)["objects"] == ["args"]
    with pytest.raises(BundleError, match="trusted=True"):
        tensor_dap.replay(path, model, lambda b: step_fn(b.x, b.y), optimizer, on="raise")
    with pytest.raises(NonFiniteError) as again:
        tensor_dap.replay(path, model, lambda b: step_fn(b.x, b.y), optimizer, on="raise", trusted=True)
    assert again.value.report.op == "log"


def test_an_old_full_pickle_bundle_is_refused_unless_trusted(tmp_path):
    """Format-1 bundles were one full pickle (numpy RNG arrays): read only with trusted=True."""
    import numpy as np

    report = bundle_of("log_zero", tmp_path)
    state_path = os.path.join(report.bundle, "state.pt")
    state = torch.load(state_path, weights_only=True)
    state["rng"]["numpy"] = np.random.get_state()  # what format 1 stored
    del state["format"], state["objects"]
    torch.save(state, state_path)
    with pytest.raises(BundleError, match="trusted=True"):
        read_bundle(report.bundle)
    assert read_bundle(report.bundle, trusted=True).step == planted.BUG_STEP


class _Planted:
    def __reduce__(self):
        return (open, (os.environ["TENSOR_DAP_TEST_MARKER"], "w"))  # unpickling would create this file


def test_a_crafted_state_pt_runs_no_code(tmp_path, monkeypatch):
    report = bundle_of("log_zero", tmp_path)
    marker = tmp_path / "pwned"
    monkeypatch.setenv("TENSOR_DAP_TEST_MARKER", str(marker))
    torch.save({"format": 2, "step": 1, "args": (_Planted(),)}, os.path.join(report.bundle, "state.pt"))
    with pytest.raises(BundleError, match="trusted=True"):
        read_bundle(report.bundle)
    assert not marker.exists()


def test_a_report_json_that_never_ends_is_refused_in_bounded_memory(tmp_path, capsys):
    (tmp_path / "report.json").write_text('{"kind": "x", "headline": "' + "a" * (17 * 2**20) + '"}')
    assert main(["replay", str(tmp_path)]) == 1
    assert "not a report" in capsys.readouterr().err


def test_a_loop_bundle_replays_without_a_step_function(tmp_path):
    model, optimizer, batch, step_fn = planted.build("backward_nan")
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=str(tmp_path)):
        for step in range(8):
            step_fn(*batch(step))
    original = info.value.report
    assert original.mode == "loop" and "model, optimizer=optimizer" in Path(original.bundle, "report.txt").read_text()
    model2, optimizer2, _, _ = planted.build("backward_nan", seed=7)
    with pytest.raises(NonFiniteError) as again:
        tensor_dap.replay(original.bundle, model2, optimizer=optimizer2, on="raise")
    got = again.value.report
    assert (got.phase, got.module, got.op, got.source) == (original.phase, original.module, original.op,
                                                           original.source)
    with pytest.raises(ValueError, match="step function"):
        tensor_dap.replay(bundle_of("log_zero", tmp_path / "s").bundle, model2, optimizer=optimizer2)


def test_the_replay_line_names_the_model_and_optimizer_as_the_program_holds_them(tmp_path, capsys):
    """minDiffusion's loop holds ``ddpm`` and ``optim``: the line to type at the stop's prompt (the frame calling the
    optimizer's step) or to paste uses those names, in the report, its bundle's report.txt and ``tensor-dap
    replay``'s rendering of report.json. (A step function holding them as ``model`` and ``optimizer``, where the
    stop would open, keeps those: ``test_a_loop_bundle_replays_without_a_step_function``.)"""
    ddpm, optim, batch, _ = planted.build("backward_nan")
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(ddpm, optim, on="raise", capture=str(tmp_path)):
        for step in range(8):
            x, y = batch(step)
            optim.zero_grad()
            torch.nn.functional.mse_loss(ddpm(x), y).backward()
            optim.step()
    report = info.value.report
    line = f"tensor_dap.replay({report.bundle!r}, ddpm, optimizer=optim)"
    assert report.names == {"model": "ddpm", "optimizer": "optim"}
    assert line in str(info.value) and line in Path(report.bundle, "report.txt").read_text()
    assert main(["replay", "--json", report.bundle]) == 0
    assert json.loads(capsys.readouterr().out)["names"] == report.names
    assert line in to_text(read_bundle(report.bundle).report)  # read back: what `tensor-dap replay` renders
    fresh, fresh_optim, _, _ = planted.build("backward_nan")  # replayed (``run --replay`` re-runs the program): the
    with pytest.raises(NonFiniteError) as again:  # same names, not "model" and "optimizer"
        tensor_dap.replay(report.bundle, fresh, optimizer=fresh_optim, on="raise")
    assert again.value.report.names == report.names and line in str(again.value)


class _Wrapped:
    """A library's optimizer wrapper (accelerate's AcceleratedOptimizer keeps the real one as ``.optimizer``)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer


def test_an_optimizer_the_loop_holds_only_in_a_wrapper_is_named_through_it(tmp_path):
    net, optim, batch, _ = planted.build("backward_nan")
    opt = _Wrapped(optim)
    del optim  # the loop holds the optimizer only inside the wrapper
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(net, opt.optimizer, on="raise",
                                                                 capture=str(tmp_path)):
        for step in range(8):
            x, y = batch(step)
            opt.optimizer.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.optimizer.step()
    assert info.value.report.names == {"model": "net", "optimizer": "opt.optimizer"}


# ------------------------------------------------------------------ tensor-dap replay: the CLI

def test_cli_replay_prints_the_report(tmp_path, capsys):
    report = bundle_of("zero_variance", tmp_path)
    assert main(["replay", report.bundle]) == 0
    out = capsys.readouterr().out
    assert "norm" in out and "Standardize" in out and f"step {planted.BUG_STEP}" in out and "NaN!" in out
    assert "op: div" in out and "planted.py:" in out and "diagnosis: division by zero" in out
    assert main(["replay", "--json", report.bundle]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["module"], data["op"], data["source"]["text"]) == ("norm", "div", "return (x - x.mean(0)) / x.std(0)")


@pytest.mark.parametrize("path", ["does/not/exist", "."])
def test_cli_replay_bad_bundle_is_one_line_and_exit_2(path, capsys):
    assert main(["replay", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensor-dap: error:") and err.count("\n") == 1 and "Traceback" not in err


GOOD = {"kind": "nonfinite", "headline": "x", "step": 3, "tensors": [], "notes": []}
SUMMARY = {"kind": "tensor", "shape": [2], "dtype": "torch.float32", "device": "cpu", "numel": 2, "nbytes": 8}
DAMAGED = {
    "not an object": "[]",
    "not json": "{not json",
    "missing headline": '{"kind": "nonfinite"}',
    "tensors not a list": json.dumps({**GOOD, "tensors": 5}),
    "step a string": json.dumps({**GOOD, "step": "five"}),
    "step a bool": json.dumps({**GOOD, "step": True}),
    "notes a string": json.dumps({**GOOD, "notes": "abc"}),
    "a note a number": json.dumps({**GOOD, "notes": [1]}),
    "source line a string": json.dumps({**GOOD, "source": {"file": "a.py", "line": "x", "text": ""}}),
    "lr a dict": json.dumps({**GOOD, "lr": {"a": 1}}),
    "loss a list": json.dumps({**GOOD, "loss": [1]}),
    "row too short": json.dumps({**GOOD, "tensors": [["a", "b"]]}),
    "summary numel a string": json.dumps({**GOOD, "tensors": [["a", "b", {**SUMMARY, "numel": "x"}]]}),
    "summary min a string": json.dumps({**GOOD, "tensors": [["a", "b", {**SUMMARY, "min": "x"}]]}),
    "gradient of a gradient": json.dumps({**GOOD, "tensors": [["a", "b", {**SUMMARY, "grad": {
        **SUMMARY, "grad": SUMMARY}}]]}),
    "nested 100000 deep": '{"kind": "x", "headline": "x", "notes": ' + "[" * 100000 + "]" * 100000 + "}",
    "too many notes": json.dumps({**GOOD, "notes": ["n"] * 20000}),
    "names a list": json.dumps({**GOOD, "names": ["model"]}),
    "a name that is code": json.dumps({**GOOD, "names": {"model": "__import__('os').system('x')"}}),
    "a name for something else": json.dumps({**GOOD, "names": {"step_fn": "step"}}),
}


@pytest.mark.parametrize("content", list(DAMAGED.values()), ids=list(DAMAGED))
def test_cli_replay_damaged_report_is_one_line_and_exit_1(tmp_path, content, capsys):
    """The file is the problem: exit 1, one line naming report.json, never a traceback."""
    (tmp_path / "report.json").write_text(content)
    assert main(["replay", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tensor-dap: error:") and "report.json" in err and err.count("\n") == 1
    with pytest.raises(BundleError):
        read_bundle(str(tmp_path))


def test_a_file_that_fails_to_load_without_a_message_is_a_bundle_error(tmp_path):
    """EOFError('') from torch.load of an empty state.pt: the error names the file and the exception's type."""
    (tmp_path / "state.pt").write_bytes(b"")
    (tmp_path / "report.json").write_text(json.dumps(GOOD))
    with pytest.raises(BundleError, match=r"cannot load state\.pt: EOFError$"):
        read_bundle(str(tmp_path))
    (tmp_path / "report.json").write_text(json.dumps({**GOOD, "headline": None}))
    with pytest.raises(BundleError, match=r"cannot read report\.json: \S"):
        read_bundle(str(tmp_path))


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202eevil[/bold][link=http://x]blocks[/link]"


def test_cli_replay_shows_hostile_strings_escaped_and_literal(tmp_path, capsys):
    """Escape sequences from the file are shown as text, never sent to the terminal; markup stays literal."""
    report = {**GOOD, "headline": HOSTILE, "module": "blocks[/x]" + HOSTILE, "module_type": "[bold]T",
              "phase": "forward", "op": HOSTILE, "source": {"file": "\x1b[31m.py", "line": 3, "text": HOSTILE},
              "diagnosis": HOSTILE, "notes": [HOSTILE], "lr": [0.1], "loss_history": ["nan", 1.5],
              "tensors": [[HOSTILE, "[/]" + HOSTILE, {**SUMMARY, "kind": HOSTILE, "device": "\x1b[2J",
                                                      "notes": [HOSTILE], "error": HOSTILE}]]}
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert main(["replay", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b]0;pwned" in out and "blocks[/x]" in out and "[/bold]" in out and "[link=http://x]" in out
    assert main(["replay", "--json", str(tmp_path)]) == 0
    raw = capsys.readouterr().out
    assert "\x1b" not in raw and json.loads(raw)["module"] == report["module"]  # JSON keeps the data, escaped


def test_version_1_reports_still_read(tmp_path, capsys):
    """A report.json written before version 2: no version, op, source, history... fields."""
    v1 = {"kind": "nonfinite", "headline": "first non-finite value in the forward of norm", "step": 5,
          "phase": "forward", "module": "norm", "module_type": "Standardize", "rank": None, "loss": "nan",
          "notes": ["its output is non-finite while its inputs are finite"], "bundle": str(tmp_path),
          "created": 1.0, "tensors": [["output", "output", {**SUMMARY, "has_nan": True, "nan": 1}]]}
    (tmp_path / "report.json").write_text(json.dumps(v1))
    assert main(["replay", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "forward of norm (Standardize)" in out and "NaN!" in out
    from tensor_dap.triggers.incident import read_report

    report = read_report(str(tmp_path))
    assert report.version == 1 and report.op is None and report.loss_history == []


def test_an_op_line_in_an_installed_package_says_whose_it_is():
    """einops' ``rearrange`` ran the op: the line is einops' own file, named with its package (the user's and the
    standard library's lines are not)."""
    import sysconfig

    from tensor_dap.triggers.report import Report

    site = sysconfig.get_paths()["purelib"]
    lines = {os.path.join(site, "einops", "_torch_specific.py"): "reshape at _torch_specific.py:74 (einops)  x",
             "/home/me/train.py": "reshape at train.py:74  x",
             os.path.join(sysconfig.get_paths()["stdlib"], "functools.py"): "reshape at functools.py:74  x"}
    for file, origin in lines.items():
        assert Report("nonfinite", "h", op="reshape", source={"file": file, "line": 74, "text": "x"}).origin == origin


@pytest.mark.parametrize(("mode", "phase", "after", "origin"), [
    ("loop", "loss", False, "log, in the loss computed before train.py:9"),
    ("loop", "loss", True, "log, in the loss computed after train.py:9"),
    ("closure", "loss", False, "log at train.py:9"),
    ("loop", "forward", False, "log at train.py:9"),
])
def test_version_2_reports_say_which_lines_are_near_the_loss_op(tmp_path, mode, phase, after, origin):
    """Version 2 told a line near a loss op (not the op's own: the unchanged loop read the op from the loss's graph)
    by the report's mode and phase, and ``after`` in its source; version 3 says it in the source (``near``)."""
    from tensor_dap.triggers.incident import read_report

    v2 = {**GOOD, "version": 2, "mode": mode, "phase": phase, "module": None, "op": "log",
          "source": {"file": "/x/train.py", "line": 9, "text": "", **({"after": True} if after else {})}}
    (tmp_path / "report.json").write_text(json.dumps(v2))
    report = read_report(str(tmp_path))
    assert report.origin == origin and "after" not in report.source
    v3 = {**v2, "version": 3, "source": {**report.source}}  # written again, it reads the same
    (tmp_path / "report.json").write_text(json.dumps(v3))
    assert read_report(str(tmp_path)).origin == origin


@pytest.mark.parametrize("mode", ["loop", "closure", "step"])
def test_a_report_offers_the_shell_command_that_replays_it_where_one_can(tmp_path, capsys, monkeypatch, mode):
    """The script that trained (report.json's ``program`` and ``args``) rebuilds the model and optimizer, and the
    closure a ``closure`` bundle needs, which only it has: those reports say how to replay them from the shell,
    quoted as a shell reads it; a ``w.step`` bundle needs its step function, so it offers code only."""
    monkeypatch.chdir(tmp_path)
    report = {**GOOD, "mode": mode, "bundle": "incidents/step 3", "program": str(tmp_path / "train.py"),
              "args": ["--lr", "0.1", "--name", "a b", HOSTILE]}
    (tmp_path / "report.json").write_text(json.dumps(report))
    assert main(["replay", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # (the panel wraps long lines)
    assert "\x1b" not in out
    offered = "tensor-dap run --replay 'incidents/step 3' train.py --lr 0.1 --name 'a b'"
    assert (offered in out) == (mode != "step"), out
    assert "show this report again: tensor-dap replay 'incidents/step 3'" in out


def test_the_program_kept_for_a_replay_is_the_users_script_not_a_librarys_entry_point(tmp_path, monkeypatch):
    """``tensor-dap demo`` runs as ``tensor_dap/__main__.py demo`` and tests as pytest's ``__main__.py``: rerun
    under ``--replay``, neither would train, so a bundle they write names no program (and offers no command)."""
    from tensor_dap.triggers.incident import _program

    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    monkeypatch.setattr("sys.argv", [str(script), "--lr", "3e-4"])
    assert _program() == (str(script), ["--lr", "3e-4"])
    for entry in (os.path.join(os.path.dirname(tensor_dap.__file__), "__main__.py"), pytest.__file__):
        monkeypatch.setattr("sys.argv", [entry, "demo"])
        assert _program() == (None, [])


@pytest.mark.parametrize("width", [60, 100, 220])
def test_the_report_panel_keeps_its_whole_headline_at_any_width(width):
    """rich cuts a panel title wider than the terminal mid-word: the module and op at the headline's end were lost."""
    import io

    from rich.console import Console

    from tensor_dap.triggers.report import Report, title, to_rich

    headline = "NaN born in SqrtBackward0 (the backward of sqrt), in the backward of transformer.h.3.mlp.act"
    report = Report("nonfinite", headline, step=7)
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(to_rich(report))
    lines = out.getvalue().splitlines()
    text = " ".join(" ".join(line.strip("│╭╮╰╯─ ") for line in lines).split())
    assert f"step 7 · {headline}" in text and all(len(line) <= width for line in lines)
    assert (title(report) in lines[0]) == (len(title(report)) + 6 <= width)  # whole in the border where it fits
