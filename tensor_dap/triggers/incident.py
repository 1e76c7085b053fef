"""Incident bundles: everything needed to re-run one failing training step, on disk.

A bundle is a folder ``.tensor_dap/incidents/<UTC time>-step<N>/`` holding ``state.pt``
(the step's arguments, model and optimizer state from before the step, RNG states),
``report.json`` and ``report.txt``. It is written into a hidden temporary folder next to
its final place and renamed in one step, so a crash never leaves half a bundle, and an
existing bundle is never overwritten (a clash gets a ``-2``, ``-3``... suffix).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import torch

from ..nested import map_tensors
from .report import Report, to_json, to_text

DEFAULT_DIR = os.path.join(".tensor_dap", "incidents")
STATE_FILE, JSON_FILE, TEXT_FILE = "state.pt", "report.json", "report.txt"


class BundleError(ValueError):
    """The path is not a readable incident bundle."""


# ------------------------------------------------------------------ bundles

@dataclass
class Bundle:
    """A bundle read back from disk."""

    path: str
    report: Report
    step: int | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    model_state: dict[str, Any] | None
    optimizer_state: dict[str, Any] | None
    rng: dict[str, Any] | None


def _detached(obj: Any) -> Any:
    """The same structure with tensors detached and on the CPU (saving must not keep the graph)."""
    return map_tensors(obj, lambda t: t.detach().cpu().clone())


def write_bundle(report: Report, *, step: int | None, args: tuple[Any, ...] = (),
                 kwargs: dict[str, Any] | None = None, model_state: dict[str, Any] | None = None,
                 optimizer_state: dict[str, Any] | None = None, rng: dict[str, Any] | None = None,
                 root: str | None = None) -> str:
    """Write a bundle atomically and return its path; ``report.bundle`` is set to it."""
    root = root or DEFAULT_DIR
    os.makedirs(root, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = os.path.join(root, f"{stamp}-step{step if step is not None else 'unknown'}")
    tmp = tempfile.mkdtemp(prefix=".partial-", dir=root)
    try:
        state = {"format": 1, "step": step, "args": _detached(tuple(args)), "kwargs": _detached(kwargs or {}),
                 "model": _detached(model_state), "optimizer": _detached(optimizer_state), "rng": rng}
        with open(os.path.join(tmp, STATE_FILE), "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes the bundle visible
        final = base
        for n in range(2, 1000):
            report.bundle = final
            _write_text(os.path.join(tmp, JSON_FILE), to_json(report))
            _write_text(os.path.join(tmp, TEXT_FILE), to_text(report) + "\n")
            try:
                os.rename(tmp, final)  # atomic; fails on an existing non-empty folder, never overwrites it
                return final
            except OSError:
                if not os.path.exists(final):
                    raise
                final = f"{base}-{n}"
        raise OSError(f"too many bundles named {base}-*")
    except BaseException:
        report.bundle = None
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def read_report(path: str) -> Report:
    """Only the report of a bundle (no torch.load): what ``tensor-dap replay`` prints."""
    json_path = os.path.join(path, JSON_FILE)
    if not os.path.isdir(path):
        raise BundleError(f"{path}: not an incident bundle folder (expected .tensor_dap/incidents/<time>-step<N>)")
    try:
        with open(json_path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise TypeError(f"expected a JSON object, got {type(data).__name__}")
        return Report.from_dict(data)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BundleError(f"{path}: cannot read {JSON_FILE}: {exc}") from None


def read_bundle(path: str) -> Bundle:
    """The whole bundle. ``state.pt`` is unpickled in full: only open bundles you wrote yourself."""
    report = read_report(path)
    try:
        state = torch.load(os.path.join(path, STATE_FILE), map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable state.pt is one clear error
        raise BundleError(f"{path}: cannot load {STATE_FILE}: {type(exc).__name__}: {exc}") from None
    return Bundle(path, report, state.get("step"), tuple(state.get("args", ())), dict(state.get("kwargs", {})),
                  state.get("model"), state.get("optimizer"), state.get("rng"))
