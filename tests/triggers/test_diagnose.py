"""Diagnoses that need a real step to be told: a batch whose every target is ignored (padding only)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap import LossThresholdError, NonFiniteError
from tensor_dap.triggers.diagnose import diagnose
from tensor_dap.triggers.fixes import DIAGNOSES
from tensor_dap.triggers.birth import Birth

pytestmark = pytest.mark.timeout(60)


class LM(nn.Module):
    """A language model that computes its loss in forward, as HF models do with ``labels``."""

    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)

    def forward(self, ids, labels):
        logits = self.head(self.emb(ids))
        return F.cross_entropy(logits.view(-1, 50), labels.view(-1))  # IGNORED


@pytest.mark.parametrize("loop", [False, True], ids=["w.step", "unchanged loop"])
def test_a_batch_of_padding_only_is_diagnosed_as_every_target_ignored(loop):
    torch.manual_seed(0)
    model = LM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step(ids, labels):
        optimizer.zero_grad()
        loss = model(ids, labels)
        loss.backward()  # its gradients are finite (zero): only the loss tells
        optimizer.step()
        return loss

    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step in range(5):
            ids = torch.randint(0, 50, (4, 12))
            labels = ids.clone() if step != 3 else torch.full_like(ids, -100)  # the last batch: all padding
            train_step(ids, labels) if loop else w.step(train_step, ids, labels)
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (3, "forward", "", "cross_entropy")
    assert report.diagnosis == DIAGNOSES["no_targets"].format(index=-100)


def test_a_nan_in_cross_entropy_with_real_targets_is_not_called_all_ignored():
    logits, targets = torch.randn(6, 5), torch.tensor([0, 4, 2, -100, 1, 3])
    birth = Birth("forward", "cross_entropy", "nan", inputs=[("args[0]", logits), ("args[1]", targets)])
    assert diagnose(birth, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) is None
    birth.inputs[1] = ("args[1]", torch.full((6,), -100))
    said = diagnose(birth, phase="forward", kind="nonfinite", max_abs=None, loss_history=[])
    assert said == DIAGNOSES["no_targets"].format(index=-100)


def test_a_parameter_an_update_made_non_finite_is_called_a_divergence_only_with_evidence():
    """Weights an update wrote NaN into: a divergence when values grew huge or the loss rose, else no guess (the
    update used NaN gradients of a step that was reported and continued: a GAN's generator, seen by the other)."""
    quiet = diagnose(None, phase="optimizer", kind="nonfinite", max_abs=0.57, loss_history=[1.43, 1.42, 1.53, 1.46])
    assert quiet is None
    grown = diagnose(None, phase="optimizer", kind="nonfinite", max_abs=3e33, loss_history=[1.4, 1.5])
    assert grown.startswith(DIAGNOSES["divergence"]) and "values up to 3e+33" in grown
    rising = diagnose(None, phase="optimizer", kind="nonfinite", max_abs=2.0, loss_history=[0.5, 40.0])
    assert rising.startswith(DIAGNOSES["divergence"]) and "the loss went from 0.5 to 40" in rising


def test_a_threshold_the_first_loss_is_above_is_not_called_a_divergence():
    """``--loss-above 4`` on a character model whose loss starts at 4.5: the threshold is too low, the run is fine."""
    assert diagnose(None, phase="loss", kind="above", max_abs=None, loss_history=[4.53]) == DIAGNOSES["above_at_start"]
    risen = diagnose(None, phase="loss", kind="above", max_abs=None, loss_history=[1.2, 0.9, 40.0])
    assert risen.startswith(DIAGNOSES["divergence"]) and "the loss went from 1.2 to 40" in risen
    huge = diagnose(None, phase="loss", kind="above", max_abs=3e33, loss_history=[9.0])  # values that big: diverged
    assert huge.startswith(DIAGNOSES["divergence"])
    crept = diagnose(None, phase="loss", kind="above", max_abs=None, loss_history=[4.306, 4.321, 4.338])  # HF, > 4.33
    assert crept.startswith("the loss crossed the threshold without a rise (4.306 to 4.338 over its last 3 values)")
    spiked = diagnose(None, phase="loss", kind="spike", max_abs=None, loss_history=[1.0, 1.1, 1.4])
    assert spiked.startswith(DIAGNOSES["divergence"])  # (a spike is judged against the average: its own verdict)


def test_a_padding_only_batch_in_a_loss_outside_the_model_is_diagnosed_in_the_unchanged_loop():
    """The loss function nobody handed over: its NaN (0/0, every gradient zero) is read from the loss's graph
    as ``nll_loss``, cross_entropy's second half, with the class-index targets the diagnosis needs."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 50))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(5):
            ids = torch.randint(0, 50, (4, 12))
            labels = ids.clone() if step != 2 else torch.full_like(ids, -100)
            loss = F.cross_entropy(model(ids).view(-1, 50), labels.view(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (2, "loss", None, "nll_loss")
    assert report.diagnosis == DIAGNOSES["no_targets"].format(index=-100)


@pytest.mark.parametrize("phase, op, kind, key", [
    ("forward", "sqrt", "nan", "sqrt_forward"),  # pytorch/examples' VAE with std = sqrt(logvar)
    ("loss", "sqrt", "nan", "sqrt_forward"),
    ("backward", "SqrtBackward0", "nan", "sqrt_either"),  # nothing saved: the gradient at 0, or a where
    ("forward", "rsqrt", "inf", "sqrt"),  # rsqrt(0): the zero, not a negative number
])
def test_sqrt_is_diagnosed_by_where_its_nan_came_from(phase, op, kind, key):
    x = torch.tensor([-1.0, 4.0])
    birth = Birth(phase, op, kind, forward_op="sqrt" if phase == "backward" else None, inputs=[("args[0]", x)])
    assert diagnose(birth, phase=phase, kind="nonfinite", max_abs=None, loss_history=[]) == DIAGNOSES[key]


def test_a_hand_written_distance_between_equal_points_is_told_from_the_where_trap():
    """A contrastive loss's ``sqrt(((a - b) ** 2).sum(-1))`` for a sample paired with itself: the NaN is sqrt's
    gradient at an exact 0 (what SqrtBackward0 saved), not a negative number behind torch.where."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    x = torch.randn(6, 8)

    def step(pairs):
        a, b = net(x[pairs[0]]), net(x[pairs[1]])
        same = (pairs[0] == pairs[1]).float()
        d = torch.sqrt(((a - b) ** 2).sum(dim=1))
        loss = (same * d ** 2 + (1 - same) * torch.relu(1.0 - d) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(net, optimizer, on="raise", capture=False) as w:
        w.step(step, torch.tensor([[0, 1, 2], [3, 4, 5]]))
        w.step(step, torch.tensor([[0, 1, 2], [3, 1, 5]]))  # sample 1 paired with itself
    report = info.value.report
    assert (report.step, report.op, report.module) == (1, "SqrtBackward0", None)
    assert report.diagnosis == DIAGNOSES["sqrt_zero"]
    where = Birth("backward", "SqrtBackward0", "nan", forward_op="sqrt",
                  saved={"result": torch.tensor([math.nan, 2.0])})  # sqrt(-1) behind torch.where
    assert diagnose(where, phase="backward", kind="nonfinite", max_abs=None, loss_history=[]) == DIAGNOSES["sqrt"]
    # the unchanged loop, the distance in the loss function: read from the freed graph's structure, with no values;
    # no op there hides a value from the loss (no where, no index), so a forward NaN would have shown: an exact 0
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(net, optimizer, on="raise", capture=False):
        step(torch.tensor([[0, 1, 2], [3, 4, 5]]))
        step(torch.tensor([[0, 1, 2], [3, 1, 5]]))
    report = info.value.report
    assert (report.step, report.op) == (1, "SqrtBackward0"), report
    assert report.diagnosis == DIAGNOSES["sqrt_zero"]
    assert "non-finite (1 row of 3 along dim 0 holds NaN/Inf: 1)" in report.notes[0], report.notes  # the pair


class Classifier(nn.Module):
    """nn.MultiheadAttention with a key_padding_mask: torch turns the mask into -inf inside its own forward."""

    def __init__(self):
        super().__init__()
        self.emb, self.attn, self.head = nn.Embedding(20, 16), nn.MultiheadAttention(16, 2, batch_first=True), \
            nn.Linear(16, 2)

    def forward(self, ids, pad, scale=1.0):
        h = self.emb(ids) * scale
        out, _ = self.attn(h, h, h, key_padding_mask=pad)
        return self.head(out.mean(1))


@pytest.mark.parametrize("loop", [False, True], ids=["w.step", "unchanged loop"])
def test_an_all_padding_sequence_in_multihead_attention_is_diagnosed(loop):
    torch.manual_seed(0)
    model = Classifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train_step(ids, pad, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(ids, pad), y)
        loss.backward()
        optimizer.step()
        return loss

    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step in range(5):
            ids, pad = torch.randint(0, 20, (4, 6)), torch.zeros(4, 6, dtype=torch.bool)
            pad[2] = step == 3  # step 3: the third sequence is all padding
            batch = (ids, pad, torch.randint(0, 2, (4,)))
            train_step(*batch) if loop else w.step(train_step, *batch)
    report = info.value.report
    assert (report.step, report.phase, report.module) == (3, "forward", "attn")
    assert report.op == "multi_head_attention_forward"
    assert report.diagnosis == DIAGNOSES["masked_attention"]


def test_multihead_attention_overflowing_is_not_called_a_padding_mask():
    torch.manual_seed(0)
    model = Classifier()
    ids, pad = torch.randint(0, 20, (4, 6)), torch.zeros(4, 6, dtype=torch.bool)
    pad[:, -1] = True  # ordinary padding: every query still has keys
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step():
        optimizer.zero_grad()
        F.cross_entropy(model(ids, pad, scale=1e30), torch.zeros(4, dtype=torch.long)).backward()  # q·k overflows
        optimizer.step()

    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        w.step(train_step)
    report = info.value.report
    assert (report.module, report.op) == ("attn", "multi_head_attention_forward")  # born there all the same
    assert report.diagnosis != DIAGNOSES["masked_attention"]


def _mha_birth(**masks):
    q = torch.randn(5, 2, 8)
    return Birth("forward", "multi_head_attention_forward", "nan", inputs=[("args[0]", q), *masks.items()])


@pytest.mark.parametrize("masks, masked", [
    (dict(key_padding_mask=torch.tensor([[0.0, 0.0, float("-inf")], [float("-inf")] * 3])), True),
    (dict(key_padding_mask=torch.tensor([[0.0, 0.0, float("-inf")], [0.0, float("-inf"), float("-inf")]])), False),
    (dict(attn_mask=torch.triu(torch.ones(3, 3, dtype=torch.bool), 1)), False),  # causal: the diagonal stays
    # left padding under a causal mask: the first query sees only the first key, which is padding
    (dict(key_padding_mask=torch.tensor([[True, False, False], [False, False, False]]),
          attn_mask=torch.triu(torch.ones(3, 3, dtype=torch.bool), 1)), True),
    (dict(key_padding_mask=torch.tensor([[False, False, True], [False, False, False]]),
          attn_mask=torch.triu(torch.ones(3, 3, dtype=torch.bool), 1).expand(4, 3, 3)), False),  # 2 heads
    (dict(key_padding_mask=torch.tensor([[True, False, False], [False, False, False]]),
          attn_mask=torch.triu(torch.ones(3, 3, dtype=torch.bool), 1).expand(4, 3, 3)), True),
])
def test_a_query_with_every_key_masked_is_told_from_the_masks_multihead_attention_got(masks, masked):
    diagnosis = diagnose(_mha_birth(**masks), phase="forward", kind="nonfinite", max_abs=None, loss_history=[])
    assert (diagnosis == DIAGNOSES["masked_attention"]) == masked


def _regression_diverging(clip: str | None) -> Any:
    """SGD at a learning rate far too high on a linear regression, its gradients clipped by ``clip``: a loss above
    1e6 stops it. ``clip_grad_norm_`` is taken by name before the watch begins, as a script's imports do (it is
    seen all the same); ``clip_grad_value_`` is called through its module ("value"), or taken by name too
    ("value by name")."""
    from torch.nn.utils import clip_grad_norm_, clip_grad_value_

    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e4)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    with pytest.raises(LossThresholdError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(200):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            if clip == "norm":
                clip_grad_norm_(model.parameters(), 0.5)
            elif clip == "norm 1e9":  # a bound no gradient reaches: no clipping at all
                clip_grad_norm_(model.parameters(), 1e9)
            elif clip == "value":
                torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=0.25)
            elif clip == "value by name":
                clip_grad_value_(model.parameters(), 0.25)
            tensor_dap.break_if(loss, above=1e6, on="raise")
            optimizer.step()
    return info.value.report


@pytest.mark.parametrize("clip, said", [(None, None), ("norm", "norm 0.5"), ("value", "value 0.25"),
                                         ("value by name", "value 0.25")])
def test_a_divergence_of_a_loop_that_clips_is_not_told_to_clip(clip, said):
    """Clipping bounds each gradient, not each update: a run that diverges while clipping is told to lower its
    learning rate, with the clipping it has (seen as the loop calls it), not to clip."""
    from torch.nn.utils import clip_grad

    from tensor_dap.triggers import loss_tap

    originals = (clip_grad._clip_grads_with_norm_, torch.nn.utils.clip_grad_value_,
                 clip_grad._group_tensors_by_device_and_dtype)
    report = _regression_diverging(clip)
    assert report.kind == "above" and report.loss > 1e6
    if said is None:
        assert report.diagnosis.startswith(DIAGNOSES["divergence"])
    else:
        assert report.diagnosis.startswith(DIAGNOSES["divergence_clipped"].format(clip=said))
        assert "clip_grad_norm_(model.parameters()" not in report.diagnosis
    assert loss_tap.clipping() is None  # the watch closed: nothing noted, nothing wrapped
    assert (clip_grad._clip_grads_with_norm_, torch.nn.utils.clip_grad_value_,
            clip_grad._group_tensors_by_device_and_dtype) == originals


def test_a_clipping_that_never_acts_is_told_as_none():
    """A clip by norm far above every norm the gradients had never clipped: the run is told so, with the norm they
    reach, which the report keeps (a replay in another process diagnoses with it)."""
    from tensor_dap.triggers.report import Report

    report = _regression_diverging("norm 1e9")
    assert report.clipping == "norm 1e+09"
    assert report.clip_norm_seen is not None and 0 < report.clip_norm_seen < 1e8
    assert report.diagnosis.startswith("the training diverged, and its gradients are clipped at norm 1e+09, far above")
    assert f"at most {report.clip_norm_seen:.3g}" in report.diagnosis
    again = Report.from_dict(report.to_dict())
    assert again.clip_norm_seen == report.clip_norm_seen
    assert diagnose(None, phase=again.phase, kind=again.kind, max_abs=again.max_abs, loss_history=again.loss_history,
                    clipping=again.clipping, norm_seen=again.clip_norm_seen) == report.diagnosis


@pytest.mark.parametrize("clipping, seen, unclipped", [
    ("norm 1e+09", 0.113, True), ("norm 2", 0.15, True), ("norm 0.25", 0.113, False),  # within 10x: it may act
    ("norm 1", None, False), ("value 0.5", 0.01, False), ("norm", 0.01, False), ("norm 1", 0.0, False)])
def test_how_far_a_clip_is_above_the_norms_decides_the_diagnosis(clipping, seen, unclipped):
    text = diagnose(None, phase="loss", kind="above", max_abs=None, loss_history=[2.0, 600.0], clipping=clipping,
                    norm_seen=seen)
    assert text.startswith("the training diverged, and its gradients are clipped at") == unclipped, text
    if unclipped:
        assert "clip_grad_norm_(model.parameters(), 0.1)" in text  # a round norm the gradients reach
    else:
        assert text.startswith(DIAGNOSES["divergence_clipped"].format(clip=clipping))


def test_a_clipped_divergence_is_diagnosed_from_its_numbers_too():
    text = diagnose(None, phase="optimizer", kind="nonfinite", max_abs=3e33, loss_history=[1.4, 1.5],
                    clipping="norm 1")
    assert text.startswith(DIAGNOSES["divergence_clipped"].format(clip="norm 1")) and "values up to 3e+33" in text
    assert diagnose(None, phase="optimizer", kind="nonfinite", max_abs=0.5, loss_history=[1.4, 1.5],
                    clipping="norm 1") is None  # no evidence of a divergence: no guess, clipping or not


def test_clipping_is_noted_however_the_program_calls_it():
    """The ways a program clips: a norm of infinity only measures (HF's Trainer logs the norm so), accelerate imports
    the public helper as it clips, a norm's bound given as a tensor is not read (no device sync), only said."""
    from torch.nn.utils import clip_grad_norm_

    from tensor_dap.triggers import loss_tap

    model = nn.Linear(3, 2)
    model(torch.randn(4, 3)).sum().backward()
    stop = loss_tap.listen(lambda loss: None)
    try:
        torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        assert loss_tap.clipping() is None
        from torch.nn.utils import clip_grads_with_norm_, get_total_norm  # as accelerate does, at each clip

        norm = torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
        clip_grads_with_norm_(model.parameters(), 2.0, get_total_norm([p.grad for p in model.parameters()]))
        assert loss_tap.clipping() == "norm 2"
        assert norm > 2 and loss_tap.clip_norm_seen() == pytest.approx(norm)  # the norm it was given, not after

        class Sharded(torch.Tensor):  # a norm this process cannot read alone (a sharded DTensor's)
            def __float__(self):
                raise RuntimeError("needs the other shards")

        clip_grads_with_norm_(model.parameters(), 2.0, torch.tensor(50.0).as_subclass(Sharded))
        assert loss_tap.clip_norm_seen() == pytest.approx(norm)  # left out, not an error in the report
        kept = torch.nn.utils.clip_grad_value_  # as a script importing it by name while listening keeps it
        kept(model.parameters(), clip_value=torch.tensor(0.5))
        assert loss_tap.clipping() == "value 0.5"  # (read by torch itself: clip_grad_value_ makes it a float first)
        clip_grad_norm_(model.parameters(), torch.tensor(3.0))
        assert loss_tap.clipping() == "norm"  # a bound given as a tensor, not read by us
    finally:
        stop()
    assert loss_tap.clipping() is None and loss_tap.clip_norm_seen() is None
    kept(model.parameters(), clip_value=0.5)
    assert loss_tap.clipping() is None  # noted only while anyone listens


def test_a_float16_overflow_is_told_by_phase_and_not_taken_for_log_or_sqrt():
    """A forward overflow is not the GradScaler's to fix (it skips steps whose gradients overflowed); a log of 0
    in float16 is a log of 0, as in float32."""
    big = torch.full((2, 2), 300.0)
    out = (big.half() @ big.half())
    forward = Birth("forward", "matmul", "inf", inputs=[("a", big), ("b", big)], output=out)
    assert diagnose(forward, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == DIAGNOSES["fp16"]
    backward = Birth("backward", "MmBackward0", "inf", forward_op="mm", inputs=[("grad", big)],
                     output=(out, None))
    assert diagnose(backward, phase="backward", kind="nonfinite", max_abs=None,
                    loss_history=[]) == DIAGNOSES["fp16_backward"]
    zero = torch.zeros(3, dtype=torch.float16)
    log = Birth("forward", "log", "inf", inputs=[("input", zero)], output=zero.log())
    assert diagnose(log, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == DIAGNOSES["log"]


@pytest.mark.parametrize("make, expected", [
    (lambda: (torch.full((4,), 300.0).half(), torch.full((4,), 1e-3).half()), "fp16"),  # a quotient past 65504
    (lambda: (torch.full((4,), 3.0).half(), torch.zeros(4).half()), "div"),  # a division by zero, in any dtype
], ids=["overflowing quotient", "zero denominator"])
def test_a_half_division_is_an_overflow_only_when_nothing_is_zero(make, expected):
    a, b = make()
    birth = Birth("forward", "div", "inf", inputs=[("a", a), ("b", b)], output=a / b)
    assert diagnose(birth, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == DIAGNOSES[expected]


def test_a_half_nan_needs_evidence_of_an_overflow():
    """A NaN in float16 from inputs within range is not an overflow: every target ignored stays that, and an op
    with no rule gets no guess."""
    scores, targets = torch.randn(4, 3).half(), torch.full((4,), -100)
    ignored = Birth("forward", "cross_entropy", "nan", inputs=[("a", scores), ("b", targets)],
                    output=torch.tensor(float("nan")).half())
    assert diagnose(ignored, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == \
        DIAGNOSES["no_targets"].format(index=-100)
    one = torch.ones(1).half()
    std = Birth("forward", "std", "nan", inputs=[("a", one)], output=torch.tensor(float("nan")).half())  # of one value
    assert diagnose(std, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == DIAGNOSES["std_single"]
    other = Birth("forward", "erf", "nan", inputs=[("a", one)], output=torch.tensor(float("nan")).half())
    assert diagnose(other, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) is None


def test_a_square_overflowing_in_half_is_an_overflow_not_a_root():
    x = torch.tensor([-400.0, 300.0]).half()
    birth = Birth("forward", "pow", "inf", inputs=[("self", x), ("exponent", 2)], output=x ** 2)
    assert diagnose(birth, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == DIAGNOSES["fp16"]
    root = Birth("forward", "pow", "nan", inputs=[("self", x), ("exponent", 0.5)], output=x ** 0.5)
    assert diagnose(root, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == \
        DIAGNOSES["sqrt_forward"]


def test_a_replay_elsewhere_diagnoses_a_clipped_divergence_as_the_run_did(tmp_path):
    """How the run clipped is kept in the report and its bundle: replayed where nothing clips (another process; here
    after the watch closed, when no clipping is noted), the divergence is still not told to clip."""
    from tensor_dap.triggers import loss_tap
    from tensor_dap.triggers.report import Report, to_json

    def diverging() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), *(nn.Linear(16, 16) for _ in range(5)), nn.Linear(16, 1))
        return model, torch.optim.SGD(model.parameters(), lr=1e8)  # one clipped update: the forward overflows

    model, optimizer = diverging()
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=tmp_path):
        for _ in range(200):
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
    report = info.value.report
    clipped = DIAGNOSES["divergence_clipped"].format(clip="norm 0.5")
    assert report.clipping == "norm 0.5" and report.diagnosis.startswith(clipped)
    assert Report.from_dict(__import__("json").loads(to_json(report))).clipping == "norm 0.5"
    assert loss_tap.clipping() is None and report.bundle
    model2, optimizer2 = diverging()
    with pytest.raises(NonFiniteError) as replayed:
        tensor_dap.replay(report.bundle, model2, optimizer=optimizer2, on="raise")
    again = replayed.value.report
    assert again.clipping == "norm 0.5" and again.diagnosis.startswith(clipped)


def test_a_log_of_a_softmax_is_told_to_take_log_softmax_and_a_log_of_other_zeros_an_epsilon():
    """x-transformers trained at lr 5 with a hand-written log(softmax(logits)): the softmax underflowed to exact
    zeros; the fix is log_softmax, not an epsilon. A log of zeros that are not probabilities keeps the epsilon."""
    probs = torch.softmax(torch.tensor([[200.0, 0.0, -5.0], [1.0, 2.0, 3.0]]), -1)
    assert (probs == 0).any()
    softmax = Birth("loss", "log", "inf", inputs=[("input", probs)], output=probs.log())
    assert "torch.log_softmax(x, dim) instead of" in diagnose(softmax, phase="loss", kind="nonfinite", max_abs=1.0,
                                                                loss_history=[4.3])
    images = torch.softmax(torch.randn(2, 5, 3, 3) * 100, dim=1)  # F.softmax(x, dim=1) of an image batch
    by_channel = Birth("forward", "log", "inf", inputs=[("input", images)], output=images.log())
    assert "log_softmax" in diagnose(by_channel, phase="forward", kind="nonfinite", max_abs=1.0, loss_history=[])
    counts = torch.tensor([[0.0, 3.0, 1.0]])  # zeros, not a distribution
    plain = Birth("forward", "log", "inf", inputs=[("input", counts)], output=counts.log())
    said = diagnose(plain, phase="forward", kind="nonfinite", max_abs=3.0, loss_history=[])
    assert said.startswith("log of zero") and "log_softmax" not in said
    assert said.endswith("torch.xlogy(p, x) is 0 where p is 0")  # (the sentence once stopped at "where p is")
    backward = Birth("backward", "LogBackward0", "inf", forward_op="log", inputs=[("self", probs)])
    assert "log_softmax" in diagnose(backward, phase="backward", kind="nonfinite", max_abs=1.0, loss_history=[])


def test_the_softmax_guess_sums_a_bounded_number_of_samples(monkeypatch):
    """Summing a large image batch's probabilities along dim 1 made a temporary of its size over the channels: the
    sums are taken over the first samples a bounded piece holds, and a larger single sample is not guessed at."""
    from tensor_dap.triggers import finite

    monkeypatch.setattr(finite, "SLICE_ELEMENTS", 100)
    summed = []
    real = torch.Tensor.sum
    monkeypatch.setattr(torch.Tensor, "sum",  # sums along a dim (a whole sum is one number: no temporary)
                        lambda t, *a, **k: (a or "dim" in k) and summed.append(t.shape[0]) or real(t, *a, **k))
    images = torch.softmax(torch.randn(40, 5, 3, 3) * 100, dim=1)  # 45 elements a sample: two samples a piece
    by_channel = Birth("forward", "log", "inf", inputs=[("input", images)], output=images.log())
    assert "log_softmax" in diagnose(by_channel, phase="forward", kind="nonfinite", max_abs=1.0, loss_history=[])
    assert summed and set(summed) == {2}, summed
    wide = torch.softmax(torch.randn(2, 101), dim=-1)  # one sample over the piece
    big = Birth("forward", "log", "inf", inputs=[("input", wide)], output=wide.log())
    assert "log_softmax" not in diagnose(big, phase="forward", kind="nonfinite", max_abs=1.0, loss_history=[])


@pytest.mark.parametrize("loop", [False, True], ids=["w.step", "unchanged-loop"])
@pytest.mark.parametrize("which", ["p", "1-p"])
def test_a_hand_written_bce_whose_sigmoid_saturated_is_told_to_take_the_log_from_the_logits(loop, which):
    """The GAN tutorials' hand-written BCE, -(y log p + (1 - y) log(1 - p)) with p = sigmoid(logits): logits past
    ~17 make 1 - p exactly 0, past ~-88 make p 0. The fix is F.logsigmoid / binary_cross_entropy_with_logits, not an
    epsilon; told from the graph (the op that made the log's input), in the model's forward and in a loss outside."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 4)

    def step(i):
        p = torch.sigmoid(model(x) * (1e4 if i == 1 else 1))  # logits of both signs: some p 0, some 1
        loss = -(torch.log(p) if which == "p" else torch.log(1 - p)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    with pytest.raises(NonFiniteError) as caught:
        with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
            for i in range(6):
                step(i) if loop else w.step(step, i)
    report = caught.value.report
    assert report.op == "log" and report.step == 1, report.diagnosis
    assert "F.logsigmoid" in report.diagnosis and "binary_cross_entropy_with_logits" in report.diagnosis


def test_a_weight_norm_row_of_zeros_is_diagnosed_as_weight_norm_not_a_division():
    """``weight_norm`` (a parametrization: its module runs when the layer reads ``.weight``) of a row of zeros is
    one fused op, ``_weight_norm``: named at the line that called the layer, and told what makes it NaN."""
    from torch.nn.utils.parametrizations import weight_norm

    torch.manual_seed(0)
    model = nn.Sequential(weight_norm(nn.Linear(8, 16)), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(4):
            if step == 2:
                with torch.no_grad():
                    model[0].parametrizations.weight.original1[4] = 0  # a unit pruned to zero
            optimizer.zero_grad()
            F.mse_loss(model(torch.randn(32, 8)), torch.randn(32, 1)).backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (2, "forward", "_weight_norm"), report
    assert report.module == "0.parametrizations.weight.0" and report.diagnosis == DIAGNOSES["weight_norm"]


class _Standardize(nn.Module):
    def forward(self, x):
        return (x - x.mean(0)) / (x.std(0) + 1e-5)  # a batch of one has no (unbiased) std


def test_the_std_of_a_batch_of_one_is_told_as_such():
    """An epoch's last batch of one element: ``std`` divides by n - 1 = 0. Not a division the user wrote, so the
    epsilon they added does not help; the diagnosis says what does."""
    torch.manual_seed(0)
    model = nn.Sequential(_Standardize(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False), \
            pytest.warns(UserWarning, match="degrees of freedom"):
        for n in (16, 16, 1):
            optimizer.zero_grad()
            F.mse_loss(model(torch.randn(n, 8)), torch.randn(n, 1)).backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (2, "forward", "0", "std"), report
    assert report.diagnosis == DIAGNOSES["std_single"]
    assert diagnose(Birth(phase="backward", op="StdBackward0", forward_op="std", kind="nan", module=None),
                    phase="backward", kind="nonfinite", max_abs=None, loss_history=[]) != DIAGNOSES["std_single"]


class _Angles(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return torch.acos(torch.tanh(self.fc(x)) * 1.01)  # a cosine scaled past 1: outside acos's domain


def test_acos_outside_or_at_the_edge_of_its_domain_is_told_to_clamp_inside_it():
    torch.manual_seed(0)
    model = nn.Sequential(_Angles(), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        optimizer.zero_grad()
        F.mse_loss(model(torch.randn(16, 8) * 10), torch.randn(16, 1)).backward()
        optimizer.step()
    report = info.value.report
    assert (report.phase, report.module, report.op) == ("forward", "0", "acos"), report
    assert report.diagnosis == DIAGNOSES["arc"]
    at_one = Birth(phase="backward", op="AcosBackward0", forward_op="acos", kind="inf", module=None)  # at exactly ±1
    assert diagnose(at_one, phase="backward", kind="nonfinite", max_abs=None, loss_history=[]) == DIAGNOSES["arc"]


class _Pointer(nn.Module):
    """A pointer network's log-probabilities over candidates, the padded ones masked with -inf."""

    def __init__(self):
        super().__init__()
        self.score = nn.Linear(8, 1)

    def forward(self, x, mask):
        scores = self.score(x).squeeze(-1).masked_fill(~mask, float("-inf"))
        return scores - scores.logsumexp(-1, keepdim=True)  # LOGPROBS


def test_a_masked_row_minus_its_logsumexp_is_told_as_a_masked_row():
    torch.manual_seed(0)
    model = _Pointer()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(3):
            mask = torch.ones(4, 6, dtype=torch.bool)
            mask[2] = step < 2  # at step 2, an example with no candidate left
            optimizer.zero_grad()
            F.nll_loss(model(torch.randn(4, 6, 8), mask), torch.zeros(4, dtype=torch.long)).backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (2, "forward", "sub"), report
    assert report.diagnosis == DIAGNOSES["masked_subtract"]
    overflowed = torch.tensor([[float("inf"), 1.0]])  # inf - inf from an overflow, no masked row: not that story
    birth = Birth("forward", "sub", "nan", inputs=[("a", overflowed), ("b", overflowed)],
                  output=torch.full((1, 2), float("nan")))
    assert diagnose(birth, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) != \
        DIAGNOSES["masked_subtract"]


@pytest.mark.parametrize("pick", ["gather", "index"])
def test_a_log_of_the_picked_probabilities_of_a_softmax_is_told_to_take_log_softmax(pick):
    """A hand-written NLL takes the log of the target's probability only (``probs.gather(1, y)``, or
    ``probs[range(n), y]``): the values it logs are no distribution, but the op that made them, seen through the
    pick, is the softmax."""
    torch.manual_seed(0)
    model = nn.Linear(8, 5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        x, y = torch.randn(32, 8), torch.randint(0, 5, (32,))
        probs = torch.softmax(model(x) * 1e3, dim=1)  # underflows to exact zeros off each row's largest logit
        picked = probs.gather(1, y[:, None]) if pick == "gather" else probs[torch.arange(32), y]
        loss = -torch.log(picked).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    report = info.value.report
    assert (report.phase, report.op) == ("loss", "log"), report
    assert report.diagnosis == DIAGNOSES["log_softmax"]


def test_the_rules_read_an_op_s_inputs_in_bounded_pieces(monkeypatch):
    """The inputs a rule reads may be an activation of gigabytes, or an attention mask broadcast over the batch and
    heads (here 2**32 elements over 2,048 of its own): read by their own values, a bounded piece at a time."""
    from tensor_dap.triggers import finite

    monkeypatch.setattr(finite, "SLICE_ELEMENTS", 4096)
    read = []
    real = finite.pieces
    monkeypatch.setattr(finite, "pieces", lambda t: (read.append(p.numel()) or p for p in real(t)))
    row = torch.zeros(1, 1, 1, 2048)
    row[..., :] = float("-inf")
    scores = row.expand(64, 16, 2048, 2048)  # every query's row masked
    softmax = Birth("forward", "softmax", "nan", inputs=[("input", scores)], output=torch.zeros(1))
    assert diagnose(softmax, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == \
        DIAGNOSES["masked_softmax"]
    big = torch.randn(64, 1000)
    big[37, :] = float("-inf")  # one masked row among 64,000 values, read in pieces of at most 4,096
    subtract = Birth("forward", "sub", "nan", inputs=[("a", big), ("b", big.logsumexp(-1, keepdim=True))],
                     output=torch.zeros(1))
    assert diagnose(subtract, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == \
        DIAGNOSES["masked_subtract"]
    assert read and max(read) <= 4096, read


class _GraphConv(nn.Module):
    """A GCN layer normalizing by D^-1/2 A D^-1/2 itself (pygcn with the normalization moved into the model)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        norm = torch.sparse.sum(adj, dim=1).to_dense().pow(-0.5)  # a node with no edges: 0 ** -0.5
        return torch.spmm(adj, self.lin(x) * norm[:, None]) * norm[:, None]


def test_a_negative_power_of_a_zero_degree_is_told_as_such_not_as_sqrt():
    torch.manual_seed(0)
    model = _GraphConv()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    edges = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(3):
            kept = edges[:, :6 if step < 2 else 4]  # at step 2 node 3 loses its only edge
            adj = torch.sparse_coo_tensor(kept, torch.ones(kept.shape[1]), (4, 4), check_invariants=True)
            optimizer.zero_grad()
            model(torch.randn(4, 5), adj).square().mean().backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (2, "forward", "pow") and "Inf born" in report.headline, report
    assert "pow(-0.5)" in report.source["text"]
    assert "pow made Inf from finite inputs (1 row of 4 along dim 0 holds NaN/Inf: 3)" in report.notes  # the node
    assert report.diagnosis == DIAGNOSES["negative_power"]


@pytest.mark.parametrize("base, exponent, key", [(torch.tensor([0.0, 4.0]), -0.5, "negative_power"),
                                                   (torch.tensor([-1.0, 4.0]), 0.5, "sqrt_forward"),
                                                   (torch.tensor([1e30, 4.0]), 2.0, None),  # x ** 2 overflowing
                                                   (2.0, torch.tensor([200.0]), None)])  # 2 ** x: no base of 0
def test_a_power_is_told_by_its_base_and_exponent(base, exponent, key):
    output = torch.pow(base, exponent)
    kind = "nan" if output.isnan().any() else "inf"
    birth = Birth("forward", "pow", kind, inputs=[("self", base), ("exponent", exponent)], output=output)
    told = diagnose(birth, phase="forward", kind="nonfinite", max_abs=None, loss_history=[])
    assert told == (DIAGNOSES[key] if key else None)


def test_rsqrt_of_a_zero_mean_square_is_a_negative_power_of_zero():
    """An RMSNorm without eps (llama2.c's with its eps dropped) over an embedding row of zeros."""
    base = torch.tensor([[0.0], [0.25]])
    birth = Birth("forward", "rsqrt", "inf", inputs=[("args[0]", base)], output=torch.rsqrt(base))
    assert diagnose(birth, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == \
        DIAGNOSES["negative_power"]
    assert "RMSNorm without eps" in DIAGNOSES["negative_power"]


@pytest.mark.parametrize("clipping, key", [(None, "divergence"), ("norm 1", "divergence_clipped")])
def test_a_product_of_finite_values_overflowing_is_a_divergence_even_below_the_huge_values_rule(clipping, key):
    """llama2.c at lr 50 (its gradients clipped at norm 1): the loss flat at log(vocab), gradients of 4e11, and an
    RMSNorm's MulBackward0 overflowing to Inf: no value reached the 1e15 a divergence is otherwise told by."""
    grad = torch.full((4, 8), 4e11)
    birth = Birth("backward", "MulBackward0", "inf", forward_op="mul", inputs=[("grad_output[0]", grad)],
                  output=torch.full((4, 8), float("inf")))
    told = diagnose(birth, phase="backward", kind="nonfinite", max_abs=6.85e11, loss_history=[6.238] * 8,
                    clipping=clipping, norm_seen=None)
    assert told is not None and told.startswith(DIAGNOSES[key].format(clip=clipping)), told
    nan = Birth("backward", "MulBackward0", "nan", forward_op="mul", inputs=[("grad_output[0]", grad)],
                output=torch.full((4, 8), float("nan")))  # 0 * inf: not an overflow by itself
    assert diagnose(nan, phase="backward", kind="nonfinite", max_abs=6.85e11, loss_history=[6.238] * 8) is None


@pytest.mark.parametrize("mode", ["unchanged loop", "w.step"])
@pytest.mark.parametrize("term", ["smooth_l1_loss", "mean"])
def test_a_loss_over_an_empty_selection_is_diagnosed_as_a_mean_over_nothing(mode, term):
    """A regression term over the batch's positive samples only (a detector's box loss): a batch with none gives a mean
    over an empty selection, 0/0, in the loss function outside the model."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step(x, y, positive):
        out = net(x)
        if term == "mean":
            box = ((out[positive, 0] - y[positive]) ** 2).mean()
        else:
            box = F.smooth_l1_loss(out[positive, 0], y[positive])
        loss = F.binary_cross_entropy_with_logits(out[:, 1], positive.float()) + box
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    gen = torch.Generator().manual_seed(1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(net, optimizer, on="raise", capture=False) as w:
        for i in range(4):
            x, y = torch.randn(16, 5, generator=gen), torch.randn(16, generator=gen)
            positive = (torch.arange(16) % 2 == 0) & (i != 2)  # none at step 2
            w.step(step, x, y, positive) if mode == "w.step" else step(x, y, positive)
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (2, "loss", None, term), report
    assert report.diagnosis == DIAGNOSES["empty_mean"]


@pytest.mark.parametrize("mode", ["unchanged loop", "w.step"])
def test_a_focal_loss_with_gamma_below_one_is_told_as_a_power_at_zero(mode):
    """``(1 - pt) ** 0.5 * ce``: once a sample is classified with certainty (pt rounds to 1), the power's gradient at
    0 is infinite; a power, not a distance: the diagnosis says so."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.05)
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(1))
    y = (x[:, 0] > 0).long()

    def step():
        ce = F.cross_entropy(net(x), y, reduction="none")
        loss = ((1 - torch.exp(-ce)) ** 0.5 * ce).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(net, optimizer, on="raise", capture=False) as w:
        for _ in range(200):
            w.step(step) if mode == "w.step" else step()
    report = info.value.report
    assert (report.phase, report.module, report.op) == ("loss" if mode != "w.step" else "backward", None,
                                                        "PowBackward0"), report
    assert report.diagnosis == DIAGNOSES["pow_zero"]


def test_a_division_by_zero_in_a_packages_code_points_at_what_it_was_handed():
    """peft's DoRA divides by the norm of each weight row (``magnitude / weight_norm``): a pruned row of zeros makes
    0/0 there, in code the user does not own; "add an epsilon to the denominator" aimed at that line does not help."""
    import rich

    from tensor_dap.debug.frames import SourceLine

    zero = torch.zeros(3)
    for file, expected in ((rich.__file__, "division by zero inside rich's code: what it divides by comes from"),
                           (__file__, DIAGNOSES["div"])):
        birth = Birth("forward", "div", "nan", inputs=[("a", zero), ("b", zero)], output=zero / zero,
                      line=SourceLine(file, 1))
        assert diagnose(birth, phase="forward", kind="nonfinite", max_abs=None,
                        loss_history=[]).startswith(expected)


def test_a_sum_divided_by_a_count_of_zero_is_an_empty_selection():
    """HF's causal-LM loss under its Trainer is ``loss.sum() / num_items_in_batch``: a batch whose every label is -100
    (prompts truncated past the answer) divides 0 by a count of 0, in transformers' code. That is the mean over an
    empty selection, not a weight row of zeros; a division by a tensor of zeros, or by a norm of 0, stays a division
    by zero."""
    total, items = torch.tensor(0.0), torch.tensor(0)
    counted = Birth("forward", "div", "nan", inputs=[("args[0]", total), ("args[1]", items)], output=total / items)
    assert diagnose(counted, phase="forward", kind="nonfinite", max_abs=None,
                    loss_history=[]) == DIAGNOSES["empty_mean"]
    zeros, norm = torch.zeros(3), torch.tensor(0.0)  # a division by zeros, and by the norm of a zero gradient
    for divisor in (zeros, norm):
        by = Birth("forward", "div", "nan", inputs=[("args[0]", zeros), ("args[1]", divisor)], output=zeros / divisor)
        assert diagnose(by, phase="forward", kind="nonfinite", max_abs=None, loss_history=[]) == DIAGNOSES["div"]


class _Invertible1x1(nn.Module):
    """Glow's invertible 1x1 convolution, as a matrix: its log-determinant enters the flow's likelihood."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linalg.qr(torch.randn(4, 4))[0])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x @ self.weight, torch.linalg.slogdet(self.weight)[1] * x.size(0)


def test_a_matrix_that_lost_rank_is_diagnosed_as_singular():
    """A flow whose invertible layer was re-initialized with two equal rows: its log-determinant is -inf. The op was
    named and nothing was said of it."""
    torch.manual_seed(0)
    flow = _Invertible1x1()
    optimizer = torch.optim.SGD(flow.parameters(), lr=0.01)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(flow, optimizer, on="raise"):
        for step in range(5):
            if step == 3:
                with torch.no_grad():
                    flow.weight[1] = flow.weight[0]
            z, logdet = flow(torch.randn(16, 4))
            loss = 0.5 * (z ** 2).sum() - logdet
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (3, "forward", "linalg_slogdet"), report.headline
    assert report.diagnosis == DIAGNOSES["singular"]


def test_a_determinant_s_gradient_at_a_singular_matrix_is_diagnosed_as_singular():
    birth = Birth("backward", "LinalgDetBackward0", "nan", forward_op="linalg_det")
    assert diagnose(birth, phase="backward", kind="nonfinite", max_abs=None, loss_history=[]) == DIAGNOSES["singular"]
