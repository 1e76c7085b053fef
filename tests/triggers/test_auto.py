"""Triggers switched on from the command line, on a training loop nobody changed (``tensor-dap run --guard``)."""

import contextlib
import os
import re
import shlex
import subprocess
import sys

import pytest
import torch
from torch import nn

import tensor_dap
from markers import file_marker_line, marker_line
from tensor_dap import NonFiniteError
from tensor_dap.triggers.attach import find_model
from tensor_dap.triggers import loss_tap
from tensor_dap.triggers.auto import AutoTriggers

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(HERE, "debuggees", "debuggee_launch_train.py")
TENSOR_DAP = [sys.executable, "-m", "tensor_dap", "run"]


def _run(cmd, tmp_path):
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------- finding the model

def test_find_model_picks_the_root_module_holding_the_parameters():
    encoder, head = nn.Linear(4, 4), nn.Linear(4, 2)
    model = nn.Sequential(encoder, nn.ReLU(), head)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # every module that ran a forward is seen; the root is the one no other contains
    assert find_model([encoder, head, model], optimizer) == (model, [])
    assert find_model([encoder, head], optimizer) == (encoder, [head])  # roots only: submodules ran alone
    assert find_model([nn.Linear(2, 2)], optimizer) == (None, [])  # holds none of the optimizer's parameters


def test_several_models_sharing_one_optimizer_watch_the_largest():
    small, large = nn.Linear(2, 2), nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 4))
    optimizer = torch.optim.SGD([*small.parameters(), *large.parameters()], lr=0.1)
    assert find_model([small, large], optimizer) == (large, [small])


def test_attached_at_the_first_step_and_removed_on_close():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    original_backward = torch.autograd.backward
    with AutoTriggers(nan=True) as auto:
        assert torch.autograd.backward is not original_backward
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(4, 3)).sum().backward()
            optimizer.step()
        assert len(auto.watches) == 1 and auto.watches[0].model is model and auto.steps == 3
        assert auto.watches[0].optimizer is optimizer and auto.watches[0].step_count == 3
        assert auto._forward is None  # the global forward hook is gone after the first step
    assert torch.autograd.backward is original_backward
    assert not torch.nn.modules.module._global_forward_pre_hooks
    from torch.optim import optimizer as optim_module

    assert not optim_module._global_optimizer_pre_hooks and not optim_module._global_optimizer_post_hooks


