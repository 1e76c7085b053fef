"""The files a user opens after the tour: a TensorBoard run, a cProfile ``.prof`` and a line_profiler ``.lprof``.

They come from the same tools a user runs (``tensor_dap.Monitor``, ``tensor-dap profile``), on the
demo's training script with the bug left out.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from .scenario import Context, Outcome
from .train import DemoNet, train

TRAIN_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")


def monitor(ctx: Context) -> Outcome:
    """A healthy run logged to TensorBoard: losses, learning rate, gradient norms, histograms."""
    import torch

    from ..profiling.monitor import Monitor

    logdir = ctx.folder / "runs" / "demo"
    model = DemoNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Monitor(str(logdir), model=model, optimizer=optimizer, every=20) as mon:
        train(model, optimizer, steps=60, bug=False, log=lambda step, loss: mon.log(step, loss=loss))
    events = sorted(logdir.glob("events.out.tfevents.*"))
    caught = bool(events) and events[0].stat().st_size > 0
    said = [f.message for f in mon.findings] or ["no warnings from the curves (a healthy run)"]
    return Outcome(caught, [f"TensorBoard run in {logdir}", *said[:1]],
                   artifacts=[("TensorBoard run", logdir, f"tensor-dap tensorboard {logdir.parent}")])


def profiles(ctx: Context) -> Outcome:
    """``tensor-dap profile --mode cpu`` and ``--mode line --function train`` on the demo script, in this process."""
    from .. import runner
    from ..profiling.recorder import Options
    from ..profiling.session import prepare, profile_program

    target = runner.script_target(TRAIN_SCRIPT)
    found: dict[str, Path] = {}
    notes = []
    runs = (("cpu", Options(), "cprofile.prof"), ("line", Options(functions=["train"]), "line.lprof"))
    for mode, options, name in runs:
        recorder = prepare(mode, target, options, str(ctx.folder / "profiles"))
        with contextlib.redirect_stdout(io.StringIO()):  # the script's own "trained N steps" line
            result = profile_program(recorder, ["--clean", "--steps", "30"])
        if result.exit_code == 0 and name in result.files:
            found[mode] = result.folder / name
        notes += result.notes
    caught = set(found) == {"cpu", "line"}
    artifacts = []
    if "cpu" in found:
        artifacts.append(("cProfile profile", found["cpu"], f"python -m pstats {found['cpu']}   ·   VS Code: open it"))
    if "line" in found:
        artifacts.append(("line profile of train()", found["line"], f"python -m line_profiler {found['line']}   ·   "
                          "VS Code: open it, the times show in train.py"))
    return Outcome(caught, [f"{len(found)} of 2 profiles written", *notes[:1]], artifacts=artifacts)
