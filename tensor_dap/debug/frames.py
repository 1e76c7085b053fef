"""Which frames are the user's: everything outside Python, torch and tensor_dap.

A trigger fires deep inside torch's optimizer hooks and tensor_dap's own code; the user wants to
land in their training loop or model code, and a report should name their line, not ours. One
predicate serves both: the debugger hides library frames from ``where``/``up``/``down``, and
localization names the first user frame as the source line of an op.
"""

from __future__ import annotations

import io
import linecache
import os
import sys
import tokenize
from types import FrameType
from typing import Any, Callable, Iterator, NamedTuple, Optional, Union

from ..libraries import is_framework, is_pass_through, is_user_file, library_of
from ..runner import is_runner_frame

_PACKAGE = __name__.partition(".")[0]


def is_library(filename: str) -> bool:
    """True for Python's, torch's and tensor_dap's own code (``libraries.is_framework``), and for the wrappers a
    framework puts between the user's call and torch's (``libraries.is_pass_through``: Lightning Fabric)."""
    return is_framework(filename) or is_pass_through(filename)


def is_runner(filename: str) -> bool:
    """tensor_dap's frames (``tensor-dap run``'s runner and CLI) and runpy's (``python -m``): the frames above the
    user's script, left out of its traceback and of the debugger's where/up/down."""
    return library_of(filename) == "tensor_dap" or is_runner_frame(filename)


def offer_package(frame: Any) -> None:
    """``tensor_dap.culprit()``, which a trigger's stop tells the user to type, works at the pdb prompt or in VS Code's
    Debug Console of a program that never imported tensor_dap (``tensor-dap run``): the name goes into the namespace
    a debugger evaluates in, in each of the program's frames that has no ``tensor_dap`` of its own (a function's:
    beside its locals, never one of them)."""
    package = sys.modules[_PACKAGE]
    while frame is not None:
        if not is_library(frame.f_code.co_filename):
            try:
                names = frame.f_locals
                if _PACKAGE not in names and _PACKAGE not in frame.f_globals:
                    names[_PACKAGE] = package
            except Exception:  # noqa: BLE001 - a frame whose namespace refuses it: the user imports it by hand
                pass
        frame = frame.f_back


def user_frame(frame: Optional[FrameType]) -> Optional[FrameType]:
    """``frame`` or the nearest caller outside torch and tensor_dap; None when every frame is library code."""
    while frame is not None and is_library(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def held_as(obj: Any, frame: Optional[FrameType], *, outward: bool = False) -> Iterator[tuple[str, Any]]:
    """The names the program has for ``obj`` in the user's frame at or above ``frame`` (``outward``: and in every
    user frame above that one), innermost first: (a variable, None), (``self.disc``, None) for an attribute of the
    frame's ``self``, or (a variable, the tuple or list) holding it among a few items (an LSTM's ``hidden``)."""
    frame = user_frame(frame)
    while frame is not None:
        for name, value in names_in(frame, globals_too=True):
            attribute = name.startswith("self.")
            if not attribute and name.startswith("_"):
                continue
            if value is obj:
                yield name, None
            elif not attribute and isinstance(value, (tuple, list)) and len(value) <= 8 and \
                    any(v is obj for v in value):
                yield name, value
        if not outward:
            return
        frame = user_frame(frame.f_back)


def name_of(obj: Any, frame: Optional[FrameType], *, outward: bool = False) -> Optional[str]:
    """The first name the program has for ``obj`` itself (``held_as``: a variable, ``self.disc``; not a list holding
    it), or None."""
    return next((name for name, within in held_as(obj, frame, outward=outward) if within is None), None)


def names_in(frame: FrameType, *, globals_too: bool = False) -> Iterator[tuple[str, Any]]:
    """(name, value) of a frame's variables (``globals_too``: then its module's), then of its ``self``'s
    attributes, named ``self.name`` (a trainer's ``self.total_loss``)."""
    for scope in (frame.f_locals, frame.f_globals) if globals_too else (frame.f_locals,):
        yield from list(scope.items())
    own = getattr(frame.f_locals.get("self"), "__dict__", None)
    if own is not None and callable(getattr(own, "items", None)):
        yield from [(f"self.{key}", value) for key, value in list(own.items())]


class SourceLine(NamedTuple):
    """A line of the user's code: where an op ran, where a step called backward."""

    file: str
    line: int
    function: str = ""

    @property
    def text(self) -> str:
        """The line itself, stripped ('' when the file cannot be read, e.g. code typed at a prompt)."""
        try:
            return linecache.getline(self.file, self.line).strip()
        except Exception:  # noqa: BLE001 - an unreadable file just has no text
            return ""

    @property
    def code(self) -> str:
        """The line's code, its trailing comment left out (where the line tokenizes alone)."""
        text = self.text
        if "#" not in text:
            return text
        try:
            for token in tokenize.generate_tokens(io.StringIO(text).readline):
                if token.type == tokenize.COMMENT:
                    return text[:token.start[1]].rstrip()
        except (tokenize.TokenError, SyntaxError):  # a line inside a bracket left open above: as it is
            pass
        return text

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}"


_STAND_INS: dict[Any, Callable[[FrameType], Optional[SourceLine]]] = {}


