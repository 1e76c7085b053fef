"""Calls tensor_dap.set_trace() under a DAP client: the stop must land here, in step(), not in tensor_dap."""
import torch

import tensor_dap


def step():
    x = torch.ones(3)
    tensor_dap.set_trace(header="trigger: loss is NaN")  # STOP-CALL
    y = x + 1  # STOP-NEXT
    print("done", y.sum().item(), flush=True)


if __name__ == "__main__":
    step()
