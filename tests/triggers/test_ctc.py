"""A CTC loss made infinite by a target its input is too short for (speech, OCR): the samples are named.

A model that downsamples its input (a strided convolution) can leave fewer frames than a long transcript
needs; ``nn.CTCLoss`` then gives that sample +Inf and a NaN gradient. Both modes of ``watch`` must name
``ctc_loss``, say which samples cannot be aligned and why, and point to ``zero_infinity=True``; a loss
filtered of its Inf afterwards still gets a NaN gradient, named as CTC's backward.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from markers import file_marker_line
from torch import nn

import tensor_dap
from tensor_dap import NonFiniteError
from tensor_dap.triggers import ctc

pytestmark = pytest.mark.timeout(60)


def _inf_samples(log_probs, targets, input_lengths, target_lengths) -> list[int]:
    """The samples torch itself finds no alignment for: the ground truth ``unalignable`` must agree with."""
    losses = F.ctc_loss(log_probs, targets, input_lengths, target_lengths, reduction="none")
    return torch.isinf(losses).nonzero().reshape(-1).tolist()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_unalignable_samples_are_those_torch_gives_an_infinite_loss(seed, layout):
    gen = torch.Generator().manual_seed(seed)
    n, frames = 12, 10
    target_lengths = torch.randint(0, 12, (n,), generator=gen)
    input_lengths = torch.randint(4, frames + 1, (n,), generator=gen)
    padded = torch.randint(1, 3, (n, 12), generator=gen)  # two labels only: many repeats next to each other
    targets = padded if layout == "padded" else torch.cat([padded[i, :k] for i, k in enumerate(target_lengths)])
    log_probs = torch.randn(frames, n, 3, generator=gen).log_softmax(-1)
    expected = _inf_samples(log_probs, targets, input_lengths, target_lengths)
    found = ctc.unalignable(targets, input_lengths, target_lengths)
    assert [s.sample for s in found] == expected
    assert expected, "the case must have samples that cannot be aligned"
    for s in found:
        assert s.frames == int(input_lengths[s.sample]) < s.needed
        assert s.labels == int(target_lengths[s.sample])


def test_a_repeat_across_two_samples_is_not_counted():
    """Concatenated targets: the last label of one sample and the first of the next are not a repeat."""
    targets = torch.tensor([1, 2, 2, 3, 1, 1])  # sample 0: 1 2 (ends in 2); sample 1: 2 3 (starts with 2); 2: 1 1
    found = ctc.unalignable(targets, torch.tensor([2, 2, 2]), torch.tensor([2, 2, 2]))
    assert found == [ctc.Unalignable(2, 2, 3, 2)]  # only the last, whose two 1s need a blank between


def test_arguments_by_position_by_name_and_as_ints():
    lp, t = torch.zeros(3, 1, 2), torch.tensor([[1, 1]])
    by_position = ctc.arguments([("args[0]", lp), ("args[1]", t), ("args[2]", torch.tensor([3])),
                                 ("args[3]", torch.tensor([2]))])
    as_saved = ctc.arguments([("blank", 0), ("input_lengths", (3,)), ("log_probs", lp), ("target_lengths", (2,)),
                              ("targets", t)])  # how CtcLossBackward0 keeps them: lengths as ints
    assert list(by_position) == list(as_saved) == ["log_probs", "targets", "input_lengths", "target_lengths"]
    assert as_saved["input_lengths"].tolist() == [3]
    assert ctc.explain(list(as_saved.items())) == ""  # 2 labels + 1 repeat = 3 frames: it fits
    short = ctc.explain([("targets", t), ("input_lengths", (2,)), ("target_lengths", (2,))])
    assert short == " (1 of 1 samples: sample 0: 2 labels need 3 frames, its input_lengths gives 2)"


def test_what_ctc_loss_would_refuse_is_not_explained():
    assert ctc.explain([("targets", torch.zeros(2, 3)), ("input_lengths", (1,)), ("target_lengths", (1, 2))]) == ""
    assert ctc.unalignable(torch.zeros(2, 3, dtype=torch.long), torch.tensor([1, 1]), torch.tensor([5, 1])) == []


class Striding(nn.Module):
    """A speech-style encoder: a convolution of stride 2 halves the frames (40 in, 20 out)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(8, 16, 3, stride=2, padding=1)
        self.head = nn.Linear(16, 6)

    def forward(self, x):
        return self.head(self.conv(x.transpose(1, 2)).relu().transpose(1, 2)).log_softmax(-1)  # (N, T', C)


