"""Incident bundles: everything needed to re-run one failing training step, on disk.

A bundle is a folder ``.tensor_dap/incidents/<UTC time>-step<N>/`` holding ``state.pt``
(the step's arguments, or the model's forwards for an unchanged loop, the model and optimizer
state from before the step, RNG states), ``report.json`` and ``report.txt``. It is written into
a hidden temporary folder next to its final place and renamed in one step, so a crash never
leaves half a bundle, and an existing bundle is never overwritten (a clash gets a ``-2``,
``-3``... suffix).

``state.pt`` holds only what ``torch.load(weights_only=True)`` reads (tensors, numbers,
strings, plain lists/tuples/dicts, and an RNN's ``PackedSequence``, which torch lets a safe load
build): loading it runs no code. A step argument that is a Python object of its own (a
namedtuple or dataclass batch) goes into ``objects.pt`` instead, which only ``trusted=True``
(``tensor-dap run --replay ... --trust``) unpickles.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch

from ..folders import INCIDENTS
from ..format import first_line, short_error
from ..libraries import is_user_file
from ..loading import load_saved
from ..nested import map_tensors
from .report import Report, to_json, to_text

DEFAULT_DIR = INCIDENTS
STATE_FILE, OBJECTS_FILE, JSON_FILE, TEXT_FILE = "state.pt", "objects.pt", "report.json", "report.txt"
FORMAT = 2  # state.pt: 1 was one full pickle (numpy RNG arrays, any argument objects)
MAX_REPORT_CHARS = 16 * 2**20
_SAFE_LEAVES = (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device, torch.Size)
# torch's own classes state.pt may hold, where a safe load can be told to build them (``safe_globals``, torch 2.5+):
# an RNN's packed input. With an older torch they go to objects.pt, as the program's own classes do.
_SAFE_CLASSES: tuple[type, ...] = ((torch.nn.utils.rnn.PackedSequence,)
                                   if hasattr(torch.serialization, "safe_globals") else ())
try:  # a jagged nested tensor (sequences of different lengths) is torch's own subclass: a safe load builds it
    from torch.nested._internal.nested_tensor import NestedTensor as _Jagged
except ImportError:  # an older torch
    _Jagged = None
_SAFE_TENSORS = (torch.Tensor, torch.nn.Parameter, *((_Jagged,) if _Jagged is not None else ()))
TRUST = "pass trusted=True (tensor-dap run --replay ... --trust) only if you wrote it"


class BundleError(ValueError):
    """The bundle cannot be read: a damaged or foreign file (``file_problem``), or a usage mistake."""

    def __init__(self, message: str, *, file_problem: bool = True) -> None:
        super().__init__(message)
        self.file_problem = file_problem


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
    forwards: list[dict[str, Any]] = field(default_factory=list)  # unchanged loop: the model's own forwards
    mode: str = "step"


def _detached(obj: Any) -> Any:
    """The same structure with tensors detached and on the CPU (saving must not keep the graph)."""
    return map_tensors(obj, lambda t: t.detach().cpu().clone())


def loads_safely(obj: Any, depth: int = 0) -> bool:
    """True when ``weights_only=True`` can load ``obj`` back: tensors, numbers, strings, plain containers."""
    if depth > 32:
        return False
    if isinstance(obj, torch.Tensor):
        return type(obj) in _SAFE_TENSORS
    if isinstance(obj, _SAFE_LEAVES):
        return True
    if type(obj) in (list, tuple) or type(obj) in _SAFE_CLASSES:
        return all(loads_safely(v, depth + 1) for v in obj)
    if type(obj) in (dict, OrderedDict):
        return all(isinstance(k, (str, int)) and loads_safely(v, depth + 1) for k, v in obj.items())
    return False


def safe_rng(rng: dict[str, Any] | None) -> dict[str, Any] | None:
    """RNG states in safe types: numpy's key array becomes a list (``np.random.set_state`` takes either)."""
    if not rng or "numpy" not in rng:
        return rng
    name, keys, *rest = rng["numpy"]
    return {**rng, "numpy": (name, [int(k) for k in keys], *rest)}


