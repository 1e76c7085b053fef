"""The loss a program hands to ``backward()``, for whoever listens: ``tensor-dap run``'s loss checks and
the reports of ``watch`` on an unchanged loop (whose loss is computed outside the model).

While anyone listens, ``torch.autograd.backward`` is wrapped (``Tensor.backward`` goes through it)
and so is ``GradScaler.scale``, so a scaled loss is traced back to the loss it scaled. A listener gets
the scalar tensor itself: nothing is read to the host here. Vector-Jacobian products (an explicit
gradient) and several roots at once are not losses and are not passed on. A listener is called as
backward() starts, or (``done=True``) once it has returned: the gradients are then complete and
nothing has used them yet (a loop that updates its parameters by hand does so after).

``torch.autograd.grad`` is wrapped too, only to note where a program takes gradients of gradients
(``create_graph=True``: a WGAN-GP gradient penalty), whose double backward the unchanged loop's
re-run cannot reproduce (``double_backward_line``); and so is the clipping of gradients
(``clip_grad_norm_``, ``clip_grad_value_``), only to note that the program clips (``clipping``): a
diverging run that clips already needs another fix than clipping; and ``F.ctc_loss``, only to count the
samples ``zero_infinity=True`` drops (``ctc_zeroed``).
"""

from __future__ import annotations

import functools
import math
import sys
import weakref
from collections import deque
from typing import Any, Callable

import torch

from ..debug.frames import CallSites, Site, SourceLine, site_line
from . import backward_errors, ctc_zeroed, scaled_clip

Listener = Callable[[torch.Tensor], None]

_listeners: list[tuple[Listener, bool]] = []  # (listener, called once backward() returned)
# Snapshots, renewed on listen/stop: no copy per backward(), and a listener may stop while it is called.
_calling: tuple[Listener, ...] = ()
_finishing: tuple[Listener, ...] = ()
_restore: list[tuple[Any, str, Any]] = []
_scaled: dict[int, tuple[weakref.ref, weakref.ref]] = {}  # id(scaled loss) -> (scaled, loss)
_scaling = [False]  # a GradScaler has scaled a loss while anyone listened
_double: list[Site] = [None]  # where torch.autograd.grad(create_graph=True) was last called while anyone listened
_grad_sites = CallSites()
_clipping: list[str | None] = [None]  # how the program last clipped its gradients while anyone listened
_clips = [0]  # clips seen while anyone listened (what ``clip_order`` compares with the backward() calls) ...
_clipped: list[Any] = [None]  # ... and the parameters (or their gradients) the last one was handed (None: not known)
CLIP_NORMS_KEPT = 32
# the total norms of the program's last clips by norm, as tensors (nothing read until a stop's report asks)
_clip_norms: deque[torch.Tensor] = deque(maxlen=CLIP_NORMS_KEPT)
_ctc: list[ctc_zeroed.Tally | None] = [None]  # what ctc_loss(zero_infinity=True) dropped while anyone listened
# the loss the last backward() that returned went through: it tells a loss handed to backward() again, or one whose
# graph an earlier loss's backward() freed. Held weakly where backward() kept its graph (retain_graph=True): holding
# it would keep that graph; otherwise only the spent nodes and a value are held, until the next backward().
_last_done: list[Any] = [None]


def listen(fn: Listener, *, done: bool = False) -> Callable[[], None]:
    """Call ``fn(loss)`` at every ``backward()`` on a loss (``done``: once it has returned), until the
    returned function is called.

    ``fn`` may raise on purpose (a trigger stopping the run); the wrapper passes that on.
    """
    if not _listeners:
        _install()
    entry = (fn, done)
    _listeners.append(entry)
    _renew()

    def stop() -> None:
        for i, other in enumerate(_listeners):
            if other is entry:
                del _listeners[i]
                break
        _renew()
        if not _listeners:
            _uninstall()

    return stop


def _renew() -> None:
    global _calling, _finishing
    _calling = tuple(fn for fn, done in _listeners if not done)
    _finishing = tuple(fn for fn, done in _listeners if done)


