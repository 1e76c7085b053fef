"""A NaN/Inf born inside a backward the program wrote (a custom ``autograd.Function``): the report names the op and
the line in that backward, not only the line that called ``apply``, in both modes and in a replay of its bundle; the
op tracker pushed around such a backward always comes off torch's mode stack, whatever that backward does."""

from __future__ import annotations

import origins
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import _get_current_function_mode_stack

import tensor_dap
from tensor_dap import NonFiniteError

pytestmark = [pytest.mark.timeout(90), pytest.mark.filterwarnings("ignore::UserWarning")]


def watched(model, optimizer, batch, step_fn, steps, loop, **kw):
    with pytest.raises(NonFiniteError) as info, \
            tensor_dap.watch(model, optimizer, on="raise", **kw) as w:
        for step in range(steps):
            step_fn(*batch(step)) if loop else w.step(step_fn, *batch(step))
    assert _get_current_function_mode_stack() == []  # nothing of tensor_dap's left on
    return info.value.report


def mse_step(model, optimizer):
    """A plain training step on (x, y) batches."""
    def step(x, y):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step


def said_inside() -> str:
    line = origins.birth_line("custom_backward.inside")
    return f"div at origins.py:{line} (return grad / x)"


@pytest.mark.parametrize("loop", [False, True], ids=["w.step", "loop"])
def test_the_line_in_the_hand_written_backward_is_named(loop):
    report = watched(*origins.build("custom_backward"), origins.BUG_STEP + 4, loop, capture=False)
    assert report.op == "SafeLogBackward" and report.phase == "backward"
    assert report.source["line"] == origins.birth_line("custom_backward")  # the call of SafeLog.apply, as before
    assert said_inside() in report.diagnosis, report.diagnosis
    assert any(said_inside() in note for note in report.notes), report.notes


def test_a_replay_of_the_bundle_names_it_too(tmp_path):
    model, optimizer, batch, step_fn = origins.build("custom_backward")
    report = watched(model, optimizer, batch, step_fn, origins.BUG_STEP + 4, True, capture=str(tmp_path))
    assert report.bundle is not None and report.mode == "loop"
    with pytest.raises(NonFiniteError) as info:
        tensor_dap.replay(report.bundle, model, optimizer=optimizer, on="raise")
    assert said_inside() in (info.value.report.diagnosis or ""), info.value.report.diagnosis


class Refusing(torch.autograd.Function):
    """A backward that will not run under a TorchFunctionMode (as some libraries' kernels assert), dividing by its
    input otherwise."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        if torch._C._is_torch_function_mode_enabled():
            raise RuntimeError("this kernel cannot run under a TorchFunctionMode")
        (x,) = ctx.saved_tensors
        return grad / x


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(4, 8), nn.Linear(8, 1)

    def forward(self, x):
        h = self.inp(x)
        return self.out(Refusing.apply(h * (h > 0).float()))  # 0 where the gate is closed: 1/0 in its backward


def test_a_backward_refusing_the_op_tracker_is_re_run_without_it_and_training_goes_on():
    """The re-run with the tracker inside custom backwards fails; the one without it still names the Function
    (from its node, at the line that called ``apply``), and nothing of the failed attempt stays behind."""
    torch.manual_seed(0)
    model = Gate()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    step = mse_step(model, optimizer)
    report = watched(model, optimizer, lambda _: (x, y), step, 3, False, capture=False)
    assert (report.phase, report.module, report.op) == ("backward", "", "RefusingBackward"), report.headline
    assert report.source["text"].startswith("return self.out(Refusing.apply(")
    assert not any("failed" in note for note in report.notes), report.notes
    with torch.no_grad():  # and torch goes on as before, with no mode of ours
        model.inp.weight.fill_(0.1)
        model.inp.bias.fill_(1.0)
    assert torch.isfinite(step(x, y))


def test_module_backward_hooks_are_torch_plumbing_not_the_program_s_backward():
    model, optimizer, batch, step_fn = origins.build("custom_backward")
    seen = []
    model.proj.register_full_backward_hook(lambda m, gi, go: seen.append(len(gi)) and None)
    report = watched(model, optimizer, batch, step_fn, origins.BUG_STEP + 4, False, capture=False)
    assert seen and report.op == "SafeLogBackward"
    assert said_inside() in report.diagnosis


class GatedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 32)

    def forward(self, x):
        h = self.lin(x)
        return origins.SafeLog.apply(h * (h > 0).float())


class CheckpointedNet(nn.Module):
    """The gated block under ``torch.utils.checkpoint(use_reentrant=True)``: its backward is itself a custom
    Function's (``CheckpointFunction``), which re-runs the block and calls ``backward()`` inside."""

    def __init__(self) -> None:
        super().__init__()
        self.block, self.head = GatedBlock(), nn.Linear(32, 4)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return self.head(checkpoint(self.block, x, use_reentrant=True))


