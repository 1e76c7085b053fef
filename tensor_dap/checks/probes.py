"""What the doctor asks other processes: the GPUs (``nvidia-smi``) and whether debugpy finds the plugin.

Both run as child processes with a timeout, so the doctor never initializes CUDA in the calling
process to name a GPU, and the plugin is loaded by pydevd's own extension manager in a fresh
interpreter, exactly as it happens when VS Code starts a debug session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

from ..format import first_line

PLUGIN_MODULE = "pydevd_plugins.extensions.pydevd_plugin_tensor_dap"
TIMEOUT_S = 20.0

# Run in a fresh interpreter: debugpy puts its vendored pydevd first on sys.path (force_pydevd), and pydevd's
# ExtensionManager walks the ``pydevd_plugins.extensions`` namespace package for ``pydevd_plugin*`` modules.
_PLUGIN_PROBE = r"""
import json, sys
out = {"discoverable": False, "path": None, "providers": [], "searched": [], "error": None}
try:
    from debugpy._vendored import force_pydevd  # noqa: F401
    from _pydevd_bundle.pydevd_extension_api import StrPresentationProvider, TypeResolveProvider
    from _pydevd_bundle.pydevd_extension_utils import extensions_of_type
    import pydevd_plugins.extensions as extensions
    out["searched"] = [str(p) for p in extensions.__path__]
    name = sys.argv[1]
    found = [type(p) for kind in (TypeResolveProvider, StrPresentationProvider) for p in extensions_of_type(kind)]
    ours = sorted({p.__name__ for p in found if p.__module__ == name})
    module = sys.modules.get(name)
    out["path"] = getattr(module, "__file__", None)
    out["providers"] = ours
    if module is None:
        out["error"] = "pydevd found no module " + name + " on its extension path"
    elif not ours:
        out["error"] = "the module loaded but defines no provider pydevd accepts"
    else:
        import tensor_dap.dap  # noqa: F401 - what the plugin imports on its first use
        out["discoverable"] = True
except BaseException as exc:
    out["error"] = type(exc).__name__ + ": " + (str(exc).splitlines() or [""])[0]
print(json.dumps(out))
"""


def _run(argv: list[str]) -> tuple[int, str, str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout, done.stderr


def start_plugin_probe() -> subprocess.Popen:
    """Start the plugin probe in a fresh interpreter; ``plugin(probe)`` collects it (meanwhile, do other work)."""
    env = dict(os.environ, PYDEVD_DISABLE_FILE_VALIDATION="1")
    return subprocess.Popen([sys.executable, "-c", _PLUGIN_PROBE, PLUGIN_MODULE], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)


def plugin(probe: subprocess.Popen | None = None) -> dict[str, Any]:
    """Whether a debug session of this interpreter loads tensor_dap's plugin, from where, with which providers."""
    facts: dict[str, Any] = {"module": PLUGIN_MODULE, "discoverable": False, "path": None, "providers": [],
                             "searched": [], "error": None,
                             "disabled_by_env": os.environ.get("TENSOR_DAP_DISABLE_PLUGIN", "").strip().lower()
                             not in ("", "0", "false", "no")}
    try:
        probe = probe or start_plugin_probe()
        try:
            out, err = probe.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            probe.kill()
            probe.communicate()
            raise
        lines = out.strip().splitlines()
        facts.update(json.loads(lines[-1]) if lines else
                     {"error": first_line(RuntimeError(err.strip() or f"exit {probe.returncode}"))})
    except Exception as exc:  # noqa: BLE001 - a hung or broken child is reported, not raised
        facts["error"] = f"the probe failed: {first_line(exc)}"
    return facts


def nvidia_smi() -> list[dict[str, Any]] | None:
    """GPUs as nvidia-smi lists them (name, memory, driver); None when nvidia-smi is not installed."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    fields = "index,name,memory.total,memory.used,driver_version"
    try:
        code, out, _ = _run([exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits"])
    except Exception:  # noqa: BLE001 - a driver that hangs or is missing its libraries
        return []
    gpus = []
    for line in out.splitlines() if code == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 5:
            gpus.append({"index": _int(parts[0]), "name": parts[1], "memory_total_bytes": _mib(parts[2]),
                         "memory_used_bytes": _mib(parts[3]), "driver": parts[4], "source": "nvidia-smi"})
    return gpus


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _mib(text: str) -> int | None:
    value = _int(text)
    return None if value is None else value * 1024 * 1024