def _install() -> None:
    import torch.autograd

    _clipping[0] = None
    _clip_norms.clear()
    _last_done[0] = None

    original = torch.autograd.backward

    @functools.wraps(original)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
        loss = _loss_of(tensors, args, kwargs)
        if loss is None:
            return original(tensors, *args, **kwargs)
        for fn in _calling:
            fn(loss)
        try:
            result = original(tensors, *args, **kwargs)
        except RuntimeError as error:  # a tensor changed in place, a graph already freed: which, where
            last = _last_done[0]
            backward_errors.annotate(loss, error, last() if type(last) is weakref.ref else last)
            raise
        # held weakly where backward() kept the graph: retain_graph or create_graph (Tensor.backward passes both by
        # position after the gradient; written out, not a helper: this runs in every training step)
        _last_done[0] = weakref.ref(loss) if (any(args[1:3]) or kwargs.get("retain_graph")
                                              or kwargs.get("create_graph")) else loss
        for fn in _finishing:
            fn(loss)
        return result

    _restore.append((torch.autograd, "backward", original))
    torch.autograd.backward = backward
    grad = torch.autograd.grad

    @functools.wraps(grad)
    def traced_grad(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("create_graph") or (len(args) > 4 and args[4]):
            _double[0] = _grad_sites.at(sys._getframe(1))
        return grad(*args, **kwargs)

    _restore.append((torch.autograd, "grad", grad))
    torch.autograd.grad = traced_grad
    scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if scaler is not None:
        scale = scaler.scale

        @functools.wraps(scale)
        def traced_scale(scaler_self: Any, outputs: Any) -> Any:
            scaled = scale(scaler_self, outputs)
            _remember_scaled(scaled, outputs)
            scaled_clip.scaled_by(scaler_self)
            return scaled

        _restore.append((scaler, "scale", scale))
        scaler.scale = traced_scale
    _trace_clipping()
    _count_ctc()


def _count_ctc() -> None:
    """Count the samples ``ctc_loss(zero_infinity=True)`` drops (``ctc_zeroed``): said as the last listener leaves."""
    import torch.nn.functional as F

    from .aftermath import say

    _ctc[0] = tally = ctc_zeroed.Tally(say)
    _restore.append((F, "ctc_loss", F.ctc_loss))
    F.ctc_loss = ctc_zeroed.counting(F.ctc_loss, tally)


def _trace_clipping() -> None:
    """Note each clipping of gradients. ``clip_grad_norm_`` clips through ``_clip_grads_with_norm_``, looked up in
    its module at each call: wrapped there, a ``clip_grad_norm_`` imported by name before listening began is
    seen too (HF's Trainer clips through accelerate, which calls it). ``clip_grad_value_`` has no helper of its own:
    it is seen when called through its module (``torch.nn.utils.clip_grad_value_``), and, imported by name, where
    it groups its gradients (``_group_tensors_by_device_and_dtype``, looked up in its module at each call: the
    caller's code tells that it is ``clip_grad_value_``)."""
    from torch.nn import utils

    clip_module = getattr(utils, "clip_grad", None)
    # (the helper is public too, as torch.nn.utils.clip_grads_with_norm_: accelerate imports it when it clips)
    targets = [(owner, name, "norm") for owner, name in ((clip_module, "_clip_grads_with_norm_"),
                                                         (utils, "clip_grads_with_norm_")) if hasattr(owner, name)]
    if not targets:  # a torch before 2.6
        targets = [(utils, "clip_grad_norm_", "norm")]
    targets += [(owner, "clip_grad_value_", "value") for owner in (utils, clip_module)
                if hasattr(owner, "clip_grad_value_")]
    value = getattr(getattr(clip_module, "clip_grad_value_", None), "__wrapped__", None)  # (under torch's _no_grad)
    group = getattr(clip_module, "_group_tensors_by_device_and_dtype", None)
    for owner, name, kind in targets:
        original = getattr(owner, name)
        _restore.append((owner, name, original))
        setattr(owner, name, _noting_clip(original, kind, returns_norm=name == "clip_grad_norm_"))
    if value is not None and group is not None:
        _restore.append((clip_module, "_group_tensors_by_device_and_dtype", group))
        clip_module._group_tensors_by_device_and_dtype = _noting_value_clip(group, value.__code__)


def _noting_value_clip(group: Callable[..., Any], code: Any) -> Callable[..., Any]:
    """``group``, noting a call from ``clip_grad_value_`` (``code``) with the ``clip_value`` it clips to."""
    @functools.wraps(group)
    def grouped(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        if caller.f_code is code and _listeners:
            bound = caller.f_locals.get("clip_value")
            _clipping[0] = f"value {bound:.4g}" if isinstance(bound, (int, float)) else "value"
            _clips[0] += 1
            _scaled_clip("value", bound)
            params = caller.f_locals.get("parameters")  # a list when it came through ``traced``; else maybe spent
            tensors = args[0] if args else None  # ([its gradients],): the same objects while they are not reset
            _clipped[0] = params if isinstance(params, (list, tuple, torch.Tensor)) else \
                tensors[0] if isinstance(tensors, list) and tensors else None
        return group(*args, **kwargs)

    return grouped


def _scaled_clip(kind: str, bound: Any) -> None:
    """Say a clip of gradients a GradScaler still scales (``scaled_clip``), once."""
    if _scaling[0] and (line := scaled_clip.clipped(kind, bound)) is not None:
        from .aftermath import say

        say(line)


def _noting_clip(clip: Callable[..., Any], kind: str, returns_norm: bool) -> Callable[..., Any]:
    """``clip`` (its bound second: ``max_norm``, ``clip_value``), noting each call in ``_clipping``, and a clip by
    norm's total norm (the helper's third argument, or what ``returns_norm`` clip returns) in ``_clip_norms``."""
    keyword = "max_norm" if kind == "norm" else "clip_value"

    @functools.wraps(clip)
    def traced(*args: Any, **kwargs: Any) -> Any:
        bound = args[1] if len(args) > 1 else kwargs.get(keyword)
        # Noted only while anyone listens (the program may keep this wrapper, imported by name, after that); a bound
        # given as a tensor is not read (on an accelerator that would wait for the device); an infinite one only
        # measures the norm (HF's Trainer, to log it).
        noted = _listeners and not (isinstance(bound, (int, float)) and not math.isfinite(bound))
        if noted:
            _clipping[0] = f"{kind} {bound:.4g}" if isinstance(bound, (int, float)) else kind
            _clips[0] += 1
            _scaled_clip(kind, bound)
            if args and not isinstance(args[0], (list, tuple, torch.Tensor)):  # model.parameters(): read once, kept
                args = (list(args[0]), *args[1:])
            _clipped[0] = args[0] if args else kwargs.get("parameters")  # (a reference: nothing copied)
        result = clip(*args, **kwargs)
        norm = result if returns_norm else args[2] if len(args) > 2 else kwargs.get("total_norm")
        if noted and kind == "norm" and isinstance(norm, torch.Tensor) and norm.numel() == 1:
            _clip_norms.append(norm.detach())
        return result

    return traced


def clip_norm_seen() -> float | None:
    """The largest finite total norm among the program's last ``CLIP_NORMS_KEPT`` clips by norm, None if it
    measured none: a bound above it never clipped. Read now (a device's norms wait for it: a stop's report)."""
    finite = []
    for norm in _clip_norms:
        try:
            value = float(norm)
        except Exception:  # noqa: BLE001 - a norm that cannot be read here (a sharded DTensor's): not told
            continue
        if math.isfinite(value):
            finite.append(value)
    return max(finite) if finite else None


def _uninstall() -> None:
    for owner, name, original in reversed(_restore):
        setattr(owner, name, original)
    _restore.clear()
    tally, _ctc[0] = _ctc[0], None
    if tally is not None and (line := tally.summary()):
        tally.say(line)
    _scaled.clear()
    _scaling[0] = False
    _double[0] = None
    _clipping[0] = None
    _clip_norms.clear()
    _last_done[0] = None
    scaled_clip.forget()


def double_backward_line() -> SourceLine | None:
    """The user's line that last took gradients with ``create_graph=True`` while anyone listened, if one did."""
    site = _double[0]
    return site_line(site) if site is not None else None


def clips() -> int:
    """How many times the program clipped its gradients while anyone listened."""
    return _clips[0]


def last_clipped() -> Any:
    """The parameters (or their gradients: a list, or one tensor) the program's last clip was handed; None when not
    known."""
    return _clipped[0]


def clipping() -> str | None:
    """How the program clipped its gradients since listening began ("norm 1", "value 0.5"), None if it did not."""
    return _clipping[0]


def scaling() -> bool:
    """Whether a ``GradScaler`` has scaled a loss since listening began: then a step without an update may be
    one it skipped (an overflow), not a phase of another model."""
    return _scaling[0]


def _remember_scaled(scaled: Any, loss: Any) -> None:
    if scaled is loss:  # a disabled scaler (nanoGPT's GradScaler(enabled=False) off float16) skips no step
        return
    _scaling[0] = True
    if isinstance(scaled, torch.Tensor) and isinstance(loss, torch.Tensor):
        for key in [k for k, v in _scaled.items() if v[0]() is None]:  # drop the dead
            del _scaled[key]
        _scaled[id(scaled)] = (weakref.ref(scaled), weakref.ref(loss))


def _loss_of(tensors: Any, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The loss ``backward`` was called on, unscaled; None for anything that is not one loss.
    (It runs at every backward: the common case, ``loss.backward()``, takes the fewest steps.)"""
    if (args and args[0] is not None) or kwargs.get("grad_tensors") is not None:
        return None  # an explicit gradient: a vector-Jacobian product
    loss = tensors
    if not isinstance(loss, torch.Tensor):
        if not isinstance(loss, (list, tuple)) or len(loss) != 1 or not isinstance(loss[0], torch.Tensor):
            return None
        loss = loss[0]
    if loss.numel() != 1:
        return None
    if _scaled:
        pair = _scaled.get(id(loss))
        if pair is not None and pair[0]() is loss and pair[1]() is not None:
            return pair[1]()
    return loss
