"""A program that crashes on a value its step made non-finite, before the sentinel could see it (torch's
``binary_cross_entropy`` refusing NaN probabilities right after the forward; ``clip_grad_norm_`` with
``error_if_nonfinite``): the open watch names where it was born, bundles the step, and the crash goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from markers import file_marker_line

pytestmark = [pytest.mark.timeout(90), pytest.mark.filterwarnings("ignore::UserWarning")]
BAD_STEP = 3


class VAE(nn.Module):
    """pytorch/examples' VAE, small; from BAD_STEP on its log-variance is scaled up (a bad rescale)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.mu, self.logvar, self.dec = nn.Linear(16, 8), nn.Linear(8, 4), nn.Linear(8, 4), nn.Linear(4, 16)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        h = F.relu(self.enc(x))
        logvar = self.logvar(h) * (1e4 if self.calls > BAD_STEP else 1.0)
        std = torch.exp(0.5 * logvar)  # EXP-LINE
        z = self.mu(h) + torch.randn_like(std) * std
        return torch.sigmoid(self.dec(z))


def _train(model, optimizer, clip=False):
    torch.manual_seed(0)
    x = (torch.rand(8, 16) > 0.5).float()
    for _ in range(6):
        optimizer.zero_grad()
        loss = F.binary_cross_entropy(model(x), x)  # raises on NaN probabilities
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        optimizer.step()


def test_a_crash_on_a_nan_the_forward_made_names_its_birthplace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = VAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with pytest.raises(RuntimeError, match="between 0 and 1"):  # the program's own crash still happens
        with tensor_dap.watch(model, optimizer, on="raise") as w:
            _train(model, optimizer)
    (report,) = w.reports
    assert (report.step, report.phase, report.op) == (BAD_STEP, "forward", "exp")
    assert (os.path.basename(report.source["file"]), report.source["line"]) == (os.path.basename(__file__),
                                                                             file_marker_line(__file__, "EXP-LINE"))
    assert any("as the program crashed" in n for n in report.notes)
    assert report.bundle is not None and os.path.isfile(os.path.join(report.bundle, "state.pt"))


def test_w_step_mode_re_runs_the_step_function_that_crashed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = VAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = (torch.rand(8, 16) > 0.5).float()

    def train_step():
        optimizer.zero_grad()
        loss = F.binary_cross_entropy(model(x), x)
        loss.backward()
        optimizer.step()
        return loss

    with pytest.raises(RuntimeError, match="between 0 and 1"):
        with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
            for _ in range(6):
                w.step(train_step)
    (report,) = w.reports
    assert (report.step, report.phase, report.op) == (BAD_STEP, "forward", "exp")
    assert report.source["line"] == file_marker_line(__file__, "EXP-LINE")


class Sqrt(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        h = self.lin(x).abs() + 1.0 - (100.0 if self.calls > BAD_STEP else 0.0)  # all positive until BAD_STEP
        return torch.where(h > 0, torch.sqrt(h), h).sigmoid()  # SQRT-LINE


def test_clip_grad_norm_refusing_a_nan_gradient_names_the_backward_op(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = Sqrt()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="non-finite"):
        with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
            torch.manual_seed(0)
            x = torch.randn(8, 4)
            losses = []
            for _ in range(6):
                optimizer.zero_grad()
                loss = model(x).sum()
                losses.append(loss.item())
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
                optimizer.step()
    (report,) = w.reports
    assert (report.step, report.phase, report.op) == (BAD_STEP, "backward", "SqrtBackward0")
    # the step that crashed before its update has its own loss in the report, not the step's before
    assert report.loss == pytest.approx(losses[-1]) and report.loss_history == pytest.approx(losses)
    assert (os.path.basename(report.source["file"]), report.source["line"]) == (os.path.basename(__file__),
                                                                             file_marker_line(__file__, "SQRT-LINE"))


def test_a_crash_with_every_value_finite_adds_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        with tensor_dap.watch(model, optimizer, on="raise") as w:
            for n in (4, 4, 5):
                optimizer.zero_grad()
                model(torch.ones(2, n)).sum().backward()
                optimizer.step()
    assert w.reports == []
    assert not os.path.exists(tmp_path / ".tensor_dap")


PROGRAM = textwrap.dedent('''
    import torch, torch.nn.functional as F
    from torch import nn
    model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.rand(4, 6)
    for step in range(5):
        optimizer.zero_grad()
        out = model(x if step < 2 else x * 0 / 0)  # the batch turns NaN at step 2
        loss = F.binary_cross_entropy(out.sigmoid(), x)
        loss.backward()
        optimizer.step()
''')


def _crashed_run(folder, *args: str) -> subprocess.CompletedProcess:
    """``tensor-dap run ARGS`` in ``folder`` with no terminal, for a program that ends on a crash (exit code 1)."""
    done = subprocess.run([sys.executable, "-m", "tensor_dap", "run", *args], cwd=folder, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})
    assert done.returncode == 1, done.stderr[-2000:]
    return done