def write_bundle(report: Report, *, step: int | None, args: tuple[Any, ...] = (),
                 kwargs: dict[str, Any] | None = None, model_state: dict[str, Any] | None = None,
                 optimizer_state: dict[str, Any] | None = None, rng: dict[str, Any] | None = None,
                 forwards: list[dict[str, Any]] | None = None, root: str | None = None) -> str:
    """Write a bundle atomically and return its path; ``report.bundle`` is set to it."""
    if report.program is None:
        report.program, report.args = _program()
    root = root or DEFAULT_DIR
    os.makedirs(root, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = os.path.join(root, f"{stamp}-step{step if step is not None else 'unknown'}")
    tmp = tempfile.mkdtemp(prefix=".partial-", dir=root)
    try:
        parts = {"args": _detached(tuple(args)), "kwargs": _detached(kwargs or {}),
                 "forwards": _detached(forwards or []), "optimizer": _detached(optimizer_state)}
        objects = {k: v for k, v in parts.items() if not loads_safely(v)}
        state = {"format": FORMAT, "step": step, "mode": report.mode or "step", "objects": sorted(objects),
                 "model": _detached(model_state), "rng": safe_rng(rng),
                 **{k: v for k, v in parts.items() if k not in objects}}
        _save(os.path.join(tmp, STATE_FILE), state)
        if objects:
            _save(os.path.join(tmp, OBJECTS_FILE), objects)
            report.notes.append(f"the bundle keeps {', '.join(sorted(objects))} as Python objects ({OBJECTS_FILE}): "
                                "replaying it needs tensor_dap.replay(..., trusted=True) or "
                                "tensor-dap run --replay ... --trust")
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


def _save(path: str, obj: Any) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename makes the bundle visible


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def read_report(path: str) -> Report:
    """Only the report of a bundle (no torch.load): what ``tensor-dap replay`` prints."""
    if not os.path.isdir(path):
        raise BundleError(f"{path}: not an incident bundle folder (expected .tensor_dap/incidents/<time>-step<N>)",
                          file_problem=False)
    json_path = os.path.join(path, JSON_FILE)
    if not os.path.isfile(json_path):
        raise BundleError(f"{path}: not an incident bundle (no {JSON_FILE})", file_problem=False)
    try:
        with open(json_path, encoding="utf-8") as f:
            text = f.read(MAX_REPORT_CHARS + 1)  # bounded: a report is kilobytes; a crafted one may not end
        if len(text) > MAX_REPORT_CHARS:
            raise ValueError(f"larger than {MAX_REPORT_CHARS // 2**20} MiB, not a report")
        return Report.from_dict(json.loads(text))
    except RecursionError:
        raise BundleError(f"{path}: cannot read {JSON_FILE}: nested too deeply") from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BundleError(f"{path}: cannot read {JSON_FILE}: {first_line(exc)}") from None


def read_bundle(path: str, *, trusted: bool = False) -> Bundle:
    """The whole bundle. ``state.pt`` loads with ``weights_only=True``; ``trusted=True`` also unpickles
    ``objects.pt`` and bundles from before format 2 (full pickles: only open bundles you wrote)."""
    report = read_report(path)
    state = _load(path, STATE_FILE, trusted)
    if not isinstance(state, dict):
        raise BundleError(f"{path}: {STATE_FILE} is not a bundle state (a {type(state).__name__})")
    objects = state.get("objects") or []
    if objects:
        if not trusted:
            raise BundleError(f"{path}: the bundle keeps {', '.join(map(str, objects))} as Python objects "
                              f"({OBJECTS_FILE}); unpickling runs code: {TRUST}",
                              file_problem=False)
        state = {**state, **_load(path, OBJECTS_FILE, True)}
    rng = state.get("rng")
    return Bundle(path, report, state.get("step"), tuple(state.get("args", ())), dict(state.get("kwargs", {})),
                  state.get("model"), state.get("optimizer"), rng, list(state.get("forwards") or []),
                  str(state.get("mode", "step")))


def _load(path: str, name: str, trusted: bool) -> Any:
    try:
        return load_saved(os.path.join(path, name), trusted=trusted, allowed=_SAFE_CLASSES)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one clear error
        if not trusted and "weights_only" in str(exc):
            raise BundleError(f"{path}: {name} holds objects a safe load refuses (a bundle from an older "
                              f"tensor_dap, or not ours); {TRUST}", file_problem=False) from None
        raise BundleError(f"{path}: cannot load {name}: {short_error(exc, limit=None)}") from None


def _program() -> tuple[str | None, list[str]]:
    """The script this process runs and its arguments (``sys.argv``), when it is the user's file: what a replay
    reruns. Not a library's entry point (``python -m pytest``, ``tensor-dap demo``): rerun, it would not train."""
    argv = list(getattr(sys, "argv", None) or [])
    if not argv or not argv[0] or not os.path.isfile(argv[0]) or not is_user_file(argv[0]):
        return None, []
    return os.path.abspath(argv[0]), [str(a) for a in argv[1:256]]
