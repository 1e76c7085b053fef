"""Whose code a source file is: the user's, Python's own, torch's, tensor_dap's, or another installed package's.

Crash reports start at the user's frames, shape errors explain the user's line, a NaN's birth is
named by the user's line, the debugger hides library frames, memory sites are charged to the
user's line: all of them ask here. The demo's training script (``tensor_dap/demo``) plays a
user's program, so it counts as the user's code although it ships inside the package.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from typing import Optional

_PACKAGE = os.path.dirname(os.path.realpath(__file__))  # tensor_dap/
_DEMO = os.path.join(_PACKAGE, "demo") + os.sep
_STDLIB = os.path.realpath(sysconfig.get_paths().get("stdlib", "")) + os.sep
_SITE = tuple({os.path.realpath(p) + os.sep for p in (sysconfig.get_paths().get("purelib"),
                                                       sysconfig.get_paths().get("platlib")) if p})
_SCRIPTS = tuple({os.path.realpath(p) + os.sep for p in (sysconfig.get_paths().get("scripts"),
                                                          os.path.dirname(sys.executable)) if p})
# the launcher pip writes for a package's console script (bin/tensor-dap): "from tensor_dap.cli import main"
_LAUNCHER = re.compile(r"^from ([A-Za-z_]\w*)[\w.]* import \w+\s*$.*^\s*sys\.exit\(", re.M | re.S)
_cache: dict[str, Optional[str]] = {}
_CACHE_MAX = 10_000
FRAMEWORK = ("python", "torch", "tensor_dap")  # what the debugger hides and a report's user line skips


def library_of(filename: str) -> Optional[str]:
    """``"tensor_dap"``, ``"torch"``, another package's top-level name (its files, or the console-script
    launcher pip wrote for it, ``bin/tensor-dap``), or ``"python"`` (the standard library, frozen
    modules, code typed at a prompt); None for the user's own code."""
    if filename in _cache:
        return _cache[filename]
    owner = _owner(filename)
    if len(_cache) < _CACHE_MAX:
        _cache[filename] = owner
    return owner


def _owner(filename: str) -> Optional[str]:
    if not filename or filename.startswith("<"):
        return "python"
    path = os.path.realpath(filename)
    if path.startswith(_DEMO):
        return None
    if path.startswith(_PACKAGE + os.sep):
        return "tensor_dap"
    for site in _SITE:  # site-packages lives inside the standard library folder on some layouts: first
        if path.startswith(site):
            return _top_level(path[len(site):])
    packages = _PACKAGES_DIR.search(path)  # the user site, Debian's dist-packages, one a .pth or PYTHONPATH adds
    if packages:
        return _top_level(path[packages.end():])
    target = _installed_by_target(path)
    if target:
        return target
    if _in_torch(path):  # torch built from a source checkout
        return "torch"
    if path.startswith(_STDLIB):
        return "python"
    if path.startswith(_SCRIPTS):
        return _launched(path)
    return None


_PACKAGES_DIR = re.compile(r".*[/\\](?:site|dist)-packages[/\\]")


def _installed_by_target(path: str) -> Optional[str]:
    """The package of a file in a folder on sys.path that pip installed into (``pip install --target DIR``, then
    PYTHONPATH=DIR): the ``.dist-info`` folders there name the top-level packages it holds."""
    for entry in list(sys.path):  # (read once each; an entry added later is read when first seen)
        if entry not in _targets:
            _targets[entry] = _installed_in(entry)
        folder, names = _targets[entry]
        if names and path.startswith(folder):
            top = _top_level(path[len(folder):])
            if top in names:
                return top
    return None


_targets: dict[str, tuple[str, frozenset[str]]] = {}
_SCANNED = 10_000  # entries of a sys.path folder looked at for .dist-info (a script's folder may hold a dataset)


def _installed_in(entry: str) -> tuple[str, frozenset[str]]:
    """(folder, the top-level names its .dist-info folders list); no names for any folder pip did not install
    into, or one already known as site-packages or the standard library."""
    folder = os.path.realpath(entry or os.curdir) + os.sep
    if folder.startswith(_SITE) or _PACKAGES_DIR.match(folder) or folder.startswith(_STDLIB):
        return folder, frozenset()
    names: set[str] = set()
    try:
        with os.scandir(folder) as it:
            for i, e in enumerate(it):
                if i >= _SCANNED:
                    break
                if e.name.endswith(".dist-info") and e.is_dir():
                    names.update(_top_levels(e.path))
    except OSError:
        pass
    return folder, frozenset(names)


def _top_levels(dist_info: str) -> set[str]:
    """The top-level names a .dist-info folder's package installed: its top_level.txt, else its RECORD's paths."""
    try:
        with open(os.path.join(dist_info, "top_level.txt"), encoding="utf-8") as f:
            return {line.strip() for line in f if line.strip()}
    except OSError:
        pass
    try:
        with open(os.path.join(dist_info, "RECORD"), encoding="utf-8") as f:
            tops = {_top_level(line.split(",", 1)[0].replace("/", os.sep)) for line in f if line.strip()}
    except OSError:
        return set()
    return {t for t in tops if t.isidentifier() and t not in ("python", "bin")}  # (not tqdm-4.70.1.dist-info)


def _top_level(rest: str) -> str:
    """The package a path inside a packages folder belongs to (``torch/nn/functional.py`` -> torch)."""
    return rest.split(os.sep)[0].split(".")[0] or "python"


def _in_torch(path: str) -> bool:
    torch = sys.modules.get("torch")
    where = getattr(torch, "__file__", None)
    return bool(where) and path.startswith(os.path.dirname(os.path.realpath(where)) + os.sep)


def _launched(path: str) -> Optional[str]:
    """The package a console-script launcher in the interpreter's scripts folder starts; None for any
    other file there (a user may keep a script of their own beside the interpreter)."""
    try:
        with open(path, encoding="utf-8") as f:
            head = f.read(2048)
    except (OSError, UnicodeDecodeError):
        return None
    m = _LAUNCHER.search(head)
    return m.group(1) if m else None


def is_user_file(filename: str) -> bool:
    """Not the standard library, not an installed package, not tensor_dap itself."""
    return library_of(filename) is None


def is_pass_through(filename: str) -> bool:
    """Lightning Fabric's code: the thin layer between the user's ``model(x)`` / ``fabric.backward(loss)`` and torch's
    (its model wrapper, its precision's and strategy's backward), which names no line of its own: the user's call
    is the line. Lightning's Trainer (``lightning.pytorch``) is not: it is the loop."""
    owner = library_of(filename)
    return owner == "lightning_fabric" or (owner == "lightning" and f"{os.sep}lightning{os.sep}fabric{os.sep}" in
                                           os.path.realpath(filename))


def is_framework(filename: str) -> bool:
    """Python's, torch's or tensor_dap's own code: what stands between the user and their frame.

    Other installed packages stay visible (a model from ``transformers`` is the user's model code
    as far as a NaN or a debugger stop is concerned).
    """
    return library_of(filename) in FRAMEWORK
