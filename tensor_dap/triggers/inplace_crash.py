"""Why ``backward()`` says a tensor it needs "has been modified by an inplace operation", when the tensor is a
parameter: an update ran between the loss's forward and its ``backward()``.

torch names only a type and a shape (``[torch.FloatTensor [32, 1]], which is output 0 of TBackward0, is at version
2; expected version 1``) and suggests anomaly mode, which points at the forward op, not at what changed the
tensor. The usual cause is an ``optimizer.step()`` in between: a GAN stepping its discriminator before the
generator's ``backward()`` through it, or a loop calling ``step()`` before ``backward()``. While ``watch`` listens
to ``backward()``, such an error is matched against the parameters the failing loss's graph holds (its shape, or
the transpose torch saved, and its version counter now), which are named with the watched model and optimizer that
hold them. When it is an activation instead (``nn.ReLU(inplace=True)`` after a sigmoid, ``x += y`` on a tensor an
op saved), the unchanged loop's forward that made the loss (or the ``w.step`` running) is run again watching
every op's version counters (``inplace_origin``): the op that changed it and its line are named, or, when the
model's forward changes nothing, the code between the model's output and ``backward()`` is (``backward_errors``
adds the note).
"""

from __future__ import annotations

import sys
from typing import Any

from torch import nn

from ..debug.frames import name_of, stand_in
from ..nested import map_tensors
from ..state import restore_rng
from . import active
from .inplace_origin import Mutation, Wanted, find
from .ops import forward_name
from .optimizer_call import param_ids
from .stray_params import graph_params

def explain(loss: Any, error: BaseException) -> str | None:
    """The tensor that ``error`` (from ``backward()`` on ``loss``) is about and what changed it, or None."""
    wanted = Wanted.parse(str(error))
    if wanted is None:
        return None
    if wanted.made_by_view_or_leaf:  # a parameter is saved as it is or as a view (its transpose): never an op's output
        return _parameter(loss, wanted) or _activation(loss, wanted)
    return _activation(loss, wanted)


def _parameter(loss: Any, wanted: Wanted) -> str | None:
    """A parameter of the loss's graph with the error's shape (or its transpose) and version: an update changed it."""
    size, now, then = wanted.shape, wanted.now, wanted.expected
    params = graph_params(loss)
    found = [p for p in params if p._version == now and size in (tuple(p.shape), tuple(p.shape)[::-1])]
    if not found:
        return None
    name, optimizer = _named(found[0])
    updater = f"{type(optimizer).__name__}.step()" if optimizer is not None else "an optimizer.step() updating it"
    transposed = " (torch saved its transpose)" if size != tuple(found[0].shape) and len(size) > 1 else ""
    changed = (f"the tensor backward() needs is {name}{transposed}, changed in place after this loss's forward (its "
               f"version went from {then} to {now})")
    if _no_update_since(loss, found[0]):
        return (f"{changed}, with no optimizer step since that forward: the program wrote it (an in-place op under "
                "torch.no_grad(): `.zero_()`, `.clamp_()`, `.copy_()`, `w.data[...] = ...`; a weight constraint, an "
                "EMA swap, load_state_dict) between the forward and backward(). Change it before the forward or "
                "after backward()")
    text = f"{changed}: {updater} ran between the forward and this backward(). Call backward() before that update"
    held = param_ids(optimizer) if hasattr(optimizer, "param_groups") else set()
    if any(id(p) not in held for p in params):  # the loss is another model's too: a GAN's generator
        text += ("; in a GAN, run the generator's backward() before the discriminator's step(), or compute the "
                 "generator's loss from a new forward through the discriminator after its step")
    return text


def _no_update_since(loss: Any, param: Any) -> bool:
    """The watch of the model holding ``param`` saw, on its unchanged loop, the forward that made ``loss`` in this
    step and no update after it."""
    for w in active.watches():
        loop, model = getattr(w, "_loop", None), getattr(w, "_inner", None)
        if loop is None or loop.updated or not isinstance(model, nn.Module) or \
                not any(p is param for p in model.parameters()):
            continue
        if any(f.loss_tensor is loss for f in loop.forwards):
            return True
    return False


