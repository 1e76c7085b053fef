"""Save and restore what a training step changes: RNG streams, buffers, module modes, optimizer state.

Re-running a step (localizing a NaN, replaying a window, probing shapes) must leave the
program exactly as it found it, so every such caller saves and restores through here.
Reading a state never advances a stream and never synchronizes a device.
"""

from __future__ import annotations

import contextlib
import functools
import random
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

from .nested import map_tensors


# ------------------------------------------------------------------ RNG streams

def capture_rng(*, python: bool = True, numpy: bool = True, torch: bool = True) -> dict[str, Any]:
    """Every RNG a training step may draw from; reading them never advances a stream.

    torch's states cost ~2 µs; Python's ``random`` ~10 µs and numpy's ~40 µs. In a training step
    every microsecond is several, so ``watch`` leaves out the streams the step (or the model's
    forward) does not draw from (``rngs_used``). ``torch=False`` leaves torch's (CPU and CUDA)
    out, and torch unimported.
    """
    state: dict[str, Any] = {}
    if torch:
        import torch as th

        state["torch"] = th.get_rng_state()
        if _cuda_in_use(th):  # the CUDA generators keep seed and offset on the host: reading them does not sync
            state["cuda"] = th.cuda.get_rng_state_all()
    if python:
        state["python"] = random.getstate()
    np = sys.modules.get("numpy")
    if numpy and np is not None:
        state["numpy"] = np.random.get_state()
    return state


@functools.cache
def _cuda_built() -> bool:
    """Whether this torch can use CUDA at all (asked once: ~1 µs a call)."""
    import torch as th

    return bool(th.cuda.is_available())


def _cuda_in_use(th: Any) -> bool:
    return _cuda_built() and th.cuda.is_initialized()


def rngs_used(before: dict[str, Any]) -> dict[str, bool]:
    """Which RNGs (``capture_rng``'s keywords) moved since ``before`` was captured: what a step draws from.

    A stream that ``before`` left out counts as used (nothing shows it was not)."""
    import torch as th

    now = capture_rng()
    used = {"python": "python" not in before or now["python"] != before["python"], "numpy": False,
            "torch": "torch" not in before or not th.equal(now["torch"], before["torch"])}
    if "cuda" in now:
        old_cuda = before.get("cuda")
        used["torch"] = used["torch"] or old_cuda is None or len(old_cuda) != len(now["cuda"]) or not all(
            th.equal(a, b) for a, b in zip(old_cuda, now["cuda"]))
    if "numpy" in now:
        import numpy as np

        old = before.get("numpy")
        used["numpy"] = old is None or not (old[0] == now["numpy"][0] and np.array_equal(old[1], now["numpy"][1])
                                            and tuple(old[2:]) == tuple(now["numpy"][2:]))
    return used


class RngUse:
    """Which RNG streams a recurring piece of code (a training step, a model's forward) draws from, learned
    by watching it: its first call, and every ``PROBE_EVERY``-th, keeps every stream and compares after;
    a stream once seen moving is kept from then on. The others are left out of ``before``'s states:
    a call that does not draw from a stream finds it as the previous call left it."""

    PROBE_EVERY = 100

    def __init__(self) -> None:
        self.streams: dict[str, bool] | None = None  # capture_rng's keywords; None: not probed yet
        self._calls = 0
        self._none = False  # no stream is used: nothing to capture

    def before(self) -> tuple[dict[str, Any], bool]:
        """(the states to keep for this call, whether this call probes: then hand them to ``after``)."""
        self._calls += 1
        streams = self.streams
        if streams is None or self._calls % self.PROBE_EVERY == 0:
            return capture_rng(), True
        return ({} if self._none else capture_rng(**streams)), False

    def after(self, before: dict[str, Any]) -> None:
        """A probing call ended: learn which streams it moved."""
        used = rngs_used(before)
        old = self.streams
        self.streams = used if old is None else {k: v or old.get(k, True) for k, v in used.items()}
        self._none = not any(self.streams.values())


def restore_rng(state: dict[str, Any]) -> None:
    """Put back the streams ``state`` holds (what ``capture_rng`` read); the others are left as they are."""
    if "torch" in state:
        import torch

        torch.set_rng_state(state["torch"])
    if "python" in state:
        random.setstate(state["python"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])
    if "cuda" in state:
        import torch

        if torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu")


