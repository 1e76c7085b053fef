"""``tensor-dap run --break-on-nan`` on a loop with no torch.optim optimizer (it updates its parameters by hand, as
pytorch/examples' word language model does): the model is watched from its first forward, so step 0 is localized."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from markers import file_marker_line
from tensor_dap import NonFiniteError
from tensor_dap.triggers.auto import AutoTriggers


class NormedEmbedding(nn.Module):
    """Embeddings scaled to unit length: the zero row (a padding token's) divides 0 by 0."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 3)
        with torch.no_grad():
            self.emb.weight[7] = 0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        x = x / x.norm(dim=-1, keepdim=True)  # ZERO-NORM
        return self.head(x)


def _train_by_hand(model: nn.Module, batches: list[torch.Tensor], lr: float = 0.1) -> None:
    targets = torch.tensor([0, 1, 2])
    for ids in batches:
        model.zero_grad()
        F.cross_entropy(model(ids), targets).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad


CLEAN, PADDED = torch.tensor([1, 2, 3]), torch.tensor([1, 7, 2])


def _no_capture_left(module: nn.Module) -> bool:
    return "_compiled_call_impl" not in module.__dict__


def test_a_nan_in_the_first_step_is_born_at_its_op_and_line():
    """Before, the watch was made at the first backward(): step 0's forward was gone, and the report only said that
    the embedding's gradient was non-finite (the module holding it, not where the NaN was born)."""
    torch.manual_seed(0)
    model = NormedEmbedding()
    with AutoTriggers(nan=True, on="raise") as auto, pytest.raises(NonFiniteError) as info:
        _train_by_hand(model, [PADDED, CLEAN])
    report = info.value.report
    assert (report.step, report.phase, report.op) == (0, "forward", "div")
    assert report.source["line"] == file_marker_line(__file__, "ZERO-NORM")
    assert report.diagnosis.startswith("division by zero") and report.bundle is not None
    assert auto.watches == [] and _no_capture_left(model)  # closed with the run


def test_a_later_step_and_a_clean_run_are_as_before():
    torch.manual_seed(0)
    model = NormedEmbedding()
    with AutoTriggers(nan=True, on="raise"), pytest.raises(NonFiniteError) as info:
        _train_by_hand(model, [CLEAN, CLEAN, PADDED])
    assert (info.value.report.step, info.value.report.op) == (2, "div")

    torch.manual_seed(0)
    watched, plain = NormedEmbedding(), NormedEmbedding()
    plain.load_state_dict(watched.state_dict())
    with AutoTriggers(nan=True, on="raise") as auto:
        _train_by_hand(watched, [CLEAN] * 4)
        assert [w.model for w in auto.watches] == [watched] and not auto.watches[0].reports
    _train_by_hand(plain, [CLEAN] * 4)
    assert all(torch.equal(a, b) for a, b in zip(watched.parameters(), plain.parameters()))  # bit-identical


def test_a_module_called_first_that_is_not_trained_gives_its_watch_up_at_the_first_backward():
    """A frozen-in-spirit feature network (parameters that require grad, never updated) runs before the model: the
    first backward() finds the model holding most trainable parameters; the first module's capture is removed."""
    torch.manual_seed(0)
    features, model = nn.Linear(3, 3), nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 3))
    x = torch.randn(4, 3)
    with AutoTriggers(nan=True, on="raise") as auto:
        for _ in range(2):
            model.zero_grad()
            model(features(x).detach()).pow(2).mean().backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
        assert [w.model for w in auto.watches] == [model]
        assert _no_capture_left(features) and not _no_capture_left(model)


def test_a_forward_before_the_optimizer_is_made_leaves_one_watch_the_optimizers():
    """A look at the output before training (no optimizer yet) is not a loop updating by hand: the optimizer made
    next gets the only watch, and a NaN in its first step is still localized."""
    torch.manual_seed(0)
    model = NormedEmbedding()
    with AutoTriggers(nan=True, on="raise") as auto:
        assert model(CLEAN).shape == (3, 3)  # before training: a look at the output
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(NonFiniteError) as info:
            for ids in (PADDED, CLEAN):
                optimizer.zero_grad()
                F.cross_entropy(model(ids), torch.tensor([0, 1, 2])).backward()
                optimizer.step()
        assert len(auto.watches) == 1 and auto.watches[0].optimizer is optimizer
    assert (info.value.report.step, info.value.report.op) == (0, "div")


def test_a_lazy_model_is_watched_from_the_first_backward():
    """A lazy module makes its parameters inside its first call: it is not watched from there (its first step is
    then found in a gradient, as before), but from the first backward() on, and later steps are localized."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.Linear(8, 1))
    x = torch.randn(4, 3)
    with AutoTriggers(nan=True, on="raise") as auto, pytest.raises(NonFiniteError) as info:
        for step in range(3):
            model.zero_grad()
            model(x if step != 2 else x / 0).sum().backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
    assert [w.model for w in auto.watches] == [] and info.value.report.step == 2
    assert info.value.report.where == "input of 0 (Linear)"


def test_a_module_run_before_the_optimizer_is_made_is_not_watched_beside_it():
    """A teacher (trainable parameters, never updated) runs before the optimizer of the student is made: the
    optimizer's watch is the only one, and the teacher keeps no capture."""
    torch.manual_seed(0)
    teacher, student = nn.Sequential(nn.Linear(3, 8), nn.Linear(8, 3)), nn.Linear(3, 3)
    x = torch.randn(4, 3)
    with AutoTriggers(nan=True, on="raise") as auto:
        target = teacher(x).detach()
        optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
        for _ in range(2):
            optimizer.zero_grad()
            F.mse_loss(student(x), target).backward()
            optimizer.step()
        assert [w.model for w in auto.watches] == [student] and _no_capture_left(teacher)


def test_a_model_run_with_gradients_on_and_no_backward_is_given_up():
    """Inference with gradients on (no backward() ever): the watch made at the first forward is dropped after a few
    calls, leaving the model as it was."""
    from tensor_dap.triggers.auto import EARLY_FORWARDS

    model = NormedEmbedding()
    with AutoTriggers(nan=True, on="raise") as auto:
        for _ in range(EARLY_FORWARDS):
            model(CLEAN)
        assert len(auto.watches) == 1 and not _no_capture_left(model)
        model(CLEAN)
        assert auto.watches == [] and _no_capture_left(model)
        model(CLEAN).sum().backward()  # a backward() after all: the model is watched from here, as before
        assert [w.model for w in auto.watches] == [model]
