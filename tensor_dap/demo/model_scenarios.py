"""The planted model bugs: a NaN born in a middle layer, an Inf written into a buffer, a mixed-device model, a
DataParallel checkpoint, and a data loader too slow for the model."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .scenario import Context, Outcome
from .train import BUG_STEP, DemoNet, train

NAN_MODULE, NAN_OP = "encoder.2", "div"


def nan(ctx: Context) -> Outcome:
    """The demo's training loop, unchanged, inside ``watch``: the NaN's step, module, op and line are named."""
    import torch

    from ..errors import NonFiniteError
    from ..triggers.report import to_rich
    from ..triggers.watch import watch

    model = DemoNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    report = None
    try:
        with watch(model, optimizer, on="raise", capture=str(ctx.incidents)):
            train(model, optimizer, steps=BUG_STEP + 3)
    except NonFiniteError as exc:
        report = exc.report
    if report is None:
        return Outcome(False, ["watch saw no NaN"])
    source = report.source or {}
    caught = (report.step == BUG_STEP and report.module == NAN_MODULE and report.op == NAN_OP
              and str(source.get("file", "")).endswith("train.py") and "/ std" in str(source.get("text", "")))
    where = f"{report.op} in the {report.where}, step {report.step}"
    evidence = [f"NaN born in {where}", f"at train.py:{source.get('line')}  {source.get('text', '')}"]
    artifacts = []
    if report.bundle:
        artifacts.append(("incident bundle (the failing step, replayable)", Path(report.bundle),
                          f"tensor-dap replay {report.bundle}   ·   VS Code: the tensor_dap Incidents view, "
                          "Replay in Debugger"))
    return Outcome(caught, evidence, [to_rich(report)], artifacts)


EMA_MODULE = "codes"


def ema_buffer(ctx: Context) -> Outcome:
    """A vector-quantizing layer whose codes follow a moving average of what is assigned to them, with no smoothing
    of the counts: a code nothing was assigned to divides by 0, and the Inf lands in a buffer while the step's loss
    and gradients stay finite (the next step's NaN would seem born in the head). ``watch`` stops the step that wrote
    it, naming the division, its line and the buffer."""
    import torch
    import torch.nn.functional as F

    from ..errors import NonFiniteError
    from ..triggers.report import to_rich
    from ..triggers.watch import watch

    class Codebook(torch.nn.Module):
        def __init__(self, dim: int, size: int) -> None:
            super().__init__()
            embed = torch.randn(dim, size, generator=torch.Generator().manual_seed(3))
            self.register_buffer("embed", embed)
            self.register_buffer("count", torch.zeros(size))
            self.register_buffer("total", embed.clone())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            nearest = F.one_hot(torch.cdist(x, self.embed.t()).argmin(1), self.embed.shape[1]).to(x.dtype)
            quantized = nearest @ self.embed.t()
            if self.training:
                with torch.no_grad():
                    self.count.mul_(0.9).add_(nearest.sum(0), alpha=0.1)
                    self.total.mul_(0.9).add_(x.t() @ nearest, alpha=0.1)
                    self.embed.copy_(self.total / self.count)  # a code never chosen: a count of 0
            return x + (quantized - x).detach()

    class Quantized(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.codes, self.head = torch.nn.Linear(16, 8), Codebook(8, 32), torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.codes(self.encoder(x)))

    torch.manual_seed(0)
    model = Quantized()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(4)
    report = None
    try:
        with watch(model, optimizer, on="raise", capture=False):  # (the nan scenario writes the tour's bundle)
            for _ in range(3):
                x, y = torch.randn(16, 16, generator=gen), torch.randint(0, 4, (16,), generator=gen)
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
    except NonFiniteError as exc:
        report = exc.report
    if report is None:
        return Outcome(False, ["watch saw no Inf"])
    source, note = report.source or {}, report.notes[0] if report.notes else ""
    buffer = f"{EMA_MODULE}.embed"
    caught = report.module == EMA_MODULE and report.op == "div" and f"buffer '{buffer}'" in note and \
        report.loss is not None and abs(report.loss) < float("inf")
    evidence = [f"Inf born in {report.op} in the {report.where}, step {report.step}, written into the buffer {buffer} "
                f"(the loss still {report.loss:.4g})" if report.loss is not None else report.headline,
                f"at model_scenarios.py:{source.get('line')}  {source.get('text', '')}"]
    return Outcome(caught, evidence, [to_rich(report)])


def devices(ctx: Context) -> Outcome:
    """The head was left behind on another device (``meta`` stands in for a GPU when there is none)."""
    import torch

    from ..checks import check_devices
    from ..checks.render import render

    other = "cuda" if torch.cuda.is_available() else "meta"
    model = DemoNet()
    model.head.to(other)
    result = check_devices(model, torch.randn(4, 16))
    caught = result.subjects == ("head",)
    return Outcome(caught, [result.summary, *(f"{f.subject}: {f.message}" for f in result.of_level("problem"))],
                   [render(result)])


def checkpoint(ctx: Context) -> Outcome:
    """A checkpoint saved from ``nn.DataParallel(model)``: every key carries ``module.``."""
    import torch

    from ..checks import compare_state_dict
    from ..checks.render import render

    path = ctx.folder / "checkpoint_dataparallel.pt"
    torch.save(torch.nn.DataParallel(DemoNet()).state_dict(), path)
    result = compare_state_dict(DemoNet(), str(path))
    caught = "module." in result.subjects and result.verdict == "problem"
    return Outcome(caught, [result.summary, *(f.message for f in result.of_level("problem"))][:2], [render(result)],
                   [("checkpoint saved from DataParallel", path, f"tensor-dap inspect {path}")])


class _SlowDataset:
    """Each sample costs a few milliseconds to 'decode': the model waits for the loader."""

    def __init__(self, n: int, seconds: float) -> None:
        import torch

        g = torch.Generator().manual_seed(5)
        self.x = torch.randn(n, 16, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.seconds = seconds

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        time.sleep(self.seconds)
        return self.x[i], self.y[i]


def slow_loader(ctx: Context) -> Outcome:
    """``StepProfiler`` splits each step into data, forward, backward and optimizer, and says what to change."""
    import torch

    from ..profiling.step_profiler import StepProfiler

    model = DemoNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # 80 ms a batch: on a loaded 2-core machine the tiny model's step took 86 ms (2 ms idle), and 32 ms of loading
    # was then 27 % of the step, under the 30 % that calls it slow
    loader = torch.utils.data.DataLoader(_SlowDataset(16 * 7, 0.005), batch_size=16)
    profiler = StepProfiler(model, optimizer)
    loss_fn = torch.nn.CrossEntropyLoss()
    try:
        for x, y in profiler.loader(loader):
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
    finally:
        profiler.remove()
    share = profiler.breakdown().fraction("data")
    advice = profiler.advice()
    caught = bool(advice) and any("num_workers" in tip for tip in advice)
    return Outcome(caught, [f"data loading: {share:.0%} of each step", *advice[:1]], [profiler.table()])
