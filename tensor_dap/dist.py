"""torch.distributed for triggers: which rank we are, who may stop, and re-runs without collectives.

A localization re-run happens on each rank independently and stops early at the first
non-finite tensor, so it must not take part in DistributedDataParallel's collectives
(gradient all-reduce, buffer broadcast): ranks stopping at different points would wait on
each other forever.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator

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


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside DistributedDataParallel, so reports say ``encoder.x``, not ``module.encoder.x``."""
    return model.module if _ddp(model) else model  # type: ignore[return-value]


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
