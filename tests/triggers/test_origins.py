"""The birthplace of a NaN/Inf: eight planted bugs in a small transformer, an MLP, a CNN and an LSTM.

Each report must name the module whose own code produced the first non-finite value, the phase,
the op, and the user's line (looked up from the ``# BIRTH:`` marker in harness/origins.py), in
the exact ``w.step`` mode and, for bugs inside the model, in the unchanged-loop mode too.
"""

from __future__ import annotations

import json
import math
import os

import origins
import pytest
import torch

import tensor_dap
from tensor_dap import NonFiniteError
from tensor_dap.format import fmt_num
from tensor_dap.triggers.report import Report, to_json, to_text

pytestmark = [pytest.mark.timeout(90), pytest.mark.filterwarnings("ignore::UserWarning")]

STEPS = origins.BUG_STEP + 8
DIAGNOSIS = {"masked_softmax": "fully masked row", "where_sqrt": "torch.where does not stop",
             "log_zero_loss": "torch.log_softmax(x, dim) instead of torch.log(torch.softmax",  # a softmax's 0
             "zero_norm": "division by zero", "exploding_lr": "diverged", "fp16_matmul": "float16 overflow",
             "nan_batch": "the batch itself", "inf_batch_rnn": "the batch itself",
             "custom_backward": "SafeLog.backward, written by hand, made Inf from finite gradients"}
IN_MODEL = [b for b, (module, _, _) in origins.EXPECTED.items() if module is not None]


def run(bug, loop=False, **kw):
    model, optimizer, batch, step_fn = origins.build(bug)
    with pytest.raises(NonFiniteError) as info, \
            tensor_dap.watch(model, optimizer, on="raise", capture=False, **kw) as w:
        for step in range(STEPS):
            step_fn(*batch(step)) if loop else w.step(step_fn, *batch(step))
    return info.value.report


def assert_names_the_birthplace(report, bug):
    module, phase, op = origins.EXPECTED[bug]
    assert (report.module, report.phase, report.op) == (module, phase, op), report.headline
    line = origins.birth_line(bug)
    with open(origins.__file__, encoding="utf-8") as f:
        text = f.read().splitlines()[line - 1].strip()
    assert report.source is not None, "no source line"
    assert os.path.samefile(report.source["file"], origins.__file__)
    assert (report.source["line"], report.source["text"]) == (line, text)


@pytest.mark.parametrize("bug", origins.BUGS)
def test_w_step_names_module_phase_op_and_line(bug):
    report = run(bug)
    assert_names_the_birthplace(report, bug)
    assert report.step == origins.BUG_STEP or (bug == "exploding_lr" and report.step > origins.BUG_STEP)
    assert DIAGNOSIS[bug] in (report.diagnosis or ""), report.diagnosis
    assert report.version == 3 and report.lr and report.loss_history  # the numbers that tell bug from divergence


@pytest.mark.parametrize("retain", [True, False], ids=["output-keeps-grad", "node-hook"])
@pytest.mark.parametrize("bug", IN_MODEL)
def test_unchanged_loop_names_the_same_place_as_w_step(bug, retain, monkeypatch):
    """Both ways the loop keeps the gradient reaching the model's outputs: a small output keeps its own
    (retain_grad), a large one is seen by a hook on the node that made it."""
    if not retain:
        monkeypatch.setattr("tensor_dap.triggers.loop.RETAIN_BYTES", 0)
    report = run(bug, loop=True)
    assert_names_the_birthplace(report, bug)
    assert report.step == origins.BUG_STEP


@pytest.mark.parametrize("retain", [True, False], ids=["output-keeps-grad", "node-hook"])
@pytest.mark.parametrize("bug", [b for b in origins.BUGS if b not in IN_MODEL])
def test_unchanged_loop_blames_the_loss_outside_the_model_at_its_backward_line(bug, retain, monkeypatch):
    """The loss function is not re-run in the unchanged loop: a NaN/Inf born there (log(0), a diverged
    MSE whose gradient is still finite) is the loss phase, at the backward() line, never a module; its op
    is read from the loss's graph."""
    if not retain:
        monkeypatch.setattr("tensor_dap.triggers.loop.RETAIN_BYTES", 0)
    exact, report = run(bug), run(bug, loop=True)
    assert (report.module, report.phase, report.step) == (None, "loss", exact.step)
    with open(origins.__file__, encoding="utf-8") as f:
        text = f.read().splitlines()[report.source["line"] - 1]
    assert ".backward()" in text and os.path.samefile(report.source["file"], origins.__file__)
    assert report.loss is not None and not math.isfinite(report.loss)  # the loss handed to backward()
    assert len(report.loss_history) == report.step + 1
    if bug == "log_zero_loss":  # the op itself, read from the loss's graph when backward() was called
        assert report.op == exact.op == "log" and DIAGNOSIS[bug] in report.diagnosis
        assert report.origin.startswith("log, in the loss computed before origins.py:")
    else:  # mse_loss of huge outputs overflows: re-computed from the inputs its node saved
        assert report.op == exact.op == "mse_loss" and DIAGNOSIS[bug] in report.diagnosis