def autocast_now() -> tuple[tuple[str, str], ...]:
    """The autocast regions code runs in now, as (device type, dtype name) pairs: a forward the loop called under
    ``torch.autocast`` is re-run under it too (a float16 overflow reproduces). Empty outside any."""
    import torch

    now = []
    for device in AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(device):
                now.append((device, str(torch.get_autocast_dtype(device)).removeprefix("torch.")))
        except (RuntimeError, TypeError, ValueError):  # a device type this torch does not know
            continue
    return tuple(now)


@contextlib.contextmanager
def autocast_as(regions: Any) -> Iterator[None]:
    """Within, autocast as ``autocast_now`` recorded it (a bundle's, read back: names a torch knows only)."""
    import torch

    with contextlib.ExitStack() as stack:
        for device, name in regions or ():
            dtype = getattr(torch, str(name), None)
            if isinstance(dtype, torch.dtype):
                stack.enter_context(torch.autocast(str(device), dtype=dtype))
        yield


@contextlib.contextmanager
def rng_kept(*, python: bool = True, numpy: bool = True, torch: bool = True) -> Iterator[None]:
    """Within, code may draw from the RNGs named (a library that picks ids at random): their streams are
    put back on the way out, so the program's own draws stay what they would have been."""
    saved = capture_rng(python=python, numpy=numpy, torch=torch)
    try:
        yield
    finally:
        restore_rng(saved)


# ------------------------------------------------------------------ buffers and modes

class BufferSnapshot(NamedTuple):
    """The buffer tensors of a module tree at one moment (``live``) and copies of their values."""

    live: list[Any]
    values: list[Any]


NO_BUFFERS = BufferSnapshot([], [])  # the snapshot of a model without buffers (read, never written)


class Buffers:
    """A module tree's buffers (BatchNorm statistics...): the only state a forward pass writes.

    ``save`` copies them into storage kept from call to call (one fused copy, no allocation),
    for a per-step snapshot; ``clone`` makes an independent copy; ``restore`` puts a snapshot
    back, rebinding a buffer that was replaced by a new tensor since (``self.x = self.x + 1``).
    """

    def __init__(self, model: Any) -> None:
        self._model = model
        self._slots: list[tuple[Any, str]] = []
        self.names: list[str] = []
        self._store: list[Any] = []
        self._stored_for: list[Any] = []
        self.grow()

    def grow(self) -> bool:
        """Take in the buffers registered since (a module that registers its statistics or cache at its first
        forward), after the others: a slot keeps its place (``buffer_writes`` keeps masks by slot). True if any."""
        known = {(id(m), key) for m, key in self._slots}
        pairs = [(prefix, m, key) for prefix, m in self._model.named_modules(remove_duplicate=False)
                 for key, buf in m._buffers.items() if buf is not None and (id(m), key) not in known]
        self._slots += [(m, key) for _, m, key in pairs]
        self.names += [f"{prefix}.{key}" if prefix else key for prefix, _, key in pairs]
        return bool(pairs)

    def live(self) -> list[Any]:
        return [m._buffers.get(key) for m, key in self._slots]

    def save(self) -> BufferSnapshot:
        if not self._slots:  # a model without buffers (an MLP): every training step, with nothing to copy
            return NO_BUFFERS
        import torch

        live = self.live()
        if any(a is not b for a, b in zip(live, self._stored_for)) or len(live) != len(self._stored_for):
            self._store = [torch.empty_like(b) if b is not None else None for b in live]
            self._stored_for = live
        pairs = [(s, b) for s, b in zip(self._store, live) if b is not None]
        if pairs:
            with torch.no_grad():
                torch._foreach_copy_([s for s, _ in pairs], [b for _, b in pairs])
        return BufferSnapshot(live, self._store)

    def clone(self) -> BufferSnapshot:
        live = self.live()
        return BufferSnapshot(live, [b.detach().clone() if b is not None else None for b in live])

    def restore(self, snapshot: BufferSnapshot) -> None:
        import torch

        with torch.no_grad():
            for (module, key), live, value in zip(self._slots, snapshot.live, snapshot.values):
                if live is None or value is None:
                    continue
                if module._buffers.get(key) is not live:
                    module._buffers[key] = live
                if live.shape == value.shape and not torch.equal(live, value):  # (equal: not written at all, as a
                    live.copy_(value)  # buffer in read-only memory must not be: a checkpoint mapped from its file)

    def into(self, state: dict[str, Any], snapshot: BufferSnapshot) -> dict[str, Any]:
        """``state`` (the model's state_dict) with its buffers replaced by a snapshot's values (a step's start)."""
        for name, value in zip(self.names, snapshot.values):
            if name in state and value is not None:
                state[name] = value
        return state


