"""The one way tensor_dap reads a file ``torch.save`` wrote (a checkpoint to inspect or check, an incident
bundle): on the CPU, with ``weights_only`` unless the user trusts the file, so loading runs no code from it."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any


def load_saved(path: Any, *, trusted: bool = False, mmap: bool = False, allowed: tuple[type, ...] = ()) -> Any:
    """``torch.load`` of ``path`` onto the CPU. ``allowed``: torch's own classes a safe load may build (an RNN's
    PackedSequence); ``mmap``: map a large file instead of reading it (a legacy, non-zip file is read plainly).
    A jagged nested tensor loads safely only once torch's nested and dynamo modules are imported (a fresh
    process has not): they are imported, and the load tried again."""
    import torch

    def attempt(mapped: bool) -> Any:
        allow = torch.serialization.safe_globals(list(allowed)) if allowed else contextlib.nullcontext()
        with allow, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's own on loading ("sparse CSR support is in beta"): not the user's
            if mapped:
                return torch.load(path, map_location="cpu", weights_only=not trusted, mmap=True)
            return torch.load(path, map_location="cpu", weights_only=not trusted)

    def plainly_or_mapped() -> Any:
        if mmap:
            try:
                return attempt(True)
            except Exception as exc:  # noqa: BLE001 - legacy files cannot be mapped: read them plainly
                if _needs_nested(exc):
                    raise
        return attempt(False)

    try:
        return plainly_or_mapped()
    except Exception as exc:  # noqa: BLE001 - one retry for nested tensors; anything else is the caller's
        if not _needs_nested(exc):
            raise
    import torch._dynamo  # noqa: F401 - what the safe unpickler asks for before it builds a jagged tensor
    import torch.nested  # noqa: F401
    return plainly_or_mapped()


def _needs_nested(exc: BaseException) -> bool:
    return "nested jagged" in str(exc)
