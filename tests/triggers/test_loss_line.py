"""The line naming a loss op outside the model, when ``backward()`` is called from a library's code.

HF's Trainer (through accelerate), Lightning and other trainers call ``loss.backward()`` in their own
files; the user's ``compute_loss`` / ``training_step`` calls the model and computes the loss. The
unchanged loop cannot re-run the loss function, so the op's own line is not known: the report names
the user's line that called the model, as the loss computed *after* it, not the trainer's backward().
"""

from __future__ import annotations

import math
import os
import sys
import warnings

import pytest
import torch
from markers import file_marker_line
from torch import nn

import tensor_dap
from tensor_dap import NonFiniteError
from tensor_dap.triggers.report import Report

pytestmark = pytest.mark.timeout(60)

TRAINER = "def backward(loss):\n    loss.backward()\n"  # what accelerate's Accelerator.backward comes down to


def compute_loss(model, x, y, sharpen):
    logits = model(x)  # MODEL-CALL
    probs = torch.softmax(logits * sharpen, dim=-1)
    return -torch.log(probs.gather(1, y[:, None])).mean()  # underflows to log(0) once sharpened


def train(tmp_path, monkeypatch, backward):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(6):
            optimizer.zero_grad()
            backward(compute_loss(model, x, y, 1e4 if step == 3 else 1.0))
            optimizer.step()
    return info.value.report


def test_a_trainers_backward_names_the_users_model_call_instead(tmp_path, monkeypatch):
    site = tmp_path / "lib" / "python3" / "site-packages"  # an installed package: not the user's code
    site.mkdir(parents=True)
    (site / "trainer_lib.py").write_text(TRAINER)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "trainer_lib", raising=False)
    import trainer_lib

    report = train(tmp_path, monkeypatch, trainer_lib.backward)
    assert (report.phase, report.module, report.op, report.step) == ("loss", None, "log", 3)
    assert os.path.samefile(report.source["file"], __file__)
    assert report.source["line"] == file_marker_line(__file__, "MODEL-CALL")
    assert report.origin.startswith(f"log, in the loss computed after {os.path.basename(__file__)}:")
    assert "logits = model(x)" in report.origin
    again = Report.from_dict(report.to_dict())  # report.json keeps which side of the loss the line is on
    assert again.origin == report.origin


def test_the_users_own_backward_call_stays_the_line_named(tmp_path, monkeypatch):
    def backward(loss):
        loss.backward()  # USER-BACKWARD

    report = train(tmp_path, monkeypatch, backward)
    assert report.source["line"] == file_marker_line(__file__, "USER-BACKWARD")
    assert report.origin.startswith(f"log, in the loss computed before {os.path.basename(__file__)}:")
    assert report.source["near"] == "before"


def test_a_finite_loss_whose_backward_sends_nan_to_the_model_is_named_so():
    """A where/sqrt trap in the loss computation: the loss is finite, its backward is not. The unchanged loop
    sees the gradient reaching the model's outputs already NaN: the loss phase, not a module, and not called
    a non-finite loss."""
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(3):
            optimizer.zero_grad()
            out = model(torch.randn(8, 4))
            loss = torch.where(out > 0, torch.sqrt(out), out).sum()
            loss.backward()  # GRAD-BACKWARD
            optimizer.step()
    report = info.value.report
    assert report.headline == "NaN born in SqrtBackward0 (the backward of sqrt), outside any module", report.headline
    assert (report.phase, report.module, report.step, report.op) == ("loss", None, 0, "SqrtBackward0")
    assert report.loss is not None and math.isfinite(report.loss)  # the loss itself was fine
    assert report.source["line"] == file_marker_line(__file__, "GRAD-BACKWARD")
    assert "the gradient arriving at the model's outputs is non-finite" in report.notes[0]
    assert "SqrtBackward0: the only op of the loss computation whose backward can make NaN/Inf" in report.notes[0]
    assert report.diagnosis.startswith("sqrt has an infinite gradient at 0")


