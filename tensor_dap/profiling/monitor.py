"""``tensor_dap.Monitor``: TensorBoard curves of a training run, and what they say.

Every step, ``monitor.log(step, loss=..., val_loss=...)`` keeps the loss as a tensor on its
device, and every ``norm_every`` steps each gradient's norm (one pass over the gradients: on a
CPU, at every step it would cost more than the 5 % budget of a small model's step); every
``flush_every`` steps they come back in one transfer and are written (the total gradient norm
made of them), with the learning rate of each parameter group; the event file reaches the disk
at most ``WRITE_S`` later, and at close. Every ``every`` steps it also writes per-layer gradient
and parameter norms, the update-to-weight ratio of the next optimizer step, the share of dead
units in each ReLU on the next forward, and histograms of weights and gradients. After each
flush the curves are checked (``diagnose``: NaN/Inf, a diverging loss and exploding norms on
every new value, the curves' shape at most once every ``every`` steps or when a validation loss
arrives); a finding is logged as a warning (logger ``tensor_dap.monitor``) and as TensorBoard
text under ``diagnostics``, once per kind until it clears.
"""

from __future__ import annotations

import atexit
import bisect
import logging
import math
import time
from collections import deque
from typing import Any, Optional

from . import diagnose, monitor_stats
from .event_crc import use_fast_crc

log = logging.getLogger("tensor_dap.monitor")
HISTORY = 2000  # values per curve kept for the diagnostics
# events the writer thread may have queued before a write blocks (SummaryWriter's default, 10,
# made every flush wait for the thread to write each of its ~50 events)
QUEUE = 10_000
WRITE_S = 5.0  # at most this long between writes of the event file to disk (a write waits for its thread)


def _writer(logdir: str) -> Any:
    from torch.utils.tensorboard import SummaryWriter

    use_fast_crc()  # one scalar event a step: its checksum in Python would stall the loop (see event_crc)
    return SummaryWriter(log_dir=logdir, max_queue=QUEUE)


