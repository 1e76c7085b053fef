"""A GAN's loop, unchanged (the shape of pytorch/examples' DCGAN): one watch per model and optimizer, as
``tensor-dap run --guard`` attaches them. Each counts its own optimizer's steps, keeps its own losses,
names a loss op read from the loss's graph, and traces a batch made non-finite by the other model
back into that model's forward."""

from __future__ import annotations

import math

import gan
import pytest
import torch
from gan import BUG_STEP

import tensor_dap
from markers import marker_line
from tensor_dap import NonFiniteError

pytestmark = [pytest.mark.timeout(60)]


def test_a_gan_s_discriminator_names_the_log_at_its_own_step_with_its_own_losses(capsys):
    with pytest.raises(NonFiniteError) as info:
        gan.train(BUG_STEP + 3, watched=True, bug="saturated_bce")
    report = info.value.report
    assert (report.phase, report.module, report.op, report.kind) == ("loss", None, "log", "nonfinite")
    assert report.step == BUG_STEP  # the discriminator's optimizer steps: the generator's are not counted
    assert "log of zero" in report.diagnosis
    assert report.source["text"].endswith("# THE BACKWARD") and report.mode == "loop"
    assert report.origin.startswith("log, in the loss computed before gan.py:")
    # its history holds the discriminator's step losses (real + fake), not the generator's
    assert report.loss_history[:-1] == pytest.approx(gan.LOSSES["D"][:-1]) and math.isnan(report.loss_history[-1])
    summary = f"1 of the {BUG_STEP + 1} steps watched was non-finite (the first at step {BUG_STEP})"
    assert summary in capsys.readouterr().err


def test_a_gan_trains_bit_identically_and_quietly_under_both_watches():
    (wd, wg), netD, netG = gan.train(BUG_STEP, watched=True)
    _, plainD, plainG = gan.train(BUG_STEP, watched=False)
    assert wd.reports == wg.reports == []
    assert (wd.step_count, wg.step_count) == (BUG_STEP, BUG_STEP)
    for a, b in zip([*netD.parameters(), *netG.parameters()], [*plainD.parameters(), *plainG.parameters()]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("retain", [True, False], ids=["output-keeps-grad", "node-hook"])
def test_a_batch_the_generator_made_non_finite_is_traced_into_the_generator(retain, monkeypatch):
    """The discriminator's watch sees a non-finite batch first; the generator's watch made it in its current
    step, so it re-runs its own forward: the report names the generator's division, not the data pipeline.
    Both ways the loop sees an output (kept itself when small, weakly referenced when large)."""
    if not retain:
        monkeypatch.setattr("tensor_dap.triggers.loop.RETAIN_BYTES", 0)
    with pytest.raises(NonFiniteError) as info:
        gan.train(BUG_STEP + 3, watched=True, bug="generator_norm")
    report = info.value.report
    assert (report.phase, report.module, report.module_type, report.op) == ("forward", "", "Generator", "div")
    assert report.step == BUG_STEP and "division by zero" in report.diagnosis
    assert report.source["text"].endswith("# BIRTH: generator_norm")
    assert "the output of Generator, watched too" in report.notes[0]


def test_the_generator_s_own_loss_is_told_from_the_discriminator_s():
    """Every backward() reaches the loss tap of both watches; the generator's watch takes as its loss the
    non-finite one whose graph reaches its outputs (its own -log D(G(z))), not the discriminator's losses
    on the detached fake, and names its op and its backward() line."""
    with pytest.raises(NonFiniteError) as info:
        gan.train(BUG_STEP + 3, watched=True, bug="generator_loss")
    report = info.value.report
    assert (report.phase, report.module, report.op) == ("loss", None, "log")
    assert report.step == BUG_STEP and "log of zero" in report.diagnosis
    assert report.source["text"].endswith("# THE GENERATOR'S BACKWARD")
    assert math.isinf(report.loss)
    # its history: the generator's losses only (not the discriminator's on the detached fake, nor their sum)
    assert report.loss_history == pytest.approx(gan.LOSSES["G"])


def test_the_discriminator_is_not_stopped_again_for_the_generator_s_reported_nan_trained_on(capsys):
    """The generator's NaN step was reported and the run went on (``on="log"`` here; ``c`` at its stop): its update
    wrote NaN into its weights, so the next fake batch is NaN and the discriminator's gradients follow. That is the
    aftermath of the report already made: the discriminator says so in one line and does not stop the run again
    (it stopped a second time, naming the generator's module paths as if they were news: found on DCGAN)."""
    (wd, wg), _, _ = gan.train(BUG_STEP + 3, watched=True, bug="generator_sqrt", generator_on="log")
    assert [r.step for r in wg.reports] == [BUG_STEP] and wd.reports == []
    err = capsys.readouterr().err
    assert (f"tensor_dap: Discriminator step {BUG_STEP + 1} is non-finite: its input is the output of Generator, "
            f"whose weights are non-finite since its step {BUG_STEP} reported above") in " ".join(err.split())
    assert f"tensor_dap.watch(Discriminator): 2 of the {BUG_STEP + 3} steps watched were non-finite" in err


WGAN_GP = '''
import torch
from torch import nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
D = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
optD, optG = torch.optim.Adam(D.parameters(), 1e-3), torch.optim.Adam(G.parameters(), 1e-3)


def d_step(step, real, fake):
    interp = (0.5 * real + 0.5 * fake).requires_grad_(True)
    grad, = torch.autograd.grad(D(interp).sum() * (0.0 if step == 3 else 1.0), interp, create_graph=True)  # GRAD
    gp = ((torch.sqrt((grad ** 2).sum(dim=1)) - 1) ** 2).mean()  # GP: sqrt of a zero norm, step 3
    loss = D(fake).mean() - D(real).mean() + 10 * gp
    optD.zero_grad()
    loss.backward()
    optD.step()


def train(w=None):
    for step in range(6):
        real, fake = torch.randn(16, 2), G(torch.randn(16, 4)).detach()
        w.step(d_step, step, real, fake) if w is not None else d_step(step, real, fake)
        loss = -D(G(torch.randn(16, 4))).mean()  # D runs in G's step too: D's capture keeps that forward
        optG.zero_grad()
        loss.backward()
        optG.step()
'''


@pytest.mark.parametrize("loop", [True, False], ids=["unchanged loop", "w.step"])
def test_a_gradient_penalty_s_nan_is_localized_by_w_step_and_explained_by_the_loop(tmp_path, loop):
    """WGAN-GP: the NaN is born in the double backward of the penalty. w.step re-runs it (SqrtBackward0 at its line);
    the unchanged loop re-runs the model's forwards and backward only: it says so, naming the create_graph line,
    and its re-run of D's forward from G's step (whose graph G's backward freed) no longer fails."""
    import importlib.util

    path = tmp_path / "wgan_gp.py"
    path.write_text(WGAN_GP)
    spec = importlib.util.spec_from_file_location("wgan_gp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(NonFiniteError) as info, \
            tensor_dap.watch(module.D, module.optD, on="raise", capture=False) as w:
        module.train(None if loop else w)
    report = info.value.report
    assert report.step == 3
    if loop:
        note = " ".join(report.notes)
        assert f"create_graph=True at wgan_gp.py:{marker_line(WGAN_GP, 'GRAD')}: a gradient penalty" in note
        assert "re-running the step failed" not in note
    else:
        assert (report.op, report.source["line"]) == ("SqrtBackward0", marker_line(WGAN_GP, "GP"))
