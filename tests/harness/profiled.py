"""For tests/profile: a small real training script, and ``tensor-dap`` run in a subprocess as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])  # this checkout, whatever tensor_dap the interpreter has installed

TRAIN = textwrap.dedent('''
    import sys
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 20), torch.randint(0, 2, (64,))
    hoard = []


    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss


    class Helper:
        def scale(self, v):
            total = 0.0
            for i in range(50):
                total += v * i
            return total


    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    for i in range(steps):
        loss = train_step(x, y)
        hoard.append([float(k) for k in range(20000)])
        Helper().scale(loss.item())
    print("final loss", round(loss.item(), 4))
    if "--crash" in sys.argv:
        raise RuntimeError("boom after training")
''')


def tensor_dap(*args, cwd, paths=(), env=None):
    """``tensor-dap ARGS`` in ``cwd``, with ``paths`` importable after the project's own (and ``env`` added)."""
    env = {"NO_COLOR": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
           "PYTHONPATH": os.pathsep.join([ROOT, *map(str, paths)]), **(env or {})}
    return subprocess.run([sys.executable, "-m", "tensor_dap", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env=env)


def run_folder(cwd):
    runs = sorted((cwd / ".tensor_dap" / "profiles").iterdir())
    return runs[-1]