def _batch(step: int, long_at: int):
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(4, 40, 8, generator=gen)
    target_lengths = torch.tensor([6, 8, 5, 7])
    if step == long_at:
        target_lengths[2] = 30  # longer than the 20 frames the model leaves
    targets = torch.randint(1, 6, (4, 30), generator=gen)
    return x, targets, target_lengths


def _train(mode: str, *, filtered: bool = False, zero_infinity: bool = False, steps: int = 4):
    torch.manual_seed(0)
    model = Striding()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CTCLoss(reduction="none" if filtered else "mean", zero_infinity=zero_infinity)

    def step_fn(x, targets, target_lengths):
        log_probs = model(x)
        input_lengths = torch.full((x.shape[0],), log_probs.shape[1], dtype=torch.long)
        losses = criterion(log_probs.transpose(0, 1), targets, input_lengths, target_lengths)  # CTC-LINE
        loss = losses[torch.isfinite(losses)].mean() if filtered else losses
        optimizer.zero_grad()
        loss.backward()  # CTC-BACKWARD
        optimizer.step()
        return loss

    with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step in range(steps):
            batch = _batch(step, long_at=2)
            w.step(step_fn, *batch) if mode == "step" else step_fn(*batch)


@pytest.mark.parametrize("mode", ["loop", "step"])
def test_an_infinite_ctc_loss_names_the_sample_too_long_for_its_input(mode):
    with pytest.raises(NonFiniteError) as info:
        _train(mode)
    report = info.value.report
    assert (report.phase, report.module, report.op, report.step) == ("loss", None, "ctc_loss", 2)
    assert report.loss == math.inf
    assert "(1 of 4 samples: sample 2: 30 labels need " in report.diagnosis
    assert "its input_lengths gives 20" in report.diagnosis and "zero_infinity=True" in report.diagnosis
    marker = "CTC-LINE" if mode == "step" else "CTC-BACKWARD"  # the loop cannot re-run the loss: its backward()
    assert report.source["line"] == file_marker_line(__file__, marker)


@pytest.mark.parametrize("mode", ["loop", "step"])
def test_an_infinite_sample_filtered_out_of_the_loss_still_makes_ctcs_gradient_nan(mode):
    with pytest.raises(NonFiniteError) as info:
        _train(mode, filtered=True)
    report = info.value.report
    assert report.loss is not None and math.isfinite(report.loss)
    assert (report.op, report.step, report.module) == ("CtcLossBackward0", 2, None)
    assert report.diagnosis.startswith("CTC's loss is infinite for a sample that its input is too short")
    assert "whatever multiplies it" in report.diagnosis
    if mode == "step":  # the re-run still holds what the node saved: the sample is named
        assert "sample 2: 30 labels" in report.diagnosis
        assert report.source["line"] == file_marker_line(__file__, "CTC-LINE")


def test_zero_infinity_is_no_alarm():
    _train("loop", zero_infinity=True, steps=4)  # the long sample's loss and gradient are zeroed: nothing fires


# ---------------------------------------------------------------- zero_infinity=True: the samples it drops, counted


