"""``attach``: put a ``watch`` on a training program that was not written for tensor_dap.

``tensor-dap run --guard`` sees optimizers being created, not the user's model; ``attach`` takes
the optimizer and finds the model by itself: the first module called whose parameters the
optimizer updates (the training loop calls the whole model first, so it is the outermost one).
From then on it is an ordinary unchanged-loop ``watch``. Call ``close()`` when the program ends
(the watch also closes itself at interpreter exit).
"""

from __future__ import annotations

from typing import Any

import torch

from .watch import watch


class Attachment:
    """A watch attached from outside; ``.watch`` is None until the model has run its first forward."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module | None, options: dict[str, Any]):
        self.optimizer, self.options = optimizer, options
        self.watch: watch | None = None
        self._hook: Any = None
        if model is not None:
            self.watch = watch(model, optimizer, **options)
        else:
            self._params = {id(p) for g in optimizer.param_groups for p in g["params"]}
            from torch.nn.modules.module import register_module_forward_pre_hook

            self._hook = register_module_forward_pre_hook(self._called)

    def _called(self, module: torch.nn.Module, args: Any) -> None:
        if self.watch is not None or not any(id(p) in self._params for p in module.parameters()):
            return
        self._hook.remove()
        self._hook = None
        self.watch = watch(module, self.optimizer, **self.options)  # captures from the next forward on

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.watch is not None:
            self.watch.close()


def attach(optimizer: torch.optim.Optimizer, model: torch.nn.Module | None = None, **options: Any) -> Attachment:
    """Watch the model ``optimizer`` trains, without changing the program; ``options`` are ``watch``'s.

    ``model=None``: the model is the first module called whose parameters ``optimizer`` updates.
    """
    return Attachment(optimizer, model, options)
