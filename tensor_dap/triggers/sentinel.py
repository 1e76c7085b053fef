"""The per-step sentinel of ``watch``: is anything non-finite? Answered on the device, read rarely.

Why it is cheap: one fused call per device and dtype looks at every gradient. On accelerators
``_foreach_norm`` reduces each to a 0-dim value (NaN and Inf survive norms, so one sum of
everything observed since the last read is non-finite exactly when something was, or when a
sum overflowed, which ``watch`` rules out by an exact re-check when the sentinel fires). On the
CPU, where every op in a training step costs several microseconds (its caches are cold after
the step's kernels), it is the GradScaler's own check,
``_amp_foreach_non_finite_check_and_unscale_`` at a scale of 1: one call for all of a group's
gradients, which sets a flag on a NaN/Inf and gives every value back as it was (bit for bit;
version counters do not move). The flag lives on, read through a view of its memory (no op);
it is cleared only after it was set.

Why there is no host sync between reads: on a device ``observe`` only launches kernels and
keeps the resulting 0-dim tensors in a list. Nothing calls ``.item()`` or ``bool()`` on a
device tensor except ``read``, which ``watch`` calls once every ``every`` checks: one
``stack().sum().item()``. On CUDA with ``every > 1`` the host therefore runs ahead of the GPU
exactly as it would without the sentinel. Only when the read finds a non-finite value are the
kept per-step values read one by one, to name the first failing step. Values on the CPU are
looked at when observed (``READ_CPU_NOW``: that is no sync), so only a bad step's number is
kept for them. ``reads`` counts the reads.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Collection, Sequence
from typing import Any, Callable

import torch

from .optimizer_call import stored_values

COMPACT_AT = 256  # kept 0-dim values before per-step values are summed (bounds memory for large `every`)


def group(tensors: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Floating/complex tensors grouped by (device, dtype): one fused norm launch per group."""
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for t in tensors:
        if t.is_floating_point() or t.is_complex():
            groups.setdefault((t.device, t.dtype), []).append(t)
    return list(groups.values())


