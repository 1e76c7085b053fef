"""Why a CTC loss is infinite: a target that its input is too short to align to.

CTC sums over the alignments of a target's labels to the input's frames. A target of L labels needs L
frames, and one more for each label repeated next to itself (a blank must separate the two); a
sample whose ``input_lengths`` gives fewer has no alignment at all, so its loss is +Inf and its
gradient NaN, unless ``zero_infinity=True``. Speech and OCR models meet it when a model's striding
shortens the input below its longest transcripts. ``unalignable`` names those samples from the op's
own arguments (the two modes of ``watch`` see them in the same order: ``log_probs, targets,
input_lengths, target_lengths``), reading a bounded number of target elements.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ..format import plural

OPS = {"ctc_loss", "_ctc_loss", "_cudnn_ctc_loss", "cudnn_ctc_loss"}  # (cuDNN's on a GPU)
MAX_TARGETS = 1 << 22  # target elements read at most (a larger batch of targets is not looked at)
NAMED = 3  # samples named in the diagnosis at most

_NAMES = ("log_probs", "targets", "input_lengths", "target_lengths")


class Unalignable(NamedTuple):
    """One sample of the batch with no alignment: its index, its labels, the frames they need and the frames it has."""

    sample: int
    labels: int
    needed: int
    frames: int


def arguments(named: list[tuple[str, Any]]) -> dict[str, torch.Tensor]:
    """The op's four arguments as tensors by name, from ``(name, value)`` pairs named by keyword (lengths may be
    sequences of ints, as a backward node saves them) or by position (``args[0]`` ... as a re-run records its
    tensors: a length given there as a list of ints is not among them)."""
    found = {name: v if isinstance(v, torch.Tensor) else torch.as_tensor(v) for name, v in named
             if name in _NAMES and (isinstance(v, torch.Tensor) or name.endswith("_lengths") and _ints(v))}
    positional = [v for name, v in named if name.startswith("args[") and isinstance(v, torch.Tensor)]
    for name, v in zip((n for n in _NAMES if n not in found), positional):
        found[name] = v
    return {name: found[name] for name in _NAMES if name in found}


def _ints(v: Any) -> bool:
    return isinstance(v, (tuple, list)) and len(v) <= MAX_TARGETS and all(isinstance(i, int) for i in v)


def unalignable(targets: torch.Tensor, input_lengths: torch.Tensor, target_lengths: torch.Tensor) -> list[Unalignable]:
    """The samples whose input is shorter than their target needs, in order; empty when every sample fits or the
    arguments are not what ``ctc_loss`` takes (or too many targets to read)."""
    with torch.no_grad():
        frames = input_lengths.detach().reshape(-1).long().cpu()
        lengths = target_lengths.detach().reshape(-1).long().cpu()
        targets = targets.detach().cpu()
        if frames.numel() != lengths.numel() or targets.numel() > MAX_TARGETS or (lengths < 0).any() or \
                not _fits(targets, lengths):
            return []
        return short_samples(frames, lengths, needed_frames(targets, lengths))


def short_samples(frames: torch.Tensor, lengths: torch.Tensor, needed: torch.Tensor) -> list[Unalignable]:
    """The samples with fewer ``frames`` than ``needed``, in order (read to the host)."""
    frames, lengths, needed = frames.cpu(), lengths.cpu(), needed.cpu()
    short = (frames < needed).nonzero().reshape(-1).tolist()
    return [Unalignable(i, int(lengths[i]), int(needed[i]), int(frames[i])) for i in short]


def _fits(targets: torch.Tensor, lengths: torch.Tensor) -> bool:
    """The lengths stay inside the targets (read: a report's check, not the tap's)."""
    if targets.dim() == 2:
        return targets.shape[0] == lengths.numel() and (not lengths.numel() or int(lengths.max()) <= targets.shape[1])
    return targets.dim() == 1 and int(lengths.sum()) <= targets.numel()


def needed_frames(targets: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The frames each sample's target needs at least: its labels, plus one for each label equal to the one before
    it. Padded (N, S) targets, or the samples' targets one after another (1-D). Nothing is read to the host (on an
    accelerator this waits for nothing); a shape ``ctc_loss`` does not take raises ValueError."""
    n = lengths.numel()
    if targets.dim() == 2 and targets.shape[0] == n:
        same = targets[:, 1:] == targets[:, :-1]  # position j + 1 repeats position j
        inside = torch.arange(same.shape[1], device=targets.device)[None, :] < (lengths[:, None] - 1)
        return lengths + (same & inside).sum(1)
    if targets.dim() != 1 or not n:
        if n:
            raise ValueError(f"targets of shape {tuple(targets.shape)} for {n} samples")
        return lengths.clone()
    ends = lengths.cumsum(0)
    position = torch.arange(1, targets.numel(), device=targets.device)
    owner = torch.searchsorted(ends, position, right=True)  # the sample each position belongs to (n: past the last)
    inside = owner < n
    owner = owner.clamp(max=n - 1)
    first = position == (ends - lengths)[owner]  # a sample's first label repeats nothing
    counted = (targets[1:] == targets[:-1]) & inside & ~first
    return lengths + torch.zeros_like(lengths).scatter_add_(0, owner, counted.long())


def explain(named: list[tuple[str, Any]]) -> str:
    """The samples that cannot be aligned, for the diagnosis: " (sample 3 of 8: 25 labels need 25 frames, its
    input_lengths gives 20)"; empty when they cannot be told."""
    try:
        args = arguments(named)
        if not {"targets", "input_lengths", "target_lengths"} <= args.keys():
            return ""
        short = unalignable(args["targets"], args["input_lengths"], args["target_lengths"])
    except Exception:  # noqa: BLE001 - arguments the op would refuse: the diagnosis says less
        return ""
    if not short:
        return ""
    return f" ({len(short)} of {args['target_lengths'].numel()} samples: {listed(short)})"


def listed(short: list[Unalignable]) -> str:
    """``sample 3: 25 labels need 25 frames, its input_lengths gives 20; ...``, the first ``NAMED`` of them."""
    shown = "; ".join(f"sample {s.sample}: {plural(s.labels, 'label')} need{'s' * (s.labels == 1)} {s.needed} "
                      f"frames, its input_lengths gives {s.frames}" for s in short[:NAMED])
    return shown + (f"; {len(short) - NAMED} more" if len(short) > NAMED else "")
