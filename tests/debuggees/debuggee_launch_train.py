"""A plain training loop nobody changed for tensor_dap, for ``tensor-dap run`` tests.

``python debuggee_launch_train.py MODE [--steps N] [--bug-step K]``: ``clean`` trains normally; ``nan`` feeds a
NaN batch at step 3 (or K); ``loss`` multiplies the targets by 1000 at step 3 (the loss jumps);
``manual`` updates parameters by hand (no torch.optim) and gets a NaN batch at step 3;
``scaled`` runs the loss through a GradScaler (scale 1024) and jumps at 3; ``accum`` accumulates 4 micro-batches
(each loss divided by 4, as nanoGPT does) and jumps at 3.
Prints ``STEP i loss`` per step and ``TRAINING-DONE`` at the end.
"""

import argparse
import sys

import torch
from torch import nn


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["clean", "nan", "loss", "manual", "scaled", "accum"])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--bug-step", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01) if args.mode != "manual" else None
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0) if args.mode == "scaled" else None
    for step in range(args.steps):
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        if step == args.bug_step and args.mode in ("nan", "manual"):
            x[0, 0] = float("nan")
        if step == 3 and args.mode in ("loss", "scaled", "accum"):
            y = y * 1000
        if optimizer is not None:
            optimizer.zero_grad()
        if args.mode == "accum":
            loss = sum(accumulate(model, xs, ys, 4) for xs, ys in zip(x.chunk(4), y.chunk(4)))
            optimizer.step()
            print(f"STEP {step} {loss:.4g}", flush=True)
            continue
        loss = nn.functional.mse_loss(model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            if optimizer is not None:
                optimizer.step()
            else:
                with torch.no_grad():
                    for p in model.parameters():
                        p -= 0.01 * p.grad
                        p.grad = None
        print(f"STEP {step} {loss.item():.4g}", flush=True)
    print("TRAINING-DONE", flush=True)
    return 0


def accumulate(model, x, y, micro_batches):
    """One micro-batch: its loss divided by their count, backpropagated; the value it adds to the step's loss."""
    loss = nn.functional.mse_loss(model(x), y) / micro_batches
    loss.backward()
    return loss.item()


if __name__ == "__main__":
    sys.exit(main())
