"""``doctor``: the environment report people paste into bug reports, and what in it is broken.

Python, torch (its CUDA/cuDNN/ROCm build), the GPUs and their memory, BLAS/LAPACK, the versions
of the packages tensor_dap works with, whether debugpy really loads the plugin, the
``breakpoint()`` hook, CPU threads. Facts are gathered without initializing CUDA (GPU names come
from ``nvidia-smi``, or from torch only when ``init_cuda`` allows it); the verdict is "problem"
exactly when something tensor_dap needs is broken (what ``tensor-dap doctor`` exits 1 on).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import sys
from importlib import metadata
from typing import Any

from ..format import first_line, fmt_bytes
from ..version import __version__
from . import probes
from .result import INFO, PROBLEM, WARNING, CheckResult, Finding, result

REQUIRED = ("torch", "debugpy", "rich", "tensorboard", "line_profiler")  # tensor_dap's own dependencies
OPTIONAL = ("numpy", "pandas", "torchvision", "lovely-tensors")
COLUMNS = ("section", "item", "value")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except Exception:  # noqa: BLE001 - not installed, or broken metadata
        return None


def _python() -> dict[str, Any]:
    return {"version": platform.python_version(), "implementation": platform.python_implementation(),
            "executable": sys.executable, "platform": platform.platform()}


def _config_value(text: str, key: str) -> str | None:
    match = re.search(rf"\b{key}=([^,\s]+)", text)
    return match.group(1) if match else None


def _blas(torch: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"torch_blas": None, "torch_lapack": None, "mkl": None, "mkldnn": None, "openmp": None,
                           "cpu_capability": None, "numpy_blas": None}
    if torch is not None:
        try:
            config = torch.__config__.show()
            capability = re.search(r"CPU capability usage: (\S+)", config)
            out.update(torch_blas=_config_value(config, "BLAS_INFO"), torch_lapack=_config_value(config, "LAPACK_INFO"),
                       mkl=bool(torch.backends.mkl.is_available()), mkldnn=bool(torch.backends.mkldnn.is_available()),
                       openmp=bool(torch.backends.openmp.is_available()),
                       cpu_capability=capability.group(1) if capability else None)
        except Exception:  # noqa: BLE001 - an exotic build without these helpers
            pass
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            deps = np.show_config(mode="dicts")["Build Dependencies"]
            out["numpy_blas"] = f"{deps['blas']['name']} {deps['blas'].get('version', '')}".strip()
        except Exception:  # noqa: BLE001 - numpy < 1.25 prints its config instead of returning it
            pass
    return out


def _gpus(torch: Any, init_cuda: bool) -> tuple[list[dict[str, Any]], str]:
    """The GPUs and where their description came from; CUDA is initialized only if already so, or allowed."""
    listed = probes.nvidia_smi()
    if listed:
        return listed, "nvidia-smi"
    if torch is None or not (torch.version.cuda or torch.version.hip):
        return [], "CPU-only torch build"
    count = torch.cuda.device_count()  # NVML where available: no CUDA context
    if not count:
        return [], "no GPU visible to torch"
    if not (init_cuda or torch.cuda.is_initialized()):
        return [{"index": i, "name": None, "memory_total_bytes": None, "memory_used_bytes": None, "driver": None,
                 "source": "torch"} for i in range(count)], "names need CUDA: run `tensor-dap doctor`"
    gpus = []
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        gpus.append({"index": i, "name": props.name, "memory_total_bytes": int(total),
                     "memory_used_bytes": int(total - free), "driver": None, "source": "torch"})
    return gpus, "torch.cuda"


def _torch(init_cuda: bool) -> tuple[Any, dict[str, Any]]:
    out: dict[str, Any] = {"version": None, "path": None, "error": None, "cuda_build": None, "cudnn": None,
                           "hip": None, "debug": None, "cuda_available": False, "mps_available": False,
                           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpus": [],
                           "gpu_source": ""}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken install is what the doctor is for
        out["error"] = f"{type(exc).__name__}: {first_line(exc)}"
        return None, out
    out.update(version=torch.__version__, path=os.path.dirname(torch.__file__), cuda_build=torch.version.cuda,
               hip=torch.version.hip, debug=bool(torch.version.debug))
    try:
        if torch.version.cuda:
            version = torch.backends.cudnn.version()
            out["cudnn"] = None if version is None else str(version)
        out["gpus"], out["gpu_source"] = _gpus(torch, init_cuda)
        out["cuda_available"] = bool(torch.cuda.is_available()) if init_cuda or torch.cuda.is_initialized() else \
            bool(torch.cuda.device_count())
        mps = getattr(torch.backends, "mps", None)
        out["mps_available"] = bool(mps is not None and mps.is_available())
    except Exception as exc:  # noqa: BLE001 - a driver problem is a finding
        out["error"] = f"GPU query failed: {type(exc).__name__}: {first_line(exc)}"
    return torch, out


def _cgroup_cpus() -> float | None:
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _cpu(torch: Any) -> dict[str, Any]:
    try:
        available = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        available = os.cpu_count()
    return {"logical": os.cpu_count(), "available": available, "cgroup_limit": _cgroup_cpus(),
            "torch_threads": torch.get_num_threads() if torch is not None else None,
            "torch_interop_threads": torch.get_num_interop_threads() if torch is not None else None,
            "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}}


def _breakpoint() -> dict[str, Any]:
    value = os.environ.get("PYTHONBREAKPOINT")
    out: dict[str, Any] = {"PYTHONBREAKPOINT": value, "importable": None}
    if value and value != "0":
        module = value.rpartition(".")[0] or "builtins"
        try:
            out["importable"] = importlib.util.find_spec(module) is not None  # found, not run
        except (ImportError, ValueError):
            out["importable"] = False
    return out


def facts(*, init_cuda: bool = False) -> dict[str, Any]:
    """Everything the doctor reports, as plain JSON data (the schema is ``schema.DOCTOR_SCHEMA``)."""
    try:
        probe = probes.start_plugin_probe()  # runs while torch imports
    except OSError:
        probe = None
    torch, torch_facts = _torch(init_cuda)
    return {
        "tensor-dap": {"version": __version__, "path": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))},
        "python": _python(),
        "torch": torch_facts,
        "blas": _blas(torch),
        "packages": {name: _version(name) for name in REQUIRED + OPTIONAL},
        "plugin": probes.plugin(probe),
        "breakpoint": _breakpoint(),
        "cpu": _cpu(torch),
    }


def _findings(f: dict[str, Any]) -> list[Finding]:
    found: list[Finding] = []
    t = f["torch"]
    missing = [name for name in REQUIRED if f["packages"][name] is None]
    if t["version"] is None:
        found.append(Finding(PROBLEM, "torch", f"cannot import torch: {t['error']}",
                             "install a torch build for this machine (https://pytorch.org/get-started)"))
    elif t["error"]:
        found.append(Finding(WARNING, "torch", t["error"]))
    if missing:
        found.append(Finding(PROBLEM, ", ".join(missing), "not installed", f"pip install {' '.join(missing)}"))
    p = f["plugin"]
    if not p["discoverable"]:
        found.append(Finding(PROBLEM, "debugpy plugin", f"VS Code would show plain tensors: {p['error']}",
                             "pip install -e /path/to/tensor_dap into this environment (the plugin is found on "
                             "sys.path as pydevd_plugins/extensions)"))
    elif p["disabled_by_env"]:
        found.append(Finding(WARNING, "debugpy plugin", "found, but TENSOR_DAP_DISABLE_PLUGIN is set: VS Code shows "
                             "plain tensors", "unset TENSOR_DAP_DISABLE_PLUGIN"))
    b = f["breakpoint"]
    if b["PYTHONBREAKPOINT"] == "0":
        found.append(Finding(WARNING, "PYTHONBREAKPOINT", "is 0: every breakpoint() call does nothing"))
    elif b["importable"] is False:
        found.append(Finding(PROBLEM, "PYTHONBREAKPOINT", f"names {b['PYTHONBREAKPOINT']!r}, which cannot be imported: "
                             "breakpoint() will only print a warning", "PYTHONBREAKPOINT=tensor_dap.set_trace"))
    elif not b["PYTHONBREAKPOINT"]:
        found.append(Finding(INFO, "PYTHONBREAKPOINT", "not set: breakpoint() opens the plain pdb",
                             "PYTHONBREAKPOINT=tensor_dap.set_trace for the tensor-aware one"))
    if t["version"] is not None:
        found += _gpu_findings(t)
    cpu = f["cpu"]
    cores = min(c for c in (cpu["available"], cpu["cgroup_limit"], cpu["logical"]) if c)
    if cpu["torch_threads"] and cores and cpu["torch_threads"] > max(1, int(cores + 0.5)):
        found.append(Finding(WARNING, "torch threads", f"torch uses {cpu['torch_threads']} threads on "
                             f"{cores:g} available cores: threads fight over them", f"torch.set_num_threads("
                             f"{max(1, int(cores))}) or OMP_NUM_THREADS={max(1, int(cores))}"))
    return found


def _gpu_findings(t: dict[str, Any]) -> list[Finding]:
    gpu_build = t["cuda_build"] or t["hip"]
    if t["gpus"] and not gpu_build:
        return [Finding(WARNING, "torch", f"{len(t['gpus'])} GPU(s) present but torch {t['version']} is a CPU build",
                        "install a CUDA build of torch (https://pytorch.org/get-started)")]
    if gpu_build and not t["gpus"]:
        visible = t["cuda_visible_devices"]
        why = f"CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "no driver, or no GPU on this machine"
        return [Finding(WARNING, "GPU", f"torch is built for CUDA/ROCm {gpu_build} but sees no GPU ({why})")]
    if not t["gpus"]:
        return [Finding(INFO, "GPU", "no GPU: torch runs on the CPU" + (" (MPS available)" if t["mps_available"]
                                                                        else ""))]
    return []


def _rows(f: dict[str, Any]) -> list[tuple[str, str, Any]]:
    t, b, cpu, p = f["torch"], f["blas"], f["cpu"], f["plugin"]
    py = f["python"]
    rows: list[tuple[str, str, Any]] = [
        ("tensor-dap", "version", f"{f['tensor-dap']['version']} ({f['tensor-dap']['path']})"),
        ("python", "version", f"{py['implementation']} {py['version']} ({py['executable']})"),
        ("python", "platform", f["python"]["platform"]),
        ("torch", "version", t["version"] or f"not importable: {t['error']}"),
        ("torch", "CUDA build", t["cuda_build"] or ("ROCm " + t["hip"] if t["hip"] else "none (CPU build)")),
        ("torch", "cuDNN", t["cudnn"] or "-"),
    ]
    for g in t["gpus"]:
        memory = "?" if g["memory_total_bytes"] is None else (
            f"{fmt_bytes(g['memory_used_bytes'] or 0)} used of {fmt_bytes(g['memory_total_bytes'])}")
        rows.append(("GPU", str(g["index"]), f"{g['name'] or '?'}, {memory}"))
    if not t["gpus"]:
        rows.append(("GPU", "-", t["gpu_source"] or "none"))
    rows += [("BLAS", "torch", f"BLAS {b['torch_blas'] or '?'}, LAPACK {b['torch_lapack'] or '?'}, CPU "
              f"{b['cpu_capability'] or '?'}"), ("BLAS", "numpy", b["numpy_blas"] or "-")]
    rows += [("package", name, version or "not installed") for name, version in f["packages"].items()]
    rows.append(("plugin", "debugpy", f"loads from {p['path']} ({', '.join(p['providers'])})" if p["discoverable"]
                 else f"not found: {p['error']}"))
    rows.append(("breakpoint()", "PYTHONBREAKPOINT", f["breakpoint"]["PYTHONBREAKPOINT"] or "not set"))
    rows.append(("CPU", "cores", f"{cpu['available']} available of {cpu['logical']}" +
                 (f", cgroup limit {cpu['cgroup_limit']:g}" if cpu["cgroup_limit"] else "")))
    rows.append(("CPU", "torch threads", f"{cpu['torch_threads']} intra-op, {cpu['torch_interop_threads']} inter-op"))
    return rows


def doctor(*, init_cuda: bool = False) -> CheckResult:
    """The environment report. ``init_cuda``: read GPU names through torch.cuda when nvidia-smi is missing
    (this initializes CUDA in the calling process; the ``tensor-dap doctor`` command allows it)."""
    f = facts(init_cuda=init_cuda)
    t = f["torch"]
    summary = (f"Python {f['python']['version']}, torch {t['version'] or 'missing'}"
               + (f" (CUDA {t['cuda_build']})" if t["cuda_build"] else "")
               + f", {len(t['gpus'])} GPU(s), tensor_dap {__version__}")
    return result("doctor", summary, _findings(f), columns=COLUMNS, rows=_rows(f), facts=f)
