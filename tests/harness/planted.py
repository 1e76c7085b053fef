"""Training runs with real, planted bugs; shared by the trigger tests and runnable as a script.

``python planted.py BUG [--on MODE] [--steps N] [--every E] [--incidents DIR]`` trains until
the bug fires. Each bug is planted at step ``BUG_STEP`` (the exploding learning rate starts
there and needs a few steps to overflow). Run as a script, a caught NonFiniteError prints
``REPORT-JSON: {...}`` on stdout and exits 3.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch import nn

BUG_STEP = 5
BUGS = ("log_zero", "exploding_lr", "zero_variance", "inf_input", "backward_nan")


class LogSoftplus(nn.Module):
    """log(softplus(x)): softplus underflows to exactly 0 for x < -103, and log(0) = -inf."""

    def forward(self, x):
        return torch.log(F.softplus(x))


class Standardize(nn.Module):
    """Per-batch standardization without an epsilon: a zero-variance feature divides 0 by 0."""

    def forward(self, x):
        return (x - x.mean(0)) / x.std(0)


class RowNormalize(nn.Module):
    """x / |x| with a hand-written norm: finite forward on a zero row, NaN in its backward (sqrt'(0))."""

    def forward(self, x):
        return x / (torch.sqrt((x * x).sum(-1, keepdim=True)) + 1e-6)


class Block(nn.Module):
    def __init__(self, d, act):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.act = act

    def forward(self, x):
        return self.act(self.fc(x))


class Net(nn.Module):
    """inp → pre → encoder.layers.{0,1,2} → drop → head: dotted paths like encoder.layers.1.act."""

    def __init__(self, pre=None, middle=None, d=16, bias=True):
        super().__init__()
        self.inp = nn.Linear(8, d, bias=bias)
        self.pre = pre if pre is not None else nn.Identity()
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(
            [Block(d, nn.ReLU()), Block(d, middle if middle is not None else nn.Tanh()), Block(d, nn.ReLU())])
        self.drop = nn.Dropout(0.1)  # draws from the RNG: re-runs must replay the same masks
        self.head = nn.Linear(d, 4)

    def forward(self, x):
        h = self.pre(self.inp(x))
        for layer in self.encoder.layers:
            h = layer(h)
        return self.head(self.drop(h))


class ZScoreNet(Net):
    """Standardizes its input batch first (module ``norm``)."""

    def __init__(self):
        super().__init__()
        self.norm = Standardize()

    def forward(self, x):
        return super().forward(self.norm(x))


def build(bug: str, seed: int = 0):
    """(model, optimizer, batch(step) -> (x, y), train_step(x, y) -> loss) for one planted bug."""
    torch.manual_seed(seed)
    if bug == "log_zero":
        model = Net(middle=LogSoftplus())
    elif bug == "zero_variance":
        model = ZScoreNet()
    elif bug == "backward_nan":
        model = Net(pre=RowNormalize(), bias=False)
    elif bug in ("exploding_lr", "inf_input"):
        model = Net()
    else:
        raise SystemExit(f"unknown bug {bug!r}; choose from {', '.join(BUGS)}")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(seed + 1)
    data = [(torch.randn(32, 8, generator=gen), torch.randn(32, 4, generator=gen)) for _ in range(40)]

    def batch(step):
        x, y = data[step % len(data)]
        x, y = x.clone(), y.clone()
        if step == BUG_STEP:
            if bug == "log_zero":
                x = x * 1e4  # huge pre-activations in the middle layer: softplus underflows to 0
            elif bug == "zero_variance":
                x[:, 2] = 1.5  # a constant feature: its batch std is 0
            elif bug == "inf_input":
                x[3, 1] = float("inf")
            elif bug == "backward_nan":
                x[7] = 0.0  # a zero row reaches RowNormalize (no bias before it)
        if bug == "exploding_lr" and step >= BUG_STEP:
            for group in optimizer.param_groups:  # a scheduler bug: x100 every step
                group["lr"] *= 100.0
        return x, y

    def train_step(x, y):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return model, optimizer, batch, train_step


def train(bug: str, steps: int = 12, **watch_kwargs):
    """Train with ``tensor_dap.watch`` and ``w.step``; returns (watch handle, the NonFiniteError raised or None)."""
    import tensor_dap

    model, optimizer, batch, step_fn = build(bug)
    watch_kwargs.setdefault("capture", False)
    w = tensor_dap.watch(model, optimizer, **watch_kwargs)
    try:
        with w:
            for step in range(steps):
                w.step(step_fn, *batch(step))
    except tensor_dap.NonFiniteError as exc:
        return w, exc
    return w, None


def main(argv=None) -> int:
    import tensor_dap
    from tensor_dap import NonFiniteError

    ap = argparse.ArgumentParser()
    ap.add_argument("bug", choices=BUGS)
    ap.add_argument("--on", default="auto")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--incidents", default=None)
    args = ap.parse_args(argv)
    model, optimizer, batch, train_step = build(args.bug)
    capture = args.incidents if args.incidents else False
    try:
        with tensor_dap.watch(model, optimizer, on=args.on, every=args.every, capture=capture) as w:
            for step in range(args.steps):
                w.step(train_step, *batch(step))
    except NonFiniteError as exc:
        print("REPORT-JSON: " + json.dumps(exc.report.to_dict()), flush=True)
        return 3
    print(f"finished {args.steps} steps; reports: {len(w.reports)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
