"""debug/frames: the user's line now, from a cache keyed by call site (``user_line``, which runs in every training
step), and ``CallSites``, which keeps it as code and instruction until a report asks (``site_line``)."""
from __future__ import annotations

import sys
import textwrap
import types

import torch

from tensor_dap.debug.frames import CallSites, SourceLine, site_line, user_line


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


def test_call_sites_name_each_line_directly_and_through_one_library_frame_cached_or_not(tmp_path):
    """The hooks keep where the model and backward() were called as (code, offset): from the user's own frame,
    or through one library frame (``Tensor.backward``) to its caller; the identity cache must still tell the
    lines of one function apart, and a call from another function must not be taken for the cached one."""
    sites = CallSites()
    namespace: dict = {}
    # a frame of "library" code: compiled under torch's own file name, as Tensor.backward's is
    exec(compile("def library(probe):\n    return probe()\n", torch._tensor.__file__, "exec"), namespace)
    library = namespace["library"]

    def probe() -> object:
        return sites.at(sys._getframe(1))  # the library frame: the user's is one above it

    source = """\
        def where(first, direct):
            if first:
                return at(sys._getframe()) if direct else library(probe)
            return at(sys._getframe()) if direct else library(probe)
        """
    env = {"at": sites.at, "sys": sys, "library": library, "probe": probe}
    exec(compile(textwrap.dedent(source), str(tmp_path / "user.py"), "exec"), env)
    where = env["where"]
    for direct in (True, False):
        for _ in range(3):  # the first round walks the frames, the next ones hit the cache
            first, second = site_line(where(True, direct)), site_line(where(False, direct))
            assert (first.line, second.line) == (3, 4) and first.file.endswith("user.py")
            assert first.function == "where"
    other = _compile("def where():\n    return user_line()\n", str(tmp_path / "other.py"))
    env2 = {"at": sites.at, "sys": sys}
    exec(compile("def elsewhere():\n\n    return at(sys._getframe())\n", str(tmp_path / "else.py"), "exec"), env2)
    assert other().line == 2
    line = site_line(env2["elsewhere"]())
    assert (line.line, line.file) == (3, str(tmp_path / "else.py"))
    assert site_line(where(False, True)).line == 4  # and back: the cache follows the latest caller


def test_a_trigger_s_traceback_ends_on_the_users_line():
    """A trigger stops the run on purpose and its report follows: tensor_dap's raising frame folds with the rest,
    so the last line shown is the user's. Any other error keeps the frame that raised it."""
    import sys

    import torch

    import tensor_dap
    from tensor_dap.debug.crash import collapsed_traceback
    from tensor_dap.errors import LossThresholdError

    def train_step():
        tensor_dap.break_if(torch.tensor(50.0), above=10, on="raise")  # the user's line

    try:
        train_step()
    except LossThresholdError:
        text = collapsed_traceback(*sys.exc_info()[1:])
    frames = text.split("tensor_dap.errors.LossThresholdError")[0]
    assert frames.rstrip().splitlines()[-1].startswith("  [... ") and "tensor_dap hidden" in frames
    assert "tensor_dap.break_if(torch.tensor(50.0)" in frames and "tensor_dap/" not in frames

    try:
        tensor_dap.break_if(torch.tensor(50.0), above=10, on="bogus")  # a usage error, not a trigger
    except ValueError:
        text = collapsed_traceback(*sys.exc_info()[1:])
    assert "tensor_dap/triggers/" in text.split("ValueError")[0]  # the frame that raised stays


def test_a_lines_code_leaves_its_trailing_comment_out(tmp_path):
    source = tmp_path / "model.py"
    source.write_text('out = layer(x)  # [batch, dim]\ntext = "a # not a comment"  # a comment\n'
                      'call(a,  # the bracket closes below\n      b)\nplain = 1\n')
    assert [SourceLine(str(source), n).code for n in range(1, 6)] == [
        "out = layer(x)", 'text = "a # not a comment"', "call(a,", "b)", "plain = 1"]
    assert SourceLine(str(source), 1).text == "out = layer(x)  # [batch, dim]"  # the line itself keeps it