def test_tensor_dap_run_names_it_before_the_crash_report(tmp_path):
    """`tensor-dap run --break-on-nan`: the watch it made says where, then the crash report follows."""
    (tmp_path / "train.py").write_text(PROGRAM)
    done = _crashed_run(tmp_path, "--break-on-nan", "train.py")
    err = done.stderr
    assert "step 2 · non-finite input batch" in err, err[-3000:]
    assert err.index("as the program crashed") < err.index("Traceback (most recent call last)")
    assert "all elements of input should be between 0 and 1" in err



GAN = textwrap.dedent('''
    import torch
    from torch import nn

    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 6))
    D = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())
    optD = torch.optim.Adam(D.parameters(), lr=1e-3)
    optG = torch.optim.Adam(G.parameters(), lr=1e-3)

    def bce(p, t):  # hand-written, as in a DCGAN: log(0) once D saturates
        return -(t * torch.log(p) + (1 - t) * torch.log(1 - p)).mean()

    for step in range(6):
        D.zero_grad()
        bce(D(torch.randn(16, 6)), torch.ones(16)).backward()
        fake = G(torch.randn(16, 4))
        bce(D(fake.detach()), torch.zeros(16)).backward()
        optD.step()
        G.zero_grad()
        p = D(fake)
        if step == 3:
            p = p * 0
        bce(p, torch.ones(16)).backward()  # G-BACKWARD
        optG.step()
''')


def test_a_trigger_of_one_watch_is_reported_once_though_its_loss_went_through_the_other_model(tmp_path):
    """A DCGAN's generator loss goes through the discriminator: when the generator's watch stops the run, the
    discriminator's watch does not report the same Inf again as a crash it explains (found in pytorch/examples'
    dcgan with a hand-written BCE: two reports, two bundles, for one incident)."""
    (tmp_path / "train.py").write_text(GAN)
    done = _crashed_run(tmp_path, "--break-on-nan", "train.py")
    err = done.stderr
    assert err.count("tensor_dap trigger ·") == 1, err[-4000:]
    assert "NonFiniteError: tensor_dap trigger · step 3 · Inf born in log, outside any module" in err
    assert f"train.py:{file_marker_line(tmp_path / 'train.py', 'G-BACKWARD')}" in err
    assert "as the program crashed" not in err
    assert len(list((tmp_path / ".tensor_dap" / "incidents").iterdir())) == 1


CONTINUED_GAN = textwrap.dedent('''
    import torch
    import torch.nn.functional as F
    from torch import nn
    import tensor_dap

    torch.manual_seed(0)

    class Gen(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 6)
            self.calls = 0

        def forward(self, z):
            self.calls += 1
            h = self.b(torch.tanh(self.a(z)))
            return torch.where(h > 0, torch.sqrt(h), h) if self.calls >= 4 else h  # NaN gradients from step 3 on

    G = Gen()
    D = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())
    optD = torch.optim.Adam(D.parameters(), lr=1e-3)
    optG = torch.optim.Adam(G.parameters(), lr=1e-3)
    tensor_dap.watch(D, optD, on="log"), tensor_dap.watch(G, optG, on="log")  # reported, and trained on
    for step in range(8):
        D.zero_grad()
        F.binary_cross_entropy(D(torch.randn(16, 6)), torch.ones(16, 1)).backward()
        fake = G(torch.randn(16, 4))
        F.binary_cross_entropy(D(fake.detach()), torch.zeros(16, 1)).backward()  # raises on NaN probabilities
        optD.step()
        G.zero_grad()
        F.binary_cross_entropy(D(fake), torch.ones(16, 1)).backward()
        optG.step()
''')


