"""Fills a fresh copy of the e2e workspace with real profiler output about its own train.py.

    python prepare_workspace.py WORKSPACE

The profiler files are what `tensor-dap profile` (run as ``python -m tensor_dap profile``) writes
when run on WORKSPACE/train.py, renamed, so their paths point at the file the test opens:

- train.prof (--mode cpu), train.lprof (--mode line --function train_step --function main)
- hostile.prof: --mode cpu of a script named with an img tag whose function is named with a
  script tag
- traces/train.pt.trace.json (--mode torch), memory.json (--mode memory)
- .tensor_dap/incidents/<time>-step0/: a real bundle written by tensor_dap.watch
"""
import json
import os
import shutil
import sys
import tempfile

WS = os.path.abspath(sys.argv[1])
TRAIN = os.path.join(WS, "train.py")
HOSTILE = os.path.join(WS, "<img src=x onerror=alert(1)>.py")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "fixtures"))
from profile_runs import finish, start  # noqa: E402 - the shared runner, beside the unit fixtures


def main():
    os.chdir(WS)
    with open(HOSTILE, "w") as f:
        f.write("def f():\n    return 1\n\n\n"
                "f.__code__ = f.__code__.replace(co_name=\"<script>alert('x')</script>\")\n"
                "for _ in range(3):\n    f()\n")
    runs_dir = tempfile.mkdtemp(prefix="tensor-dap-e2e-runs-")
    runs = [  # started together, while this process writes the incident bundle
        (profile(runs_dir, "cpu", TRAIN), "cprofile.prof", "train.prof"),
        (profile(runs_dir, "cpu", HOSTILE), "cprofile.prof", "hostile.prof"),
        (profile(runs_dir, "line", TRAIN, "--function", "train_step", "--function", "main"), "line.lprof", "train.lprof"),
        (profile(runs_dir, "torch", TRAIN), "torch.trace.json", os.path.join("traces", "train.pt.trace.json")),
        (profile(runs_dir, "memory", TRAIN), "memory.json", "memory.json"),
    ]
    incident()
    os.makedirs("traces", exist_ok=True)
    for run, written, name in runs:
        folder = finish(*run)
        with open(os.path.join(folder, "profile.json")) as f:
            assert written in json.load(f)["files"], f"{folder}: {written} is not in the manifest"
        shutil.move(os.path.join(folder, written), name)
    shutil.rmtree(runs_dir)


def profile(runs_dir, mode, script, *options):
    """Starts `tensor-dap profile --mode MODE SCRIPT`, into a folder of its own."""
    return start(tempfile.mkdtemp(prefix=mode + "-", dir=runs_dir), mode, script, *options)


def incident():
    import torch
    import tensor_dap
    from torch import nn

    class Boom(nn.Module):
        def forward(self, x):
            return x / torch.zeros_like(x) * 0  # 0/0: NaN

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Boom(), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        return loss

    with tensor_dap.watch(model, opt, on="log") as w:
        w.step(step, torch.randn(3, 4))


if __name__ == "__main__":
    main()
