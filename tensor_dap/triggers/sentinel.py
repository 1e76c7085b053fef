"""The per-step sentinel of ``watch``: is anything non-finite? Answered on the device, read rarely.

Why it is cheap: one fused ``_foreach_norm`` launch per device and dtype (on the CPU, one
``sum`` per tensor) reduces every gradient to a 0-dim value; the loss is kept as it is. NaN
and Inf survive norms and sums, so one sum of everything observed since the last read is
non-finite exactly when something was (or when a sum overflowed, which ``watch`` rules out
by an exact re-check when the sentinel fires).

Why there is no host sync between reads: ``observe`` only launches kernels and keeps the
resulting 0-dim device tensors in a list. Nothing calls ``.item()`` or ``bool()`` on a
device tensor except ``read``, which ``watch`` calls once every ``every`` checks: one
``stack().sum().item()`` (values on the CPU are read directly: that is no sync). On CUDA
with ``every > 1`` the host therefore runs ahead of the GPU exactly as it would without the
sentinel. Only when the read finds a non-finite value are
the kept per-step values read one by one, to name the first failing step. ``reads`` counts
the host reads.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import torch

COMPACT_AT = 256  # kept 0-dim values before per-step values are summed (bounds memory for large `every`)


def group(tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Floating/complex tensors grouped by (device, dtype): one fused norm launch per group."""
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for t in tensors:
        if t.is_floating_point() or t.is_complex():
            groups.setdefault((t.device, t.dtype), []).append(t)
    return list(groups.values())


def reduce(groups: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
    """0-dim float values, non-finite exactly when some input element is (or the value overflowed).

    On CUDA (and other accelerators): one fused ``_foreach_norm`` launch per group. On the
    CPU a plain ``sum`` per tensor is cheaper (multi-threaded, no squaring) and fusing buys
    nothing there. Low-precision tensors accumulate in float32 so they do not overflow early.
    """
    out: list[torch.Tensor] = []
    for g in groups:  # gradients do not require grad: no autograd graph is built here
        if not g:
            continue
        dtype = g[0].dtype
        if g[0].device.type == "cpu" and not g[0].is_complex():
            if dtype == torch.float32:
                out += [t.sum() for t in g]
            else:  # float64 values may exceed float32: compare as float64, keep as float32 inf
                out += [t.sum(dtype=torch.float64).float() for t in g]
        elif dtype == torch.float32:
            out += torch._foreach_norm(g)
        elif dtype in (torch.float16, torch.bfloat16):  # accumulate in float32: no early overflow
            out += torch._foreach_norm(g, 2, dtype=torch.float32)
        else:  # float64, complex: their own precision, then one float32 value each
            out += [n.float() for n in torch._foreach_norm(g)]
    return out


class Sentinel:
    """Keeps on-device values since the last read; ``read`` is the only host synchronization."""

    def __init__(self, every: int = 1) -> None:
        self.every = every
        self.reads = 0  # host reads so far: what the tests count
        self.failing: list[int] = []  # the steps with a non-finite value found by the last read
        self._checks = 0
        self._pending: list[tuple[int, list[torch.Tensor]]] = []  # (step, 0-dim device tensors)
        self._count = 0

    def observe(self, groups: Sequence[Sequence[torch.Tensor]], step: int) -> None:
        """Fold grouped tensors (gradients, see ``group``) of ``step`` in. Kernel launches only."""
        self._keep(step, reduce(groups), {g[0].device for g in groups if g})  # a group reduces on its device

    def observe_value(self, value: torch.Tensor, step: int) -> None:
        """Fold a scalar (the loss) in as it is."""
        if value.dtype == torch.float32 and value.dim() == 0:
            self._keep(step, [value.detach()], (value.device,))
        elif value.is_floating_point() or value.is_complex():
            self._keep(step, [value.detach().reshape(()).abs().float()], (value.device,))  # |x| non-finite iff x is

    def _keep(self, step: int, values: list[torch.Tensor], devices: Collection[torch.device]) -> None:
        """``devices``: where ``values`` are, known per group, so no per-value check on every step."""
        if not values:
            return
        device = self._pending[0][1][0].device if self._pending else values[0].device
        if any(d != device for d in devices):  # model parallel: gather onto one device, no sync
            values = [v.to(device, non_blocking=True) for v in values]
        self._pending.append((step, values))
        self._count += len(values)
        if self._count > COMPACT_AT:
            self._pending = [(s, [torch.stack(v).sum()] if len(v) > 1 else v) for s, v in self._pending]
            self._count = len(self._pending)

    def due(self) -> bool:
        """Count one check; True on every ``every``-th."""
        self._checks += 1
        return self._checks % self.every == 0

    def read(self) -> int | None:
        """The first step with a non-finite value since the last read, else None; then reset."""
        if not self._pending:
            return None
        pending, self._pending, self._count = self._pending, [], 0
        flat = [t for _, values in pending for t in values]
        self.reads += 1
        if flat[0].device.type == "cpu":  # reading CPU values is not a sync: skip the stack
            total = sum(t.item() for t in flat)
        else:  # the one device-to-host read per `every` checks
            total = (flat[0] if len(flat) == 1 else torch.stack(flat).sum()).item()
        self.failing = []
        if math.isfinite(total):
            return None
        self.failing = sorted({step for step, values in pending  # fired: find the failing steps (reads only now)
                               if not all(math.isfinite(v.item()) for v in values)})
        return self.failing[0] if self.failing else pending[-1][0]  # only a sum overflowed: watch re-checks
