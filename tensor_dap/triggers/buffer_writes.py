"""A NaN/Inf written into a buffer: state a forward keeps across steps (an EMA codebook, a running normalizer,
BatchNorm's statistics) can go non-finite while that step's loss and gradients stay finite; the next step's forward
then reads it, and the NaN seems born there, in an op that was only handed it.

``watched`` gives the sentinel the model's floating buffers to check with the gradients at every step (read only:
``Sentinel.also``): the smallest first, up to a quarter of the parameters' elements (a causal mask of ones or a rotary
table would cost more than it tells), leaving out any non-finite as the watch begins (a -inf mask). ``written`` names
the op whose value an in-place write put in a buffer during a re-run (``buffer.data.copy_(avg / count)``); ``held``
says which buffer holds it when no re-run can tell more.
"""

from __future__ import annotations

import logging

import torch

from ..state import Buffers, BufferSnapshot
from ..summary import describe
from .birth import Birth, root, storage_of
from .finite import kind_of
from .localize import Finding, from_birth, nonfinite
from .origin import Tracker
from .sentinel import Sentinel

log = logging.getLogger("tensor_dap.triggers")

MIN_BUDGET = 1 << 16  # buffer elements always checked, however small the model's parameters


class Watched:
    """The sentinel's source of buffers to check (``Sentinel.also``), asked at every check: the buffers live now are
    compared by identity with the last ones (a buffer rebound by the forward, ``self.avg = ...``, is checked in the
    same step) and chosen again when they changed. The first choice, and one after ``dismiss``, leave out what is
    non-finite then (a -inf mask); later ones keep it (a rebound buffer holding NaN is the finding)."""

    def __init__(self, buffers: Buffers, params: list[torch.Tensor]) -> None:
        self._buffers = buffers
        self._budget = max(MIN_BUDGET, sum(p.numel() for p in params if not _lazy(p)) // 4)
        self._live: list[torch.Tensor | None] | None = None
        self._kept: list[torch.Tensor] = []
        self._masks: set[int] = set()  # the buffers left out as masks, by slot (``Buffers.live``'s order): a mask
        # the forward builds again at each call (``self.mask = torch.full(..., -inf).triu(1)``) stays out
        self._lazy = False  # a lazy module's buffer was not materialized yet: chosen again until it is

    def __call__(self) -> list[torch.Tensor]:
        live, last = self._buffers.live(), self._live
        if last is None or self._lazy or len(live) != len(last) or any(a is not b for a, b in zip(live, last)):
            try:  # (one entry a slot; slots taken in later, ``Buffers.grow``, come after: seen for the first time)
                self._choose(live, new_from=0 if last is None else len(last))
            except Exception as exc:  # noqa: BLE001 - a buffer it cannot read: none checked, training goes on
                log.debug("tensor_dap.watch: buffers not checked: %r", exc)
                self._live, self._kept = live, []
        return self._kept

    def dismiss(self) -> None:
        """A non-finite buffer turned out deliberate (a -inf mask made in the step): choose again without it."""
        self._choose(self._buffers.live(), new_from=0)

    def _choose(self, live: list[torch.Tensor | None], *, new_from: int) -> None:
        """The smallest floating buffers up to the budget (a causal mask of ones or a rotary table would cost more
        than it tells), in one new list (the sentinel regroups it). Slots from ``new_from`` on are seen for the first
        time: what is non-finite there is a mask."""
        ranked = sorted(((i, b) for i, b in enumerate(live) if b is not None and i not in self._masks and not _lazy(b)
                         and b.is_floating_point() and b.layout == torch.strided and b.device.type != "meta"),
                        key=lambda slot: slot[1].numel())
        kept, total = [], 0
        for i, b in ranked:
            total += b.numel()
            if total > self._budget:
                break
            kept.append((i, b))
        if new_from < len(live):  # (a read of each: at the watch's start, after a dismissed alarm, of a new buffer)
            self._masks.update(i for i, b in kept if i >= new_from and nonfinite(b))
            kept = [(i, b) for i, b in kept if i not in self._masks]
        self._live, self._kept = live, [b for _, b in kept]
        self._lazy = any(b is not None and _lazy(b) for b in live)


def _lazy(t: torch.Tensor) -> bool:
    """A lazy module's parameter or buffer before its first forward: no shape, no values yet."""
    return isinstance(t, torch.nn.parameter.UninitializedTensorMixin)


def taken_in(buffers: Buffers, sentinel: Sentinel, params: list[torch.Tensor]) -> None:
    """Buffers registered since the watch began (at a first forward, a lazily made cache or statistic) are checked from
    now on: its first steps and now and then after (``watch._check``)."""
    if buffers.grow() and sentinel.source is None:
        sentinel.also(watched(buffers, params))


def watched(buffers: Buffers, params: list[torch.Tensor]) -> Watched | None:
    """The sentinel's source of buffers (``Watched``); None for a model with no floating buffer (nothing added)."""
    if not any(b is not None and b.is_floating_point() for b in buffers.live()):
        return None
    source = Watched(buffers, params)
    source()  # the first choice, as the watch begins: what is non-finite before any step ran is a mask
    return source


def deliberate(model: torch.nn.Module, masks: list[str], rerun: bool) -> bool:
    """Whether the non-finite buffers are masks to leave out: the re-run found their -inf put there on purpose
    (``masks``, from ``written``); or, with no re-run to tell (``rerun=False``), they hold Inf and no NaN (a -inf mask
    the forward builds; an Inf written by accident still shows, as a NaN in a later step's loss)."""
    if masks:
        return True
    found = nonfinite_buffer(model) if not rerun else None
    return found is not None and kind_of(found[1]) == "inf"


def nonfinite_buffer(model: torch.nn.Module) -> tuple[str, torch.Tensor] | None:
    """The first floating buffer of ``model`` holding a NaN/Inf now, by name."""
    for name, b in model.named_buffers():
        if b.is_floating_point() and nonfinite(b):
            return name, b
    return None


def written(tracker: Tracker, model: torch.nn.Module, masks: list[str] | None = None) -> Finding | None:
    """After a re-run that found nothing else: a buffer an op of the step made non-finite, written in place
    (``self.embed.data.copy_(x)``) or rebound (``self.avg = self.avg * d + x``), and the op that made the value.
    A value the step was handed is not told here; a deliberate Inf (a -inf mask put there) is not either: its
    buffer's name goes into ``masks``."""
    for name, b in model.named_buffers():
        if not b.is_floating_point() or not nonfinite(b):
            continue
        memory = storage_of(b)
        birth = tracker.written.get(memory) if memory is not None else None
        if birth is None:
            known = tracker.lineage(b)
            birth = known[1] if known is not None else None
        if birth is None or _handed(birth):
            continue
        birth = root(birth)
        if birth.deliberate:
            if masks is not None:
                masks.append(name)
            continue
        finding = from_birth(birth, model)
        finding.note += (f"; it was written into the buffer {name!r}, which the model keeps across steps: the next "
                         "step's forward reads it (the loss and gradients of this step are still finite)")
        return finding
    return None


def _handed(birth: Birth) -> bool:
    """A birth the tracker made for a value that was non-finite before the step began (its only input is it)."""
    return len(birth.inputs) == 1 and birth.inputs[0][0] == "input" and birth.inputs[0][1] is birth.output


def held(model: torch.nn.Module, start: BufferSnapshot | None) -> Finding | None:
    """Which buffer holds a NaN/Inf, where no re-run named the op: written between steps (``start``, the buffers
    as the step began, already held it: code after the update, an EMA of the weights) or in this step's forward."""
    found = nonfinite_buffer(model)
    if found is None:
        return None
    name, b = found
    before = start is not None and any(live is b and value is not None and nonfinite(value)
                                       for live, value in zip(start.live, start.values))
    when = ("it already held it when this step began: written between steps (after the last update, before this "
            "forward: an EMA or a statistic updated by the loop)") if before else (
        "written during this step's forward (the loss and gradients are still finite; the next forward reads it)")
    path, _, _ = name.rpartition(".")
    module = model.get_submodule(path) if path else model
    return Finding("forward", path, type(module).__name__, f"the buffer {name!r} holds NaN/Inf: {when}",
                   [("buffer", name, describe(b))], {"module": module, "buffer": b})
