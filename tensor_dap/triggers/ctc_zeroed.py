"""Samples that ``ctc_loss(zero_infinity=True)`` silently drops, counted while ``watch`` listens.

``zero_infinity=True`` (many CTC recipes set it) turns the infinite loss of a target its input is too
short for into 0, and its NaN gradient into 0: the run trains on, the loss curve looks fine, and those
samples teach nothing. A model whose striding leaves fewer frames than its longest transcripts can
lose a large share of its data that way. While anyone listens to the loss (``loss_tap``), the
``ctc_loss`` of ``torch.nn.functional`` (which ``nn.CTCLoss`` calls) is wrapped: a call with
``zero_infinity=True`` has the frames each target needs compared with its ``input_lengths``
(``ctc.needed_frames``: a few small ops on the lengths, nothing read on an accelerator). The first
call that drops a sample says so in one line, with the samples; the end of the run (the last
listener leaving) says how many were dropped in all. On the CPU the count is read at each call; on an
accelerator it is kept there and read every ``READ_EVERY`` calls, so the host never waits for it.
A ``ctc_loss`` imported by name before the watch began, or ``torch.ctc_loss``, is not seen.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from ..format import plural
from . import ctc

try:
    from torch.compiler import is_compiling as _is_compiling  # True while dynamo traces: no graph break of ours
except ImportError:  # a torch without it
    def _is_compiling() -> bool:
        return False

READ_EVERY = 64  # calls between two reads of an accelerator's count
READ_CPU_NOW = True  # a CPU count is read at each call (no sync there); tests set False to let the CPU act a device
_ZERO_INFINITY = 6  # its position in ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction, ...)


class Tally:
    """What the wrapped ``ctc_loss`` saw with ``zero_infinity=True`` since listening began."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.samples = 0  # samples given to it
        self.dropped = 0  # of them, too long for their input (read so far)
        self.calls = 0
        self._pending: torch.Tensor | None = None  # an accelerator's count, not read yet
        self._unread = 0
        self._said = False

    def add(self, targets: Any, input_lengths: Any, target_lengths: Any) -> None:
        """Count one call's samples that cannot be aligned; never raises (it runs inside the user's loss)."""
        try:
            self._add(targets, input_lengths, target_lengths)
        except Exception:  # noqa: BLE001 - arguments ctc_loss itself will refuse, or a device we cannot count on
            return

    def _add(self, targets: Any, input_lengths: Any, target_lengths: Any) -> None:
        if not isinstance(targets, torch.Tensor):
            return
        with torch.no_grad():
            device = targets.device
            frames = torch.as_tensor(input_lengths).detach().reshape(-1).to(device, torch.long)
            lengths = torch.as_tensor(target_lengths).detach().reshape(-1).to(device, torch.long)
            if frames.numel() != lengths.numel():
                return
            needed = ctc.needed_frames(targets.detach(), lengths)
            short = frames < needed
            self.calls += 1
            self.samples += lengths.numel()
            if device.type == "cpu" and READ_CPU_NOW:
                count = int(short.sum())
                self.dropped += count
                if count and not self._said:
                    self._first(ctc.short_samples(frames, lengths, needed), lengths.numel())
                return
            count_on_device = short.sum()
            self._pending = count_on_device if self._pending is None else self._pending + count_on_device
            self._unread += 1
            if self._unread >= READ_EVERY:
                self.read()

    def read(self) -> None:
        """Bring an accelerator's count over (a sync: every ``READ_EVERY`` calls, and at the end)."""
        if self._pending is None:
            return
        count, self._pending, calls, self._unread = int(self._pending), None, self._unread, 0
        self.dropped += count
        if count and not self._said:
            self._said = True
            self.say(f"tensor_dap: ctc_loss(zero_infinity=True) gave zero loss and gradient to "
                     f"{plural(count, 'sample')} in its last {plural(calls, 'call')}: {_WHY}")

    def _first(self, short: list[ctc.Unalignable], samples: int) -> None:
        self._said = True
        self.say(f"tensor_dap: ctc_loss(zero_infinity=True) gave zero loss and gradient to "
                 f"{len(short)} of {samples} samples of a batch ({ctc.listed(short)}): {_WHY}")

    def summary(self) -> str | None:
        """The end of the run: how many samples were dropped in all; None when none was."""
        self.read()
        if not self.dropped:
            return None
        share = 100 * self.dropped / max(1, self.samples)
        return (f"tensor_dap: ctc_loss(zero_infinity=True) gave zero loss and gradient to {self.dropped:,} of the "
                f"{self.samples:,} samples it was given while watched ({share:.3g} %, in "
                f"{plural(self.calls, 'call')}): targets too long for their input, which taught nothing")


_WHY = ("a target of L labels needs L frames, plus one for each label repeated next to itself, and these had fewer, "
        "so the run goes on but they teach nothing: keep more frames (less downsampling) or drop such samples (said "
        "once; the end of the run counts them)")


def counting(original: Callable[..., Any], tally: Tally) -> Callable[..., Any]:
    """``ctc_loss`` that first counts, into ``tally``, the samples a ``zero_infinity=True`` call will drop."""
    @functools.wraps(original)
    def ctc_loss(*args: Any, **kwargs: Any) -> Any:
        zero = args[_ZERO_INFINITY] if len(args) > _ZERO_INFINITY else kwargs.get("zero_infinity", False)
        if zero is True and not _is_compiling():  # (torch.compile traces its own copy: not counted there)
            named = dict(zip(("log_probs", "targets", "input_lengths", "target_lengths"), args))
            named.update(kwargs)
            tally.add(named.get("targets"), named.get("input_lengths"), named.get("target_lengths"))
        return original(*args, **kwargs)

    return ctc_loss