@contextlib.contextmanager
def preserved(module: Any) -> Iterator[None]:
    """Within, a forward pass may change modes, buffers and RNG streams: all are put back on the way out."""
    modes = [(m, m.training) for m in module.modules()]
    buffers = Buffers(module)
    saved_buffers, saved_rng = buffers.clone(), capture_rng()
    try:
        yield
    finally:
        buffers.restore(saved_buffers)
        for m, training in modes:
            m.training = training
        restore_rng(saved_rng)


@contextlib.contextmanager
def kept(params: list[Any], buffers: Buffers, *, params_too: bool = True) -> Iterator[dict[str, Any]]:
    """Within, a replay or re-run may change gradients, buffers, RNG states (and parameters): all are put
    back on the way out. Yields the RNG states saved on the way in."""
    import torch

    saved_rng, saved_buffers = capture_rng(), buffers.clone()
    saved_grads = [(p, p.grad) for p in params]
    saved_params = [p.detach().clone() for p in params] if params_too else None
    try:
        yield saved_rng
    finally:
        for p, g in saved_grads:
            p.grad = g
        if saved_params is not None:
            with torch.no_grad():
                torch._foreach_copy_(params, saved_params)
        buffers.restore(saved_buffers)
        restore_rng(saved_rng)


# ------------------------------------------------------------------ optimizer state

def cloned(obj: Any) -> Any:
    """A copy of a state_dict-like structure, tensors cloned where they are (no host sync)."""
    return map_tensors(obj, lambda t: t.detach().clone())


def hyper(optimizer: Any) -> list[dict[str, Any]]:
    """Every param group's settings (lr, momentum...), without the parameters."""
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def set_hyper(optimizer: Any, saved: list[dict[str, Any]]) -> None:
    for g, values in zip(optimizer.param_groups, saved):
        g.update(values)


def optimizer_state(optimizer: Any) -> dict[Any, dict[str, Any]]:
    """A copy of ``optimizer.state`` (per parameter: momentum, Adam moments, step...)."""
    return {p: cloned(dict(st)) for p, st in optimizer.state.items()}


def load_model_state(model: Any, state: dict[str, Any]) -> None:
    """``model.load_state_dict(state)``, strict, except that a buffer already equal to its saved value is not written:
    one in read-only memory (``np.memmap``, ``torch.frombuffer``) would crash the program with the copy."""
    import torch

    live = dict(model.named_buffers())
    same = {k for k, v in state.items() if isinstance(v, torch.Tensor) and isinstance(live.get(k), torch.Tensor)
            and live[k].shape == v.shape and live[k].dtype == v.dtype and torch.equal(live[k], v.to(live[k].device))}
    if not same:
        model.load_state_dict(state)
        return
    result = model.load_state_dict({k: v for k, v in state.items() if k not in same}, strict=False)
    missing = [k for k in result.missing_keys if k not in same]
    if missing or result.unexpected_keys:  # what strict loading would refuse
        model.load_state_dict(state)  # (raises torch's own error, naming them)


def load_optimizer_state(optimizer: Any, saved: dict[Any, dict[str, Any]]) -> None:
    """Put an ``optimizer_state`` copy back *in place*: the optimizer's own dicts and tensors stay the same
    objects (``load_state_dict`` would replace them, under code holding references to them)."""
    import torch

    for p in [p for p in optimizer.state if p not in saved]:
        del optimizer.state[p]
    for p, st in saved.items():
        live = optimizer.state[p]
        for k in [k for k in live if k not in st]:
            del live[k]
        for k, v in st.items():
            old = live.get(k)
            if isinstance(v, torch.Tensor) and isinstance(old, torch.Tensor) and old.shape == v.shape \
                    and old.dtype == v.dtype and old.device == v.device:
                with torch.no_grad():
                    old.copy_(v)
            else:
                live[k] = cloned(v)


@contextlib.contextmanager
def optimizer_kept(optimizer: Any) -> Iterator[None]:
    """Within, a replay may change the optimizer's state and settings: both are put back, in place, on the way out."""
    saved_state, saved_hyper = optimizer_state(optimizer), hyper(optimizer)
    try:
        yield
    finally:
        load_optimizer_state(optimizer, saved_state)
        set_hyper(optimizer, saved_hyper)