def _activation(loss: Any, wanted: Wanted) -> str | None:
    """The op that changed the tensor, found by re-running the unchanged loop's forward that made ``loss``, or the
    ``w.step`` running now."""
    mutation: Mutation | None = None
    rerun = ""  # what was run again: "this step's forward" (unchanged loop) or "this step" (w.step)

    def forward(model: nn.Module, f: Any) -> None:
        nonlocal mutation, rerun
        rerun, mutation = "this step's forward", find(lambda: _forward_again(model, f), wanted, model)

    def step(ctx: Any) -> None:
        nonlocal mutation, rerun
        rerun, mutation = "this step", find(lambda: _step_again(ctx), wanted, model)

    for w in active.watches():
        model = getattr(w, "_inner", None)
        if hasattr(w, "rerun_for") and isinstance(model, nn.Module) and w.rerun_for(loss, forward, step):
            if mutation is not None:
                break
    what = _what(wanted, mutation)
    if mutation is not None:
        where = _place(mutation.module, mutation.line)
        return (f"the tensor backward() needs is {what}, changed in place by {mutation.op}{where} before backward() "
                f"used it (its version went from {wanted.expected} to {wanted.now}; found by re-running {rerun}): "
                f"{mutation.fix}")
    if rerun != "this step's forward":  # (a re-run of the whole step that finds nothing: left to torch's message)
        return None
    return (f"the tensor backward() needs is {what}, changed in place before backward() used it (its version went "
            f"from {wanted.expected} to {wanted.now}). Re-running this step's forward changes nothing in place, so "
            "the op is in the code between the model's output and backward() (an x += ..., x[...] = ..., a method "
            "ending in _, or inplace=True there): make it out of place")


def _what(wanted: Wanted, mutation: Mutation | None) -> str:
    shape = list(wanted.shape)
    if wanted.node is None:
        return f"a tensor {shape} that no op of the graph made (an input or a buffer)"
    made_by = (mutation.made_by if mutation is not None else None) or forward_name(wanted.node)
    at = _place(mutation.made_in, mutation.made_at) if mutation is not None else ""
    return f"the output of {made_by} {shape}{at}"


def _place(module: str | None, line: Any) -> str:
    """" in blocks.0.act (ReLU) at model.py:12 (`h = self.act(h)`)": the line is the user's code running it."""
    quoted = f"{line} (`{line.code}`)" if line is not None and line.code else str(line or "")
    return (f" in {module}" if module else "") + (f" at {quoted}" if quoted else "")


def _forward_again(model: nn.Module, f: Any) -> Any:
    """The step's forward on copies of its inputs (one it changes in place must not be changed twice)."""
    args, kwargs = map_tensors((f.args, f.kwargs), _copy)
    restore_rng(f.rng)  # the step's dropout masks: the same ops run on the same values
    return model(*args, **kwargs)


def _step_again(ctx: Any) -> None:
    """A ``w.step``'s function once more, on copies of its inputs: its backward() fails again (or the update is
    refused: ``StopRerun``), after the op that changed the tensor has run."""
    args, kwargs = map_tensors((ctx.args, ctx.kwargs), _copy)
    restore_rng(ctx.rng)
    try:
        ctx.fn(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the same error again, or the refused update (StopRerun): the op has run
        pass


def _copy(t: Any) -> Any:
    return t.detach().clone().requires_grad_(t.requires_grad)


# the user's line above a re-run forward is the line that called the model in the step
stand_in(_forward_again.__code__, lambda frame: getattr(frame.f_locals.get("f"), "call", None))


def _named(param: nn.Parameter) -> tuple[str, Any]:
    """The parameter's name in a watched model, and that watch's optimizer (None when not known)."""
    for w in active.watches():
        model = getattr(w, "_inner", None)
        if not isinstance(model, nn.Module):
            continue
        for name, p in model.named_parameters():
            if p is param:
                optimizer = getattr(w, "optimizer", None) or getattr(w, "_stepper", None)
                return f"{_called(model)}'s parameter {name!r} {list(param.shape)}", optimizer
    return f"a parameter of shape {list(param.shape)}", None


def _called(model: nn.Module) -> str:
    """The name the user's code has for ``model`` (``D``, ``self.disc``), else its class's name."""
    return name_of(model, sys._getframe(1)) or type(model).__name__