def reduce(g: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """0-dim values of one (device, dtype) group, non-finite when an input element is (or a value overflowed).

    Accelerators: one fused ``_foreach_norm`` launch, low precision accumulated in float32. The
    CPU (what its fused check refuses: a gradient whose elements overlap in memory, complex
    values): a sum per tensor.
    """
    dtype = g[0].dtype
    if g[0].is_cpu and not g[0].is_complex():
        if dtype == torch.float32:
            return [t.sum() for t in g]
        return [t.sum(dtype=torch.float64).float() for t in g]  # float64 may exceed float32: keep inf as inf
    if dtype == torch.float32:
        return list(torch._foreach_norm(g))
    if dtype in (torch.float16, torch.bfloat16):  # accumulate in float32: no early overflow
        return list(torch._foreach_norm(g, 2, dtype=torch.float32))
    return [n.float() for n in torch._foreach_norm(g)]  # float64, complex: their own precision, then float32


def grads_of(groups: Sequence[Sequence[torch.Tensor]]) -> list[list[torch.Tensor]]:
    """The gradients of grouped parameters, missing ones left out, sparse ones by their stored values."""
    strided = torch.strided
    return [[gr if gr.layout is strided else stored_values(gr) for p in g if (gr := p.grad) is not None]
            for g in groups]


_GRAD = operator.attrgetter("grad")
READ_CPU_NOW = True  # CPU values are read when observed (no sync); tests set False to let the CPU act a device


def _fusable(first: torch.Tensor) -> bool:
    """Whether the group ``first`` belongs to goes through the CPU's fused check, or a value is read as it is
    observed: real values on the CPU, read at once (no sync there)."""
    return READ_CPU_NOW and first.is_cpu and not first.is_complex()


def _flattened(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The tensors' elements in one 1-d tensor (a copy): torch's one C++ call for it where there is one (what DDP
    buckets with: ~0.1 ms for 300 small buffers, against ~0.25 ms with a reshape of each in Python)."""
    try:
        return torch._C._nn.flatten_dense_tensors(list(tensors))
    except (AttributeError, RuntimeError, TypeError):  # a torch without it, or tensors it refuses
        return torch.cat([t.reshape(-1) for t in tensors])


class _CpuFlag:
    """The GradScaler's fused non-finite check at scale 1, with a flag that outlives the step."""

    _ONE = torch.ones(())  # the inverse scale: 1 gives every value back unchanged

    def __init__(self) -> None:
        self.flag = torch.zeros(1)
        try:
            # the same memory, read with no torch op (a memoryview's item is a plain float: no numpy scalar)
            self._view: Any = memoryview(self.flag.numpy())
        except Exception:  # noqa: BLE001 - no numpy: read with item()
            self._view = None

    def check(self, tensors: Sequence[torch.Tensor]) -> bool | None:
        """True when some element is NaN/Inf; None when the fused check refuses the tensors."""
        try:
            torch._amp_foreach_non_finite_check_and_unscale_(tensors, self.flag, self._ONE)
        except (RuntimeError, TypeError):  # None among them, sparse, overlapping memory, another device
            self.flag.zero_()
            return None
        if not (self._view[0] if self._view is not None else self.flag.item()):
            return False
        self.flag.zero_()
        return True


class Sentinel:
    """Keeps on-device values since the last read; ``read`` is the only host synchronization."""

    def __init__(self, every: int = 1) -> None:
        self.every = every
        self.reads = 0  # reads so far (one per `every` checks that observed something): what the tests count
        self.failing: list[int] = []  # the steps with a non-finite value found by the last read
        self._checks = 0
        self._pending: list[tuple[int, list[torch.Tensor]]] = []  # (step, 0-dim device tensors)
        self._count = 0
        self._bad: list[int] = []  # steps whose values, read when observed, were non-finite
        self._observed = False  # since the last read
        self._flag = _CpuFlag()
        self._param_groups: Any = None  # the groups observe_params last saw, and which of them are fusable:
        self._fusable_groups: list[bool] = []  # asked once (two tensor attributes a group cost µs every step)
        self._one_fusable = False
        self.source: Callable[[], list[torch.Tensor]] | None = None  # more tensors checked with the gradients
        self._also: list[torch.Tensor] = []  # what it gave last, and grouped:
        self._also_groups: list[list[torch.Tensor]] = []

    def also(self, source: Callable[[], list[torch.Tensor]] | None) -> None:
        """Check ``source()``'s tensors (a model's buffers: state its forward writes) with the gradients at every
        check (None: nothing more); it is asked each time, and regrouped when it gives another list."""
        self.source = source

    def observe(self, groups: Sequence[Sequence[torch.Tensor]], step: int) -> None:
        """Fold grouped tensors (gradients, see ``group``) of ``step`` in. Kernel launches only."""
        for g in groups:  # gradients do not require grad: no autograd graph is built here
            if g and not (_fusable(g[0]) and self._fused(g, step)):
                self._keep(step, reduce(g), (g[0].device,))  # a group reduces on its device

    def _observe_read_only(self, groups: Sequence[Sequence[torch.Tensor]], step: int) -> None:
        """Fold in tensors the sentinel must not write, even with their own values (a buffer can live in read-only
        memory: a checkpoint mapped from its file, ``torch.frombuffer``): one sum of each group, read-only, copied
        into one piece first (``also``'s source bounds how much)."""
        for g in groups:
            if g:
                flat = _flattened(g)
                flat = torch.view_as_real(flat) if flat.is_complex() else flat
                total = flat.sum(dtype=torch.float64 if flat.dtype == torch.float64 else torch.float32)  # (no early
                # overflow; kept on a device as float32, as ``reduce`` keeps its values)
                self._keep(step, [total if total.is_cpu else total.float()], (g[0].device,))  # non-finite when an
                # element is (or when the sum overflowed: ``watch`` re-checks)

    def observe_params(self, groups: Sequence[Sequence[torch.Tensor]], step: int) -> None:
        """Fold in the gradients of grouped parameters (``group``). The common case, a dense gradient for
        every parameter of a CPU group, is one fused check taken straight from the parameters, with no
        Python per gradient; whatever that check refuses (a missing, sparse or overlapping gradient, another
        device) goes the careful way (``grads_of``, ``observe``)."""
        if groups is not self._param_groups:
            self._param_groups, self._fusable_groups = groups, [_fusable(g[0]) for g in groups]
            self._one_fusable = self._fusable_groups == [True]
        if self._one_fusable:  # one CPU group (a float32 model): the common case, with no loop
            if not self._fused(list(map(_GRAD, groups[0])), step):
                self.observe(grads_of(groups), step)  # refused: not tried a second time
            return
        rest = [g for g, fusable in zip(groups, self._fusable_groups)
                if not (fusable and self._fused(list(map(_GRAD, g)), step))]
        if rest:
            self.observe(grads_of(rest), step)

    def _fused(self, tensors: Sequence[torch.Tensor], step: int) -> bool:
        """One CPU group through the fused check; False when the check refuses ``tensors``."""
        bad = self._flag.check(tensors)
        if bad is None:
            return False
        self._observed = True
        if bad:
            self._note_bad(step)
        return True

    def observe_value(self, value: torch.Tensor, step: int) -> None:
        """Fold a scalar (the loss) in as it is."""
        if not (value.is_floating_point() or value.is_complex()):
            return
        if _fusable(value) and value.numel() == 1:  # the common case (a CPU loss): no tensor kept, no loop
            self.observe_number(value.item(), step)
            return
        if value.dtype == torch.float32 and value.dim() == 0:
            self._keep(step, [value.detach()], (value.device,))
        else:
            self._keep(step, [value.detach().reshape(()).abs().float()], (value.device,))  # |x| non-finite iff x is

    def observe_number(self, value: float, step: int) -> None:
        """Fold in a value already read on the host (an unchanged loop's loss on the CPU: ``loss_value``)."""
        self._observed = True
        if not math.isfinite(value):
            self._note_bad(step)

    def _note_bad(self, step: int) -> None:
        if not self._bad or self._bad[-1] != step:
            self._bad.append(step)

    def _keep(self, step: int, values: list[torch.Tensor], devices: Collection[torch.device]) -> None:
        """``devices``: where ``values`` are, known per group, so no per-value check on every step."""
        if not values:
            return
        self._observed = True
        if READ_CPU_NOW and all(d.type == "cpu" for d in devices):
            if not all(math.isfinite(v.item()) for v in values):
                self._note_bad(step)
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

    def check_params(self, groups: Sequence[Sequence[torch.Tensor]], step: int) -> bool | None:
        """``observe_params``, ``due`` and a read that finds nothing, in one call (a training step makes it):
        None when no read is due; False when one was and every value seen since the last was finite on the
        CPU (the read is counted and done); True when ``read`` has something to look at."""
        if self.source is not None:  # (a model with buffers)
            tensors = self.source()
            if tensors is not self._also:
                self._also, self._also_groups = tensors, group(tensors)
            self._observe_read_only(self._also_groups, step)
        if (groups is self._param_groups and self._one_fusable
                and self._flag.check(list(map(_GRAD, groups[0]))) is False):
            self._observed = True  # observe_params' common case, in this call: every training step comes here
        else:
            self.observe_params(groups, step)  # (a failing or refused check is taken again there)
        self._checks += 1
        if self._checks % self.every:
            return None
        if self._bad or self._pending:
            return True
        if self._observed:
            self._observed = False
            self.reads += 1
            self.failing = []
        return False

    def read(self) -> int | None:
        """The first step with a non-finite value since the last read, else None; then reset."""
        if not self._observed:
            return None
        bad, self._bad, self._observed = self._bad, [], False
        pending, self._pending, self._count = self._pending, [], 0
        self.reads += 1
        self.failing = bad
        if pending:
            flat = [t for _, values in pending for t in values]
            total = (flat[0] if len(flat) == 1 else torch.stack(flat).sum()).item()  # one read per `every` checks
            if not math.isfinite(total):  # fired: find the failing steps (reads only now)
                found = {step for step, values in pending if not all(math.isfinite(v.item()) for v in values)}
                self.failing = sorted(found.union(bad))
                if not self.failing:
                    return pending[-1][0]  # only a sum overflowed: watch re-checks
        return self.failing[0] if self.failing else None
