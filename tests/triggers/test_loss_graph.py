"""A NaN/Inf born in a loss function nobody handed to tensor_dap: the unchanged loop reads the op from the
loss's autograd graph when backward() is called (``loss_graph``)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from gan import hand_bce
from torch import nn

from tensor_dap.triggers import loss_graph
from tensor_dap.triggers.diagnose import diagnose
from tensor_dap.triggers.loss_graph import read

pytestmark = [pytest.mark.timeout(60)]


def loss_birth(loss, made=None):
    """The op read from the graph of ``loss``, over what was computed after the tensor ``made``."""
    graph = read(loss, [made.grad_fn] if made is not None else [])
    assert graph.reaches == (made is not None)
    return graph.birth


def test_a_saturated_sigmoid_in_a_hand_written_bce_is_log_of_zero():
    w = torch.tensor([60.0, 0.3], requires_grad=True)
    p = torch.sigmoid(w * 1.0)  # the "model": 60 saturates to exactly 1.0 in float32
    loss = hand_bce(p, torch.zeros(2))
    birth = loss_birth(loss, p)
    assert (birth.phase, birth.op, birth.kind, birth.module) == ("loss", "log", "inf", None)
    [(name, x)] = birth.inputs
    assert name == "input" and x[0].item() == 0.0 and x.grad_fn is None  # detached: no graph kept alive
    assert torch.isneginf(birth.output[0]) and math.isfinite(birth.output[1].item())


@pytest.mark.parametrize("make, op", [
    (lambda y: (y / (y - y)).sum(), "div"),  # 0/0 and x/0
    (lambda y: (y / 0.0).sum(), "div"),  # a Python zero: only the divisor is saved
    (lambda y: torch.sqrt(y - 3).sum(), "sqrt"),
    (lambda y: (y - 2).pow(-1).sum(), "pow"),
    (lambda y: torch.exp(y * 100).sum(), "exp"),
])
def test_the_ops_that_make_non_finite_values_from_finite_ones_are_named(make, op):
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    birth = loss_birth(make(y), y)
    assert birth is not None and birth.op == op


def test_a_squared_error_that_overflows_is_named_mse_loss():
    x = torch.tensor([1e30, 2.0], requires_grad=True)
    y = x * 1.0
    birth = loss_birth(nn.functional.mse_loss(y, torch.zeros(2)), y)
    assert (birth.op, birth.kind) == ("mse_loss", "inf")
    assert [name for name, _ in birth.inputs] == ["input", "target"]


@pytest.mark.parametrize("reduction, ignore_index", [("mean", -100), ("mean", 3)])
def test_a_mean_over_targets_all_ignored_is_named_nll_loss_with_the_targets(reduction, ignore_index):
    """cross_entropy is log_softmax then nll_loss: a batch whose targets are all the ignore_index is 0/0 there
    (torch saves the ignore_index as an unsigned number: -100 reads back as 2**64 - 100)."""
    scores = torch.randn(4, 5, requires_grad=True)
    logits = scores * 1.0
    targets = torch.full((4,), ignore_index)
    birth = loss_birth(nn.functional.cross_entropy(logits, targets, ignore_index=ignore_index,
                                                   reduction=reduction), logits)
    assert (birth.op, birth.kind) == ("nll_loss", "nan")
    assert torch.equal(dict(birth.inputs)["target"], targets)
    said = diagnose(birth, phase="loss", kind="nonfinite", max_abs=None, loss_history=[])
    assert f"every target of this batch is the ignore_index ({ignore_index}: a batch of padding only" in said, said
    with_one = targets.clone()
    with_one[0] = 1
    assert loss_birth(nn.functional.cross_entropy(logits, with_one, ignore_index=ignore_index), logits) is None


def test_only_the_loss_computation_after_the_model_is_looked_at():
    """A NaN the model masks itself (where/sqrt: NaN in the unused branch) is older than the loss's log(0);
    with the model's last node as the boundary the walk names the loss op, without it the older one."""
    x = torch.tensor([-1.0, 4.0], requires_grad=True)
    h = torch.where(x > 0, torch.sqrt(x), torch.zeros(2))  # sqrt(-1) is NaN, masked: the output is finite
    loss = torch.log(h * 0).sum()
    assert loss_birth(loss, h).op == "log"
    assert loss_birth(loss).op == "sqrt"


def test_the_earliest_birth_wins():
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    y = x * 1.0
    first = torch.log(y)  # -inf at 0
    loss = (first + torch.sqrt(y - 2)).sum()  # a second, later birth (NaN)
    assert loss_birth(loss, y).op == "log"


