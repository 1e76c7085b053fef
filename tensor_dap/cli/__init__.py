"""The ``tensor-dap`` command: ``main`` parses arguments and turns usage mistakes into one line and exit code 2;
each subcommand is a module with ``add_arguments(parser)`` and ``run(args) -> int``."""

from .main import main

__all__ = ["main"]