def test_a_crash_on_a_batch_another_watched_model_made_from_broken_weights_says_so(tmp_path):
    """The generator's NaN step was reported and its update trained on (``on="log"``, or ``c`` at the stop): the
    next step the discriminator crashes on the generator's NaN output. Its report says the batch is the output of
    the other watched model, whose parameters are non-finite since an update it reported (not "born in linear",
    and no divergence guessed: nothing grew)."""
    (tmp_path / "train.py").write_text(CONTINUED_GAN)
    done = _crashed_run(tmp_path, "train.py")
    out = done.stdout + done.stderr
    assert "step 3 · NaN born in SqrtBackward0" in out, out[-4000:]
    assert "step 4 · the optimizer update made a parameter of a non-finite" in out, out[-4000:]
    (step4,) = (tmp_path / ".tensor_dap" / "incidents").glob("*-step4")
    report = json.loads((step4 / "report.json").read_text())
    assert (report["phase"], report["module"], report["diagnosis"]) == ("optimizer", "a", None)
    assert report["notes"][0].startswith("this model's input is the output of Gen, watched too, whose parameters "
                                         "are non-finite (module paths are Gen's)")
    assert report["notes"][0].endswith("Gen's non-finite step was reported before")
    assert "diverged" not in out
    assert "all elements of input should be between 0 and 1" in out  # the program's own crash follows


def test_one_watch_failing_to_explain_leaves_the_others_their_turn(monkeypatch, capsys):
    """Two watches open (a GAN): the first one's failure is one line, and the second still sees the crash. (Stand-ins
    for the watches: what is tested is tensor-dap run's loop over them.)"""
    from tensor_dap.cli import run
    from tensor_dap.triggers import active

    seen = []

    class Failing:
        def explain_crash(self, tb, error):
            raise RuntimeError("boom")

    class Explaining:
        def explain_crash(self, tb, error):
            seen.append((tb, error))

    monkeypatch.setattr(active, "watches", lambda: (Failing(), Explaining()))
    try:
        raise ValueError("the program's crash")
    except ValueError as exc:
        crash = exc
    run._explain_with_watches(crash)
    assert seen == [(crash.__traceback__, crash)]
    assert "tensor_dap: RuntimeError: boom" in capsys.readouterr().err


@pytest.mark.parametrize("crashes", [False, True])
def test_weights_non_finite_before_the_first_watched_step_are_not_blamed_on_an_update(crashes):
    """A checkpoint saved from a diverged run: the first watched step already has a NaN weight. The report says
    so at step 0, whether the sentinel sees it or the program crashes on it first (``binary_cross_entropy``
    refusing NaN probabilities); it was "the optimizer update made …" at step -1, and "NaN born in linear"."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    with torch.no_grad():
        model[2].weight[0, 3] = float("nan")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = RuntimeError if crashes else tensor_dap.NonFiniteError
    with pytest.raises(expected), tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for _ in range(3):
            optimizer.zero_grad()
            out = model(torch.randn(16, 4))
            if crashes:
                F.binary_cross_entropy(torch.sigmoid(out), torch.ones(16, 1)).backward()
            else:
                F.mse_loss(out, torch.zeros(16, 1)).backward()
            optimizer.step()
    (report,) = w.reports
    assert (report.step, report.phase, report.module) == (0, "optimizer", "2")
    assert report.headline == "a parameter of 2 was non-finite before the first watched step"
    assert "parameter 'weight' is non-finite before the step: it was so when the watch began" in report.notes[0]


def _policy_steps(all_masked_at: int | None, causal_crash: bool = False, validate: bool = True) -> None:
    """An RL policy whose illegal actions are masked with -inf before ``Categorical``: at ``all_masked_at`` one state
    has no legal action (its row normalizes to NaN and the distribution's check raises). ``causal_crash``: a shape
    error instead, with a -inf mask (on purpose) and finite logits in the frame. ``validate``: the distribution checks
    its arguments (torch's default, until dynamo's set-up turns it off for the process: then ``sample`` crashes)."""
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 4))
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
    with tensor_dap.watch(policy, optimizer, on="raise"):
        for step in range(6):
            legal = torch.rand(16, 4) > 0.3
            legal[:, 0] = True
            if step == all_masked_at:
                legal[5] = False
            logits = policy(torch.randn(16, 6)).masked_fill(~legal, float("-inf"))
            if causal_crash and step == 3:
                mask = torch.full((4, 4), float("-inf")).triu(1)  # a causal mask: -inf on purpose
                logits = logits @ torch.ones(5, 4) + mask  # a shape error
            dist = torch.distributions.Categorical(logits=logits, validate_args=validate)  # MASKED-CRASH
            loss = -(dist.log_prob(dist.sample()) * torch.randn(16)).mean()  # SAMPLE-CRASH
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


@pytest.mark.parametrize("validate", [True, False])
def test_a_crash_on_a_nan_the_program_made_after_the_model_names_its_masked_row(tmp_path, monkeypatch, capsys,
                                                                                validate):
    """The model re-runs finite, and the NaN the crash is about was made after it: ``Categorical`` over logits whose
    row 5 is -inf in every entry (a state with no legal action). The ValueError prints the tensor and nothing more;
    the watch names the program's line, its tensor and the row, and writes no bundle (the model's step replays
    clean)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError if validate else RuntimeError, match="found invalid values" if validate else
                       "probability tensor contains either `inf`, `nan`"):
        _policy_steps(all_masked_at=4, validate=validate)
    err = " ".join(capsys.readouterr().err.split())
    assert "step 4 · NaN made after the model, in the program's code: it crashed on it" in err, err[-3000:]
    line = file_marker_line(__file__, "MASKED-CRASH" if validate else "SAMPLE-CRASH")
    assert f"{os.path.basename(__file__)}:{line}" in err
    assert "logits: 1 of 16 rows along the last dim is entirely -inf: index 5 of dim 0 (of 16)" in err
    assert "no bundle: the model's step re-runs finite" in err and not os.path.exists(tmp_path / ".tensor_dap")
    assert "loss: ? (last 4: " in err  # the crashed step never computed its loss: not the last step's, as its own


