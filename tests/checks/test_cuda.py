"""The checks on a real GPU: mixed cpu/cuda models, CUDA splits, and a doctor that creates no CUDA context.

Skipped without CUDA (this project's CI has none); on CPU the same paths are covered with the meta device.
"""

import json
import subprocess
import sys

import pytest
import torch
from torch import nn

from tensor_dap import check_devices, check_gradients, check_leakage, check_shapes

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_layer_left_on_the_cpu_and_inputs_on_the_gpu():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).cuda()
    model[2].cpu()
    r = check_devices(model, torch.randn(4, 8, device="cuda"))
    assert r.verdict == "problem" and r.subjects == ("2",) and r.facts["home"] == "cuda:0"
    failed = check_shapes(model, torch.randn(4, 8, device="cuda"))
    assert failed.verdict == "problem" and failed.findings[0].subject == "2"
    model.cuda()
    assert check_devices(model, torch.randn(4, 8, device="cuda")).verdict == "ok"
    model(torch.randn(4, 8, device="cuda")).sum().backward()
    assert check_gradients(model).verdict == "ok"


def test_cuda_splits_match_the_cpu_answer():
    train = torch.randn(10_000, 32, device="cuda")
    test = torch.cat([torch.randn(500, 32, device="cuda"), train[:7]])
    on_gpu = check_leakage(train, test)
    assert on_gpu.facts["duplicate_test_rows"] == 7
    assert on_gpu.to_dict()["rows"] == check_leakage(train.cpu(), test.cpu()).to_dict()["rows"]


def test_doctor_in_a_program_names_gpus_without_initializing_cuda():
    code = ("import json, torch, tensor_dap; t = tensor_dap.doctor().facts['torch']; "
            "print(json.dumps([torch.cuda.is_initialized(), t['gpus'], t['cuda_available']]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    initialized, gpus, available = json.loads(out.stdout.strip().splitlines()[-1])
    assert not initialized and available and len(gpus) == torch.cuda.device_count()
