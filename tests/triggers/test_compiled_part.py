"""A part of the model compiled on its own (timm's ``--torchcompile`` compiles the model inside its task module; a
user compiles one block): the re-run that localizes a NaN runs it eagerly, so the op is named as written
(``SqrtBackward0`` and its line), not as ``CompiledFunctionBackward``; after it the part runs compiled again. The same
for TorchScript: a scripted part (its optimizing executor makes one ``DifferentiableGraphBackward`` of it) takes no
module hooks, and a model scripted whole must not break the program watch is put on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import tensor_dap
from tensor_dap import NonFiniteError

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.timeout(300)]  # dynamo's imports


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return torch.where(h > 0, torch.sqrt(h), 0.0)  # NaN in backward where h < 0


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # aot_eager: AOTAutograd makes one backward node of the compiled forward, as inductor does, with no C++ build
        self.block = torch.compile(_Block(), backend="aot_eager")
        self.head = nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    return loss


@pytest.mark.parametrize("mode", ["unchanged loop", "w.step"])
def test_a_compiled_part_is_re_run_eagerly_and_its_op_named(mode):
    import torch._dynamo.eval_frame as eval_frame

    torch.manual_seed(0)
    model = _Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for _ in range(3):
            x = torch.randn(8, 6, generator=gen)
            w.step(_train, model, optimizer, x) if mode == "w.step" else _train(model, optimizer, x)
    report = info.value.report
    assert (report.step, report.phase, report.op) == (0, "backward", "SqrtBackward0"), report
    assert report.module.startswith("block") and "torch.sqrt(h)" in report.source["text"]
    assert eval_frame._stance.stance == "default"  # the stance is put back: the part runs compiled again


class _ScriptedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = torch.jit.script(_Block())
        self.head = nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))  # SCRIPTED-CALL


class _PlainNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block, self.head = _Block(), nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def _steps(model: nn.Module, n: int = 4) -> NonFiniteError | None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    try:
        with tensor_dap.watch(model, optimizer, on="raise", capture=False):
            for _ in range(n):
                _train(model, optimizer, torch.randn(8, 6, generator=gen))
    except NonFiniteError as exc:
        return exc
    return None


def test_a_scripted_part_is_re_run_op_by_op_and_named_by_the_module_calling_it():
    torch.manual_seed(0)
    model = _ScriptedNet()
    with torch.no_grad():  # the profiling executor optimizes a scripted forward after its first calls
        for _ in range(3):
            model(torch.randn(8, 6))
    report = _steps(model).report
    assert (report.step, report.phase, report.op) == (0, "backward", "SqrtBackward0"), report
    assert report.module == "" and "# SCRIPTED-CALL" in report.source["text"]  # no Python line inside TorchScript
    assert not any("re-running the step failed" in note for note in report.notes), report.notes


def test_a_model_scripted_whole_is_watched_without_breaking_the_program():
    """``type(model).forward`` of a RecursiveScriptModule raises AttributeError (its forward is a per-instance
    descriptor): ``watch`` raised it into the program. Now it watches, and the re-run sees the scripted model's calls
    through torch's global module hooks (it takes no hooks of its own): the op, as the model's own."""
    torch.manual_seed(0)
    model = torch.jit.script(_PlainNet())
    report = _steps(model).report
    assert (report.step, report.phase, report.module, report.op) == (0, "backward", "", "SqrtBackward0"), report
    assert report.module_type == "_PlainNet"  # the user's class, not torch's RecursiveScriptModule
    assert report.source["file"] == __file__  # the line that called the model


SCRIPTED_RUN = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        h = self.fc(x)
        return torch.where(h > 0, torch.sqrt(h), torch.zeros_like(h))


torch.manual_seed(0)
model = torch.jit.script(nn.Sequential(Block(), nn.Linear(6, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 6)).pow(2).mean().backward()
    optimizer.step()
"""


def test_run_guard_attaches_to_a_scripted_model_from_inside_its_forward(tmp_path):
    """``tensor-dap run --guard`` attaches the watch from inside the model's first call, and hooks its output:
    TorchScript refused ("register_forward_hook is not supported on ScriptModules"), which stopped the program."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPTED_RUN)
    env = {**os.environ, "NO_COLOR": "1"}
    run = subprocess.run([sys.executable, "-m", "tensor_dap", "run", "--guard", str(script)], capture_output=True,
                         text=True, env=env, stdin=subprocess.DEVNULL, timeout=200, cwd=tmp_path)
    assert "not supported on ScriptModules" not in run.stderr, run.stderr[-3000:]
    assert "NonFiniteError: tensor_dap trigger · step 0" in run.stderr, run.stderr[-3000:]
    assert "the watch began inside this step's call of a TorchScript module" in run.stderr
