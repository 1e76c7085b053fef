"""Parameters the loss depends on that the model does not hold: a layer made inside ``forward``, or layers kept
in a plain Python list.

``nn.Linear(d, d)(x)`` in a ``forward`` builds a new layer, with new random weights, at every call; a model that
keeps its blocks in a Python list (not ``nn.ModuleList``) never registers them. Either way the loss depends on
parameters that ``model.parameters()`` leaves out (and with it the optimizer, ``state_dict()`` and ``.to()``):
they never train, the rest of the model learns around them, and nothing errors. ``watch`` reads the first
loss's graph once for parameters the model does not hold. Only when it finds some, the module constructions of
the next step are recorded (torch's global parameter-registration hook, for that one step) to tell a layer
built in ``forward``, said with its line at the second ``backward()``, from one kept elsewhere, followed and said
at the 20th update (or the end of a shorter run) if it never changed (another optimizer may update it: a GAN's
discriminator).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from torch import nn

from ..debug.frames import SourceLine, is_library
from ..probe.unregistered import unregistered
from . import active
from .ops import graph_nodes
from .unoptimized import Followed, listed

NODES = 200_000  # autograd nodes read at most, once or twice a run ...
SECONDS = 0.25  # ... and for this long at most (an RL episode's graph holds its every forward)
RECORDED = 4096  # parameter registrations recorded at most in the step after the first


def graph_params(loss: Any, limit: int = NODES, seconds: float = SECONDS) -> list[nn.Parameter]:
    """The ``nn.Parameter`` leaves the graph of ``loss`` accumulates gradients into (``limit`` nodes read, for
    ``seconds`` at most)."""
    found = []
    deadline = time.monotonic() + seconds
    for count, node in enumerate(graph_nodes([getattr(loss, "grad_fn", None)], limit)):
        variable = getattr(node, "variable", None)
        if isinstance(variable, nn.Parameter):
            found.append(variable)
        if count % 1024 == 1023 and time.monotonic() > deadline:
            break
    return found


def _construction_site(frame: Any) -> SourceLine | None:
    """The user's line that built the module being registered: past torch, and past every ``__init__`` of a module
    (a user's layer class whose ``__init__`` makes the parameter is built somewhere else)."""
    while frame is not None:
        code = frame.f_code
        constructing = code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), nn.Module)
        if not constructing and not is_library(code.co_filename):
            return SourceLine(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None


class _Registrations:
    """Which module type each parameter registered from now on went to, and the line that built it."""

    def __init__(self) -> None:
        # id(param) -> (module type, line, the module: held for the step, so that its id is not reused)
        self.made: dict[int, tuple[str, SourceLine | None, nn.Module]] = {}
        self._handle: Any = nn.modules.module.register_module_parameter_registration_hook(self._registered)

    def _registered(self, module: nn.Module, name: str, param: Any) -> None:
        try:
            if param is not None and len(self.made) < RECORDED:
                self.made[id(param)] = (type(module).__name__, _construction_site(sys._getframe(1)), module)
        except Exception:  # noqa: BLE001 - a hook of ours must not break the user's constructor
            pass

    def close(self) -> None:
        self._handle.remove()


class StrayParams:
    """One watch's: the parameters outside its model that its loss depends on."""

    def __init__(self, model: nn.Module, say: Callable[[str], None], followed: Followed) -> None:
        self._model = model
        self._say = say
        self._first: list[nn.Parameter] = []  # held from the first loss to the second, a step at most
        self._registrations: _Registrations | None = None
        self._followed = followed
        self._owners: dict[str, str] = {}  # a followed parameter's name -> the plain list or dict holding it

    def first_loss(self, loss: Any) -> bool:
        """Read the first loss's graph; True when it holds parameters the model does not (the next loss is wanted)."""
        own = {id(p) for p in self._model.parameters()}
        self._first = [p for p in graph_params(loss) if id(p) not in own]
        if self._first:
            self._registrations = _Registrations()
        return bool(self._first)

    def second_loss(self, loss: Any) -> None:
        """Say the layers built anew since the first loss; follow the stray parameters that stayed the same."""
        made = self._close()
        now = {id(p): p for p in graph_params(loss)}
        built: dict[tuple[str, SourceLine | None], set[int]] = {}
        for i in now:
            if i in made:
                kind, line, module = made[i]
                built.setdefault((kind, line), set()).add(id(module))
        if built:
            self._say(f"tensor_dap: {_built_text(built)} (said once)")
        self._follow([p for p in self._first if id(p) in now and id(p) not in made])

    def unchanged(self, final: bool = True) -> str | None:
        """The line for the stray parameters that never changed; None when there are none (or, before the run's end,
        while the second loss is still awaited)."""
        if self._registrations is not None:  # no second loss came (yet)
            if not final:
                return None
            self._close()
            self._follow(self._first)
        still = self._followed.unchanged()
        if not still:
            return None
        owners = list(dict.fromkeys(self._owners[name] for name in still if name in self._owners))
        one = len(still) == 1
        what = (f"{len(still)} parameter{'' if one else 's'} ({listed(still)}) the loss depends on "
                f"{'is' if one else 'are'}")
        over = f"never changed over {self._followed.over} updates"
        if owners:
            return (f"{what} outside the model's parameters and {over}: {'; '.join(owners)}, whose layers "
                    f"model.parameters() (the optimizer's), state_dict() and .to() leave out; use nn.ModuleList / "
                    f"nn.ModuleDict (nn.ParameterList for parameters)")
        it = "it" if one else "them"
        return (f"{what} not the model's and {over}: no optimizer updates {it}. Register {it} on the model (a "
                f"module's attribute) or hand {it} to the optimizer; to keep {it} fixed, requires_grad_(False) (their "
                f"gradients cost a backward for nothing)")

    def _close(self) -> dict[int, tuple[str, SourceLine | None, nn.Module]]:
        registrations, self._registrations = self._registrations, None
        if registrations is None:
            return {}
        registrations.close()
        return registrations.made

    def _follow(self, params: list[nn.Parameter]) -> None:
        self._first = []
        if not params:
            return
        watched = {id(p) for w in active.watches() for p in getattr(w, "_inner", nn.Module()).parameters()}
        params = [p for p in params if id(p) not in watched]  # a GAN's other watched model: its own watch's
        if not params:
            return
        held = {id(p): (name, f"{group.holder} is a plain Python {group.kind}")
                for group in unregistered(self._model) for name, p in group.params}
        order = {i: n for n, i in enumerate(held)}  # in the containers' order, the rest after
        for p in sorted(params, key=lambda p: order.get(id(p), len(order))):
            name, owner = held.get(id(p), (f"a {type(p).__name__} of shape {list(p.shape)}", ""))
            if owner:
                self._owners[name] = owner
            self._followed.add(name, p)


def _built_text(built: dict[tuple[str, SourceLine | None], set[int]]) -> str:
    """What the layers built inside a step are: each kind with its line and how many were built there."""
    parts = []
    for (kind, line), modules in sorted(built.items(), key=lambda item: (-len(item[1]), item[0][1] or ()))[:4]:
        at = f" at {line} `{line.code}`" if line is not None else ""
        parts.append(f"{kind} ×{len(modules)}{at}")
    return (f"the loss depends on layers built anew in every step ({'; '.join(parts)}): each starts from new random "
            f"weights that no optimizer holds, so they never train (and state_dict() leaves them out); build the "
            f"layer once in __init__ (self.proj = nn.Linear(...)) and call self.proj(x) in forward")
