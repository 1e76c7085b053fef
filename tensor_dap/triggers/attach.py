"""``attach``: put a ``watch`` on a training program that was not written for tensor_dap.

``tensor-dap run --guard`` sees optimizers being created, not the user's model; ``attach`` takes
the optimizer and finds the model itself: the first module called with gradients on whose
parameters the optimizer updates (a training loop calls the whole model, the outermost module,
first). The watch is attached inside that first forward and captures it, so even a NaN in the
very first step is localized. Until the first update, a later call of a module holding that one
and more of the parameters moves the watch to it (a loop that calls a submodule first). From then
on it is an ordinary unchanged-loop ``watch``. A module holding only part of the parameters, called from code whose
frames hold a module with it and more of them (CleanRL's PPO: ``agent.get_action_and_value`` calls ``agent.actor``
and ``agent.critic``; the agent itself is never called), is watched as that module (``owner_in_frames``).

An optimizer first seen when it already steps (created before tensor_dap was switched on) is
handled by ``find_model`` over the modules the caller noted (``seen``): the root one holding most
of its parameters. Call ``close()`` when the program ends (the watch also closes itself at exit).
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable
from typing import Any, Optional

import torch

from ..dynamo import global_forward_pre_hook
from . import active
from .optimizer_call import closure_of, param_ids
from .parts import parts_of
from .watch import watch


def find_model(modules: Collection[torch.nn.Module], optimizer: Optional[torch.optim.Optimizer]
               ) -> tuple[Optional[torch.nn.Module], list[torch.nn.Module]]:
    """The root module among ``modules`` holding most of ``optimizer``'s parameters (None: of the parameters
    that require gradients), and other roots holding some."""
    wanted = param_ids(optimizer) if optimizer is not None else {
        id(p) for m in modules for p in m.parameters() if p.requires_grad}
    inner: set[int] = set()
    for m in modules:
        inner.update(id(sub) for sub in m.modules() if sub is not m)
    scored = []
    for m in modules:
        if id(m) in inner:
            continue
        held = sum(1 for p in m.parameters() if id(p) in wanted)
        if held:
            scored.append((held, m))
    scored.sort(key=lambda pair: -pair[0])
    if not scored:
        return None, []
    return scored[0][1], [m for _, m in scored[1:]]


OWNER_FRAMES = 24  # frames looked at, innermost first, for a module holding the part of the model that ran


def owner_in_frames(parts: list[torch.nn.Module], params: Collection[int], frame: Any) -> Optional[torch.nn.Module]:
    """The module in the locals of ``frame`` and its callers (the ``self`` of a method, the loop's variables)
    that holds every one of ``parts`` (none of them itself) and the most of ``params`` (ids), at least as many as
    they hold together; the innermost such module where several hold as many. None where none does."""
    held = sum(1 for part in parts for p in part.parameters() if id(p) in params)
    best, seen = None, {id(part) for part in parts}
    for _ in range(OWNER_FRAMES):
        if frame is None:
            break
        for value in list(frame.f_locals.values()):
            if isinstance(value, torch.nn.Module) and id(value) not in seen:
                seen.add(id(value))
                n = sum(1 for p in value.parameters() if id(p) in params)
                inside = best is not None and any(sub is value for sub in best.modules())
                if (n > held or n == held and (best is None or inside)) and \
                        all(any(sub is part for sub in value.modules()) for part in parts):
                    best, held = value, n
        frame = frame.f_back
    return best


def model_of(seen: Iterable[torch.nn.Module], optimizer: Optional[torch.optim.Optimizer], frame: Any
             ) -> tuple[Optional[torch.nn.Module], list[torch.nn.Module]]:
    """``find_model`` among the modules that ran, or, where several roots among them hold the parameters, the module
    in the program's frames holding them all (``owner_in_frames``: an agent whose actor and critic ran), else, of an
    optimizer's, those roots together (``parts``: SAC's two Q-networks)."""
    model, others = find_model(list(seen), optimizer)
    if model is None or not others:
        return model, others
    params = param_ids(optimizer) if optimizer is not None else {
        id(p) for m in (model, *others) for p in m.parameters() if p.requires_grad}
    owner = owner_in_frames([model, *others], params, frame)
    if owner is None and optimizer is None:  # (every module's trainable parameters: the largest root is the model)
        return model, others
    return (owner if owner is not None else parts_of([model, *others], frame)), []


class Attachment:
    """A watch attached from outside; ``.watch`` is None until the model has run its first forward.

    ``others``: further root modules the optimizer also updates, when the model was chosen among
    noted modules (they are named, not watched).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, model: Optional[torch.nn.Module], options: dict[str, Any],
                 seen: Optional[Iterable[torch.nn.Module]] = None) -> None:
        self.optimizer, self.options = optimizer, options
        self.watch: Optional[watch] = None
        self.shared = False  # ``watch`` is another attachment's, on the same model (``_shared_watch``)
        self.others: list[torch.nn.Module] = []
        self._hook: Any = None
        # A step with a closure (LBFGS) runs the model inside step(): the watch is then made after that step's
        # pre-step hook, and is told the closure to check (``watch.join_step``).
        self._closure: Any = None
        self._step_hooks: list[Any] = []
        if model is None and seen is not None:  # the optimizer already steps: choose among what ran
            model, self.others = model_of(seen, optimizer, sys._getframe(1))
            if model is None:
                return
        if model is not None:
            self.watch = self._shared_watch(model) or watch(model, optimizer, **options)
            return
        self._params = param_ids(optimizer)
        self._watched_holds = 0  # of those, how many the watched module holds
        self._parts: list[torch.nn.Module] = []  # roots called holding some of them, none all: watched together
        self._hook = global_forward_pre_hook(self._called)  # also inside compiled models
        self._step_hooks = [optimizer.register_step_pre_hook(self._step_begins),
                            optimizer.register_step_post_hook(self._step_ends)]

    def _step_begins(self, _optimizer: Any, args: Any, kwargs: Any) -> None:
        self._closure = closure_of(args, kwargs)

    def _step_ends(self, *_: Any) -> None:
        self._closure = None

    def _called(self, module: torch.nn.Module, args: Any) -> None:
        if not torch.is_grad_enabled():
            return  # (evaluation under no_grad is not training: wait for a training forward)
        if self.watch is not None:
            self._outer_call(module, args)
            return
        held = self._held(module)
        if not held:
            return
        owner = owner_in_frames([module], self._params, sys._getframe(1)) if held < len(self._params) else None
        closure = self._closure
        self._remove_step_hooks()
        self._watch(module, args, held, owner)
        if closure is not None:
            self.watch.join_step(closure)  # ... and the step already running, whose closure called the model

    def _watch(self, module: torch.nn.Module, args: Any, held: int, owner: Optional[torch.nn.Module] = None) -> None:
        """Watch ``module`` (or ``owner``: a module holding it and more of the parameters, or the parts trained
        together with it), from inside its call."""
        self._watched_holds = held if owner is None else self._held(owner)
        self.watch = self._shared_watch(owner or module)
        if self.watch is None:
            self.watch = watch(owner or module, self.optimizer, **self.options)
            self.watch.begin_forward(module, args)  # its own pre-hook missed the call already running

    def _shared_watch(self, module: torch.nn.Module) -> watch | None:
        """The watch another optimizer's attachment already keeps on ``module``, now checking this optimizer's
        updates too (one model, two optimizers: one watch, one report, one stop); None when there is none."""
        shared = next((w for w in active.watches() if w.model is module and w.optimizer is not self.optimizer), None)
        if shared is not None:
            shared.add_optimizer(self.optimizer)
            self.shared = True
        return shared

    def _held(self, module: torch.nn.Module) -> int:
        return sum(1 for p in module.parameters() if id(p) in self._params)

    def _outer_call(self, module: torch.nn.Module, args: Any) -> None:
        """Until the first update, or the watched module's next call: a module holding more of the optimizer's
        parameters than the one watched, and holding it, is the model (a loop that calls a submodule first:
        ``model.emb(tokens)`` to pack a sequence, then ``model(packed)``); the watch moves to it, inside its call.
        Then the hook goes (an optimizer that never steps leaves no cost on later forwards)."""
        watched = self.watch
        assert watched is not None
        if watched.step_count or self._closure is not None or module is watched.model or self.shared:
            self._hook.remove()  # removing a global hook from inside it is safe: torch iterates over a copy
            self._hook = None
            self._remove_step_hooks()  # (a watch of parts, made in one of them)
            return
        held = self._held(module)
        if held and self._watched_holds + held <= len(self._params) and not any(
                sub is module for sub in watched.model.modules()) and not any(
                sub is watched.model for sub in module.modules()):  # another part trained with the one watched (SAC's
            self._parts = self._parts or [watched.model]  # qf2 after qf1): the parts are watched together
            watched.close(flush=False)
            self._parts.append(module)
            self._watch(module, args, held, parts_of(self._parts, sys._getframe(1)))
            return
        if held <= self._watched_holds or not any(sub is watched.model for sub in module.modules()):
            return
        watched.close(flush=False)
        self._watch(module, args, held)

    def _remove_step_hooks(self) -> None:
        for h in self._step_hooks:
            h.remove()
        self._step_hooks = []

    def close(self) -> None:
        self._remove_step_hooks()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.watch is not None:
            self.watch.close()


def attach(optimizer: torch.optim.Optimizer, model: Optional[torch.nn.Module] = None, *,
           seen: Optional[Iterable[torch.nn.Module]] = None, **options: Any) -> Attachment:
    """Watch the model ``optimizer`` trains, without changing the program; ``options`` are ``watch``'s.

    ``model=None``: the first module called (with gradients on) whose parameters ``optimizer``
    updates; ``seen``: choose among these modules now instead (the optimizer is already stepping).
    """
    return Attachment(optimizer, model, options, seen)
