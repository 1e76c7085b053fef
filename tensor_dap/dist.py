"""torch.distributed for triggers: which rank we are, who may stop, and re-runs without collectives.

A localization re-run happens on each rank independently and stops early at the first
non-finite tensor, so it must not take part in DistributedDataParallel's collectives
(gradient all-reduce, buffer broadcast): ranks stopping at different points would wait on
each other forever.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # launch_rank() is read before the program starts: importing torch here would cost seconds
    import torch


def current_rank() -> int | None:
    """This process's rank under torch.distributed, None outside it."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except (ImportError, RuntimeError):
        pass
    return None


def may_stop(rank: int | None, ranks: Collection[int] | None) -> bool:
    """``ranks=None`` lets rank 0 stop (one debugger per job), and any non-distributed process."""
    if rank is None:
        return True
    return rank in (ranks if ranks is not None else (0,))


def _ddp(model: torch.nn.Module) -> bool:
    try:
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:
        return False
    return isinstance(model, DistributedDataParallel)


def _compiled(model: torch.nn.Module) -> bool:
    """A ``torch.compile``'d module (dynamo's ``OptimizedModule``), known without importing dynamo."""
    import torch

    return type(model).__name__ == "OptimizedModule" and isinstance(getattr(model, "_orig_mod", None),
                                                                     torch.nn.Module)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's own module inside DistributedDataParallel, Lightning Fabric's wrapper and ``torch.compile``, so
    reports say ``encoder.x``, not ``module.encoder.x``, ``_forward_module.encoder.x`` or ``_orig_mod.encoder.x``, and
    a re-run runs eagerly."""
    model = called(model)
    while _compiled(model):
        model = called(model._orig_mod)  # type: ignore[arg-type]
    return model


def called(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose forward hooks see each call the user makes: inside DistributedDataParallel and Lightning
    Fabric's wrapper (``fabric.setup``: called inside its precision's autocast, with the inputs it converted), the
    module they call; a ``torch.compile``'d module itself (around the compiled code, so hooks add no graph
    break: hooks inside it would be traced into the graph)."""
    while True:
        if _ddp(model):
            model = model.module  # type: ignore[assignment]
        elif _fabric(model):
            model = model._forward_module  # type: ignore[assignment]
        else:
            return model


def _fabric(model: torch.nn.Module) -> bool:
    """Lightning Fabric's ``_FabricModule`` (known without importing lightning): its forward calls
    ``_forward_module`` (the user's module, or the strategy's wrapper of it)."""
    import torch

    return type(model).__name__ == "_FabricModule" and isinstance(model._modules.get("_forward_module"),
                                                                   torch.nn.Module)


@contextlib.contextmanager
def no_collectives(model: torch.nn.Module) -> Iterator[None]:
    """Within: DDP neither all-reduces gradients nor broadcasts buffers (a local re-run)."""
    if not _ddp(model):
        yield
        return
    saved = model.require_forward_param_sync
    with model.no_sync():
        model.require_forward_param_sync = False  # DDP broadcasts buffers before a forward otherwise
        try:
            yield
        finally:
            model.require_forward_param_sync = saved


@dataclass(frozen=True)
class LaunchRank:
    """Where the launcher (torchrun, or srun under SLURM) placed this process, read from its environment."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def prefix(self) -> str:
        """What starts each line this rank prints on a terminal every rank shares ("[rank 1] "); "" alone."""
        return f"[rank {self.rank}] " if self.distributed else ""


def launch_rank(environ: Mapping[str, str] | None = None) -> LaunchRank:
    """This process's rank as torchrun (``RANK``, ``LOCAL_RANK``...) or SLURM set it; rank 0 of 1 otherwise.

    Read from the environment, not ``torch.distributed``: it is needed before the program
    starts (which port to listen on) and while a collective hangs.
    """
    env = os.environ if environ is None else environ

    def number(*names: str, default: int) -> int:
        for name in names:
            value = env.get(name, "").strip()
            if value.isdigit():
                return int(value)
        return default

    world = number("WORLD_SIZE", "SLURM_NTASKS", default=1)
    return LaunchRank(rank=number("RANK", "SLURM_PROCID", default=0),
                      local_rank=number("LOCAL_RANK", "SLURM_LOCALID", default=0),
                      world_size=world, local_world_size=number("LOCAL_WORLD_SIZE", default=world))
