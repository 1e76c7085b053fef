"""Training-loop overhead of tensor_dap.Monitor: monitor.log every step, histograms every 100 steps.

Run: .venv/bin/python benchmarks/bench_monitor.py [--quick]
The MLP 784-256-256-10 (batch 64, Adam, CPU) trains one shared model; each block of steps
with a Monitor logging every step (every=100: per-layer norms, update ratios, dead ReLUs and
weight/gradient histograms on every 100th step) is timed right next to a plain block,
alternating which goes first, and the median of the pair ratios is printed (so the
machine's drift hits both sides alike). Also timed: the naive way (a SummaryWriter
add_scalar of loss.item() and of each parameter's grad norm .item() every step).
Target: Monitor costs under 5% of step time (≥ 0.95× plain).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.tensorboard import SummaryWriter

import tensor_dap
from _paired import heap_note, paired_ratios, spread, steady_heap  # noqa: E402 - the benchmarks' shared timing, beside this script

TARGET = 0.95


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--steps", type=int, default=200, help="steps per block (a multiple of 100 keeps histograms even)")
    args = ap.parse_args()
    steady_heap()  # (may run this script again: the event files' folder is made after it)
    with tempfile.TemporaryDirectory(prefix="bench_monitor_") as logdir:  # not left behind
        measure(args, logdir)


def measure(args: argparse.Namespace, logdir: str) -> None:
    rounds = args.rounds or (2 if args.quick else 12)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(64, 784, generator=gen), torch.randint(0, 10, (64,), generator=gen)) for _ in range(16)]
    step_no = [0]

    def step(i: int) -> torch.Tensor:
        x, y = data[i % len(data)]
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    def plain(n: int) -> None:
        for i in range(n):
            step(i)

    monitor = tensor_dap.Monitor(f"{logdir}/monitor", model=model, optimizer=opt, every=100)  # lives the whole run

    def monitored(n: int) -> None:
        for i in range(n):
            step_no[0] += 1
            monitor.log(step_no[0], loss=step(i))

    writer = SummaryWriter(f"{logdir}/naive")

    def naive(n: int) -> None:
        for i in range(n):
            step_no[0] += 1
            loss = step(i)
            writer.add_scalar("loss", loss.item(), step_no[0])
            for name, p in model.named_parameters():
                writer.add_scalar(f"grad_norm/{name}", p.grad.norm().item(), step_no[0])

    rates, ratios = paired_ratios({"plain": plain, "monitor": monitored, "naive add_scalar": naive}, rounds,
                                  args.steps, warmup=20)
    monitor.close()
    writer.close()
    step_us = 1e6 / statistics.median(rates["plain"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; MLP 784-256-256-10, batch 64, Adam, CPU; "
          f"plain step {step_us:.0f} µs; {heap_note()}")
    print(f"{rounds} rounds × {args.steps} steps per block (medians of adjacent-pair ratios, speed × plain)")
    for name, values in ratios.items():
        ratio, q1, q3 = spread(values)
        verdict = f"≥{TARGET:.2f} {'PASS' if ratio >= TARGET else 'FAIL'}" if name == "monitor" else ""
        print(f"  {name:<18}{ratio:>8.3f}  middle half {q1:.3f}–{q3:.3f}  {verdict}")


if __name__ == "__main__":
    main()