def test_a_non_finite_tensor_the_graph_did_not_make_is_data_named_by_the_op_that_first_used_it():
    """A NaN label, or a NaN batch read with no model boundary (``break_if`` outside a watch): before, the label gave
    nothing, and the batch was called "born in softmax" (SoftmaxBackward0 saves only its result, which was NaN)."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    label = torch.tensor([0.5, math.nan])
    birth = loss_birth(nn.functional.mse_loss(y, label), y)
    assert (birth.phase, birth.op, birth.kind, birth.module, birth.line) == ("input", "mse_loss", "nan", None, None)
    [(name, t)] = birth.inputs
    assert name == "target" and t is birth.output and math.isnan(t[1].item())

    torch.manual_seed(0)
    layer = nn.Linear(3, 4)
    batch = torch.randn(2, 3)
    batch[1, 0] = math.inf
    loss = torch.softmax(layer(batch) * 1.0, dim=-1).sum()
    birth = loss_birth(loss)
    assert (birth.phase, birth.op, birth.kind) == ("input", "addmm", "inf")
    assert torch.equal(birth.inputs[0][1], batch)

    weight = nn.Parameter(torch.tensor([math.nan, 1.0]))  # made by no op of this graph, but trained: not data
    assert loss_birth((weight * weight).sum()) is None


def test_a_non_finite_tensor_taken_without_gradient_is_named_by_the_variable_holding_it():
    """diffusers' min-SNR weighting with a zero terminal SNR: ``weights / snr`` is 0/0 where a sample drew the last
    timestep, computed from the schedule with no gradient; the graph keeps the tensor, not its line: the variable
    holding it where backward() is called (or in a caller) names it."""
    pred = torch.ones(4, 3, requires_grad=True)
    snr = torch.tensor([1.0, 0.0, 2.0, 3.0])
    mse_loss_weights = torch.minimum(snr, torch.full_like(snr, 5.0)) / snr  # 0/0 at sample 1
    loss = ((pred * 2.0) ** 2).mean(dim=1).mul(mse_loss_weights).mean()

    def inner_frame():  # backward() called a level below the variable: found in the caller
        import sys

        return read(loss, [], sys._getframe(0))

    birth = inner_frame().birth
    assert (birth.phase, birth.op) == ("input", "mul")
    assert birth.output is mse_loss_weights and birth.note.endswith("the program holds it as `mse_loss_weights`")
    assert "holds it as" not in read(loss, []).birth.note  # no frame given: nothing named


def test_after_backward_the_structure_still_names_the_ops_whose_backward_can_make_nan():
    from tensor_dap.triggers.loss_graph import read_structure

    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1.0  # the "model"
    loss = (torch.sqrt(y) + y ** 2 + y ** 0.5 + y / 3.0).sum()
    loss.backward()  # what the nodes saved is freed now: only the structure and saved numbers are left
    assert read_structure(loss, [y.grad_fn])[0] == ["DivBackward0", "PowBackward0", "SqrtBackward0"]  # not y ** 2 alone
    assert read_structure((y ** 2).sum(), [y.grad_fn])[0] == []
    assert read_structure(torch.tensor(1.0))[0] == []  # no graph: nothing, no error
    assert read_structure(loss, [y.grad_fn])[1] is False  # nothing there keeps a value out of the loss
    assert read_structure(torch.where(y > 1, torch.sqrt(y), y).sum(), [y.grad_fn])[1] is True  # where's unused branch


def test_what_cannot_be_told_is_none_and_nothing_raises():
    x = torch.tensor([3e38, 2.0], requires_grad=True)
    y = x * 1.0
    assert loss_birth(torch.cat([y, y]).sum(), y) is None  # a sum that overflows: SumBackward0 saves no input
    assert loss_birth((y * 2).sum(), y) is None  # finite
    loss = torch.log(y - y).sum()
    loss.backward()  # the nodes' saved tensors are freed now: reading them fails inside, quietly
    assert loss_birth(loss) is None
    assert loss_birth(torch.tensor(float("nan"))) is None  # no graph at all


def test_it_tells_whether_a_loss_reaches_the_model_s_outputs():
    """In a GAN not every loss reaches every model: the discriminator's loss on a detached fake sample
    never reaches the generator's output."""
    z = torch.ones(3, requires_grad=True)
    fake = z * 2.0  # the generator's output
    on_detached = torch.log(fake.detach() * 0).sum()
    through = torch.log(fake * 0).sum()
    assert read(on_detached, [fake.grad_fn]) == (False, None)  # nothing after the model's outputs: no op read
    graph = read(through, [fake.grad_fn])
    assert graph.reaches and graph.birth.op == "log"


def test_the_walk_is_bounded(monkeypatch):
    monkeypatch.setattr(loss_graph, "MAX_NODES", 50)
    x = torch.tensor([0.0], requires_grad=True)
    y = torch.log(x * 1.0)  # the birth, far below the 5000 adds above it
    for _ in range(5000):
        y = y + 1.0
    assert loss_birth(y.sum()) is None  # the walk stopped long before reaching it


def test_a_large_input_is_re_computed_in_slices(monkeypatch):
    """The op's output for a large saved input is computed slice by slice: the slice holding the first
    NaN/Inf is the output shown; a binary op whose result would be large is not re-computed at all."""
    from tensor_dap.triggers import finite

    monkeypatch.setattr(finite, "SLICE_ELEMENTS", 64)
    data = torch.rand(40, 30) + 0.5
    data[33, 7] = 0.0  # log(0) deep in the tensor
    x = data.requires_grad_()
    y = x * 1.0
    birth = loss_birth(torch.log(y * 1.0).sum(), y)
    assert birth.op == "log" and birth.output.numel() <= 64 and torch.isneginf(birth.output).any()
    assert loss_birth((y / (y - y)).sum(), y) is None  # 1200 elements > 64: not re-computed


def test_the_first_read_imports_nothing_heavy_inside_the_users_backward():
    """``torch.broadcast_shapes`` imports sympy on its first call: half a second (seconds on a loaded machine),
    which ran the walk past its budget and lost the op. A fresh process must read the op without it."""
    code = ("import sys, torch\n"
            "from tensor_dap.triggers.loss_graph import read\n"
            "x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
            "y = x * 1.0\n"
            "print(read((y / (y - y)).sum(), [y.grad_fn]).birth.op, 'sympy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["div", "False"]


@pytest.mark.parametrize("a", [(), (1,), (3,), (2, 3), (2, 1), (4, 1, 3), (0,), (0, 3)])
@pytest.mark.parametrize("b", [(), (3,), (1, 3), (5, 2, 1), (0, 1)])
def test_the_size_of_a_broadcast_result_is_torchs(a, b):
    try:
        want = torch.broadcast_shapes(a, b).numel()
    except RuntimeError:
        want = 1 << 62  # not broadcastable: never re-computed
    assert loss_graph._numel(torch.empty(a), torch.empty(b), 2.0) == want
