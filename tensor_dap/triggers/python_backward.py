"""The program's own Python that runs inside ``backward()``, seen by the op tracker: a custom ``autograd.Function``'s
``backward``, gradient hooks on parameters (``p.register_hook(fn)``) and on tensors its forward makes.

torch runs ``backward()`` with the tracker's ``TorchFunctionMode`` off: the mode is popped to handle the
``backward()`` call itself. Torch's own backward formulas run in C++ and need no mode; the program's Python there,
``grad / x`` in ``SafeLog.backward`` or ``g / g.norm()`` in a hook normalizing each gradient, is the birthplace a
report should name (not only the line that called ``SafeLog.apply``, or the parameter whose gradient showed it).
So the tracker is pushed again around each: by a pre-hook on a custom Function's node, popped by its post-hook; by a
hook put before a parameter's own, popped by the tracker's hook after them; by a wrapper around each hook the forward
registers in the re-run; by a wrapper put for the re-run in place of each module backward hook of the program
(``register_full_backward_hook``, ``register_full_backward_pre_hook``: ``module_hooks``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction
from torch.overrides import _get_current_function_mode_stack

from ..debug.frames import SourceLine
from .birth import Birth, Born, op_at, root
from .finite import kind_of


def written_in_python(node: Any) -> bool:
    """Whether ``node`` runs a backward the program wrote (a custom ``autograd.Function``), not torch's; module
    backward hooks' plumbing (``BackwardHookFunctionBackward``) is not one."""
    return isinstance(node, BackwardCFunction) and type(node).__name__ != "BackwardHookFunctionBackward"