class Monitor:
    def __init__(self, logdir: str = "runs/exp", model: Any = None, optimizer: Any = None, every: int = 100, *,
                 flush_every: Optional[int] = None, norm_every: Optional[int] = None, patience: int = 200,
                 writer: Any = None) -> None:
        """``every``: steps between histograms and per-layer values; ``norm_every``: steps between total
        gradient norms (default ``min(every, 10)``; 1 logs it every step); ``patience``: steps the loss may
        take before "not decreasing" is reported."""
        for name, value in (("every", every), ("flush_every", flush_every), ("norm_every", norm_every)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        self.model, self.optimizer, self.every = model, optimizer, every
        self.flush_every = flush_every or min(every, 50)
        self._curves_checked = 0  # the step of the last check of the curves' shape
        self._first_loss: Optional[float] = None  # the first and lowest finite train losses: what diverging compares
        self._lowest_loss: Optional[float] = None
        self._risen = 0  # train losses in a row far above the lowest before them (``diagnose.risen``)
        self.patience = patience
        self.writer = writer if writer is not None else _writer(logdir)
        self.logdir = logdir
        self.findings: list[diagnose.Finding] = []
        self._active: set[str] = set()
        self._pending: list[tuple[int, str, Any]] = []  # (step, tag, value: float or 0-dim tensor)
        self._curves: dict[str, deque[tuple[int, float]]] = {}
        self._lr: list[float] = []
        self._last_step = 0
        self._written_at = time.monotonic()
        self._before: Optional[list[Any]] = None  # parameters before the update being measured
        self._relu_hooks: dict[str, Any] = {}  # ReLU name -> its forward hook, only while armed
        self._dead: dict[str, Any] = {}  # ReLU name -> dead share (0-dim tensor) from the armed forward
        self._dead_now: Optional[dict[str, Any]] = None  # the same, read back, for the diagnostics
        self._layer_grads: tuple[int, dict[str, float]] = (-1, {})  # (step, per-layer gradient norms)
        self._handles: list[Any] = []
        self._named = [(n, p) for n, p in model.named_parameters() if p.requires_grad] if model is not None else []
        # the total norm is one more pass over the gradients: on an accelerator one fused kernel a step, on
        # the CPU a pass over memory that costs a small model's step several percent, so one in ten there
        self.norm_every = norm_every or (1 if any(p.device.type != "cpu" for _, p in self._named) else min(every, 10))
        self._relus: list[tuple[str, Any]] = []
        atexit.register(self.close)  # a run that ends without close() keeps its last steps
        self._closed = False
        if optimizer is not None:
            self._handles.append(optimizer.register_step_post_hook(self._after_update))
        if model is not None:
            from torch import nn

            self._relus = [(name or "relu", m) for name, m in model.named_modules() if isinstance(m, nn.ReLU)]

    # --- per step -------------------------------------------------------------------------
    def log(self, step: int, loss: Any = None, val_loss: Any = None, **scalars: Any) -> None:
        """Record this step's values (tensors stay on their device until the next flush)."""
        try:
            self._log(step, loss, val_loss, scalars)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks the training loop
            log.warning("tensor_dap.Monitor.log failed at step %s: %s", step, exc)

    def _log(self, step: int, loss: Any, val_loss: Any, scalars: dict[str, Any]) -> None:
        self._last_step = step
        for tag, value in (("loss/train", loss), ("loss/val", val_loss), *scalars.items()):
            if value is not None:
                self._pending.append((step, tag, value.detach() if hasattr(value, "detach") else float(value)))
        if step % self.norm_every == 0:
            grads = [p.grad for _, p in self._named if p.grad is not None]
            if grads:  # each gradient's norm, on the device: the total is made of them at the flush
                self._pending.append((step, "grad_norm/total", monitor_stats.layer_norms(grads)))
        self._log_lr(step)
        if step % self.every == 0:
            self._layers(step)
        if step % self.flush_every == 0 or step % self.every == 0:
            self.flush()

    def _log_lr(self, step: int) -> None:
        if self.optimizer is None:
            return
        lrs = [float(g.get("lr", math.nan)) for g in self.optimizer.param_groups]
        if lrs != self._lr or step % self.flush_every == 0:
            self._lr = lrs
            for i, lr in enumerate(lrs):
                self._pending.append((step, f"lr/group{i}", lr))

    def _layers(self, step: int) -> None:
        """Per-layer norms and histograms now; update ratios and dead ReLUs at the next update / forward."""
        if not self._named:
            return
        names = [n for n, _ in self._named]
        params = [p.detach() for _, p in self._named]
        with_grad = [(n, p.grad) for n, p in self._named if p.grad is not None]
        for name, value in zip(names, monitor_stats.norms(params)):
            self._pending.append((step, f"param_norm/{name}", value))
        layer_grads: dict[str, float] = {}
        if with_grad:
            for (name, _), value in zip(with_grad, monitor_stats.norms([g for _, g in with_grad])):
                layer_grads[name] = value
                self._pending.append((step, f"grad_norm/{name}", value))
        for name, p in zip(names, params):
            self._histogram(f"weights/{name}", p, step)
        for name, g in with_grad:
            self._histogram(f"grads/{name}", g, step)
        self._layer_grads = (step, layer_grads)
        if self.optimizer is not None:
            self._before = [p.clone() for p in params]
        for name, module in self._relus:  # hooked for one forward only: a hooked module calls slower
            if name not in self._relu_hooks:
                self._relu_hooks[name] = module.register_forward_hook(self._relu_hook(name))

    def _histogram(self, tag: str, x: Any, step: int) -> None:
        h = monitor_stats.raw_histogram(x)
        if h is not None:
            self.writer.add_histogram_raw(tag, h.min, h.max, h.num, h.sum, h.sum_squares, h.bucket_limits,
                                          h.bucket_counts, global_step=step)

    def _after_update(self, *_: Any) -> None:
        if self._before is None:
            return
        before, self._before = self._before, None
        try:
            params = [p.detach() for _, p in self._named]
            ratios = monitor_stats.update_ratios(params, before)
        except Exception as exc:  # noqa: BLE001
            log.warning("tensor_dap.Monitor: update ratio failed: %s", exc)
            return
        step = self._last_step + 1  # the update of the step after the one that armed it
        for (name, _), value in zip(self._named, ratios):
            self._pending.append((step, f"update_ratio/{name}", value))

    def _relu_hook(self, name: str) -> Any:
        def hook(module: Any, args: Any, out: Any) -> None:
            handle = self._relu_hooks.pop(name, None)
            if handle is not None:
                handle.remove()
            if hasattr(out, "dim") and out.dim() >= 1:
                self._dead[name] = monitor_stats.dead_fraction(out)
        return hook

    # --- flush and diagnostics -----------------------------------------------------------
    def flush(self) -> None:
        """Read back pending values (one transfer), write them, check the curves."""
        try:
            self._flush()
        except Exception as exc:  # noqa: BLE001
            log.warning("tensor_dap.Monitor: flush failed: %s", exc)

    def _flush(self) -> None:
        import torch

        if self._dead:
            step = self._last_step
            for name, frac in self._dead.items():
                self._pending.append((step, f"dead_relu/{name}", frac))
            self._dead_now = {n: float(f) for n, f in self._dead.items()}
            self._dead.clear()
        pending, self._pending = self._pending, []
        tensors = [t for _, _, v in pending for t in (v if isinstance(v, list) else [v]) if isinstance(t, torch.Tensor)]
        values = iter(_read_back(tensors))
        by_step: dict[int, list[tuple[str, float]]] = {}
        for step, tag, v in pending:
            if isinstance(v, list):  # per-gradient norms: their 2-norm, as clip_grad_norm_ computes it
                value = math.sqrt(math.fsum(n * n for n in (next(values) for _ in v)))
            else:
                value = next(values) if isinstance(v, torch.Tensor) else float(v)
            by_step.setdefault(step, []).append((tag, value))
        for step in sorted(by_step):
            _write_scalars(self.writer, step, by_step[step])
            for tag, v in by_step[step]:
                if tag in ("loss/train", "loss/val", "grad_norm/total"):
                    self._curves.setdefault(tag, deque(maxlen=HISTORY)).append((step, v))
        self._diagnose(by_step)
        if time.monotonic() - self._written_at > WRITE_S:
            self._written_at = time.monotonic()
            self.writer.flush()

    def _diagnose(self, by_step: dict[int, list[tuple[str, float]]]) -> None:
        found: list[diagnose.Finding] = []
        for step in sorted(by_step):
            f = diagnose.nonfinite(step, {t: v for t, v in by_step[step] if t.startswith(("loss/", "grad_norm/total"))})
            if f:
                found.append(f)
                break
        checked: set[str] = set()
        new_val = any(t == "loss/val" for tags in by_step.values() for t, _ in tags)
        if new_val or self._last_step - self._curves_checked >= self.every:  # O(history): not at every flush
            self._curves_checked = self._last_step
            train = list(self._curves.get("loss/train", ()))
            val = list(self._curves.get("loss/val", ()))
            for check in (diagnose.not_decreasing(train, self.patience), diagnose.oscillating(train),
                          diagnose.overfitting(train, val)):
                if check:
                    found.append(check)
            checked |= {"not_decreasing", "oscillating", "overfitting"}
        found += self._diverging(by_step)
        checked.add("diverging")
        norms = list(self._curves.get("grad_norm/total", ()))
        new = sum(1 for tags in by_step.values() for t, _ in tags if t == "grad_norm/total")
        if new:
            checked.add("exploding_gradients")
            past = sorted(v for _, v in norms[:len(norms) - new] if math.isfinite(v))
            for step, total in norms[len(norms) - new:]:  # every new norm: one may explode just before a NaN
                exploding = diagnose.gradients(step, {}, total, diagnose.typical_norm(past))
                if exploding:
                    found += exploding
                    break
                if math.isfinite(total):
                    bisect.insort(past, total)
        layer_step, layer_grads = self._layer_grads
        if layer_step in by_step:
            checked.add("vanishing_gradients")
            found += [f for f in diagnose.gradients(layer_step, layer_grads) if f.kind == "vanishing_gradients"]
        if self._dead_now:
            checked.add("dead_relu")
            found += diagnose.dead_relus(self._last_step, self._dead_now)
            self._dead_now = None
        kinds = {f.kind for f in found}
        for f in found:
            if f.kind not in self._active:
                self.findings.append(f)
                log.warning("%s", f.message)
                self.writer.add_text("diagnostics", f.message, global_step=f.step)
        # a finding is reported again only after a check that ran found it gone (NaN/Inf: only once)
        self._active = (self._active - (checked - kinds)) | kinds

    def _diverging(self, by_step: dict[int, list[tuple[str, float]]]) -> list[diagnose.Finding]:
        """Every new train loss against the lowest before it (kept as it goes: O(1) a value): a run that blows
        up in a few steps, between two total gradient norms (``norm_every``), is still named; so is one that
        blew up to a level it stays at."""
        found: list[diagnose.Finding] = []
        for step in sorted(by_step):
            for tag, loss in by_step[step]:
                if tag != "loss/train" or not math.isfinite(loss):
                    continue
                if self._first_loss is None:
                    self._first_loss = loss
                else:
                    self._risen = self._risen + 1 if diagnose.risen(loss, self._lowest_loss, self._first_loss) else 0
                    if not found:
                        finding = diagnose.diverging(step, loss, self._lowest_loss, self._first_loss, self._risen)
                        if finding:
                            found.append(finding)
                if loss > 0 and (self._lowest_loss is None or loss < self._lowest_loss):
                    self._lowest_loss = loss
        return found

    def close(self) -> None:
        """Flush what is pending, take the hooks off, close the event file (also at the end of the program)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self.flush()
        for h in [*self._handles, *self._relu_hooks.values()]:
            h.remove()
        self._handles.clear()
        self._relu_hooks.clear()
        self.writer.close()

    def __enter__(self) -> "Monitor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _write_scalars(writer: Any, step: int, values: list[tuple[str, float]]) -> None:
    """All of a step's scalars as one event (what add_scalar writes one value at a time, at a third of the cost)."""
    file_writer = getattr(writer, "_get_file_writer", None)
    if file_writer is None:
        for tag, v in values:
            writer.add_scalar(tag, v, global_step=step)
        return
    from tensorboard.compat.proto.summary_pb2 import Summary

    file_writer().add_summary(Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in values]), step)


def _read_back(tensors: list[Any]) -> list[float]:
    """Values of 0-dim tensors, one transfer per device, in order."""
    import torch

    if not tensors:
        return []
    out: list[float] = [math.nan] * len(tensors)
    by_device: dict[Any, list[int]] = {}
    for i, t in enumerate(tensors):
        by_device.setdefault(t.device, []).append(i)
    for idx in by_device.values():  # 0-dim as the monitor makes them; stack promotes mixed dtypes
        stacked = torch.stack([tensors[i] if tensors[i].dim() == 0 else tensors[i].reshape(()) for i in idx])
        stacked = stacked.double().tolist()
        for i, v in zip(idx, stacked):
            out[i] = v
    return out
