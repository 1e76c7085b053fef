"""Fills a fresh copy of the e2e workspace with real profiler output about its own train.py.

    python prepare_workspace.py WORKSPACE

- train.prof (cProfile), train.lprof (line_profiler on train_step and main), paths pointing at
  WORKSPACE/train.py so the line decorations land on the open file
- hostile.prof: a function named with an HTML script tag, in a file named with an img tag
- traces/train.pt.trace.json (torch.profiler)
- .tensor_dap/incidents/<time>-step0/: a real bundle written by tensor_dap.watch
- memory.json: an example in the format `tensor-dap profile --mode memory` writes (that
  command is not merged yet, so the test writes the file itself)
"""
import cProfile
import json
import os
import runpy
import sys

WS = os.path.abspath(sys.argv[1])
TRAIN = os.path.join(WS, "train.py")


def main():
    os.chdir(WS)
    sys.path.insert(0, WS)
    cProfile.run("runpy.run_path(TRAIN, run_name='__main__')", "train.prof")
    import train
    import line_profiler

    lp = line_profiler.LineProfiler(train.train_step, train.main)
    lp.runcall(train.main)
    lp.dump_stats("train.lprof")

    ns = {}
    exec(compile("def f():\n    return 1\n", os.path.join(WS, "<img src=x onerror=alert(1)>.py"), "exec"), ns)
    fn = ns["f"]
    fn.__code__ = fn.__code__.replace(co_name="<script>alert('x')</script>")
    cProfile.runctx("for _ in range(3): fn()", {"fn": fn}, {}, "hostile.prof")

    import torch
    from torch.profiler import ProfilerActivity, profile

    os.makedirs("traces", exist_ok=True)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        train.main(steps=5)
    prof.export_chrome_trace(os.path.join("traces", "train.pt.trace.json"))

    incident(torch)
    with open("memory.json", "w") as f:
        json.dump({"version": 1, "kind": "tensor_dap.memory", "program": TRAIN, "peak_rss_bytes": 812_000_000,
                   "measure": "live Python bytes at the largest snapshot",
                   "sites": [{"file": TRAIN, "line": 7, "function": "make_model", "size_bytes": 3_604, "count": 4},
                             {"file": TRAIN, "line": 25, "function": "main", "size_bytes": 512, "count": 20}]}, f, indent=1)


def incident(torch):
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
