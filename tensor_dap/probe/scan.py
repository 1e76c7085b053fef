"""Find every tensor reachable from a frame, and the ``tensors`` / ``nan`` reports over them.

Reachable means: the frame's locals, their containers (a few levels deep), the parameters
and buffers of any ``nn.Module`` among them, and the attributes of ``self``. Each tensor
is listed once, under the first name that reaches it.
"""

from __future__ import annotations

import sys
import time
import types
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..kinds import is_module, is_tensor
from ..nested import children, walk
from ..summary import TensorSummary, describe
from .display import MAX_DEPTH

MAX_TENSORS = 500  # enough for any frame a person reads; a giant model is cut, and says so
_COUNT_PAST_LIMIT = 10_000
SEARCH_SECONDS = 3.0  # the nan command's patient budget, over all tensors; past it, the default one


def _walk(name: str, value: Any, grads: bool, modules: bool) -> Iterator[tuple[str, Any]]:
    """Tensors inside ``value`` (and each leaf's ``.grad``); a module contributes its parameters and buffers."""
    def expand(node: Any, path: str, dotted: bool) -> Iterator[tuple[str, Any]] | None:
        if is_module(node):
            return _module_tensors(node, path) if modules else iter(())
        return children(node, path, dotted)

    for path, tensor in walk(value, name, max_depth=MAX_DEPTH, expand=expand, limit=_COUNT_PAST_LIMIT):
        yield path, tensor
        if grads and getattr(tensor, "is_leaf", False) and tensor.grad is not None:
            yield f"{path}.grad", tensor.grad


def _module_tensors(module: Any, path: str) -> Iterator[tuple[str, Any]]:
    for pname, param in module.named_parameters():
        yield f"{path}.{pname}", param
    for bname, buf in module.named_buffers():
        yield f"{path}.{bname}", buf


def _skip(name: str, value: Any) -> bool:
    return name.startswith("__") or isinstance(value, (types.ModuleType, type, types.FunctionType))


def reachable_tensors(local_vars: Mapping[str, Any], *, grads: bool = False, modules: bool = True,
                      limit: int = MAX_TENSORS) -> tuple[list[tuple[str, Any]], int]:
    """((name, tensor) list, number left out past ``limit``).

    ``grads`` adds each leaf's ``.grad``; ``modules=False`` skips the parameters and buffers of modules.
    """
    seen = set()
    found: list[tuple[str, Any]] = []
    extra = 0
    items = [(k, v) for k, v in list(local_vars.items()) if not _skip(k, v)]
    self_obj = local_vars.get("self")
    if self_obj is not None and not is_module(self_obj) and not is_tensor(self_obj):
        try:
            items += [(f"self.{k}", v) for k, v in vars(self_obj).items() if not _skip(k, v)]
        except TypeError:
            pass  # no __dict__
    for name, value in items:
        try:
            for tname, tensor in _walk(name, value, grads, modules):
                if id(tensor) in seen:
                    continue
                seen.add(id(tensor))
                if len(found) < limit:
                    found.append((tname, tensor))
                else:
                    extra += 1
                    if extra >= _COUNT_PAST_LIMIT:
                        return found, extra  # a huge container: say "more", do not walk it all
        except Exception:
            continue  # an odd object in locals must not break the listing
    return found, extra


@dataclass(frozen=True)
class TensorRow:
    name: str
    summary: TensorSummary
    flags: tuple[str, ...]  # "NaN/Inf", "other device" or "mixed devices", "requires_grad"


def _device_of(s: TensorSummary) -> str:
    """The device that counts for mixing: none for a 0-dim CPU tensor, which PyTorch lets mix with any."""
    if s.device in ("-", "?") or (s.device == "cpu" and s.shape == ()):
        return ""
    return s.device


def _main_device(rows: list[tuple[Any, TensorSummary]]) -> str | None:
    """Where the frame's work happens: the model's device, else the device most tensors use.

    None when every tensor is on one device; "" when two devices tie with no model to decide.
    """
    devices = Counter(_device_of(s) for _, s in rows if _device_of(s))
    if len(devices) < 2:
        return None
    torch = sys.modules.get("torch")
    params = {_device_of(s) for t, s in rows
              if torch is not None and isinstance(t, torch.nn.Parameter) and _device_of(s)}
    if len(params) == 1:  # a model on one device: that is where inputs must go
        return params.pop()
    (first, n1), (_, n2) = devices.most_common(2)
    return first if n1 > n2 else ""


def tensor_rows(found: list[tuple[str, Any]]) -> list[TensorRow]:
    """Describe each tensor and flag the ones a user should look at first.

    A tensor is on the "other device" when the frame's tensors span several devices and it
    is not where the model's parameters live (or, without a model, where most tensors are):
    the usual model-on-GPU, batch-on-CPU bug. With no way to tell which side is right (two
    devices, as many tensors on each, no model), every tensor gets "mixed devices".
    """
    described = [(t, describe(t)) for _, t in found]
    main = _main_device(described)
    rows = []
    for (name, _), (_, s) in zip(found, described):
        flags = []
        if s.nonfinite:
            flags.append("NaN/Inf")
        device = _device_of(s)
        if main == "" and device:
            flags.append("mixed devices")
        elif main and device and device != main:
            flags.append("other device")
        if s.requires_grad:
            flags.append("requires_grad")
        rows.append(TensorRow(name, s, tuple(flags)))
    return rows


@dataclass(frozen=True)
class NonFiniteRow:
    name: str
    summary: TensorSummary
    bad: int | None  # NaN + Inf elements (an estimate when ``estimated``), None when not counted
    fraction: float | None
    estimated: bool = False  # the summary counted a sample of the tensor: the count and share are estimates


def _badness(s: TensorSummary) -> tuple[int | None, float | None]:
    counts = (s.nan, s.pos_inf, s.neg_inf)
    if any(c is None for c in counts) or not s.numel:
        return None, None
    bad = sum(counts)
    return bad, bad / s.numel


def nonfinite_rows(found: list[tuple[str, Any]]) -> list[NonFiniteRow]:
    """The tensors holding NaN/Inf, worst first (largest share of bad values, then largest count).

    A tensor too large to count exactly within the summary's budget is ranked by the share its
    summary estimated from an even sample, so a huge embedding full of NaN still comes before a
    single bad element elsewhere. The user asked and waits, so each tensor's range pass may take up to
    a second (a NaN in the middle of 1e8 values is found on a busy machine), for SEARCH_SECONDS in all.
    """
    from ..summary import tensor as summaries  # read at call time: the default budget is configurable

    patient, deadline = summaries.DEFAULT_BUDGET.patient(), time.perf_counter() + SEARCH_SECONDS
    rows = []
    for name, tensor in found:
        s = describe(tensor, grad=False, budget=patient if time.perf_counter() < deadline else None)
        if s.nonfinite:
            bad, fraction = _badness(s)
            rows.append(NonFiniteRow(name, s, bad, fraction, estimated=not s.counts_exact))
    rows.sort(key=lambda r: (-(r.fraction if r.fraction is not None else -1.0), -(r.bad or 0)))
    return rows
