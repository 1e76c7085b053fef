"""A report names the warnings the program was given in its step, at the program's own lines: a NaN that came in
as data (returns normalized by the std of a one-step episode) carries no line, and torch warned where it was made.
The program's warnings are shown as before, and the warnings module is left as it was when the watch closes."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap import NonFiniteError
from tensor_dap.triggers import warned

pytestmark = pytest.mark.timeout(60)


def actor_critic_steps(episode_lengths, *, other_warning_at=None):
    """An actor-critic update per episode, its returns normalized by their std (pytorch/examples' actor_critic.py):
    an episode of one step makes that std NaN. Returns the report (None when nothing fired)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    try:
        with tensor_dap.watch(model, optimizer, on="raise", capture=False):
            for episode, length in enumerate(episode_lengths):
                if episode == other_warning_at:
                    warnings.warn("a warning of another step", UserWarning, stacklevel=1)  # LINE: other
                log_probs = [F.log_softmax(model(torch.randn(4)), -1)[0] for _ in range(length)]
                returns = torch.arange(length, 0, -1, dtype=torch.float32)
                returns = (returns - returns.mean()) / (returns.std() + 1e-8)  # LINE: std
                loss = torch.stack([-lp * r for lp, r in zip(log_probs, returns)]).sum()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    except NonFiniteError as exc:
        return exc.report
    return None


def line_of(marker):
    source = open(__file__).read().splitlines()
    return next(i for i, text in enumerate(source, 1) if text.endswith(f"# LINE: {marker}"))


def test_the_report_names_the_line_torch_warned_at_in_the_failing_step():
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # as a program runs: each place once
        report = actor_critic_steps([5, 4, 6, 1, 3], other_warning_at=1)
    assert report is not None and report.step == 3
    named = [n for n in report.notes if n.startswith("warned in this step")]
    assert len(named) == 1, report.notes
    assert f"test_warned.py:{line_of('std')}" in named[0] and "returns.std()" in named[0]
    assert "degrees of freedom" in named[0]  # torch's own words
    assert "another step" not in str(report.notes)  # given in step 1: not this step's


def test_warnings_given_before_the_watch_opened_are_not_named():
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.warn("given before the watch opened", UserWarning, stacklevel=1)
        report = actor_critic_steps([1])  # the first step fails
    named = [n for n in report.notes if n.startswith("warned in this step")]
    assert len(named) == 1 and "degrees of freedom" in named[0]  # this step's only


def test_the_programs_warnings_are_shown_as_before_and_the_module_is_left_as_it_was():
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        before = warnings.showwarning
        model = nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with tensor_dap.watch(model, optimizer, on="raise", capture=False):
            assert warnings.showwarning is not before  # noted while open
            warnings.warn("the program's own", UserWarning, stacklevel=1)
            with tensor_dap.watch(nn.Linear(2, 1), torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1),
                                  on="raise", capture=False):
                inner = warnings.showwarning
            assert warnings.showwarning is inner  # a second watch adds no second wrapper
        assert warnings.showwarning is before
    assert [str(w.message) for w in shown] == ["the program's own"]


def test_warnings_of_library_code_and_of_other_categories_are_not_named():
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        model = nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
            warnings.warn_explicit("inside torch", UserWarning, torch.__file__, 1)
            warnings.warn_explicit("inside an installed package", UserWarning, pytest.__file__, 1)  # (CleanRL's
            # PPO: tyro warning about its Args class was named in a report of a NaN)
            warnings.warn("deprecated here", DeprecationWarning, stacklevel=1)
            warnings.warn("a user warning here", UserWarning, stacklevel=1)
            named = warned.notes(w, w.step_count)
    assert len(named) == 1 and "a user warning here" in named[0]


def test_a_note_that_fails_does_not_stop_the_warning(monkeypatch):
    class Broken:
        @property
        def step_count(self):
            raise RuntimeError("a watch half made")

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        model = nn.Linear(2, 1)
        with tensor_dap.watch(model, torch.optim.SGD(model.parameters(), lr=0.1), on="raise", capture=False) as w:
            monkeypatch.setattr(warned, "_watches", [Broken()])
            warnings.warn("still shown", UserWarning, stacklevel=1)
            monkeypatch.undo()
            assert warned.notes(w, w.step_count) == []
    assert [str(x.message) for x in shown] == ["still shown"]


STANDARDIZED = '''
import numpy as np
import torch
from torch import nn

X = np.random.default_rng(0).normal(size=(256, 8)).astype(np.float32)
X[:, 3] = 1.0  # a feature constant in this split
y = X[:, 0] * 2
X = (X - X.mean(axis=0)) / X.std(axis=0)  # LINE: standardize
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(y)),
                                     batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters())
for xb, yb in loader:
    opt.zero_grad()
    nn.functional.mse_loss(model(xb).squeeze(-1), yb).backward()
    opt.step()
print("TRAINED")
'''


def test_a_batch_that_came_in_non_finite_names_the_datas_warning_given_before_training(tmp_path):
    """``tensor-dap run --break-on-nan`` on a script that standardizes its features before training: a constant
    feature's 0/0 is named where numpy warned, and the column that holds every NaN."""
    script = tmp_path / "train.py"
    script.write_text(STANDARDIZED)
    done = subprocess.run([sys.executable, "-m", "tensor_dap", "run", "--break-on-nan", str(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    line = next(i for i, text in enumerate(STANDARDIZED.splitlines(), 1) if text.endswith("# LINE: standardize"))
    assert done.returncode == 1 and "TRAINED" not in done.stdout
    assert "non-finite input batch" in done.stderr
    assert "the NaN/Inf only at index 3 of dim 1 (of 8)" in done.stderr
    said = [x for x in done.stderr.splitlines() if "warned before training" in x]
    assert len(said) == 1 and f"train.py:{line}" in said[0]
    assert "RuntimeWarning: invalid value encountered in divide" in said[0]
