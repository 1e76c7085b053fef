"""``tensor_dap.setup_logging(file="training.log")``: readable logs now, a plain record for later.

A rich handler on stderr for the person watching, and a plain file handler with timestamps
and levels for the one reading the log at 3 a.m. Calling it again replaces its own handlers
(never duplicates them) and leaves handlers it did not add alone.
"""

from __future__ import annotations

import logging
import os
from typing import Optional, Union

FILE_FORMAT = "%(asctime)s %(levelname)-8s %(name)s: %(message)s"
_OURS = "_tensor_dap_handler"


def setup_logging(file: Optional[Union[str, os.PathLike]] = "training.log", level: Union[int, str] = logging.INFO,
                  *, logger: Optional[str] = None, console: bool = True,
                  capture_warnings: bool = True) -> logging.Logger:
    """Log ``logger`` (the root by default) to the terminal and to ``file`` (None: no file). Idempotent."""
    from rich.logging import RichHandler

    from ..console import make_console

    target = logging.getLogger(logger)
    for handler in [h for h in target.handlers if getattr(h, _OURS, False)]:
        target.removeHandler(handler)
        handler.close()
    added: list[logging.Handler] = []
    if console:
        added.append(RichHandler(console=make_console(stderr=True), show_path=False, rich_tracebacks=False,
                                 markup=False, log_time_format="[%X]"))
    if file is not None:
        path = os.fspath(file)
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        file_handler = logging.FileHandler(path, encoding="utf-8")
        file_handler.setFormatter(logging.Formatter(FILE_FORMAT))
        added.append(file_handler)
    for handler in added:
        setattr(handler, _OURS, True)
        target.addHandler(handler)
    target.setLevel(level)
    logging.captureWarnings(capture_warnings)
    return target
