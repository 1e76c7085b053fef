"""What an out-of-memory error says about the program, in the crash report.

torch says how much it asked for and how much the device had; not what filled it. The program's frames (every frame
of its own code the traceback went through) still hold it: the two leaks that grow a run's memory step by step until
it fails, each with its fix (a running total of the loss kept with its graph, ``total_loss += loss``; a list of
outputs kept with theirs, ``preds.append(model(x))``: each graph holds its step's activations), and the largest
tensors they hold, each storage counted once. Then the usual ways to need less. CUDA's ``torch.OutOfMemoryError`` and
the CPU allocator's "can't allocate memory" alike; metadata only is read (nothing waits for the device).
"""

from __future__ import annotations

import re
import sys
import time
from itertools import islice
from typing import Any

from ..format import fmt_bytes, fmt_shape
from ..libraries import is_user_file
from ..probe.scan import reachable_tensors
from ..summary.held import held_bytes

_OOM = re.compile(r"out of memory|can't allocate memory", re.IGNORECASE)
_ASKED = re.compile(r"Tried to allocate ([\d.]+ [KMGT]?i?B)|you tried to allocate (\d+) bytes")
CHAIN = 20  # additions in a row that make a running total: more than any one step's sum of loss terms
LISTED = 3  # tensors at least this many, kept with their graphs in one list, are a growing list
TOP = 3  # largest tensors named
BUDGET_S = 0.5  # for everything here
_ARITHMETIC = ("Add", "Mul", "Div", "Sub")  # the nodes a running total (or average) is made of
PER_FRAME = 256  # tensors looked at in each frame
MAX_PARAMS = 100_000  # of a model's parameters (or an optimizer's states) counted


def advice(exc: BaseException, tb: Any) -> str:
    """The report's lines for an out-of-memory ``exc``; '' for any other error."""
    try:
        import torch

        if not (isinstance(exc, torch.OutOfMemoryError) or _OOM.search(str(exc))):
            return ""
        return _advice(str(exc), _user_frames(tb))
    except Exception:  # noqa: BLE001 - advice must never replace the program's own error
        return ""


def _user_frames(tb: Any) -> list[Any]:
    frames = []
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames[::-1]  # innermost first


def _advice(message: str, frames: list[Any]) -> str:
    deadline = time.monotonic() + BUDGET_S
    asked = _ASKED.search(message)
    amount = (asked.group(1) or fmt_bytes(int(asked.group(2)))) if asked else ""
    lines = [f"tensor_dap: out of memory{f' asking for {amount}' if amount else ''}; what your frames hold:"]
    lines += [f"  {line}" for line in holders(frames, deadline)]
    held: dict[tuple[str, int], tuple[str, Any, int]] = {}  # one entry per storage, with the storage's bytes
    for frame in frames:
        found, _ = reachable_tensors(frame.f_locals, modules=False, limit=PER_FRAME)
        for name, t in found:
            storage = _storage(t)
            if storage is not None and storage[0] not in held:
                held[storage[0]] = (name, t, storage[1])
    largest = sorted(held.values(), key=lambda e: -e[2])[:TOP]
    if largest:
        total = sum(n for _, _, n in held.values())
        lines.append("  largest tensors: " + "; ".join(
            f"`{name}` {fmt_shape(tuple(t.shape))} {_dtype(t)} {t.device} {fmt_bytes(n)}" for name, t, n in largest) +
            f" ({fmt_bytes(total)} in all, {len(held)} storages)")
    lines.append("  to need less: a smaller batch (gradient accumulation keeps the effective one), bf16 under "
                 "torch.autocast, activation checkpointing (torch.utils.checkpoint), and evaluation under "
                 "torch.no_grad()")
    return "\n".join(lines)


def memory_view(frame: Any, frame_locals: Any) -> Any:
    """The post-mortem's ``mem``: process and device memory, the largest tensors in view, then what the frames of
    the user's code from ``frame`` out keep (``holders``)."""
    from rich.console import Group
    from rich.text import Text

    from ..probe.memory import memory_report
    from .views import memory

    loaded = "torch" in sys.modules  # (nothing of torch's is imported for a program that does not use it)
    found = reachable_tensors(frame_locals)[0] if loaded else []
    return Group(memory(memory_report(found)), *(Text(line) for line in (holders_from(frame) if loaded else [])))


def holders_from(frame: Any) -> list[str]:
    """``holders`` of the frames of the user's code from ``frame`` out (the post-mortem's ``mem``)."""
    frames = []
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            frames.append(frame)
        frame = frame.f_back
    return holders(frames, time.monotonic() + BUDGET_S)


