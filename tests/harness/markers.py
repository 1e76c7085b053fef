"""Lines found by their marker comment (``# BP-here``), not by number: the tests survive edits to the files."""

from __future__ import annotations

import os
from pathlib import Path


def marker_line(text: str, marker: str) -> int:
    """The 1-based number of the first line of ``text`` carrying the comment ``# marker``."""
    return next(n for n, line in enumerate(text.splitlines(), 1) if f"# {marker}" in line)


def file_marker_line(path: str | os.PathLike[str], marker: str) -> int:
    """``marker_line`` of a file."""
    return marker_line(Path(path).read_text(encoding="utf-8"), marker)
