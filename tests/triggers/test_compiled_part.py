"""A part of the model compiled on its own (timm's ``--torchcompile`` compiles the model inside its task module; a
user compiles one block): the re-run that localizes a NaN runs it eagerly, so the op is named as written
(``SqrtBackward0`` and its line), not as ``CompiledFunctionBackward``; after it the part runs compiled again."""

from __future__ import annotations

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