def test_the_masked_softmax_is_blamed_not_the_dropout_that_saw_it_first():
    report = run("masked_softmax")
    assert report.module_type == "Attention" and "attn_dropout" in report.notes[0]  # seen there, born here
    assert "masked_fill" in report.notes[0]  # the -inf it came from


class TwoMasks(torch.nn.Module):
    """makemore's attention with a padding mask added: token 0 is the padding and also the start token, so query 0,
    whose only causal key is the start, has nothing left."""

    def __init__(self):
        super().__init__()
        self.qk = torch.nn.Linear(4, 8)
        self.register_buffer("causal", torch.tril(torch.ones(5, 5)))

    def forward(self, x, idx):
        q, k = self.qk(x).split(4, dim=-1)
        att = q @ k.transpose(-2, -1)
        att = att.masked_fill(self.causal == 0, float("-inf"))  # CAUSAL
        att = att.masked_fill((idx == 0)[:, None, :], float("-inf"))  # PADDING
        return torch.softmax(att, dim=-1) @ x


def test_a_row_emptied_by_two_masks_names_both_lines_and_the_rows():
    model = TwoMasks()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    idx = torch.tensor([[0, 3, 4, 0, 0], [0, 2, 0, 0, 0]])
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        w.step(lambda: (model(torch.randn(2, 5, 4), idx).sum().backward(), optimizer.step()))
    report = info.value.report
    assert (report.op, report.phase, report.module) == ("softmax", "forward", "")
    # the root module has no dotted path: named by its class, in the headline and the where line alike
    assert report.headline == "NaN born in softmax, in the forward of TwoMasks, the model itself", report.headline
    assert report.where == "forward of the model itself (TwoMasks)"
    with open(__file__, encoding="utf-8") as f:
        lines = {tag: n for n, text in enumerate(f, 1) for tag in ("CAUSAL", "PADDING") if text.endswith(f"# {tag}\n")}
    name = os.path.basename(__file__)
    assert f"(from masked_fill at {name}:{lines['PADDING']}, after masked_fill at {name}:{lines['CAUSAL']})" \
        in report.notes[0], report.notes
    # query 0 of each sequence: every later query keeps a key (the second sequence's token 1)
    assert "2 of 10 rows along the last dim are entirely -inf: index 0 of dim 1 (of 5)" in report.notes[0]


def test_a_finite_batch_taken_by_many_ops_is_read_once_by_the_re_run(monkeypatch):
    """Every op's nodes note a non-finite input they were given; a finite batch (a dense skip connection takes it at
    every layer) is read once for that, not once per op."""
    from tensor_dap.triggers import origin

    class Skips(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(6))

        def forward(self, x):
            h = torch.zeros_like(x)
            for layer in self.layers:
                h = torch.tanh(layer(h) + x)  # the batch, at every layer
            return torch.log(h - h)  # -inf: the bug the re-run is for

    model, reads = Skips(), []
    real = origin.kind_of
    monkeypatch.setattr(origin, "kind_of", lambda t: reads.append(t is batch) or real(t))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = torch.randn(3, 4)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        w.step(lambda: (model(batch).sum().backward(), optimizer.step()))
    assert (info.value.report.op, info.value.report.phase) == ("log", "forward")
    assert reads.count(True) == 1, reads


def test_an_inf_the_lstm_saturates_on_is_blamed_on_the_batch_with_the_backward_that_made_the_nan():
    """The LSTM's gates take an Inf in the batch to 1 or 0 (the model's output and loss stay finite); the NaN first
    appears in its backward's weight gradient. The cause is the batch's sample, not the LSTM."""
    report = run("inf_batch_rnn")
    assert math.isfinite(report.loss)
    note = report.notes[0]
    assert note.startswith("the batch handed to the step is already non-finite "
                           "(1 row of 8 along dim 0 holds NaN/Inf: 5; the NaN/Inf only at index ")
    assert " in rnn stayed finite on it, and its backward " in note and note.endswith(" made NaN from it")
    assert f"origins.py:{origins.birth_line('inf_batch_rnn')}" in note  # where the backward's node was made


def test_the_backward_finding_names_the_autograd_node_and_its_forward_op():
    report = run("where_sqrt")
    assert (report.op, report.forward_op) == ("SqrtBackward0", "sqrt")
    assert "SqrtBackward0 (the backward of sqrt)" in report.headline


def test_exploding_learning_rate_reports_growing_lr_loss_history_and_max_value():
    report = run("exploding_lr")
    assert report.lr and report.lr[0] > 1.0  # 0.01 × 100 per step
    assert report.max_abs is not None and report.max_abs > 1e15
    finite = [v for v in report.loss_history if v == v and abs(v) != float("inf")]
    assert len(finite) >= 3 and finite[-1] > finite[0]


