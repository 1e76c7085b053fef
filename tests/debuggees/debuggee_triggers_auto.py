"""A training run with a planted bug and triggers on ``on="auto"``, for the debugger tests.

``python debuggee_triggers_auto.py BUG`` uses ``watch``; ``... break_if`` uses ``break_if``
on a loss that jumps above a threshold at step 4. It prints TRAINING-DONE when the loop
finishes (after the user continues from the stop).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "harness"))

import torch
from planted import build

import tensor_dap


def main(bug):
    if bug == "break_if":
        for step in range(8):
            loss = torch.tensor(0.5 if step != 4 else 50.0)
            tensor_dap.break_if(loss, above=10.0, step=step)
    else:
        model, optimizer, batch, train_step = build(bug)
        with tensor_dap.watch(model, optimizer, capture=False) as w:
            for step in range(8):
                w.step(train_step, *batch(step))
    print("TRAINING-DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