def holders(frames: list[Any], deadline: float) -> list[str]:
    """What keeps memory in ``frames`` (innermost first), a line each: a running total or a list of outputs kept
    with their graphs, then each model's and optimizer's bytes. (The post-mortem's ``mem`` says these too.)"""
    leaks: list[str] = []
    owners: list[str] = []
    seen: set[int] = set()
    for frame in frames:
        for name, value in list(frame.f_locals.items()):
            if time.monotonic() > deadline or name.startswith("__") or id(value) in seen:
                continue
            seen.add(id(value))
            leak = _running_total(name, value, deadline) or _kept_outputs(name, value)
            if leak:
                leaks.append(leak)
            elif (owned := _owned(name, value)):
                owners.append(owned)
    return leaks + owners


def _owned(name: str, value: Any) -> str:
    """A model's bytes of parameters and gradients, an optimizer's of state; '' for anything else."""
    import torch

    if isinstance(value, torch.nn.Module):
        params = list(islice(value.parameters(), MAX_PARAMS))
        weights = sum(held_bytes(p) for p in params)
        grads = sum(held_bytes(p.grad) for p in params if p.grad is not None)
        if weights:
            return (f"`{name}` ({type(value).__name__}): {fmt_bytes(weights)} of parameters"
                    + (f", {fmt_bytes(grads)} of gradients" if grads else ""))
    elif isinstance(value, torch.optim.Optimizer):
        state = sum(held_bytes(t) for s in islice(value.state.values(), MAX_PARAMS) for t in s.values()
                    if isinstance(t, torch.Tensor))
        if state:
            return f"`{name}` ({type(value).__name__}): {fmt_bytes(state)} of optimizer state"
    return ""


def _running_total(name: str, value: Any, deadline: float) -> str:
    adds, _ = additions(value, deadline)
    if adds < CHAIN:
        return ""
    return (f"`{name}` is {adds:,} additions kept with their graphs: if it is a running total of the loss, each step's "
            f"graph, activations included, stays alive through it; add `loss.item()` (or `loss.detach()`) instead")


def additions(value: Any, deadline: float, limit: int = 100_000) -> tuple[int, int]:
    """(the additions, the oldest node's sequence number) of the arithmetic that made ``value``, a one-value tensor
    ((0, 0) for anything else): a running total kept with its graph (``total += loss``, ``avg = 0.9 * avg + 0.1 *
    loss``, in any operand order) is one addition a step. Only the arithmetic nodes are walked, ``limit`` at most."""
    import torch

    if not isinstance(value, torch.Tensor) or value.grad_fn is None or value.numel() != 1:
        return 0, 0
    root = value.grad_fn
    if not type(root).__name__.startswith(_ARITHMETIC):
        return 0, 0
    todo, seen, adds, oldest = [root], {root}, 0, root._sequence_nr()
    while todo and len(seen) <= limit and time.monotonic() < deadline:
        node = todo.pop()
        adds += type(node).__name__.startswith(("Add", "Sub"))
        oldest = min(oldest, node._sequence_nr())
        for child, _ in node.next_functions:
            if child is not None and child not in seen and type(child).__name__.startswith(_ARITHMETIC):
                seen.add(child)
                todo.append(child)
    return adds, oldest


def _kept_outputs(name: str, value: Any) -> str:
    """A list, tuple or dict holding several tensors that keep their graphs."""
    import torch

    if isinstance(value, dict):
        items = list(value.values())[:1000]
    elif isinstance(value, (list, tuple)):
        items = list(value[:1000])
    else:
        return ""
    graphs = [t for t in items if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    if len(graphs) < LISTED:
        return ""
    kind = type(value).__name__
    return (f"`{name}` (a {kind} of {len(value):,}) holds {len(graphs):,} tensors with their graphs, and so the "
            f"activations of each forward that made them: keep `.detach()` of each (`.cpu()` frees the device too, "
            f"`.item()` for numbers), and evaluate under torch.no_grad()")


def _storage(t: Any) -> tuple[tuple[str, int], int] | None:
    """((device, address), bytes) of ``t``'s storage: a view keeps all of it alive, and is counted once with it."""
    try:
        storage = t.untyped_storage()
        return (str(t.device), storage.data_ptr()), int(storage.nbytes())
    except Exception:  # noqa: BLE001 - a tensor with no storage (meta, sparse, a subclass): not counted
        return None


def _dtype(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")
