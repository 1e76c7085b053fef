"""debug/frames.user_line: the user's line now, from a cache keyed by call site (it runs in every training step)."""
from __future__ import annotations

import textwrap
import types

from tensor_dap.debug.frames import user_line


def _compile(source: str, filename: str) -> types.FunctionType:
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), filename, "exec"), {"user_line": user_line}, namespace)
    return namespace["where"]


def test_each_call_site_keeps_its_own_line_and_a_new_code_object_is_not_mistaken_for_an_old_one(tmp_path):
    where = _compile("""\
        def where(first):
            if first:
                return user_line()
            return user_line()
        """, str(tmp_path / "a.py"))
    for _ in range(3):  # cached from the second round on: still each call site's own line
        assert (where(True).line, where(False).line) == (3, 4)
        assert where(True).file.endswith("a.py") and where(True).function == "where"
    for n in range(50):  # new code objects, made and dropped: an id reused by one of them is not an old entry
        moved = _compile("\n" * n + "def where():\n    return user_line()\n", str(tmp_path / f"b{n}.py"))
        line = moved()
        assert (line.line, line.file) == (n + 2, str(tmp_path / f"b{n}.py"))