class PythonBackwards:
    """Pushes ``mode`` while a custom Function's backward runs (``enter`` as the node's pre-hook, ``leave`` at the
    start of its post-hook). Torch's engine puts the mode stack back as it was when ``backward()`` ends, so a push a
    raising backward left on is gone by then: ``leave`` and ``unwind`` pop only a push of ours still on top."""

    def __init__(self, mode: Any, on: bool = True) -> None:
        self.mode = mode
        self.on = on  # off: a re-run that failed with it on runs again without (a backward refusing a mode)
        self.pushed = 0
        self.entered = 0  # backwards run with the mode pushed, in all
        self.arrived: dict[int, bool] = {}  # id(parameter) -> its gradient was finite before the program's hooks

    def enter(self, grad_outputs: Any) -> None:
        if not self.on:
            return
        try:
            self.mode.__enter__()
            self.pushed += 1
            self.entered += 1
        except Exception:  # noqa: BLE001 - not seeing inside this backward must not change it
            pass

    def leave(self) -> None:
        if self.pushed:
            self.pushed -= 1
            if _on_top(self.mode):
                self.mode.__exit__(None, None, None)

    def before_hooks(self, p: torch.Tensor) -> Any:
        """For a parameter with gradient hooks of the program's: a hook put first, pushing the mode and noting whether
        the gradient arrived finite; the tracker's hook after them calls ``after_hooks``. Its handle; None for a
        parameter with none."""
        hooks = getattr(p, "_backward_hooks", None)
        if not hooks or not self.on:
            return None

        def first(grad: torch.Tensor) -> None:
            self.arrived[id(p)] = self._finite(grad)
            self.enter(grad)

        handle = p.register_hook(first)
        theirs = [(k, v) for k, v in hooks.items() if k != handle.id]
        hooks.clear()  # torch calls them in the order of the dict's own storage (not OrderedDict's): ours first
        hooks[handle.id] = first
        hooks.update(theirs)
        return handle

    def after_hooks(self, p: torch.Tensor) -> bool:
        """The program's hooks on ``p`` have run: the mode comes off; whether the gradient had arrived finite."""
        self.leave()
        return self.arrived.pop(id(p), False)

    def hook_birth(self, hooks: list[Any], grad: torch.Tensor, module: str | None, module_type: str | None,
                   on: str) -> Birth:
        """The program's gradient ``hooks`` (``on``: "on its parameter 'weight'") made ``grad`` non-finite from a
        finite gradient: the op and line in them the tracker saw make it, else the hooks themselves (where the first
        is defined)."""
        hooks = [h for h in hooks if not _ours(h)]
        said = ", ".join(getattr(h, "__qualname__", type(h).__name__) for h in hooks) or "?"
        kind = kind_of(grad) or "nan"
        note = f"the gradient hook {said} {on} made {'NaN' if kind == 'nan' else 'Inf'} from a finite gradient"
        known = self.mode.lineage(grad)
        if known is not None:
            first = root(known[1])
            return replace(first, phase="backward", module=module, module_type=module_type,
                           note=f"{note}, with {op_at(first)}")
        code = getattr(hooks[0], "__code__", None) if hooks else None
        line = SourceLine(code.co_filename, code.co_firstlineno, code.co_name) if code is not None else None
        return Birth("backward", said, kind, module, module_type, line, output=grad, note=note)

    def wrap_hook(self, hook: Any, module: str | None, module_type: str | None, at: SourceLine | None) -> Any:
        """A gradient hook the program puts on a tensor in the re-run (``h.register_hook(fn)`` in its forward, at
        ``at``), which torch would run with the mode off: run with it on, and a NaN/Inf it makes from a finite
        gradient raised as its birth. Hooks of tensor_dap's own are left as they are."""
        if _ours(hook):
            return hook

        def seen(grad: torch.Tensor) -> Any:
            finite = self._finite(grad)
            self.enter(grad)
            try:
                out = hook(grad)
            finally:
                self.leave()
            made = grad if out is None else out
            if finite and isinstance(made, torch.Tensor) and not self._finite(made):
                where = f" registered at {at}" if at is not None else ""
                raise Born(self.hook_birth([hook], made, module, module_type, f"on a tensor{where}"))
            return out

        return seen

    def module_hooks(self, module: torch.nn.Module, path: str) -> list[Any]:
        """For the re-run, each backward hook of the program on ``module`` (full or pre, ``grad_input`` or
        ``grad_output`` in, new ones out) swapped for one that runs it with the mode on and raises, as the hook's
        birth, a NaN/Inf it returns from finite gradients; handles whose ``remove`` puts the hook back."""
        if not self.on:
            return []
        swapped = []
        for hooks, pre in ((module._backward_hooks, False), (module._backward_pre_hooks, True)):
            for key, hook in list(hooks.items()):
                if not _ours(hook):
                    hooks[key] = self._module_hook(hook, path, type(module).__name__, pre)
                    swapped.append(_Swapped(hooks, key, hook))
        return swapped

    def _module_hook(self, hook: Any, path: str, module_type: str, pre: bool) -> Any:
        def seen(module: torch.nn.Module, *grads: Any) -> Any:
            finite = all(self._finite(g) for g in grads[0] if isinstance(g, torch.Tensor))  # (grad_input or output)
            self.enter(grads)
            try:
                out = hook(module, *grads)
            finally:
                self.leave()
            bad = next((g for g in (out or ()) if isinstance(g, torch.Tensor) and not self._finite(g)), None)
            if finite and bad is not None:
                kind = "register_full_backward_pre_hook" if pre else "register_full_backward_hook"
                raise Born(self.hook_birth([hook], bad, path, module_type, f"on {path or module_type} ({kind})"))
            return out

        return seen

    def _finite(self, t: torch.Tensor) -> bool:
        """``t`` holds no NaN/Inf, read with the tracker quiet (the read is ours, not the program's op)."""
        with self.mode.quiet():
            return kind_of(t) is None

    def unwind(self, depth: int = 0) -> None:
        """Take off the pushes of ours past ``depth`` (those made inside a ``backward()`` that began there)."""
        while self.pushed > depth:
            self.leave()


class _Swapped:
    """A module backward hook of the program swapped for the re-run's wrapper; ``remove`` puts it back."""

    def __init__(self, hooks: dict, key: int, hook: Any) -> None:
        self.hooks, self.key, self.hook = hooks, key, hook

    def remove(self) -> None:
        if self.key in self.hooks:  # (unless the program removed it in the meantime)
            self.hooks[self.key] = self.hook


def _on_top(mode: Any) -> bool:
    try:
        stack = _get_current_function_mode_stack()
    except Exception:  # noqa: BLE001 - a torch without it: nothing known to be ours
        return False
    return bool(stack) and stack[-1] is mode


def _ours(hook: Any) -> bool:
    return getattr(hook, "__module__", None) is not None and hook.__module__.startswith("tensor_dap")