def test_an_optimizer_no_module_holds_leaves_no_hook_on_every_module_call(capfd):
    """SAC's temperature: ``a_optimizer = Adam([log_alpha])``, a tensor no module holds. Its attachment looked at every
    module call for the whole run (a hook on each, scanning the module's parameters: SAC ran 30 % slower); at its
    first step it is given up, said with the optimizer's name, and its loss checked instead."""
    model = nn.Linear(3, 1)
    log_alpha = torch.zeros(1, requires_grad=True)
    with AutoTriggers(nan=True) as auto:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        a_optimizer = torch.optim.Adam([log_alpha], lr=1e-3)
        for _ in range(3):
            loss = model(torch.randn(4, 3)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            alpha_loss = (log_alpha.exp() * 0.5).sum()
            a_optimizer.zero_grad()
            alpha_loss.backward()
            a_optimizer.step()
        assert not torch.nn.modules.module._global_forward_pre_hooks  # none left after the first steps
        assert [w.model for w in auto.watches] == [model]
    err = " ".join(capfd.readouterr().err.split())
    assert err.count("no module run with gradients holds the parameters of Adam (a_optimizer)") == 1, err


def test_an_optimizer_made_in_the_first_step_after_its_model_ran_watches_that_model(capfd):
    """Pyro makes its optimizers inside ``svi.step``, after the guide ran and backward() returned, and steps them at
    once: no forward comes between the optimizer's creation and its first step. The model that ran before is
    watched (it was given up for a loss check)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    with AutoTriggers(nan=True, on="raise") as auto:
        optimizers = []
        for _ in range(3):
            model(torch.randn(4, 3)).pow(2).mean().backward()
            if not optimizers:  # lazily, one per parameter, as pyro.optim does
                optimizers = [torch.optim.SGD([p], lr=0.1) for p in model.parameters()]
            for o in optimizers:
                o.step()
                o.zero_grad()
        assert [w.model for w in auto.watches] == [model] and auto.steps == 3
        watched = auto.watches[0]
        assert watched.reads == 3  # every update checked, the first included
    assert "checking the loss" not in capfd.readouterr().err


PPL = """
import torch

def step(params, optimizers, data):
    loc, scale = params
    loss = (torch.log(scale) + (data - loc) ** 2 / (2 * scale ** 2)).sum()  # the scale has no constraint
    for o in optimizers:
        o.zero_grad()
    loss.backward()
    for o in optimizers:
        o.step()
    return loss.item()
"""


def test_one_optimizer_per_parameter_and_no_module_count_the_program_s_steps_and_say_so_once(capfd, tmp_path,
                                                                                             monkeypatch):
    """Pyro's SVI: its parameters live in a store, not a module, ``pyro.optim.Adam`` makes one torch optimizer for
    each, and ``svi.step(data)`` computes the loss inside the package. The loss is checked at backward(), the note
    given once (not once per optimizer); a step is the program's: three optimizers stepping count once (the report
    said step 102 for the loop's step 34); and the report names the program's line that called into the package."""
    package = tmp_path / "site-packages" / "fakeppl"  # an installed package, as library_of tells them
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(PPL)
    monkeypatch.syspath_prepend(str(package.parent))
    import fakeppl

    loc, scale = torch.zeros(1, requires_grad=True), torch.ones(1, requires_grad=True)
    with AutoTriggers(nan=True, on="raise") as auto, pytest.raises(NonFiniteError) as info:
        optimizers = [torch.optim.Adam([p], lr=0.5) for p in (loc, scale)]
        for step in range(8):
            fakeppl.step((loc, scale), optimizers, torch.randn(16) + 3)  # CALLED INTO THE PACKAGE
            if step == 4:
                with torch.no_grad():
                    scale.fill_(-0.5)  # walked below zero, as a scale with no constraint does
    report = info.value.report
    assert report.step == 5 and auto.steps == 5
    assert (report.phase, report.op) == ("loss", "log")
    line = file_marker_line(__file__, "CALLED INTO THE PACKAGE")
    assert f"computed inside fakeppl, called from test_auto.py:{line}  fakeppl.step((loc, scale), optimizers, " \
           "torch.randn(16) + 3)" in report.notes
    assert report.notes[0].startswith("read from the loss's autograd graph as backward() began")  # (no model here)
    err = " ".join(capfd.readouterr().err.split())
    assert err.count("no module run with gradients holds the parameters of Adam") == 1, err


class _Packed(nn.Module):
    """An RNN classifier whose loop embeds and packs the batch before calling it: ``model.emb`` runs first."""

    def __init__(self):
        super().__init__()
        self.emb, self.rnn, self.head = nn.Embedding(20, 8), nn.GRU(8, 8, batch_first=True), nn.Linear(8, 3)

    def forward(self, packed, mask):
        out, _ = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=mask.shape[1])
        return self.head((out * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True))  # BUG: an empty row


def test_a_loop_calling_a_submodule_before_the_model_watches_the_model():
    """A text classifier's loop calls ``model.emb`` to pack its batch, then ``model(packed, mask)``: the first module
    run holding the optimizer's parameters is the embedding, and watching it named the model's NaN "outside any
    module", in the loss. Until the first update the watch moves to a module holding it and more of them."""
    torch.manual_seed(0)
    model = _Packed()
    with AutoTriggers(nan=True, on="raise") as auto, pytest.raises(NonFiniteError) as info:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)  # seen made: attached before the first forward
        for step in range(6):
            lengths = torch.randint(1, 7, (4,))
            tokens = torch.randint(1, 20, (4, 6)) * (torch.arange(6) < lengths[:, None])
            mask = (tokens != 0).float()
            if step == 4:
                mask[2] = 0.0
            packed = nn.utils.rnn.pack_padded_sequence(model.emb(tokens), lengths, batch_first=True,
                                                       enforce_sorted=False)
            loss = torch.nn.functional.cross_entropy(model(packed, mask), torch.randint(0, 3, (4,)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            watched = [w.model for w in auto.watches]
    assert watched == [model]
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (4, "forward", "", "div"), report
    assert report.source["text"].startswith("return self.head((out * mask.unsqueeze(-1)).sum(1) / mask.sum(1")


class _Trap(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(h / h.norm(dim=1, keepdim=True))  # 0/0 for a row that is exactly 0


@pytest.mark.parametrize("how", ["auto, AdamW first", "auto, SGD first", "by hand, AdamW first",
                                 "by hand, rerun=False, AdamW first", "by hand, w.step, AdamW first",
                                 "a list, AdamW first", "a list, SGD first"])
def test_one_model_two_optimizers_is_one_watch_checked_before_either_update(how):
    """The speedruns' split: one optimizer for the weight matrices, AdamW for the rest. Each got its own watch on
    the same model: two reports and two stops for one NaN, every step counted twice. One watch now hooks both and
    checks in whichever steps first, before either update (by hand: ``w.add_optimizer``, or both given as a list)."""
    torch.manual_seed(0)
    model = _Trap()
    with contextlib.ExitStack() as stack, pytest.raises(NonFiniteError) as info:
        auto = stack.enter_context(AutoTriggers(nan=True, on="raise")) if how.startswith("auto") else None
        matrices = torch.optim.SGD([p for p in model.parameters() if p.dim() == 2], lr=0.1, momentum=0.9)
        rest = torch.optim.AdamW([p for p in model.parameters() if p.dim() < 2], lr=1e-3)
        if how.startswith("a list"):
            w = stack.enter_context(tensor_dap.watch(model, [matrices, rest], on="raise"))
        elif auto is None:
            w = stack.enter_context(tensor_dap.watch(model, matrices, on="raise", rerun="rerun=False" not in how))
            w.add_optimizer(rest)
        order = [rest, matrices] if "AdamW first" in how else [matrices, rest]

        def train_step(x):
            torch.nn.functional.mse_loss(model(x), torch.zeros(16, 2)).backward()
            for optimizer in order:
                optimizer.step()
            for optimizer in order:
                optimizer.zero_grad()

        for step in range(8):
            x = torch.randn(16, 6)
            if step == 5:
                x[3] = 0.0
                with torch.no_grad():
                    model.fc1.bias.zero_()  # a zero row meets a zero bias: h is exactly 0 there
            w.step(train_step, x) if "w.step" in how else train_step(x)
            watches = list(auto.watches) if auto is not None else [w]
    begun = 6 if "w.step" in how else 5  # (w.step counts a step when it begins; the loop, at its update)
    assert len(watches) == 1 and watches[0].step_count == begun, [(w.model, w.step_count) for w in watches]
    report = info.value.report
    assert report.step == 5, report.headline  # (with no capture, no re-run: the gradients as they are, not the op)
    assert (report.op, report.phase) == ("div", "forward") or "rerun=False" in how, report.headline
    assert all(torch.isfinite(p).all() for p in model.parameters())  # stopped before either update


@pytest.mark.parametrize("given, said", [([], "an empty list"), ("adam", "optimizer is str"),
                                         ([None, None], "optimizer is NoneType"), (nn.Linear(2, 2), "is Linear")])
def test_an_optimizer_argument_of_the_wrong_kind_is_one_clear_error(given, said):
    model = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=said):
        tensor_dap.watch(model, given)
    assert not tensor_dap.triggers.active.watches()  # nothing left hooked


# ---------------------------------------------------------------- end to end, in batch mode (no terminal, no IDE)

def test_guard_keeps_numerics_bit_identical_and_never_fires_on_a_clean_run(tmp_path):
    plain = _run([sys.executable, TRAIN, "clean"], tmp_path)
    guarded = _run([*TENSOR_DAP, "--guard", "--loss-above", "5", TRAIN, "clean"], tmp_path)
    assert plain.returncode == guarded.returncode == 0
    assert guarded.stdout == plain.stdout and "TRAINING-DONE" in plain.stdout
    assert "trigger" not in guarded.stderr


def test_break_on_nan_stops_at_the_step_of_the_nan(tmp_path):
    done = _run([*TENSOR_DAP, "--break-on-nan", TRAIN, "nan"], tmp_path)
    assert done.returncode == 1 and "STEP 2 " in done.stdout and "STEP 3" not in done.stdout
    assert "NonFiniteError: tensor_dap trigger · step 3" in done.stderr
    assert "TRAINING-DONE" not in done.stdout


def test_a_nan_in_the_very_first_step_is_localized_and_bundled(tmp_path):
    """Optimizers are attached when they are created, so the model is watched from its first forward."""
    done = _run([*TENSOR_DAP, "--break-on-nan", TRAIN, "nan", "--bug-step", "0"], tmp_path)
    assert done.returncode == 1 and "STEP 0" not in done.stdout
    assert "tensor_dap trigger · step 0 · non-finite input batch, first used by linear in 0" in done.stderr
    assert "incident bundle: .tensor_dap/incidents/" in done.stderr and "cannot be re-run" not in done.stderr
    # the op ran inside torch's Linear: it is charged to the line that called the model, not to optimizer.step()
    assert re.search(r"op: linear at debuggee_launch_train.py:\d+  loss = nn.functional.mse_loss\(model\(x\), y\)",
                     done.stderr)


COMPILED = """
import pytest
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
compiled = torch.compile(model, backend="eager")  # dynamo traces the modules inside: global hooks fire there
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(3, 4)
    if step == 3:
        x[0, 0] = float("nan")
    optimizer.zero_grad()
    loss = F.cross_entropy(compiled(x), torch.tensor([0, 1, 0]))  # the model's call
    loss.backward()
    optimizer.step()
    print("STEP", step, flush=True)
"""


def test_a_compiled_model_trains_and_is_localized_under_guard(tmp_path):
    """The global hooks that look for the model fire inside the compiled model too: dynamo must run
    them, not trace them (tracing their bookkeeping failed inside dynamo and stopped the program)."""
    (tmp_path / "train_compiled.py").write_text(COMPILED)
    done = _run([*TENSOR_DAP, "--break-on-nan", "train_compiled.py"], tmp_path)
    assert "STEP 2" in done.stdout and "STEP 3" not in done.stdout, done.stderr[-3000:]
    assert "NonFiniteError: tensor_dap trigger · step 3 · non-finite input batch, first used by linear in 0" \
        in done.stderr
    assert re.search(r"op: linear at train_compiled.py:\d+  loss = F.cross_entropy\(compiled\(x\)", done.stderr)


HEADLINE = re.compile(r"LossThresholdError: (tensor_dap trigger · step 3 · loss (\d+) is above 100)")


def test_loss_above_reads_the_loss_at_backward_and_sees_through_a_grad_scaler(tmp_path):
    """The scaled loss (× 1024) is what .backward() gets; the threshold compares the loss the scaler was given."""
    plain = _run([*TENSOR_DAP, "--loss-above", "100", TRAIN, "loss"], tmp_path)
    assert plain.returncode == 1 and "STEP 2 " in plain.stdout and "STEP 3" not in plain.stdout
    loss = HEADLINE.search(plain.stderr)
    assert loss and 1e5 < int(loss.group(2)) < 1e7
    # the history starts at step 0 (it began at step 1: pytorch/examples' GAT at lr 30, 1.95 then 2318, was told
    # its loss "starts there", above the threshold)
    assert re.search(r"loss: 7\.97e5 \(last 4: [\d.]+, [\d.]+, [\d.]+, 7\.97e5\)", plain.stderr), plain.stderr
    assert "the training diverged" in plain.stderr
    assert "\n  lr: 0.01\n" in plain.stderr  # the optimizer's, read in its pre-step hook, as a watch's report has it
    assert "note: no incident bundle: nothing of the step is kept outside a watch" in plain.stderr  # and what does
    scaled = _run([*TENSOR_DAP, "--loss-above", "100", TRAIN, "scaled"], tmp_path)
    assert HEADLINE.search(scaled.stderr).group(1) == loss.group(1)


@pytest.mark.parametrize("guard", [False, True])
def test_loss_above_compares_the_steps_loss_when_micro_batches_accumulate(tmp_path, guard):
    """Four micro-batches, each loss divided by 4 (nanoGPT's accumulation): the threshold is on the step's loss, the
    one the run prints (8e5 at step 3), not on a quarter of it, and it fires before that step's update."""
    done = _run([*TENSOR_DAP, *(["--guard"] if guard else []), "--loss-above", "500000", TRAIN, "accum"], tmp_path)
    assert done.returncode == 1 and "STEP 2 " in done.stdout and "STEP 3" not in done.stdout, done.stderr
    printed = dict(line.split()[1:] for line in _run([sys.executable, TRAIN, "accum"], tmp_path).stdout.splitlines()
                   if line.startswith("STEP"))
    fired = re.search(r"LossThresholdError: tensor_dap trigger · step 3 · loss (\d+) is above 500000", done.stderr)
    assert fired and float(fired.group(1)) == pytest.approx(float(printed["3"]), rel=1e-3), done.stderr
    below = _run([*TENSOR_DAP, "--loss-above", "900000", TRAIN, "accum"], tmp_path)
    assert below.returncode == 0 and "TRAINING-DONE" in below.stdout, below.stderr  # (8e5 at its highest)
    if not guard:  # step 0: each micro-batch (0.29) below 0.5, their sum (1.16, the printed loss) above
        start = _run([*TENSOR_DAP, "--loss-above", "0.5", TRAIN, "accum"], tmp_path)
        assert "STEP 0" not in start.stdout and re.search(r"step 0 · loss 1\.1\d* is above 0\.5", start.stderr)
        assert "the loss was above the threshold at the first step it was compared" in start.stderr, start.stderr


def test_without_torch_optim_the_model_is_watched_as_each_backward_returns(tmp_path):
    """A loop updating by hand: the first backward() finds the model; a NaN batch is localized at its step (the
    loss check alone would only say the loss is NaN)."""
    done = _run([*TENSOR_DAP, "--guard", TRAIN, "manual"], tmp_path)
    assert done.returncode == 1 and "no torch.optim optimizer made: watching Sequential" in done.stderr
    assert "NonFiniteError: tensor_dap trigger · step 3 · non-finite input batch" in done.stderr
    assert "where: input of 0 (Linear)" in done.stderr and "TRAINING-DONE" not in done.stdout
    clean = _run([*TENSOR_DAP, "--guard", TRAIN, "manual", "--bug-step", "99"], tmp_path)
    plain = _run([sys.executable, TRAIN, "manual", "--bug-step", "99"], tmp_path)
    assert clean.returncode == plain.returncode == 0 and clean.stdout == plain.stdout  # numerics unchanged


@pytest.mark.parametrize("mode", ["nan", "manual"])
def test_f5_debug_training_stops_in_vscode_and_continues(tmp_path, mode):
    """The "Debug Training (tensor_dap)" template as VS Code runs it (debugpy launch of ``-m tensor_dap`` with the
    template's args, ``${file}`` = the training script): the NaN stops the IDE with the culprit in the locals,
    with an optimizer or with an update by hand (``manual``: the stop is at ``loss.backward()``)."""
    from dapclient import DapClient

    from tensor_dap.dap.launch import templates

    config = templates().configurations[0]
    assert config["module"] == "tensor_dap" and config["justMyCode"] is False
    args = [TRAIN if a == "${file}" else a for a in config["args"]] + [mode]
    main = os.path.join(os.path.dirname(HERE), "tensor_dap", "__main__.py")  # = -m tensor_dap
    client = DapClient.launch(main, args=args, just_my_code=config["justMyCode"], timeout=120, cwd=str(tmp_path))
    try:
        client.configuration_done()
        stopped = client.wait_for_event("stopped", timeout=120)
        assert stopped["reason"] == "breakpoint"
        top = client.stack_trace(stopped["threadId"], levels=1)[0]
        assert top["source"]["path"] == TRAIN and top["name"] == "main"  # the user's loop, before the update
        assert client.frame_locals()["step"]["value"] == "3"
        found = client.evaluate("__import__('tensor_dap').culprit().report.where", frame_id=top["id"])
        assert found["result"] == "'input of 0 (Linear)'"  # the NaN came in with the batch, first seen by layer 0
        client.continue_()
        client.wait_for_output("TRAINING-DONE", timeout=120)
        assert client.wait_for_event("exited", timeout=60)["exitCode"] == 0
    finally:
        client.close()


@pytest.mark.parametrize("mode", ["nan", "manual"])
def test_replay_reruns_a_bundle_on_the_programs_own_model_then_ends(tmp_path, mode):
    """`tensor-dap run --replay BUNDLE train.py` (VS Code's Replay button): the program builds its model and
    optimizer, the bundle's step is re-run on them at the first step (``manual``, no optimizer: at the first
    backward()), the report names where it was born again, with the line that called the model."""
    first = _run([*TENSOR_DAP, "--break-on-nan", TRAIN, mode], tmp_path)
    bundles = sorted((tmp_path / ".tensor_dap" / "incidents").iterdir())
    assert first.returncode == 1 and len(bundles) == 1, first.stderr
    again = _run([*TENSOR_DAP, "--replay", str(bundles[0]), TRAIN, mode], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "replaying" in again.stderr and "step 3 · replay: non-finite input batch" in again.stderr
    assert "STEP 1" not in again.stdout and "TRAINING-DONE" not in again.stdout  # it ends at the first step
    line = next(n for n, text in enumerate(open(TRAIN), 1) if "mse_loss(model(x), y)" in text)
    assert f"op: linear at debuggee_launch_train.py:{line} " in first.stderr
    assert f"op: linear at debuggee_launch_train.py:{line} " in again.stderr  # not where the replay ran
    missing = _run([*TENSOR_DAP, "--replay", str(tmp_path / "nope"), TRAIN, "nan"], tmp_path)
    assert missing.returncode == 2 and "not an incident bundle" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_replay_reaches_a_first_step_that_fails_again_as_the_program_runs(tmp_path):
    """A NaN batch at step 0, replayed on the same program (its data pipeline still makes it): before, the live
    run's loss check fired at the first backward(), before the replay's point (the first optimizer step), and the
    program ended with "the program ended before a step to replay it at"."""
    first = _run([*TENSOR_DAP, "--break-on-nan", TRAIN, "nan", "--bug-step", "0"], tmp_path)
    bundles = sorted((tmp_path / ".tensor_dap" / "incidents").iterdir())
    assert first.returncode == 1 and len(bundles) == 1, first.stderr
    again = _run([*TENSOR_DAP, "--replay", str(bundles[0]), TRAIN, "nan", "--bug-step", "0"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "step 0 · replay: non-finite input batch" in again.stderr and "loss is nan" not in again.stderr


def test_replay_of_a_bundle_with_an_empty_state_pt_is_one_line(tmp_path):
    """torch.load of an empty file raises EOFError(''): an exception without a message must still be one line
    naming the file (it was an IndexError from the first line of an empty message)."""
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "state.pt").write_bytes(b"")
    (bundle / "report.json").write_text('{"kind": "nan", "headline": "x"}')
    done = _run([*TENSOR_DAP, "--replay", str(bundle), TRAIN, "nan"], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"tensor_dap: --replay: {bundle}: cannot load state.pt: EOFError"
    shown = subprocess.run([sys.executable, "-m", "tensor_dap", "replay", str(bundle)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "x" in shown.stdout and shown.stderr == ""  # it reads report.json only


def _lbfgs_run(bug_step, models=None):
    """pytorch/examples' time-sequence prediction: LBFGS, whose model runs inside ``step(closure)``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    if models is not None:
        models.append(model)
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    x, y = torch.randn(16, 3), torch.rand(16, 1) + 0.5
    for step in range(4):
        def closure(step=step):
            optimizer.zero_grad()
            target = y if step != bug_step else (y - 1.0).log()  # log of a negative number
            loss = nn.functional.mse_loss(model(x), target)
            loss.backward()
            return loss
        optimizer.step(closure)
    return [p.detach().clone() for p in model.parameters()]


def test_a_closure_optimizer_is_watched_from_the_model_run_inside_its_first_step(capsys):
    """LBFGS calls the model only inside ``step(closure)``: its first step is not "a model that never ran"; the
    watch attached inside that closure localizes a later step's NaN (the closure is re-run: the loss's line)."""
    plain = _lbfgs_run(bug_step=None)
    with AutoTriggers(nan=True, on="raise") as auto:
        guarded = _lbfgs_run(bug_step=None)
        assert len(auto.watches) == 1 and auto.watches[0].step_count == 4 and not auto._loss_nan
    assert all(torch.equal(a, b) for a, b in zip(plain, guarded))
    with AutoTriggers(nan=True, on="raise"), pytest.raises(NonFiniteError) as info:
        _lbfgs_run(bug_step=2)
    report = info.value.report
    assert (report.step, report.op, report.module) == (2, "log", None)
    assert report.source["text"].startswith("target = y if step != bug_step else (y - 1.0).log()")
    assert "holds the parameters" not in capsys.readouterr().err


LBFGS_PROGRAM = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 8), nn.Linear(8, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=100.0, max_iter=4)  # diverges inside step 1
x, y = torch.randn(16, 3), torch.rand(16, 1) + 0.5
for step in range(4):
    def closure():
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)  # BUG
        loss.backward()
        return loss
    optimizer.step(closure)
    print("STEP", step, flush=True)
"""


def test_replay_of_a_closure_optimizers_bundle_replays_the_evaluation_that_failed(tmp_path):
    """pytorch/examples' time-sequence prediction under ``--replay``: LBFGS runs the model only inside its closure,
    so no module had run at the first step's pre-step hook ("no module that ran before the first step holds the
    parameters of LBFGS"). One evaluation of the program's closure finds the model; the bundle (the model's forwards
    in the evaluation that failed, inside step 1, and the state at its start) replays with no closure, as a
    Lightning closure, which holds another batch in another process, needs; the loss's op is the run's."""
    program = tmp_path / "lbfgs.py"
    program.write_text(LBFGS_PROGRAM)
    first = _run([*TENSOR_DAP, "--break-on-nan", str(program)], tmp_path)
    bundles = sorted((tmp_path / ".tensor_dap" / "incidents").iterdir())
    assert first.returncode == 1 and len(bundles) == 1, first.stderr
    assert f"tensor_dap.replay('{os.path.relpath(bundles[0], tmp_path)}', model, optimizer=optimizer)" in first.stderr
    # the command the report offers (a closure only the program has) is the one run: copied from the report
    offered = re.search(r"or with no code: tensor-dap run (--replay .*)", first.stderr)
    assert offered is not None and offered[1].endswith(" lbfgs.py"), first.stderr
    again = _run([*TENSOR_DAP, *shlex.split(offered[1])], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "replaying" in again.stderr and "Sequential and LBFGS" in again.stderr
    assert "step 1 · replay: Inf born in mse_loss, outside any module" in again.stderr
    line = marker_line(LBFGS_PROGRAM, "BUG")
    assert f"op: mse_loss at lbfgs.py:{line} " in first.stderr and f"op: mse_loss at lbfgs.py:{line} " in again.stderr
    assert "lr: 100" in again.stderr and "diverged" in again.stderr  # the step's facts, from the bundle's report
    assert "STEP" not in again.stdout  # it ends in the first step, before its update


@pytest.mark.parametrize("bug_step", [0, 1])
def test_a_closure_optimizers_first_step_is_checked_before_its_update(bug_step):
    """The watch is made inside the first step's closure, after that step's pre-step hook: each evaluation of the
    closure is still checked as its backward() returns, before LBFGS moves the parameters, and named by re-running
    the closure (found in pytorch/examples' time_sequence_prediction, which went NaN in step 0 and was reported at
    step 1 as "the optimizer update made a parameter non-finite")."""
    models = []
    with AutoTriggers(nan=True, on="raise"), pytest.raises(NonFiniteError) as info:
        _lbfgs_run(bug_step=bug_step, models=models)
    report = info.value.report
    assert (report.step, report.op, report.module) == (bug_step, "log", None)
    assert report.source["text"].startswith("target = y if step != bug_step else (y - 1.0).log()")
    assert all(torch.isfinite(p).all() for p in models[0].parameters())  # stopped before LBFGS used the NaN
    assert loss_tap._listeners == []  # closed with the run: no listener of the joined step is left behind


def test_an_optimizer_made_after_a_first_backward_gets_the_only_watch():
    """A backward() before any optimizer exists (a gradient check before training) watches the model as trained by
    hand; the optimizer made next takes over: one watch, one report, the step counted from its own first step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(8, 3)
    with AutoTriggers(nan=True, on="raise") as auto:
        model(x).sum().backward()  # before training: a look at the gradients
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(NonFiniteError) as info:
            for step in range(4):
                optimizer.zero_grad()
                model(x if step != 2 else x / 0).sum().backward()
                optimizer.step()
        assert len(auto.watches) == 1 and auto.watches[0].optimizer is optimizer
    assert info.value.report.step == 2 and info.value.report.where == "input of 0 (Linear)"


@pytest.mark.parametrize("mode", ["manual", "nan"])
def test_replay_of_a_damaged_report_is_one_line_even_for_a_loop_updating_by_hand(tmp_path, mode):
    """A bundle whose report.json cannot be read is refused at the first backward(): a loop updating by hand
    would otherwise train to its end waiting for an optimizer step that never comes."""
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "report.json").write_text("{bad")
    done = _run([*TENSOR_DAP, "--replay", str(bundle), TRAIN, mode], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"tensor_dap: --replay: {bundle}: cannot read report.json")
    assert "STEP 1" not in done.stdout


def test_replay_says_so_when_the_program_ends_with_nothing_to_replay_at(tmp_path):
    program = tmp_path / "no_training.py"
    program.write_text("print('EVALUATION-ONLY')\n")
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "report.json").write_text('{"kind": "nan", "headline": "x", "mode": "loop", "lr": [0.1]}')
    done = _run([*TENSOR_DAP, "--replay", str(bundle), str(program)], tmp_path)
    assert "EVALUATION-ONLY" in done.stdout
    assert f"--replay: the program ended before a step to replay it at: {bundle} was not replayed" in done.stderr


FORWARD_FORWARD = '''
import torch
from torch import nn

class Layer(nn.Linear):  # pytorch/examples' forward-forward: each layer trains itself, forward called directly
    def __init__(self):
        super().__init__(8, 8)
        self.opt = torch.optim.Adam(self.parameters(), lr=0.01)

    def train_once(self, x, threshold):
        goodness = self.forward(x).pow(2).mean(1)
        loss = torch.log1p(torch.exp(threshold - goodness)).mean()  # a hand-written softplus
        self.opt.zero_grad()
        loss.backward()  # BACKWARD-LINE
        self.opt.step()

layer = Layer()
for threshold in (2.0, 2.0, 200.0):  # exp(200) overflows float32
    layer.train_once(torch.rand(16, 8), threshold)
print("DONE")
'''


def test_a_model_that_never_runs_through_call_gets_its_loss_op_named(tmp_path):
    """No module runs through ``__call__`` (its forward is called directly): no model to watch, so the loss is checked
    at each backward(); a non-finite one is named by the op of the loss computation that made it."""
    (tmp_path / "ff.py").write_text(FORWARD_FORWARD)
    done = _run([*TENSOR_DAP, "--break-on-nan", "ff.py"], tmp_path)
    assert done.returncode == 1 and "DONE" not in done.stdout
    err = " ".join(done.stderr.split())
    assert "no module run with gradients holds the parameters of Adam" in err
    assert "step 2 · loss is inf" in err
    line = marker_line(FORWARD_FORWARD, "BACKWARD-LINE")
    assert f"op: exp, in the loss computed before ff.py:{line} loss.backward() # BACKWARD-LINE" in err
    assert "diagnosis: exp overflowed" in err


SPAWNED = '''
import torch
import torch.multiprocessing as mp

def train(_):  # pytorch/examples' mnist_hogwild: the training runs in processes started with spawn
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        (w * float("nan")).sum().backward()
        opt.step()

if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    p = mp.Process(target=train, args=(0,))
    p.start()
    p.join()
    print("PARENT-DONE")
'''


def test_a_run_whose_training_ran_elsewhere_says_nothing_was_checked(tmp_path):
    (tmp_path / "hog.py").write_text(SPAWNED)
    done = _run([*TENSOR_DAP, "--break-on-nan", "hog.py"], tmp_path)
    assert done.returncode == 0 and "PARENT-DONE" in done.stdout
    err = " ".join(done.stderr.split())
    assert "no backward() or optimizer step ran in this process before it ended, so nothing was checked" in err
    trained = _run([*TENSOR_DAP, "--guard", TRAIN, "clean"], tmp_path)  # a run that trained here: no such line
    assert trained.returncode == 0 and "nothing was checked" not in trained.stderr


VAE_SQRT = '''
import torch
import torch.nn.functional as F
from torch import nn

class VAE(nn.Module):  # pytorch/examples' VAE with a planted std = sqrt(logvar)
    def __init__(self):
        super().__init__()
        self.enc, self.mu, self.logvar, self.dec = nn.Linear(8, 6), nn.Linear(6, 2), nn.Linear(6, 2), nn.Linear(2, 8)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        std = torch.sqrt(self.logvar(h))  # BUG
        return torch.sigmoid(self.dec(self.mu(h) + torch.randn_like(std) * std))

torch.manual_seed(0)
model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.rand(16, 8)
recon = model(x)
F.binary_cross_entropy(recon, x).backward()  # raises: its input holds NaN
optimizer.step()
'''


def test_a_crash_in_the_first_forward_is_explained_and_not_called_unchecked(tmp_path):
    """No backward() ran (the loss function raised on the NaN first): the crash names the op that made it, and
    the end of the run does not add that nothing was checked."""
    (tmp_path / "vae.py").write_text(VAE_SQRT)
    done = _run([*TENSOR_DAP, "--break-on-nan", "vae.py"], tmp_path)
    err = " ".join(done.stderr.split())
    assert done.returncode == 1 and "all elements of input should be between 0 and 1" in err
    line = marker_line(VAE_SQRT, "BUG")
    assert f"op: sqrt at vae.py:{line} std = torch.sqrt(self.logvar(h)) # BUG" in err
    assert "diagnosis: sqrt of a negative number is NaN" in err
    assert "nothing was checked" not in err


def test_a_step_the_scaler_skipped_does_not_add_to_the_next_steps_loss():
    """The step loss's state between the optimizer hooks (``step_loss``): a GradScaler that skips a step runs no
    update, so its micro-batches' losses must not add to the next step's; the first step, before any update is
    seen, compares each loss as it comes."""
    from tensor_dap import LossThresholdError
    from tensor_dap.triggers import step_loss
    from tensor_dap.triggers.step_loss import StepLoss

    steps = [0]
    threshold = StepLoss(5.0, lambda: steps[0], "raise", None)

    def step(*losses, update=True):
        for loss in losses:
            threshold.backward(torch.tensor(loss), steps[0])
        if update:
            threshold.before_update(None, (None,), {})
            threshold.after_update()
            steps[0] += 1

    step(1.0, 1.0, 1.0, 1.0)  # step 0: each compared alone
    step(1.0, 1.0, 1.0, 1.0, update=False)  # skipped: no hooks ran
    step(1.0, 1.0, 1.0, 1.0)  # 4 < 5: the skipped step's 4 are not added
    with pytest.raises(LossThresholdError, match="step 2 · loss 6 is above 5"):
        step(1.5, 1.5, 1.5, 1.5)
    first = StepLoss(5.0, lambda: 0, "raise", None)
    with pytest.raises(LossThresholdError, match="step 0 · loss 6 is above 5"):
        first.backward(torch.tensor(6.0), 0)  # no update seen yet: compared as it comes
    accumulated = StepLoss(5.0, lambda: 0, "raise", None)
    for _ in range(4):
        accumulated.backward(torch.tensor(1.5), 0)  # each below 5: not fired as it came
    with pytest.raises(LossThresholdError, match="step 0 · loss 6 is above 5"):
        accumulated.before_update(None, (None,), {})  # an optimizer steps: the first step's micro-batches add up
    by_hand = StepLoss(5.0, lambda: 0, "raise", None)
    for _ in range(10_000):
        by_hand.backward(torch.tensor(1.0), 0)  # no optimizer ever steps: a bounded number kept, none added up
    assert len(by_hand._losses) == step_loss.FIRST_STEP_KEPT


SELF_TRAINING_LAYER = """
import torch
from torch import nn

class Layer(nn.Linear):  # pytorch/examples' forward-forward: each layer trains itself, calling self.forward
    def __init__(self, n_in, n_out):
        super().__init__(n_in, n_out)
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)

    def forward(self, x):
        return torch.relu((x / x.norm(2, 1, keepdim=True)) @ self.weight.T + self.bias)

    def train(self, x):
        for step in range(3):
            loss = self.forward(x).pow(2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            print("STEP", step, flush=True)

x = torch.randn(8, 6)
x[2] = 0.0  # a row of zeros: 0 / 0 in its forward
Layer(6, 4).train(x)
"""


def test_no_bundle_names_the_module_a_watch_would_need_when_its_forward_is_called_directly(tmp_path):
    """A layer training itself through ``self.forward(x)`` never goes through nn.Module's call, where
    ``--break-on-nan`` finds a model to watch: the loss check stops it at its first backward() and says which
    module to watch, and why none was."""
    (tmp_path / "ff.py").write_text(SELF_TRAINING_LAYER)
    done = _run([*TENSOR_DAP, "--break-on-nan", "ff.py"], tmp_path)
    assert done.returncode == 1 and "STEP 0" not in done.stdout, done.stderr[-3000:]
    assert "tensor_dap trigger · step 0 · loss is nan" in done.stderr
    assert "tensor_dap.watch(Layer, optimizer) keeps each step to replay (Layer holds the parameters this loss " \
           "trains); tensor-dap run --break-on-nan watches a model from its first call, model(x), and never sees a " \
           "forward called as model.forward(x)" in " ".join(done.stderr.split())
