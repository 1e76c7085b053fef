"""``check_dataloader``: is the model waiting for data? Settings, a few timed batches, and advice.

Only a few batches are drawn (``batches``, within ``time_limit``), and drawing them leaves the
program as it was: torch's global RNG and the loader's and sampler's generators are restored,
so the next epoch shuffles as it would have, and the worker processes started here are shut down.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from ..format import fmt_num, short_error
from ..nested import first_tensor
from ..probe.shapes import describe_shapes
from ..state import capture_rng, restore_rng
from ..summary.objects import describe_loader
from .result import INFO, PROBLEM, WARNING, CheckResult, Finding, never_raises, result

COLUMNS = ("batch", "load_ms", "step_ms", "shapes")
SLOW_SHARE = 0.5  # loading takes more than half of each step: a problem
NOTABLE_SHARE = 0.2


def _generators(loader: Any) -> list[Any]:
    """Every torch.Generator that drawing batches may advance (the loader's, its samplers')."""
    found = []
    for owner in (loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None),
                  getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        g = getattr(owner, "generator", None)
        if g is not None and hasattr(g, "get_state") and all(g is not x for x in found):
            found.append(g)
    return found


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _sync() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()  # a step's kernels finish before its time is read


def _draw(loader: Any, step: Callable[[Any], Any] | None, batches: int, time_limit: float) -> dict[str, Any]:
    """Time up to ``batches`` batches: how long each took to arrive, and the step on it."""
    timings: list[tuple[float, float | None, str]] = []
    firsts: list[Any] = []
    error, stage = None, "drawing a batch"
    deadline = time.monotonic() + time_limit
    it = iter(loader)
    try:
        while len(timings) < batches and (not timings or time.monotonic() < deadline):
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            spent = None
            if step is not None:
                stage = "the step"
                step(batch)
                stage = "drawing a batch"
                _sync()
                spent = time.perf_counter() - t1
            timings.append((t1 - t0, spent, describe_shapes(batch)))
            firsts.append(first_tensor(batch))
    except Exception as exc:  # noqa: BLE001 - a worker or step error is a finding
        error = f"{stage} failed: {short_error(exc, limit=200)}"
    finally:
        if not getattr(loader, "persistent_workers", False):
            shutdown = getattr(it, "_shutdown_workers", None)
            if callable(shutdown):
                shutdown()
    return {"timings": timings, "firsts": firsts, "error": error}


def _repeats(firsts: list[Any]) -> bool:
    """Two of the drawn batches are identical (the first tensor of each compared exactly)."""
    import torch

    seen = [t for t in firsts if t is not None]
    for i, a in enumerate(seen):
        for b in seen[i + 1:]:
            try:
                if a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b):
                    return True
            except Exception:  # noqa: BLE001 - tensors on different devices, odd subclasses
                continue
    return False


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _speed(load: float | None, compute: float | None, workers: int, cores: int) -> list[Finding]:
    if load is None or compute is None or load + compute <= 0:
        return []
    share = load / (load + compute)
    if share <= NOTABLE_SHARE:
        return []
    level = PROBLEM if share > SLOW_SHARE else WARNING
    more = f"num_workers={min(cores, 8)}" if workers == 0 else (
        f"more workers (now {workers}, this machine has {cores} cores)" if workers < cores else
        "a lighter __getitem__ (decode once and cache, move augmentation to the GPU)")
    return [Finding(level, "num_workers", f"the step waits for data {100 * share:.0f}% of the time: a batch takes "
                    f"{fmt_num(1000 * load)} ms to load, the step {fmt_num(1000 * compute)} ms",
                    f"try {more}; pin_memory=True with .to(device, non_blocking=True) on a GPU")]


def _settings(loader: Any, workers: int, cores: int, first: float | None, steady: float | None) -> list[Finding]:
    import torch

    found: list[Finding] = []
    cuda = torch.cuda.is_available()
    if workers > cores:
        found.append(Finding(WARNING, "num_workers", f"{workers} workers on {cores} CPU cores: they compete with "
                             "each other and with the training process", f"num_workers={max(1, cores - 1)}"))
    persistent = bool(getattr(loader, "persistent_workers", False))
    if workers and not persistent and first is not None and steady is not None and first > max(1.0, 5 * steady):
        found.append(Finding(WARNING, "persistent_workers", f"the first batch took {fmt_num(first)} s (workers "
                             "starting), and that repeats every epoch", "persistent_workers=True keeps them"))
    pinned = bool(getattr(loader, "pin_memory", False))
    if cuda and not pinned:
        found.append(Finding(INFO, "pin_memory", "batches are not pinned: host→GPU copies are slower and cannot "
                             "overlap compute", "pin_memory=True, then .to(device, non_blocking=True)"))
    if pinned and not cuda:
        found.append(Finding(INFO, "pin_memory", "pin_memory=True without a GPU does nothing"))
    return found


@never_raises("dataloader")
def check_dataloader(loader: Any, step: Callable[[Any], Any] | None = None, *, batches: int = 5,
                     time_limit: float = 10.0) -> CheckResult:
    """num_workers, pin_memory, persistent_workers, and batch loading time against ``step(batch)``'s.

    ``step`` is your training step on one batch (or a forward pass); without it only loading is timed.
    Draws at most ``batches`` batches and stops starting new ones after ``time_limit`` seconds.
    """
    if hasattr(loader, "__next__"):  # drawing from an iterator would take the batches away from the program
        return result("dataloader", f"{type(loader).__name__}: an iterator, not a loader", [Finding(
            WARNING, type(loader).__name__, "batches drawn from an iterator are gone for the training loop: nothing "
            "was drawn", "pass the DataLoader (or anything iter() can restart) instead of iter(loader)")])
    info = describe_loader(loader)
    cores = _cores()
    saved_rng = capture_rng()
    generators = [(g, g.get_state()) for g in _generators(loader)]
    try:
        drawn = _draw(loader, step, max(1, batches), time_limit)
    finally:
        restore_rng(saved_rng)
        for g, state in generators:
            g.set_state(state)
    timings = drawn["timings"]
    first = timings[0][0] if timings else None
    later = timings[1:] or timings
    load = _mean([t[0] for t in later])
    compute = _mean([t[1] for t in later if t[1] is not None])
    findings: list[Finding] = []
    if drawn["error"]:
        findings.append(Finding(PROBLEM, "", drawn["error"], "run one batch by hand (num_workers=0) to see the "
                                "full traceback"))
    if not timings and not drawn["error"]:
        findings.append(Finding(WARNING, "dataset", "the loader produced no batch (empty dataset, or drop_last "
                                "with fewer samples than one batch)"))
    findings += _speed(load, compute, info.num_workers, cores)
    findings += _settings(loader, info.num_workers, cores, first, _mean([t[0] for t in timings[1:]]))
    iterable = any(c.__name__ == "IterableDataset" for c in type(getattr(loader, "dataset", None)).__mro__)
    if iterable and info.num_workers > 1 and _repeats(drawn["firsts"]):
        findings.append(Finding(PROBLEM, "dataset", f"identical batches from an IterableDataset with "
                                f"{info.num_workers} workers: every worker yields the whole stream",
                                "split the stream in __iter__ with torch.utils.data.get_worker_info()"))
    if step is None and load is not None:
        findings.append(Finding(INFO, "", "only loading was timed: pass step=your_train_step to compare with compute"))
    rows = [(i, 1000 * t[0], None if t[1] is None else 1000 * t[1], t[2]) for i, t in enumerate(timings)]
    summary = f"{info}; {len(timings)} batches timed" + (
        f", {fmt_num(1000 * load)} ms to load" if load is not None else "") + (
        f", {fmt_num(1000 * compute)} ms to step" if compute is not None else "")
    facts = {"num_workers": info.num_workers, "pin_memory": info.pin_memory,
             "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
             "batch_size": info.batch_size, "cpu_cores": cores, "batches_timed": len(timings),
             "first_batch_s": first, "load_s": load, "step_s": compute,
             "wait_share": None if load is None or compute is None or load + compute <= 0 else load / (load + compute)}
    return result("dataloader", summary, findings, columns=COLUMNS, rows=rows, facts=facts)
