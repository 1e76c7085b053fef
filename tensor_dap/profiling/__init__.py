"""Profiling and training monitoring: where the time and memory go, and whether the model learns.

``session`` runs a program under one profiler (``cpu``, ``line``, ``trace`` for torch.profiler,
``memory``) and writes the files the VS Code extension opens (``output`` names them);
``timer`` and ``step_profiler`` time code from inside a training loop; ``monitor`` writes
TensorBoard scalars and histograms and ``diagnose`` reads the curves; ``logs`` sets up logging;
``marks`` holds what a program leaves for the profilers (``tensor_dap.step()``, ``@tensor_dap.profile``).

(The folder is ``profiling``, not ``profile``: ``tensor_dap.profile`` is the decorator, and a
subpackage of the same name would take its place as soon as one of its modules was imported.)
"""