def _loop_with_zero_infinity(steps: int, long_at: set[int]) -> list[float]:
    """A striding model trained with CTCLoss(zero_infinity=True): the steps in ``long_at`` have one target too long."""
    torch.manual_seed(0)
    model = Striding()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CTCLoss(zero_infinity=True)
    losses = []
    for step in range(steps):
        x, targets, target_lengths = _batch(step, long_at=step if step in long_at else -1)
        log_probs = model(x)
        input_lengths = torch.full((4,), log_probs.shape[1], dtype=torch.long)
        loss = criterion(log_probs.transpose(0, 1), targets, input_lengths, target_lengths)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_samples_zero_infinity_drops_are_said_once_then_counted_at_the_end(capfd):
    plain = _loop_with_zero_infinity(6, {1, 4})
    original = F.ctc_loss
    with tensor_dap.watch(nn.Linear(1, 1), on="raise", capture=False):  # the tap needs a listener, not this model
        assert F.ctc_loss is not original
        watched = _loop_with_zero_infinity(6, {1, 4})
        during = capfd.readouterr().err
    end = capfd.readouterr().err
    assert F.ctc_loss is original  # put back as the watch closed
    assert watched == plain  # the loss itself is untouched
    assert during.count("ctc_loss(zero_infinity=True)") == 1, during
    assert "gave zero loss and gradient to 1 of 4 samples of a batch (sample 2: 30 labels need" in during
    assert "its input_lengths gives 20" in during and "they teach nothing" in during
    assert "to 2 of the 24 samples it was given while watched (8.33 %, in 6 calls)" in " ".join(end.split()), end


def test_a_run_that_drops_nothing_says_nothing(capfd):
    with tensor_dap.watch(nn.Linear(1, 1), on="raise", capture=False):
        _loop_with_zero_infinity(3, set())
    assert "ctc_loss" not in capfd.readouterr().err


def test_an_accelerators_count_is_read_every_so_many_calls(monkeypatch):
    """Off the CPU nothing is read at a call: the count stays on the device until READ_EVERY calls have added to it
    (the CPU stands in for the device here; ``needed_frames`` on meta tensors shows it reads nothing)."""
    from tensor_dap.triggers import ctc_zeroed

    monkeypatch.setattr(ctc_zeroed, "READ_CPU_NOW", False)
    monkeypatch.setattr(ctc_zeroed, "READ_EVERY", 3)
    said: list[str] = []
    tally = ctc_zeroed.Tally(said.append)
    targets, long_lengths = torch.ones(2, 9, dtype=torch.long), torch.tensor([9, 2])
    for _ in range(2):
        tally.add(targets, torch.tensor([5, 5]), long_lengths)  # sample 0: 9 labels of one kind need 17 frames
    assert (tally.dropped, said) == (0, [])  # still on the "device"
    tally.add(targets, (5, 5), [9, 2])  # lengths as ints, as F.ctc_loss takes them too
    assert tally.dropped == 3 and len(said) == 1 and "to 3 samples in its last 3 calls" in said[0]
    assert "3 of the 6 samples" in tally.summary()
    meta = ctc.needed_frames(torch.ones(20, dtype=torch.long, device="meta"), torch.tensor([5, 15]).to("meta"))
    assert meta.device.type == "meta" and meta.shape == (2,)


def test_the_tap_never_breaks_the_loss():
    from tensor_dap.triggers import ctc_zeroed

    said: list[str] = []
    tally = ctc_zeroed.Tally(said.append)
    wrapped = ctc_zeroed.counting(F.ctc_loss, tally)
    tally.add(torch.ones(3, 3, 3), object(), None)  # nothing ctc_loss takes: not counted, no error
    log_probs = torch.randn(6, 2, 4).log_softmax(-1)
    args = (log_probs, torch.tensor([[1, 2], [3, 3]]), torch.tensor([6, 2]), torch.tensor([2, 2]))
    assert torch.equal(wrapped(*args, zero_infinity=True), F.ctc_loss(*args, zero_infinity=True))
    assert torch.equal(wrapped(*args), F.ctc_loss(*args))  # zero_infinity=False: not counted (its Inf is caught)
    assert (tally.calls, tally.dropped, tally.samples) == (1, 1, 2)  # sample 1: 3 3 needs 3 frames, has 2
