"""The one place tensor_dap writes to a terminal.

Everything user-facing is a rich renderable handed to a Console made here, so colour
follows one rule: colours on a real terminal, plain text when piped or when NO_COLOR is set.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Optional

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

    make_console(stderr=True).print(Text(text, style=style), soft_wrap=True)