@pytest.mark.parametrize(("bug", "of"), [("fp16_matmul", "the op's inputs"),  # the matmul overflowed from these
                                          ("masked_softmax", "parameters and gradients")])  # Inf in, nothing overflowed
def test_the_max_value_line_says_what_it_is_the_largest_of(bug, of):
    """A report's max |value| is of the op's inputs when an op overflowed from finite ones, else of every parameter
    and gradient: a bare 'max |value|: 1' in a masked-softmax report read as if 1 had overflowed."""
    report = run(bug)
    assert report.max_abs is not None and report.max_abs_of == of
    assert f"max |value|: {fmt_num(report.max_abs)} ({of})" in to_text(report)
    assert Report.from_dict(json.loads(to_json(report))).max_abs_of == of  # kept in report.json


def test_deliberate_minus_inf_masks_are_not_alarms():
    """A causal mask with -inf every step trains clean: no report, and the tracker lets it through."""
    model, optimizer, batch, step_fn = origins.build("where_sqrt")  # where_sqrt is off before BUG_STEP
    with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step in range(origins.BUG_STEP):
            w.step(step_fn, *batch(step))
    assert w.reports == []


def test_when_the_tracker_cannot_see_the_module_hooks_still_name_the_module(monkeypatch):
    """An op hidden from the function mode (here: the tracker is switched off) falls back to module hooks."""
    from tensor_dap.triggers import origin

    monkeypatch.setattr(origin.Tracker, "__torch_function__",
                        lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {})))
    report = run("zero_norm")
    assert (report.module, report.phase, report.op) == ("norm", "forward", None)


def test_numerics_are_bit_identical_with_the_tracker_rerun():
    """on='log' keeps training after a report: same parameters as a run without watch."""
    def train(watched):
        model, optimizer, batch, step_fn = origins.build("masked_softmax")
        w = tensor_dap.watch(model, optimizer, on="log", capture=False) if watched else None
        for step in range(origins.BUG_STEP + 2):
            w.step(step_fn, *batch(step)) if w else step_fn(*batch(step))
        if w:
            w.close()
            assert len(w.reports) == 1
        return model.state_dict(), torch.rand(2)

    (plain, draw), (watched, draw2) = train(False), train(True)
    assert all(torch.equal(plain[k].nan_to_num(), watched[k].nan_to_num()) for k in plain)
    assert torch.equal(draw, draw2)


def test_a_learning_rate_shared_by_every_parameter_group_is_said_once():
    """HF's Trainer makes two groups (with and without weight decay) at one learning rate."""
    shared = Report(kind="above", headline="loss 5 is above 4", step=2, lr=[5e-4, 5e-4])
    assert f"lr: {fmt_num(5e-4)} (all 2 parameter groups)" in to_text(shared)
    apart = Report(kind="above", headline="loss 5 is above 4", step=2, lr=[1e-3, 1e-4])
    assert f"lr: {fmt_num(1e-3)}, {fmt_num(1e-4)}" in to_text(apart)


class _Coupling(torch.nn.Module):
    """A flow layer: its container calls ``forward`` directly, as nflib's NormalizingFlow does."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.scale(x) * 100) * x  # overflows once the scale grows


class _Flow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.flows = torch.nn.ModuleList(_Coupling() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for flow in self.flows:
            x = flow.forward(x)  # no nn.Module call: no module hooks for the layer
        return x


@pytest.mark.parametrize("loop", [False, True])
def test_a_layer_whose_forward_is_called_directly_is_named_by_the_method_running_the_op(loop):
    torch.manual_seed(0)
    model = _Flow()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x: torch.Tensor, bad: bool) -> None:
        if bad:
            with torch.no_grad():
                model.flows[1].scale.bias.fill_(2.0)  # exp(200) overflows in layer 1
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()

    with pytest.raises(NonFiniteError) as info, \
            tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for i in range(4):
            x = torch.full((4, 2), 0.01)
            step(x, i == 2) if loop else w.step(step, x, i == 2)
    report = info.value.report
    assert (report.phase, report.module, report.op) == ("forward", "flows.1", "exp"), report
    assert "(_Coupling)" in to_text(report) and report.source["text"].startswith("return torch.exp(")


class _MaskedChannel(torch.nn.Module):
    """A channel masked with -inf on purpose, then fed to a conv: its sums of -inf and +inf terms make NaN."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(2, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channel = torch.zeros(1, 2, 1, dtype=torch.bool)
        channel[0, 0] = True
        return self.conv(x.masked_fill(channel, float("-inf")))


def test_rows_of_minus_inf_are_told_for_a_softmax_not_for_a_conv():
    torch.manual_seed(0)
    model = _MaskedChannel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        w.step(lambda: (model(torch.randn(3, 2, 6)).sum().backward(), optimizer.step()))
    report = info.value.report
    assert (report.op, report.module) == ("conv1d", "conv"), report
    assert "conv1d made NaN from inputs holding Inf (from masked_fill" in report.notes[0], report.notes
    assert "rows along the last dim" not in report.notes[0]  # a conv's input rows are positions, not a mask's rows
