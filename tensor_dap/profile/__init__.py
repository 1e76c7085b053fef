"""Profiling: run a program under a profiler and write the files the VS Code extension opens."""
