"""The result every check returns: verdicts, bounded findings and rows, JSON valid against its schema, safe views."""

import io
import json

import jsonschema
import pytest
import torch
from torch import nn

import tensor_dap
from tensor_dap.checks import CheckResult, Finding
from tensor_dap.checks.render import overview
from tensor_dap.checks.result import MAX_FINDINGS, MAX_ROWS, never_raises, result
from tensor_dap.checks.schema import RESULT_SCHEMA
from tensor_dap.console import make_console

pytestmark = pytest.mark.timeout(60)


def printed(renderable) -> str:
    buf = io.StringIO()
    make_console(buf).print(renderable)
    return buf.getvalue()


def test_verdict_is_the_worst_level_and_info_stays_ok():
    assert CheckResult("x", "s").verdict == "ok"
    assert CheckResult("x", "s", (Finding("info", "a", "m"),)).verdict == "ok"
    assert CheckResult("x", "s", (Finding("info", "a", "m"), Finding("warning", "b", "m"))).verdict == "warning"
    mixed = CheckResult("x", "s", (Finding("warning", "b", "m"), Finding("problem", "c", "m")))
    assert mixed.verdict == "problem" and mixed.subjects == ("b", "c") and not mixed.ok


def test_findings_and_rows_are_capped_with_the_rest_counted():
    many = [Finding("warning", f"p{i}", "m") for i in range(MAX_FINDINGS + 30)] + [Finding("problem", "last", "m")]
    r = result("x", "s", many, columns=("a",), rows=[(i,) for i in range(MAX_ROWS + 7)])
    assert len(r.findings) == MAX_FINDINGS and "32 more" in r.findings[-1].message
    assert "last" in r.subjects  # the one problem is kept; warnings make room for it
    assert len(r.rows) == MAX_ROWS and r.omitted_rows == 7
    assert "7 more rows" in printed(r)


def test_to_dict_is_strict_json_valid_against_the_schema():
    r = result("gradients", "s", [Finding("problem", "w", "NaN")], columns=("name", "norm", "shape"),
               rows=[("w", float("nan"), [2, 3]), ("b", float("inf"), [3]), ("c", 1.5, None)],
               facts={"total": float("-inf")})
    data = r.to_dict()
    jsonschema.validate(data, RESULT_SCHEMA)
    text = json.dumps(data, allow_nan=False)  # no bare NaN/Infinity tokens
    assert data["rows"][0] == {"name": "w", "norm": "nan", "shape": [2, 3]} and data["facts"]["total"] == "-inf"
    assert json.loads(text)["verdict"] == "problem"


def test_print_shows_the_table_not_the_dataclass():
    r = result("devices", "2 tensors", [Finding("problem", "fc2", "on meta")], columns=("device",), rows=[("cpu",)])
    text = str(r)
    assert text.startswith("devices  ✗ problem  2 tensors") and "fc2" in text and "Finding(" not in text
    assert text == printed(r).rstrip("\n")


def test_rendering_escapes_user_strings_and_never_parses_markup():
    hostile = "[bold red]x[/] \x1b]0;pwned\x07 \u202e"
    r = result("state_dict", hostile, [Finding("problem", hostile, hostile, hostile)], columns=("key",),
               rows=[(hostile,)])
    out = printed(r) + printed(overview([r]))
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "[bold red]x[/]" in out and "\\x1b" in out


def test_rich_console_with_markup_on_shows_brackets_literally():
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, markup=True, width=200, color_system=None).print(
        result("leakage", "s", [Finding("problem", "col[0]", "[red]x")], columns=("c",), rows=[("[b]y",)]))
    assert "col[0]" in buf.getvalue() and "[red]x" in buf.getvalue() and "[b]y" in buf.getvalue()


def test_a_check_that_breaks_reports_instead_of_raising_but_misuse_still_raises():
    @never_raises("demo")
    def broken(model, *, flag=False):
        raise RuntimeError("inner failure\nsecond line")

    r = broken(1)
    assert r.verdict == "problem" and "RuntimeError: inner failure" in r.findings[0].message
    with pytest.raises(TypeError):
        broken()  # a missing argument is the caller's bug, not odd input


def test_every_public_check_is_exported_and_survives_garbage():
    garbage = [None, 3, "text", object(), [1, [2]], {"a": object()}]
    checks = [
        lambda g: tensor_dap.check_shapes(g, g),
        lambda g: tensor_dap.check_devices(g, g),
        lambda g: tensor_dap.check_gradients(g),
        lambda g: tensor_dap.check_leakage(g, g),
        lambda g: tensor_dap.check_label_leakage(g, g),
        lambda g: tensor_dap.compare_state_dict(g, g),
        lambda g: tensor_dap.check_dataloader(g),
    ]
    for check in checks:
        for g in garbage:
            r = check(g)
            assert isinstance(r, CheckResult) and r.verdict in ("ok", "warning", "problem")
            jsonschema.validate(r.to_dict(), RESULT_SCHEMA)
            printed(r)


def test_overview_names_each_checks_offenders():
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    model[1].to("meta")
    rows = [tensor_dap.check_devices(model, torch.zeros(2, 3)),
            tensor_dap.check_shapes(nn.Linear(3, 1), torch.zeros(2, 3))]
    lines = printed(overview(rows)).splitlines()
    devices = next(line for line in lines if line.startswith("devices"))
    assert "✗ problem" in devices and devices.rstrip().endswith(" 1")  # module '1' is the one on meta
    assert "✓ ok" in next(line for line in lines if line.startswith("shapes"))