def stand_in(code: Any, line_of: Callable[[FrameType], Optional[SourceLine]]) -> None:
    """Frames running ``code`` re-run the user's code from tensor_dap: above them, the user's line is
    the one ``line_of(frame)`` recorded when that code first ran (not the hook the re-run started in)."""
    _STAND_INS[code] = line_of
    _KIND.pop(id(code), None)


_USER, _LIBRARY, _STAND_IN = 0, 1, 2
# What frames of a code object are, and the line of each instruction seen in a user's frame: user_line runs
# in every training step. Keyed by id(): a code object's own hash is computed from its whole contents each
# time (~0.6 µs); the code is kept in the entry, so its id cannot be reused while cached.
_KIND: dict[int, tuple[Any, int]] = {}
_KIND_MAX = 20_000
_LINES: dict[tuple[int, int], SourceLine] = {}  # (id(code), instruction offset) -> its line, for cached codes


def _kind(code: Any) -> int:
    kind = _STAND_IN if code in _STAND_INS else _LIBRARY if is_library(code.co_filename) else _USER
    if len(_KIND) < _KIND_MAX:
        _KIND[id(code)] = (code, kind)
    return kind


def user_line(frame: Optional[FrameType] = None, skip: int = 0) -> Optional[SourceLine]:
    """The user's line that is running now (``frame`` defaults to the caller's).

    ``skip``: frames above the caller's known to be library code (torch's own hook callers), not
    walked: hooks that run every training step start where the user's frame usually is."""
    if frame is None:
        try:
            frame = sys._getframe(1 + skip)
        except ValueError:  # fewer frames than that
            frame = sys._getframe(1)
    return site_line(call_site(frame))


# A user's line as a hook running in every training step takes it: the code and instruction offset of a
# user's frame, turned into a line only when a report asks (``site_line``), or the line itself.
Site = Union[SourceLine, "tuple[Any, int]", None]


def call_site(frame: Optional[FrameType]) -> Site:
    """The user's line running in ``frame`` or the nearest caller outside the libraries. A user's frame whose
    code is cached gives its code and instruction, turned into a line only when asked (``site_line``: no
    line-table walk for a call site seen before); every frame on the way is suspended in its call, so they
    are stable now."""
    f = frame
    while f is not None:
        code = f.f_code
        entry = _KIND.get(id(code))
        kind = entry[1] if entry is not None else _kind(code)
        if kind == _USER:
            if entry is not None:  # cached: its code stays alive, so its id names it
                return (code, f.f_lasti)
            return SourceLine(code.co_filename, f.f_lineno, code.co_name)
        if kind == _STAND_IN:
            recorded = _STAND_INS[code](f)
            if recorded is not None:
                return recorded
            if not is_library(code.co_filename):
                return SourceLine(code.co_filename, f.f_lineno, code.co_name)
        f = f.f_back
    return None


class CallSites:
    """``call_site`` for a hook that runs from the same place in every training step: the user's code it found
    last time, reached directly or through one library frame (``Tensor.backward``), is checked by identity
    first. A walk through the frame kinds costs ~8 µs inside a training step (its caches are cold)."""

    __slots__ = ("_passed", "_user")

    def __init__(self) -> None:
        self._passed: Any = None  # the code of the library frame passed on the way, if one was
        self._user: Any = None

    def at(self, frame: FrameType) -> Site:
        code = frame.f_code
        if code is self._user:
            return (code, frame.f_lasti)
        if code is self._passed:
            caller = frame.f_back
            if caller is not None and caller.f_code is self._user:
                return (caller.f_code, caller.f_lasti)
        site = call_site(frame)
        if type(site) is tuple:
            caller = frame if site[0] is code else frame.f_back
            if caller is not None and caller.f_code is site[0]:  # found at most one frame up: cached
                self._user, self._passed = site[0], (None if caller is frame else code)
        return site


def site_line(site: Site) -> Optional[SourceLine]:
    """The line a ``call_site`` names."""
    if type(site) is not tuple:  # a SourceLine (a named tuple) or None
        return site  # type: ignore[return-value]
    code, offset = site
    key = (id(code), offset)
    line = _LINES.get(key)
    if line is None:
        number = next((n for start, end, n in code.co_lines() if start <= offset < end and n is not None),
                      code.co_firstlineno)
        line = SourceLine(code.co_filename, number, code.co_name)
        if len(_LINES) < _KIND_MAX:
            _LINES[key] = line
    return line


def own_line(frame: Optional[FrameType] = None) -> Optional[SourceLine]:
    """The line running in the nearest frame of the program's own files (``frame`` defaults to the caller's): past
    installed packages too, which ``user_line`` stops at (a loss Pyro computes inside ``svi.step(data)``)."""
    f = frame if frame is not None else sys._getframe(1)
    while f is not None and not is_user_file(f.f_code.co_filename):
        f = f.f_back
    return SourceLine(f.f_code.co_filename, f.f_lineno, f.f_code.co_name) if f is not None else None


def failing_frame(tb: Any) -> Any:
    """(frame, line) of a traceback's innermost frame of the user's code, else its innermost frame: where a crash
    report and its post-mortem start."""
    last = user = None
    while tb is not None:
        last = tb
        if is_user_file(tb.tb_frame.f_code.co_filename):
            user = tb
        tb = tb.tb_next
    chosen = user or last
    return (chosen.tb_frame, chosen.tb_lineno) if chosen is not None else (None, 0)
