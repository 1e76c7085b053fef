"""tensor-dap doctor, run as a user runs it: JSON valid against its schema, exit 0 when healthy, 1 when broken."""

import json
import os
import stat
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import jsonschema
import pytest

from tensor_dap.checks.schema import DOCTOR_SCHEMA

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]


def doctor(*args, env=None, cwd=None):
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONBREAKPOINT", "TENSOR_DAP_DISABLE_PLUGIN")}
    full.update(env or {}, NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "tensor_dap", "doctor", *args], capture_output=True, text=True,
                          env=full, cwd=cwd, timeout=150)


def test_healthy_environment_json_is_valid_and_exit_0(tmp_path):
    r = doctor("--json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    jsonschema.validate(report, DOCTOR_SCHEMA)
    facts = report["facts"]
    assert report["verdict"] in ("ok", "warning") and facts["python"]["executable"] == sys.executable
    assert facts["packages"]["debugpy"] == metadata.version("debugpy")
    assert facts["packages"]["rich"] == metadata.version("rich")
    plugin = facts["plugin"]
    assert plugin["discoverable"] and plugin["providers"] == ["TensorDapResolveProvider", "TensorDapStrProvider"]
    assert Path(plugin["path"]).resolve() == ROOT / "pydevd_plugins/extensions/pydevd_plugin_tensor_dap.py"
    import torch

    assert facts["torch"]["version"] == torch.__version__ and facts["torch"]["cuda_build"] == torch.version.cuda
    assert facts["cpu"]["torch_threads"] >= 1 and facts["blas"]["torch_blas"]
    if not torch.cuda.is_available():
        assert facts["torch"]["gpus"] == [] or facts["torch"]["gpu_source"] == "nvidia-smi"


def _fake_nvidia_smi(folder: Path) -> Path:
    """A stand-in for nvidia-smi (no GPU here): prints what the real one prints for this query."""
    exe = folder / "nvidia-smi"
    exe.write_text("#!/bin/sh\necho '0, NVIDIA H200, 143771, 512, 570.86.15'\n"
                   "echo '1, NVIDIA H200, 143771, 0, 570.86.15'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return folder


def test_human_report_with_gpus_listed_and_plugin_disabled_warns_but_exits_0(tmp_path):
    bin_dir = _fake_nvidia_smi(tmp_path)
    r = doctor(env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "TENSOR_DAP_DISABLE_PLUGIN": "1",
                    "PYTHONBREAKPOINT": "tensor_dap.set_trace"}, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert out.startswith("doctor  ! warning") and "NVIDIA H200, 512 MiB used of 140 GiB" in out
    assert "TENSOR_DAP_DISABLE_PLUGIN is set" in out and "tensor_dap.set_trace" in out
    import torch

    if not torch.version.cuda:
        assert "2 GPU(s) present but torch" in out and "CPU build" in out
    assert "\x1b[" not in out and "Traceback" not in r.stderr


def test_broken_torch_breakpoint_hook_and_shadowed_plugin_exit_1(tmp_path):
    """What the doctor is for: it still reports, in valid JSON, when torch itself cannot be imported."""
    stale = tmp_path / "stale" / "pydevd_plugins" / "extensions"
    stale.mkdir(parents=True)
    (stale / "pydevd_plugin_tensor_dap.py").write_text("raise ImportError('an old copy that no longer imports')\n")
    (tmp_path / "stale" / "torch.py").write_text("raise ImportError('libtorch_cpu.so: cannot open shared object')\n")
    r = doctor("--json", env={"PYTHONPATH": str(tmp_path / "stale"), "PYTHONBREAKPOINT": "no_such_module.hook"},
               cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads(r.stdout)
    jsonschema.validate(report, DOCTOR_SCHEMA)
    problems = {f["subject"]: f["message"] for f in report["findings"] if f["level"] == "problem"}
    assert "no_such_module.hook" in problems["PYTHONBREAKPOINT"]
    assert "VS Code would show plain tensors" in problems["debugpy plugin"]
    assert str(tmp_path / "stale") in " ".join(report["facts"]["plugin"]["searched"])
    assert "libtorch_cpu.so" in problems["torch"] and report["facts"]["torch"]["version"] is None
    assert report["facts"]["cpu"]["torch_threads"] is None and report["facts"]["cpu"]["logical"] >= 1
