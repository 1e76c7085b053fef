"""A crash on a non-finite value the model did not make: the program's code after the model made it.

``explain_crash`` re-runs the crashed step's forwards and backward; where they run finite, the non-finite tensors
the crash left in its frames were made between the model and the crash. An RL policy's ``Categorical(logits=...)``
over logits masked with -inf (illegal actions), one state with no legal action: its row normalizes to
``-inf - logsumexp(-inf)``, NaN, and the distribution's check raises a ValueError that prints the tensor and nothing
more. Those tensors are named here with the program's line that led to the crash, and a row masked whole (a
softmax, a log-softmax or a distribution over it is NaN) is diagnosed.
"""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Iterable, Iterator
from types import FrameType, TracebackType
from typing import Any

import torch

from ..debug.frames import SourceLine, is_library
from ..summary import describe
from ..summary.rows import masked_rows_text
from .birth import Birth
from .finite import kind_of
from .fixes import DIAGNOSES
from .localize import Finding
from .masked_rows import has_masked_row

MAX_NAMED = 4  # non-finite tensors a report lists
MAX_READ = 32  # tensors of the crashed frames looked at, at most (each is read whole, in bounded pieces)
NOTE = ("the model's forwards and backward re-ran finite: the program's code after the model made this value, and "
        "the program crashed on it")


def outside_finding(tb: TracebackType | None, error: BaseException | None = None) -> Finding | None:
    """The finding of a crash whose non-finite values the model did not make (see the module's docstring); None where
    the exception says nothing of NaN or Inf (a crash of another kind, with a NaN in reach: missing values marked
    NaN on purpose), the frames it left hold no NaN, or none of them is the program's own."""
    if not about_nonfinite(error, tb):
        return None
    entries = traceback_frames(tb)
    own = [(f, n) for f, n in entries if not is_library(f.f_code.co_filename)]
    if not own:
        return None
    named = _in_frames([*reversed(own), *((f, n) for f, n in reversed(entries) if (f, n) not in own)])
    if not any(kind == "nan" for _, _, _, kind in named):  # no NaN in reach: a crash of another kind
        return None
    frame, line = own[-1]
    birth = Birth("loss", None, "nan", line=SourceLine(frame.f_code.co_filename, line, frame.f_code.co_name))
    finding = Finding("loss", None, None, NOTE, [("crash", name, describe(t)) for name, t, _, _ in named],
                      {name.split(" ", 1)[0]: t for name, t, _, _ in named}, birth=birth)
    masked = next(((name, t) for name, t, mine, kind in named if mine and kind == "inf"), None)
    if masked is not None:
        rows = masked_rows_text(masked[1]) or "a row along its last dim is entirely -inf"
        finding.diagnosis = DIAGNOSES["masked_row"].format(name=masked[0].split(" ", 1)[0], rows=rows)
    return finding


def _in_frames(frames: list[tuple[Any, int]]) -> list[tuple[str, torch.Tensor, bool, str]]:
    """(name, tensor, in the program's own frame, "nan" or "inf") of the NaN tensors of ``frames`` (frame, line), and
    of the program's tensors with a row masked whole (a causal mask's -inf is there on purpose): at most ``MAX_NAMED``,
    of ``MAX_READ`` looked at. The program's frames come first, as it names what it handed on (its masked logits),
    then the libraries' (the NaN their code made of it); each innermost first: nearest the crash."""
    named: list[tuple[str, torch.Tensor, bool, str]] = []
    for frame, line, name, t in frame_tensors(frames):
        if len(named) >= MAX_NAMED:
            break
        if any(t is seen for _, seen, _, _ in named):
            continue
        mine = not is_library(frame.f_code.co_filename)
        kind = kind_of(t)
        if kind == "nan" or kind == "inf" and mine and has_masked_row(t):
            where = f"in {frame.f_code.co_name} at {os.path.basename(frame.f_code.co_filename)}:{line}"
            named.append((f"{name} ({where})", t, mine, kind))
    return named


def traceback_frames(tb: TracebackType | None) -> list[tuple[FrameType, int]]:
    """(frame, line) of each frame the exception left, outermost first."""
    entries = []
    while tb is not None:
        entries.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return entries


def frame_tensors(frames: Iterable[tuple[FrameType, int]], limit: int = MAX_READ
                  ) -> Iterator[tuple[FrameType, int, str, torch.Tensor]]:
    """(frame, line, name, tensor) of the tensors reachable from the locals of ``frames`` (``probe.scan``), in their
    order, at most ``limit`` in all: what a crash left in reach."""
    from ..probe.scan import reachable_tensors

    read = 0
    for frame, line in frames:
        if read >= limit:
            return
        tensors, _ = reachable_tensors(frame.f_locals, modules=False, limit=limit - read)
        read += len(tensors)
        for name, t in tensors:
            yield frame, line, name, t


def about_nonfinite(error: BaseException | None, tb: TracebackType | None) -> bool:
    """Whether the crash is about a NaN or Inf: its message says so (``found invalid values``, ``contains either
    `inf`, `nan```, ``non-finite``), or a bare ``assert`` of the program's tests a value for it (``assert
    torch.isfinite(loss)``). No exception known: taken as about one."""
    if error is None or says_nonfinite(error):
        return True
    if not isinstance(error, AssertionError):
        return False
    entries = traceback_frames(tb)
    if not entries:
        return False
    frame, line = entries[-1]
    text = linecache.getline(frame.f_code.co_filename, line)
    return bool(_SAYS_NONFINITE.search(text) or "isfinite" in text)


def says_nonfinite(error: BaseException | None) -> bool:
    """Whether the exception's message speaks of NaN or Inf (``found invalid values``, ``returned nan values``)."""
    try:
        return error is not None and bool(_SAYS_NONFINITE.search(str(error)[:_READ_CHARS]))
    except Exception:  # noqa: BLE001 - an exception whose str() fails: nothing said
        return False


_READ_CHARS = 100_000  # of a message (a tensor's repr may be in it)
_SAYS_NONFINITE = re.compile(r"\bnan\b|\binf\b|finite|invalid values?\b|not a number", re.IGNORECASE)
HEADLINE = "NaN made after the model, in the program's code: it crashed on it"
