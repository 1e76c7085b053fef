"""The package version, in a module of its own so the CLI can print it without importing the package root."""

__version__ = "0.1.0"
