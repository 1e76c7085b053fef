"""One rank of a 2-process gloo job with DistributedDataParallel; rank 1 gets an Inf in its batch.

Each rank writes what happened to ``<out>/rank<R>.json``. With ``mode="break"`` nobody can
attach a debugger or a terminal to a spawned child here, so the terminal check and
``stop_in_debugger`` are stubbed (the one part that cannot run in this test; the real stops
are tested in test_triggers_debuggers.py); who was *allowed* to stop is the real decision
under test.
"""

from __future__ import annotations

import datetime
import gc
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import planted


def worker(rank: int, world: int, init_file: str, out: str, mode: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    try:
        result = inplace(rank) if mode == "inplace" else train(rank, mode)
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        gc.collect()  # the DDP model and its reducer go before their process group does
        dist.barrier()  # no rank tears down while another still talks to it
    finally:
        dist.destroy_process_group()


def inplace(rank: int) -> dict:
    """Both ranks' models change sigmoid's output in place (an nn.ReLU(inplace=True)) at step 2: each rank's
    backward() fails, and its note comes from a re-run of the forward that must not talk to the other rank."""
    import tensor_dap

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Sigmoid(),
                              torch.nn.ReLU(inplace=True), torch.nn.Linear(8, 1))
    ddp = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    result = {"rank": rank, "note": None, "steps": 0}
    try:
        with tensor_dap.watch(ddp, optimizer, on="raise", capture=False):
            for step in range(4):
                net[3].inplace = step == 2
                loss = ddp(torch.randn(6, 4)).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                result["steps"] = step + 1
    except RuntimeError as exc:
        result["note"] = " ".join(getattr(exc, "__notes__", []))
    return result


def train(rank: int, mode: str) -> dict:
    import tensor_dap
    from tensor_dap import NonFiniteError
    from tensor_dap.dap import attached
    from tensor_dap.triggers import stop as _trigger_stop

    stops = []
    if mode == "break":  # pretend a terminal is there, and record the stop instead of prompting
        attached.interactive_terminal = lambda: True
        _trigger_stop.stop_in_debugger = lambda report, **culprit: stops.append(report.step)
    model, _, batch, _ = planted.build("inf_input")
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)

    def train_step(x, y):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimizer.step()
        return loss

    result = {"rank": rank, "error": None, "stops": stops, "steps": 0}
    try:
        with tensor_dap.watch(ddp, optimizer, on=mode, capture=False) as w:
            for step in range(8):
                x, y = batch(step if rank == 1 else 0)  # only rank 1 sees the planted Inf
                w.step(train_step, x, y)
                result["steps"] = step + 1
        result["reports"] = [r.to_dict() for r in w.reports]
    except NonFiniteError as exc:
        result["error"] = exc.report.to_dict()
    return result
