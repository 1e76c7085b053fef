"""The per-step sentinel of ``watch``: is anything non-finite? Answered on the device, read rarely.

Why it is cheap: one fused ``_foreach_norm`` over all gradients (plus an ``isfinite`` on the
loss) gives one 0-dim flag per device. NaN and Inf survive a sum of norms, so the flag is
exact up to overflow of the sum itself, which ``watch`` rules out by an exact re-check when
the flag fires.

Why there is no host sync between reads: ``observe`` only launches device kernels. Flags are
OR-ed into ``_bad`` with ``torch.logical_or`` and the first failing step is kept on the device
with ``torch.where``; nothing calls ``.item()``/``bool()`` except ``read``, which ``watch``
calls once every ``every`` checks. On CUDA with ``every > 1`` the host therefore runs ahead of
the GPU exactly as it would without the sentinel. ``reads`` counts the host reads.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch


def nonfinite_flag(tensors: Sequence[torch.Tensor]) -> Optional[torch.Tensor]:
    """A 0-dim bool tensor (on the first tensor's device): True if any element is NaN/Inf. No sync."""
    groups: Dict[Tuple[torch.device, torch.dtype], List[torch.Tensor]] = {}
    for t in tensors:
        if t.is_floating_point() or t.is_complex():
            groups.setdefault((t.device, t.dtype), []).append(t)
    flag: Optional[torch.Tensor] = None
    for group in groups.values():
        with torch.no_grad():
            total = torch.stack(torch._foreach_norm(group, 2, dtype=torch.float32)).sum()
            bad = torch.logical_not(torch.isfinite(total))
        flag = bad if flag is None else torch.logical_or(flag, bad.to(flag.device, non_blocking=True))
    return flag


class Sentinel:
    """Accumulates on-device non-finite flags; ``read`` is the only host synchronization."""

    def __init__(self, every: int = 1) -> None:
        self.every = every
        self.reads = 0  # host reads so far: what the tests count
        self._checks = 0
        self._bad: Optional[torch.Tensor] = None
        self._first: Optional[torch.Tensor] = None  # first failing step, kept on the device

    def observe(self, tensors: Sequence[torch.Tensor], step: int) -> None:
        """Fold ``tensors`` of ``step`` into the flag. Device kernels only."""
        flag = nonfinite_flag(tensors)
        if flag is None:
            return
        if self._bad is None:
            self._bad, self._first = flag, torch.where(flag, step, -1)
            return
        flag = flag.to(self._bad.device, non_blocking=True)
        self._first = torch.where(torch.logical_and(flag, torch.logical_not(self._bad)), step, self._first)
        self._bad = torch.logical_or(self._bad, flag)

    def due(self) -> bool:
        """Count one check; True on every ``every``-th."""
        self._checks += 1
        return self._checks % self.every == 0

    def read(self) -> Optional[int]:
        """The first step whose tensors were non-finite since the last read, else None; then reset."""
        if self._bad is None:
            return None
        bad, first = self._bad, self._first
        self._bad = self._first = None
        self.reads += 1
        if not bool(bad.item()):  # the one host read per `every` checks
            return None
        return int(first.item())  # a second read only when something fired