@pytest.mark.parametrize("loop", [False, True], ids=["w.step", "loop"])
def test_inside_a_reentrant_checkpoint_the_hand_written_backward_is_named_too(loop):
    torch.manual_seed(0)
    model = CheckpointedNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 8, requires_grad=True), torch.randn(16, 4)

    step = mse_step(model, optimizer)
    report = watched(model, optimizer, lambda _: (x, y), step, 2, loop, capture=False)
    assert (report.phase, report.op) == ("backward", "SafeLogBackward"), report.headline
    assert said_inside() in report.diagnosis, report.diagnosis


def unit(g):
    return g / g.norm()  # BIRTH-HOOK


def unit_numpy(g):
    import numpy as np

    a = g.numpy()
    return torch.from_numpy(a / np.linalg.norm(a))


def hooked_training(hook, loop, order=None):
    """Every parameter's gradient normalized by a hook of the program's; step 2's batch is blank, so the first
    layer's weight gradient is all zero and its norm 0."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    for p in model.parameters():
        if order is not None:
            p.register_hook(lambda g, p=p: order.append(("first", id(p))))
        p.register_hook(hook)
        if order is not None:
            p.register_hook(lambda g, p=p: order.append(("second", id(p))))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 4)

    step = mse_step(model, optimizer)
    return model, watched(model, optimizer, lambda i: (x * 0 if i == 2 else x, y), step, 5, loop, capture=False)


def hook_line() -> int:
    with open(__file__, encoding="utf-8") as f:
        return next(n for n, text in enumerate(f, 1) if text.rstrip().endswith("# BIRTH-HOOK"))


@pytest.mark.parametrize("loop", [False, True], ids=["w.step", "loop"])
def test_a_gradient_hook_making_the_nan_is_named_with_its_op_and_line(loop):
    _, report = hooked_training(unit, loop)
    assert (report.step, report.phase, report.module, report.op) == (2, "backward", "0", "div"), report.headline
    assert report.source["line"] == hook_line() and report.source["text"] == "return g / g.norm()  # BIRTH-HOOK"
    assert "division by zero" in report.diagnosis
    assert any("the gradient hook unit on its parameter 'weight' made NaN from a finite gradient" in note
               for note in report.notes), report.notes
    sections = {section for section, _, _ in report.tensors}
    assert "op inputs" in sections and "grad_output" not in sections  # the hook's op, not an autograd node


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_a_hook_computing_outside_torch_is_named_by_its_definition():
    _, report = hooked_training(unit_numpy, True)
    assert (report.phase, report.module, report.op) == ("backward", "0", "unit_numpy"), report.headline
    assert report.source["line"] == unit_numpy.__code__.co_firstlineno


def test_the_program_s_hooks_keep_their_order_after_a_re_run_put_one_of_ours_before_them():
    order = []
    model, _ = hooked_training(unit, True, order)
    first = id(next(model.parameters()))
    order.clear()
    model(torch.randn(2, 8)).sum().backward()  # after the watch: as the program registered them, once each
    mine = [which for which, p in order if p == first]
    assert mine == ["first", "second"]
    assert all(len(p._backward_hooks) == 3 for p in model.parameters())  # nothing of tensor_dap's left


class ScaledGradients(nn.Module):
    """Its forward puts a hook on its hidden activation scaling the gradient there to [-1, 1] (in place, or as a
    new tensor): 0 / 0 where that gradient is all zero."""

    def __init__(self, in_place: bool) -> None:
        super().__init__()
        self.a, self.b, self.in_place = nn.Linear(8, 16), nn.Linear(16, 4), in_place

    def forward(self, x):
        h = torch.relu(self.a(x))
        if h.requires_grad:
            h.register_hook(self.scale_in_place if self.in_place else self.scale)  # REGISTERED
        return self.b(h)

    @staticmethod
    def scale(g):
        return g / g.abs().max()  # BIRTH-ACTIVATION-HOOK

    @staticmethod
    def scale_in_place(g):
        g.div_(g.abs().max())  # BIRTH-ACTIVATION-HOOK-IN-PLACE


def marked(marker: str) -> int:
    with open(__file__, encoding="utf-8") as f:
        return next(n for n, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


@pytest.mark.parametrize("in_place", [False, True], ids=["new", "in-place"])
@pytest.mark.parametrize("loop", [False, True], ids=["w.step", "loop"])
def test_a_hook_on_an_activation_making_the_nan_is_named_with_its_op_line_and_module(loop, in_place):
    torch.manual_seed(0)
    model = ScaledGradients(in_place)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 8), torch.randn(32, 4)

    def step(x, fitted):
        optimizer.zero_grad()
        out = model(x)
        loss = F.mse_loss(out, out.detach() if fitted else y)  # a batch fitted exactly: every gradient is 0
        loss.backward()
        optimizer.step()
        return loss

    report = watched(model, optimizer, lambda i: (x, i == 2), step, 5, loop, capture=False)
    marker = "BIRTH-ACTIVATION-HOOK" + ("-IN-PLACE" if in_place else "")
    assert (report.step, report.phase, report.module, report.op) == (2, "backward", "", "div_" if in_place else "div")
    assert report.source["line"] == marked(marker), report.source
    register_line = marked("REGISTERED")  # h.register_hook(...) in forward
    assert any(f"on a tensor registered at test_python_backward.py:{register_line} made NaN from a finite gradient"
               in note for note in report.notes), report.notes


def normalized_input_gradient(module, grad_input, grad_output):
    g = grad_input[0]
    return (g / g.norm(),)  # BIRTH-MODULE-HOOK


def normalized_output_gradient(module, grad_output):
    g = grad_output[0]
    return (g / g.norm(),)  # BIRTH-MODULE-PRE-HOOK


@pytest.mark.parametrize("pre", [False, True], ids=["full", "pre"])
@pytest.mark.parametrize("loop", [False, True], ids=["w.step", "loop"])
def test_a_module_backward_hook_making_the_nan_is_named_with_its_op_and_line(loop, pre):
    """``register_full_backward_hook`` (or its pre-hook) normalizing a gradient that is all zero (every ReLU off): the
    hook's division is named, not the module's own backward; the program's hook is its own again afterwards."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    hook = normalized_output_gradient if pre else normalized_input_gradient
    target = model[0] if pre else model[1]  # the gradient ReLU passes down (to the first Linear) is the zero one
    (target.register_full_backward_pre_hook if pre else target.register_full_backward_hook)(hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(6, 4), torch.randn(6, 2)

    def batch(i):
        if i == 2:
            with torch.no_grad():
                model[0].bias.fill_(-100.0)  # every ReLU off: a zero gradient
        return x, y

    report = watched(model, optimizer, batch, mse_step(model, optimizer), 5, loop, capture=False)
    name = "0" if pre else "1"
    assert (report.step, report.phase, report.module, report.op) == (2, "backward", name, "div"), report.headline
    marker = "BIRTH-MODULE-PRE-HOOK" if pre else "BIRTH-MODULE-HOOK"
    assert report.source["line"] == marked(marker), report.source
    kind = "register_full_backward_pre_hook" if pre else "register_full_backward_hook"
    assert f"the gradient hook {hook.__name__} on {name} ({kind}) made NaN from a finite gradient" in report.notes[0]
    hooks = target._backward_pre_hooks if pre else target._backward_hooks
    assert list(hooks.values()) == [hook]  # put back as the program registered it
