"""launch.json templates and their merge: JSON with comments parsed in place, the user's text kept byte for byte."""

import json
import os
import stat

import pytest

from tensor_dap.cli.main import main
from tensor_dap.dap import jsonc, launch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = ["Debug Training (tensor_dap)", "Debug Training (args)", "Attach to GPU box (SSH tunnel)", "Debug tests",
         "Profile current file"]

USER_FILE = """// Project launch configurations (hand-written)
{
\t"version": "0.2.0",
\t/* my own, keep it */
\t"configurations": [
\t\t{
\t\t\t"name": "Debug tests", // mine: same name as a template
\t\t\t"type": "debugpy",
\t\t\t"request": "launch",
\t\t\t"module": "pytest",
\t\t\t"args": ["-k", "slow"],
\t\t},
\t\t{"name": "Serve", "type": "debugpy", "request": "launch", "program": "serve.py"},   // url: "http://x/*y*/"
\t],
}
"""


def _value(text):
    return jsonc.parse(text).value


# ---------------------------------------------------------------- jsonc

def test_jsonc_reads_comments_trailing_commas_and_strings_that_look_like_comments():
    value = _value('{"a": "http://x // not a comment /* nor this */", /* c */ "b": [1, 2.5e3, true, null,],}')
    assert value == {"a": "http://x // not a comment /* nor this */", "b": [1, 2500.0, True, None]}


def test_jsonc_spans_point_at_the_text():
    text = '{\n  "configurations": [ {"name": "x"} ]\n}'
    node = jsonc.parse(text).get("configurations")
    assert text[node.start:node.end] == '[ {"name": "x"} ]'
    assert text[node.key_start:node.key_start + 16] == '"configurations"'


@pytest.mark.parametrize("bad, where", [
    ('{"a": 1', "missing '}'"),
    ('{"a": 1 "b": 2}', "expected ','"),
    ("{a: 1}", "quoted property name"),
    ('{"a": tru}', "unexpected character"),
    ('{"a": "line\nbreak"}', "unterminated string"),
    ("{} extra", "after the value"),
    ("/* open", "unterminated /* comment"),
    ("", "empty document"),
])
def test_jsonc_errors_say_what_and_where(bad, where):
    with pytest.raises(jsonc.JsoncError, match="line") as info:
        jsonc.parse(bad)
    assert where in str(info.value)


# ---------------------------------------------------------------- the templates

def test_templates_have_the_agreed_names_and_shape():
    tpl = launch.templates()
    assert tpl.names() == NAMES
    assert all(c["type"] == "debugpy" for c in tpl.configurations)
    training = tpl.configurations[0]
    assert training["module"] == "tensor_dap" and training["args"] == ["run", "--guard", "${file}"]
    assert training["console"] == "integratedTerminal" and training["justMyCode"] is False
    attach = next(c for c in tpl.configurations if c["request"] == "attach")
    assert attach["connect"]["host"] == "127.0.0.1"
    assert attach["pathMappings"][0]["localRoot"] == "${workspaceFolder}"
    assert tpl.configurations[4]["args"] == ["profile", "--mode", "cpu", "${file}"]
    assert {i["id"] for i in tpl.inputs} == set(launch.input_ids(tpl.configurations[1]))


def test_the_repository_launch_json_starts_with_the_templates():
    """The .vscode/launch.json users copy from this repository holds exactly what init-vscode writes
    (then the repository's own developer configurations)."""
    with open(os.path.join(ROOT, ".vscode", "launch.json")) as f:
        shipped = _value(f.read())
    fresh = json.loads(launch.merge(None, launch.templates()).text)
    assert shipped["configurations"][:len(NAMES)] == fresh["configurations"]
    assert shipped["inputs"] == fresh["inputs"]


def test_port_and_remote_root_fill_the_attach_configuration():
    tpl = launch.templates(port=6001, remote_root="/srv/me/proj")
    attach = next(c for c in tpl.configurations if c["name"] == launch.ATTACH)
    assert attach["connect"] == {"host": "127.0.0.1", "port": 6001}
    assert attach["pathMappings"] == [{"localRoot": "${workspaceFolder}", "remoteRoot": "/srv/me/proj"}]
    assert launch.templates().configurations[2]["pathMappings"][0]["remoteRoot"] == launch.REMOTE_PLACEHOLDER


# ---------------------------------------------------------------- merge

def _kept_in_order(text, original):
    """``original``'s lines, in order, are all still in ``text`` (only whole lines were inserted)."""
    it = iter(text.splitlines())
    return all(any(line == got for got in it) for line in original.splitlines())


def test_merge_keeps_the_users_text_and_adds_only_missing_names():
    result = launch.merge(USER_FILE, launch.templates())
    assert result.kept == ["Debug tests"]
    assert result.added == [n for n in NAMES if n != "Debug tests"]
    assert _kept_in_order(result.text, USER_FILE)
    value = _value(result.text)
    names = [c["name"] for c in value["configurations"]]
    assert names == ["Debug tests", "Serve", *result.added]
    assert value["configurations"][0]["args"] == ["-k", "slow"]  # the user's own, untouched
    assert [i["id"] for i in value["inputs"]] == ["tensorDapTrainingArgs"]
    assert "// mine: same name as a template" in result.text and "/* my own, keep it */" in result.text
    added = result.text[result.text.index('"name": "Debug Training (tensor_dap)"') - 20:]
    assert "\t\t\t\"name\": \"Debug Training (tensor_dap)\"" in added  # the file's tab indentation


