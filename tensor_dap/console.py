"""The one place tensor_dap writes to a terminal.

Everything user-facing is a rich renderable handed to a Console made here, so colour
follows one rule: colours on a real terminal, plain text when piped or when NO_COLOR is set.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import IO, Any, Optional

from rich.console import Console


def make_console(file: Optional[IO[str]] = None, *, stderr: bool = False) -> Console:
    """A Console for ``file`` (default stdout/stderr) that degrades to plain text off a terminal."""
    target = file if file is not None else (sys.stderr if stderr else sys.stdout)
    is_tty = bool(getattr(target, "isatty", lambda: False)())
    plain = bool(os.environ.get("NO_COLOR")) or not is_tty
    return Console(
        file=target,
        no_color=plain,
        color_system=None if plain else "auto",
        force_terminal=is_tty and not plain,
        highlight=False,
        soft_wrap=False,
        width=None if is_tty else 120,
        emoji=False,
        markup=False,
    )


def note(text: str, *, style: str = "yellow") -> None:
    """One message for whoever reads stderr (a terminal, a batch log, torchrun's merged output), never wrapped."""
    from rich.text import Text

    say(Text(text, style=style), soft_wrap=True)


def say(renderable: Any, **options: Any) -> None:
    """Print ``renderable`` on stderr while the program runs: above its tqdm progress bars, if it shows any."""
    with above_progress_bars(sys.stderr):
        make_console(stderr=True).print(renderable, **options)


@contextlib.contextmanager
def above_progress_bars(file: IO[str]) -> Iterator[None]:
    """Clear the program's tqdm bars drawn on ``file`` (or on stdout/stderr), and draw them again after: a line
    printed mid-run starts on its own line, not glued to the end of a bar. Nothing when tqdm is not imported or
    shows no bar; a tqdm that refuses is left alone."""
    tqdm_class = getattr(sys.modules.get("tqdm.std"), "tqdm", None)
    paused: Any = None
    try:
        if tqdm_class is not None and len(tqdm_class._instances):
            paused = tqdm_class.external_write_mode(file=file)
            paused.__enter__()
    except Exception:  # noqa: BLE001 - a tqdm of another make: print as if it were not there
        paused = None
    try:
        yield
    finally:
        if paused is not None:
            with contextlib.suppress(Exception):
                paused.__exit__(None, None, None)


def log_unprinted(logger: logging.Logger, level: int, text: str) -> None:
    """Hand ``text``, which stderr shows already (printed there, or in an exception's message), to the program's
    logging handlers that write somewhere else (a log file, a test's capture): a program that set up logging to the
    terminal (``logging.basicConfig``, timm's train.py) would otherwise show every line twice. Logging's own rules
    otherwise (levels, filters, ``propagate``); never raises."""
    try:
        if logger.disabled or not logger.isEnabledFor(level):
            return
        record = logger.makeRecord(logger.name, level, *logger.findCaller(False, 2)[:2], "%s", (text,), None)
        if not logger.filter(record):
            return
        current: logging.Logger | None = logger
        while current is not None:
            for handler in current.handlers:
                if record.levelno >= handler.level and not _shows_on_stderr(handler):
                    handler.handle(record)
            current = current.parent if current.propagate else None
    except Exception:  # noqa: BLE001 - a broken handler of the program's must not break training
        pass


def _shows_on_stderr(handler: logging.Handler) -> bool:
    """Whether ``handler`` writes where ``say`` prints: stderr itself, or a terminal while stderr is one too (the same
    screen). rich's ``RichHandler`` writes through its console's file."""
    stream = getattr(handler, "stream", None)
    if stream is None:
        stream = getattr(getattr(handler, "console", None), "file", None)
    if stream is None:
        return False
    if stream is sys.stderr or stream is sys.__stderr__:
        return True
    return _isatty(stream) and _isatty(sys.stderr)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:  # noqa: BLE001 - a closed or odd stream: not a terminal
        return False
