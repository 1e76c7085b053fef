"""The narrated tour: each planted bug, the tool that catches it, what it said; then how to open every file.

Nothing here is canned: every line of evidence comes from the tool's own result, and the exit
code is 0 only when every planted bug was caught.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..folders import DEMO
from ..format import short_error
from . import artifacts, crash_scenarios, data_scenarios, model_scenarios, silent_scenarios
from .artifacts import TRAIN_SCRIPT
from .scenario import Context, Outcome, Scenario
from .train import BUG_STEP

SCENARIOS = (
    Scenario("tensors", "NaN/Inf hidden in a logits tensor among 15 kinds of tensor",
             "tensor_dap.describe (one line per tensor)", data_scenarios.tensors),
    Scenario("nan", f"a NaN born in the middle layer encoder.2 at step {BUG_STEP} (0/0 in a hand-written norm)",
             "tensor_dap.watch on the unchanged training loop", model_scenarios.nan),
    Scenario("ema-buffer", "an EMA codebook divided by a code's zero count: Inf in a buffer, the loss still finite",
             "tensor_dap.watch, at the step that wrote it", model_scenarios.ema_buffer),
    Scenario("label-leak", f"column {data_scenarios.LEAKED_COLUMN} of the features is the label in disguise",
             "tensor_dap.check_label_leakage", data_scenarios.label_leak),
    Scenario("overlap", f"{data_scenarios.OVERLAP_ROWS} test rows copied from the training split",
             "tensor_dap.check_leakage", data_scenarios.overlap),
    Scenario("devices", "the model's head left on another device", "tensor_dap.check_devices",
             model_scenarios.devices),
    Scenario("slow-loader", "a Dataset too slow for the model (num_workers=0)", "tensor_dap.StepProfiler",
             model_scenarios.slow_loader),
    Scenario("checkpoint", "a checkpoint saved from nn.DataParallel (module. prefix)", "tensor_dap.compare_state_dict",
             model_scenarios.checkpoint),
    Scenario("stale-optimizer", "a new head put on the model after the optimizer was made (the loss still falls)",
             "tensor_dap.watch, at the end of the run", silent_scenarios.stale_optimizer),
    Scenario("eval-mode", "training goes on in eval mode after a validation (dropout off; the loss still falls)",
             "tensor_dap.watch, at the first such update", silent_scenarios.eval_mode),
    Scenario("layer-in-forward", "a head built inside forward: new random weights at every call",
             "tensor_dap.watch, at the second step", silent_scenarios.layer_in_forward),
    Scenario("inplace", "nn.ReLU(inplace=True) after a sigmoid: backward() fails naming only a node and a shape",
             "tensor_dap.watch, in a note under the error", silent_scenarios.inplace),
    Scenario("running-total", "`total_loss += loss` keeps every step's graph: memory grows, every loss prints right",
             "tensor_dap.watch, at the 128th update", silent_scenarios.running_total),
    Scenario("lr-schedule", "StepLR(step_size=1) stepped after every batch: the rate decays to nothing, no error",
             "tensor_dap.watch, at the 128th update", silent_scenarios.lr_schedule),
    Scenario("stalled", "Adam at lr=1.0: the loss reads exactly 0 while no gradient moves the weights any more",
             "tensor_dap.watch, at the 128th update", silent_scenarios.stalled),
    Scenario("bce-on-logits", "nn.BCELoss handed the head's raw scores: torch names no tensor",
             "tensor-dap run's crash report", crash_scenarios.bce_on_logits),
    Scenario("monitor", "the training curves of a healthy run, for TensorBoard", "tensor_dap.Monitor",
             artifacts.monitor, planted=False),
    Scenario("profile", "where the time goes, per function and per line",
             "tensor-dap profile --mode cpu / --mode line", artifacts.profiles, planted=False),
)
BY_NAME = {s.name: s for s in SCENARIOS}


def choose(names: Sequence[str]) -> list[Scenario]:
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise UsageError(f"no demo scenario named {', '.join(map(repr, unknown))} "
                         f"(choose from: {', '.join(BY_NAME)}; see 'tensor-dap demo --list')")
    return [BY_NAME[n] for n in names] if names else list(SCENARIOS)


def listing() -> Any:
    from rich.table import Table

    table = Table(title="tensor-dap demo scenarios", title_justify="left", box=None, pad_edge=False)
    for column in ("name", "planted", "caught by"):
        table.add_column(column, style="bold" if column == "name" else None)
    for s in SCENARIOS:
        table.add_row(s.name, s.bug, s.tool)
    return table


def run(chosen: Sequence[Scenario], root: Path, console: Any) -> int:
    """Run ``chosen`` in order, narrating; the exit code is 0 only if every planted bug was caught."""
    from rich.text import Text

    folder = root / DEMO / time.strftime("%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    ctx = Context(root, folder)
    results: list[tuple[Scenario, Outcome, float]] = []
    for i, scenario in enumerate(chosen, 1):
        console.print(Text(f"\n{i}. {scenario.name}: {scenario.bug}", style="bold"))
        console.print(Text(f"   {'caught by' if scenario.planted else 'written by'} {scenario.tool}", style="dim"))
        start = time.perf_counter()
        try:
            outcome = scenario.run(ctx)
        except Exception as exc:  # noqa: BLE001 - one broken scenario is reported, the tour goes on
            outcome = Outcome(False, [f"the scenario failed: {short_error(exc)}"])
        took = time.perf_counter() - start
        for shown in outcome.shown:
            console.print(shown, crop=False)  # a tool's lines stay whole, as it prints them
        done, missed = ("✓ caught", "✗ missed") if scenario.planted else ("✓ written", "✗ not written")
        mark, style = (done, "green") if outcome.caught else (missed, "bold red")
        console.print(Text(f"   {mark} ({took:.1f} s): ", style=style) + Text(" · ".join(outcome.evidence)))
        results.append((scenario, outcome, took))
    console.print(summary(results))
    console.print(next_steps(results))
    return 0 if all(outcome.caught for _, outcome, _ in results) else 1


def summary(results: list[tuple[Scenario, Outcome, float]]) -> Any:
    from rich.table import Table
    from rich.text import Text

    bugs = [o for s, o, _ in results if s.planted]
    files = [o for s, o, _ in results if not s.planted]
    title = f"\n{sum(o.caught for o in bugs)} of {len(bugs)} planted bugs caught"
    if files:
        title += f", {sum(o.caught for o in files)} of {len(files)} files written"
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for column in ("scenario", "", "found", "time"):
        table.add_column(column, style="bold" if column == "scenario" else None, no_wrap=column != "found")
    for scenario, outcome, took in results:
        table.add_row(scenario.name, Text("✓", style="green") if outcome.caught else Text("✗", style="bold red"),
                      Text(outcome.evidence[0] if outcome.evidence else ""), f"{took:.1f} s")
    return table


def next_steps(results: list[tuple[Scenario, Outcome, float]]) -> Any:
    """Every file the tour wrote, with the command or VS Code step that opens it."""
    from rich.console import Group
    from rich.text import Text

    lines: list[Any] = [Text("\nopen what it found", style="bold")]
    for _, outcome, _ in results:
        for what, path, how in outcome.artifacts:
            lines.append(Text(f"  {what}: {path}"))
            lines.append(Text(f"      {how}", style="dim"))
    lines += [Text("\nstep into the NaN yourself", style="bold"),
              Text(f"  terminal:  tensor-dap run --guard {TRAIN_SCRIPT}"),
              Text("  VS Code:   open that file, Run and Debug → \"Debug Training (tensor_dap)\" (F5): it stops on "
                   f"the division in encoder.2 at step {BUG_STEP}, with the culprit's tensors in Variables"),
              Text("  the extension (make vsix) opens the .prof, .lprof and incident files above where the code is")]
    return Group(*lines)
