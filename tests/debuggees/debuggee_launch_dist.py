"""A torchrun job (gloo, CPU) for ``tensor-dap run`` tests: one optimizer step per iteration, with an all_reduce.

``clean``: every rank does STEPS steps and exits. ``hang``: at step 2 rank 1 sleeps SLEEP
seconds (the "stuck" rank) while rank 0 waits in the all_reduce; then both finish.
Each rank prints ``RANK r DONE``.
"""

import os
import sys
import time

import torch
import torch.distributed as dist

STEPS = 4


def main() -> int:
    mode = sys.argv[1]
    sleep = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    for step in range(STEPS):
        opt.zero_grad()
        (w * w).sum().backward()
        if mode == "hang" and step == 2 and rank == 1:
            time.sleep(sleep)  # the stuck rank
        dist.all_reduce(w.grad)  # the other rank waits here
        opt.step()
    print(f"RANK {rank} DONE pid={os.getpid()}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