def test_a_crash_of_another_kind_with_a_minus_inf_mask_in_reach_adds_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        _policy_steps(all_masked_at=None, causal_crash=True)
    assert "tensor_dap trigger" not in capsys.readouterr().err


def _after_the_model(crash) -> None:
    """A model that stays finite; after it, at step 2, the program makes a NaN (a missing value, marked on purpose,
    or a 0/0) and ``crash`` raises with it at hand."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tensor_dap.watch(model, optimizer, on="raise"):
        for step in range(4):
            out = model(torch.randn(8, 4))
            if step == 2:
                crash(out, torch.zeros(8) / torch.zeros(8))
            optimizer.zero_grad()
            out.sum().backward()
            optimizer.step()


def test_a_crash_of_another_kind_with_a_nan_marking_missing_values_adds_nothing(capsys):
    """Tabular code marks missing values with NaN on purpose: a shape error beside them is not about them."""
    def shape_error(out, missing):
        return out @ missing  # a shape error
    with pytest.raises(RuntimeError, match="size mismatch|cannot be multiplied|shapes"):
        _after_the_model(shape_error)
    assert "tensor_dap trigger" not in capsys.readouterr().err


def test_an_assert_of_finiteness_is_a_crash_about_the_nan(capsys):
    def checked(out, ratio):
        assert torch.isfinite(ratio).all()  # ASSERT-FINITE
    with pytest.raises(AssertionError):
        _after_the_model(checked)
    err = " ".join(capsys.readouterr().err.split())
    assert "step 2 · NaN made after the model, in the program's code: it crashed on it" in err, err[-2000:]
    assert f"{os.path.basename(__file__)}:{file_marker_line(__file__, 'ASSERT-FINITE')}" in err


class _WhereSqrt(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        return self.fc2(torch.where(h > 0, torch.sqrt(h), h))  # ANOMALY-SQRT


def test_a_crash_of_anomaly_mode_is_explained_though_nothing_non_finite_was_kept(tmp_path, monkeypatch, capsys):
    """A program hunting its NaN with ``torch.autograd.set_detect_anomaly(True)``: backward stops with "Function
    'SqrtBackward0' returned nan values" before any gradient is kept, so nothing non-finite was in reach and the
    watch said nothing. The crash's message says it met a NaN: the step is re-run, and the module and line named."""
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = _WhereSqrt()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="returned nan values"), torch.autograd.set_detect_anomaly(True), \
            tensor_dap.watch(model, optimizer, on="raise"):
        for _ in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    err = " ".join(capsys.readouterr().err.split())
    assert "step 0 · NaN born in SqrtBackward0 (the backward of sqrt), in the backward of _WhereSqrt" in err, \
        err[-3000:]
    assert f"{os.path.basename(__file__)}:{file_marker_line(__file__, 'ANOMALY-SQRT')}" in err
