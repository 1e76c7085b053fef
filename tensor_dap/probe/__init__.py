"""Probing live objects without changing them: frames, values, gradients, memory, shape flow.

``scan`` finds every tensor reachable from a frame, ``display`` decides how a value is shown,
``grads`` and ``memory`` report gradient norms and memory use, ``shapes`` records one
forward pass's shape flow (state restored), ``shape_errors`` explains a shape error,
``stacks`` reads the Python stacks of a process's threads (where a hung rank waits), ``paths``
reads a submodule's dotted path as reports print it (``model.h.0.attn``).
Used by the pdb, crash reports and checks; nothing here prints.
"""