def test_merge_is_idempotent_and_a_second_run_changes_nothing():
    once = launch.merge(USER_FILE, launch.templates())
    twice = launch.merge(once.text, launch.templates())
    assert not twice.changed and twice.added == [] and twice.text == once.text


def test_merge_without_trailing_commas_adds_the_comma_itself():
    text = '{\n  "version": "0.2.0",\n  "configurations": [\n    {"name": "A", "type": "debugpy"} // a\n  ]\n}\n'
    result = launch.merge(text, launch.templates(), names=["Debug tests"])
    assert '{"name": "A", "type": "debugpy"}, // a\n' in result.text
    assert _value(result.text)["configurations"][1]["name"] == "Debug tests"
    assert "inputs" not in _value(result.text)  # no added configuration references an input


def test_merge_into_an_object_without_configurations_or_version():
    result = launch.merge("{\r\n  // nothing yet\r\n}\r\n", launch.templates(), names=["Debug Training (args)"])
    value = _value(result.text)
    assert value["version"] == "0.2.0" and [c["name"] for c in value["configurations"]] == ["Debug Training (args)"]
    assert value["inputs"][0]["id"] == "tensorDapTrainingArgs"
    assert "\n" not in result.text.replace("\r\n", "")  # Windows line ends stay Windows line ends


@pytest.mark.parametrize("bad", ['{"configurations": [}', "[1, 2]", '{"configurations": {"a": 1}}'])
def test_merge_refuses_what_it_cannot_read(bad):
    with pytest.raises(launch.LaunchJsonError, match="nothing was changed"):
        launch.merge(bad, launch.templates())


# ---------------------------------------------------------------- tensor-dap init-vscode

def _launch_json(folder):
    return folder / ".vscode" / "launch.json"


def test_init_vscode_in_an_empty_folder(tmp_path, capsys):
    assert main(["init-vscode", str(tmp_path), "--remote-host", "me@gpu", "--remote-root", "/srv/p", "--port",
                 "6000"]) == 0
    value = json.loads(_launch_json(tmp_path).read_text())
    assert [c["name"] for c in value["configurations"]] == NAMES
    assert value["configurations"][2]["connect"]["port"] == 6000
    out = capsys.readouterr().out
    assert "ssh -N -L 6000:127.0.0.1:6000 me@gpu" in out and "tensor-dap run --listen 6000" in out
    assert [p.name for p in (tmp_path / ".vscode").iterdir()] == ["launch.json"]  # nothing to back up


def test_init_vscode_merges_backs_up_and_keeps_everything(tmp_path, capsys):
    path = _launch_json(tmp_path)
    path.parent.mkdir()
    path.write_text(USER_FILE)
    (path.parent / "launch.json.bak").write_text("an older backup of the user's")
    assert main(["init-vscode", str(tmp_path)]) == 0
    assert (path.parent / "launch.json.bak").read_text() == "an older backup of the user's"  # never overwritten
    assert (path.parent / "launch.json.bak.2").read_text() == USER_FILE
    text = path.read_text()
    assert text == launch.merge(USER_FILE, launch.templates()).text
    out = capsys.readouterr().out
    assert "kept your own 'Debug tests'" in out and "launch.json.bak.2" in out
    assert main(["init-vscode", str(tmp_path)]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert path.read_text() == text and not (path.parent / "launch.json.bak.3").exists()


def test_init_vscode_dry_run_prints_and_writes_nothing(tmp_path, capsys):
    path = _launch_json(tmp_path)
    path.parent.mkdir()
    path.write_text(USER_FILE)
    assert main(["init-vscode", str(tmp_path), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.out == launch.merge(USER_FILE, launch.templates()).text
    assert "nothing written" in captured.err
    assert path.read_text() == USER_FILE and sorted(os.listdir(path.parent)) == ["launch.json"]


def test_init_vscode_refuses_invalid_jsonc_and_changes_nothing(tmp_path, capsys):
    path = _launch_json(tmp_path)
    path.parent.mkdir()
    path.write_text('{"configurations": [ {"name": "x"} \n')
    assert main(["init-vscode", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tensor-dap: error:") and "does not parse" in err and len(err.splitlines()) == 1
    assert path.read_text() == '{"configurations": [ {"name": "x"} \n'
    assert sorted(os.listdir(path.parent)) == ["launch.json"]


def test_init_vscode_unwritable_folder_is_one_line_and_exit_1(tmp_path, capsys):
    (tmp_path / ".vscode").write_text("a file where the folder should be")  # fails for root too
    assert main(["init-vscode", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tensor-dap: error: cannot") and len(err.splitlines()) == 1
    assert (tmp_path / ".vscode").read_text() == "a file where the folder should be"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes to read-only folders")
def test_init_vscode_read_only_vscode_folder(tmp_path, capsys):
    path = _launch_json(tmp_path)
    path.parent.mkdir()
    path.write_text(USER_FILE)
    path.parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert main(["init-vscode", str(tmp_path)]) == 1
    finally:
        path.parent.chmod(stat.S_IRWXU)
    assert "cannot write" in capsys.readouterr().err and path.read_text() == USER_FILE


@pytest.mark.parametrize("argv, message", [
    (["--remote-root", "relative/path"], "absolute path"),
    (["--port", "0"], "from 1 to 65535"),
    (["--port", "70000"], "from 1 to 65535"),
    (["--port", "x"], "invalid int"),
    (["--remote-host", "a b"], "host name"),
])
def test_init_vscode_usage_errors(tmp_path, capsys, argv, message):
    assert main(["init-vscode", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tensor-dap: error:") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / ".vscode").exists()


def test_init_vscode_missing_folder(tmp_path, capsys):
    assert main(["init-vscode", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err