def test_a_loss_whose_backward_could_be_several_ops_names_them_all_and_claims_none():
    """The op behind a non-finite gradient at the model's outputs is read from the structure of the loss's graph (what
    backward() freed cannot be read): with a sqrt and a division by a tensor there, both are named, neither claimed;
    a square (pow 2) is not one of them."""
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        optimizer.zero_grad()
        out = model(torch.randn(8, 4))
        d = torch.sqrt(((out - out.detach()) ** 2).sum(1))  # a distance of 0 (with a gradient): sqrt'(0) is inf
        loss = (d ** 2 / (d.detach() + 1)).mean()  # a division by a tensor: could make NaN too, for all the graph says
        loss.backward()
        optimizer.step()
    report = info.value.report
    assert report.headline == "NaN in the gradient the loss sent to the model's outputs", report.headline
    assert report.op is None
    assert "DivBackward0 or SqrtBackward0: the ops of the loss computation" in report.notes[0]


def test_a_nan_label_in_the_loss_is_the_batch_first_used_by_the_loss_op():
    """A NaN label (the model's outputs finite, the loss computed outside the model): before, "the loss computation
    outside the model made it". The loss's graph shows the label came in non-finite: the batch, first used by
    mse_loss, with the backward() line as the loss computed before it (its own line is not known)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(5):
            x, y = torch.randn(16, 4), torch.randn(16, 1)
            if step == 3:
                y[2, 0] = math.nan
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()  # LABEL-BACKWARD
            optimizer.step()
    report = info.value.report
    assert report.headline == ("non-finite input with no gradient (the batch, or computed from it), first used by "
                               "mse_loss")
    assert (report.phase, report.module, report.op, report.step) == ("input", None, "mse_loss", 3)
    assert report.source["line"] == file_marker_line(__file__, "LABEL-BACKWARD")
    assert report.origin.startswith(f"mse_loss, in the loss computed before {os.path.basename(__file__)}:")
    assert report.diagnosis.startswith("a tensor the loss takes without gradient holds NaN/Inf: the batch or its")
    assert [(section, name) for section, name, _ in report.tensors][:1] == [("op inputs", "target")]
    assert any(note.endswith("(1 row of 16 along dim 0 holds NaN/Inf: 2); the program holds it as `y`")
               for note in report.notes), report.notes  # the variable beside the backward() call


def test_returns_normalized_by_the_std_of_a_one_step_episode_are_named_where_the_loss_uses_them():
    """pytorch/examples' REINFORCE: ``(returns - returns.mean()) / (returns.std() + eps)`` is NaN for an episode of one
    step (the unbiased std of one value). The policy is called once per environment step (more forwards than the
    capture keeps), and the loss's graph names the mul that used the NaN returns, computed outside autograd."""
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2), nn.Softmax(dim=-1))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(policy, optimizer, on="raise", capture=False), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "std(): degrees of freedom is <= 0"
        for episode in range(4):
            log_probs = []
            for _ in range(70 if episode < 2 else 1):  # the third episode ends after one step
                dist = torch.distributions.Categorical(policy(torch.randn(1, 4)))
                log_probs.append(dist.log_prob(dist.sample()))
            returns = torch.arange(len(log_probs), 0, -1, dtype=torch.float32)
            returns = (returns - returns.mean()) / (returns.std() + 1e-6)
            loss = torch.cat([-lp * r for lp, r in zip(log_probs, returns)]).sum()
            optimizer.zero_grad()
            loss.backward()  # RETURNS-BACKWARD
            optimizer.step()
    report = info.value.report
    assert (report.phase, report.module, report.op, report.step) == ("input", None, "mul", 2)
    assert report.source["line"] == file_marker_line(__file__, "RETURNS-BACKWARD")
    assert "returns normalized by the std of a single value" in report.diagnosis
