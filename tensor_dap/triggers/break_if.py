"""``break_if``: one call per step that stops training when the loss goes wrong.

It reads the loss once (one host read per call: the same ``loss.item()`` most loops
already do for logging) and compares it on the host, so it costs microseconds. State
for ``spike`` (a running average) and the automatic step count is kept per call site,
so two ``break_if`` lines in one program never mix their histories. A report carries the last
losses its line saw and, for a threshold or a spike, the divergence diagnosis. Inside a ``watch``,
a firing ``break_if`` also writes the watch's incident bundle for the step, and its report gets
the watch's loss history and the learning rates.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..dist import current_rank
from ..errors import LossThresholdError, NonFiniteError
from ..summary.transformed import unwrapped
from . import active
from .optimizer_call import learning_rates
from .report import Report
from .stop import check_mode, dispatch

SPIKE_WARMUP = 10  # calls before `spike` may fire: the average needs a history first
SPIKE_DECAY = 0.9  # exponential moving average; ~10 recent steps dominate
HISTORY = 8  # losses a report lists (as a watch's report does)
GRAPH_NODES = 4096  # autograd nodes walked from a loss to find the parameters it trains (``_no_bundle``)
NO_BUNDLE = ("no incident bundle: nothing of the step is kept outside a watch on a model (tensor_dap.watch(model, "
             "optimizer) keeps each step to replay; tensor-dap run --break-on-nan puts one on the module holding the "
             "optimizer's parameters, where one does)")


@dataclass
class Site:
    """One call site's state: its calls, running average and last losses."""

    calls: int = 0
    average: float | None = None
    seen: int = 0  # finite, non-spike values folded into the average
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY))  # the last losses seen here


_SITES: dict[tuple[str, int], Site] = {}


def _site() -> Site:
    frame = sys._getframe(2)  # the caller of break_if
    key = (frame.f_code.co_filename, frame.f_lineno)
    return _SITES.setdefault(key, Site())


def _value(loss: Any, below: float | None) -> float:
    """The loss as a Python float (the one host read). Inside vmap (a per-sample loss), torch refuses to read it:
    every sample's is read at once, and the one that fires first is the value (a non-finite one, else the lowest
    under ``below``, else the highest)."""
    if hasattr(loss, "detach"):
        loss = loss.detach()
        if loss.numel() != 1:
            raise ValueError(f"break_if expects a scalar loss, got a tensor of shape {tuple(loss.shape)}")
        samples, transforms = unwrapped(loss)
        if not transforms:
            return float(loss.item())
        flat = samples.reshape(-1).double()
        bad = flat[~flat.isfinite()]
        if bad.numel():
            return float(bad[0])
        low = float(flat.min())
        return low if below is not None and low < below else float(flat.max())
    return float(loss)


def break_if(loss: Any, *, above: float | None = None, below: float | None = None, nan: bool = True,
             spike: float | None = None, step: int | None = None, on: str = "auto",
             ranks: Collection[int] | None = None) -> bool:
    """Fire when the loss is non-finite (``nan``), above/below a threshold, or a spike.

    ``spike=k`` fires when the loss exceeds k × its running average (after a warm-up of
    ``SPIKE_WARMUP`` calls; meant for positive losses). ``step`` defaults to the number of
    earlier calls from this line. Returns True when it fired (and did not raise); ``on``
    chooses where a firing goes (see ``tensor_dap.watch``).
    """
    __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
    return check(loss, _site(), above=above, below=below, nan=nan, spike=spike, step=step, on=on, ranks=ranks)


def check(loss: Any, site: Site, *, above: float | None = None, below: float | None = None, nan: bool = True,
          spike: float | None = None, step: int | None = None, on: str = "auto",
          ranks: Collection[int] | None = None, optimizer: Any = None) -> bool:
    """``break_if`` with its state kept in ``site``. ``optimizer``: the one about to update with this loss
    (``tensor-dap run --loss-above`` compares in its pre-step hook), whose learning rates a report outside a watch
    carries, as a watch's does."""
    __tracebackhide__ = True  # a trigger raises through here: IPython and pytest leave the frame out
    check_mode(on)
    index = site.calls if step is None else step
    site.calls += 1
    value = _value(loss, below)
    site.history.append(value)
    watching = active.current()
    if watching is not None:
        watching.note_loss(value)

    kind, headline = _verdict(site, value, above=above, below=below, nan=nan, spike=spike)
    if kind is None:
        return False
    from ..summary import describe

    birth = _loss_birth(loss, alone=watching is None) if kind == "nonfinite" and getattr(loss, "grad_fn", None) is not \
        None else None
    if birth is not None:  # the op that made it, as the unchanged loop reports one (a report for the birth)
        from .investigate import report_of
        from .localize import from_birth

        report = report_of(from_birth(birth, None), step=index, kind=kind, headline=headline)
        report.loss = value
        _called_from(report, birth)
    else:
        report = Report(kind=kind, headline=headline, step=index, phase="loss", rank=current_rank(), loss=value)
    if hasattr(loss, "detach"):
        report.tensors.insert(0, ("the value checked", "loss", describe(loss)))
    if watching is not None:  # inside a watch: the step is bundled, the report gets the loss history
        watching.adopt(report)
    else:
        _enrich(report, list(site.history), birth, optimizer)
        report.notes.append(_no_bundle(loss))
    error = NonFiniteError if kind == "nonfinite" else LossThresholdError
    dispatch(report, on=on, error=error, ranks=ranks, culprit={"loss": loss, "inputs": None, "output": loss})
    return True


def _called_from(report: Report, birth: Any) -> None:
    """A loss computed inside an installed package (Pyro's ``svi.step``): its line is the package's, so the report
    also names the program's own line that called into it."""
    from ..debug.frames import own_line
    from ..libraries import library_of

    owner = library_of(birth.line.file) if birth.line is not None else None
    mine = own_line() if owner not in (None, "python") else None
    if mine is not None:
        report.notes.append(f"computed inside {owner}, called from {mine}  {mine.code}")


def _enrich(report: Report, history: list[float], birth: Any, optimizer: Any) -> None:
    """Outside a watch: this line's last losses, the learning rates of the optimizer known, and the diagnosis they
    allow (a threshold or a spike: divergence)."""
    from .diagnose import diagnose_report

    report.loss_history = history
    if optimizer is not None:
        report.lr = learning_rates(optimizer)
    report.diagnosis = diagnose_report(report, birth) or report.diagnosis


def _no_bundle(loss: Any) -> str:
    """``NO_BUNDLE``, naming the model to watch where the program's frames hold the module whose parameters this loss
    trains (a layer that trains itself, calling its own ``self.forward``: pytorch/examples' forward-forward)."""
    try:
        from .attach import owner_in_frames
        from .ops import graph_nodes

        trained = {id(n.variable) for n in graph_nodes([loss.grad_fn], GRAPH_NODES) if hasattr(n, "variable")}
        owner = owner_in_frames([], trained, sys._getframe(1)) if trained else None
    except Exception:  # noqa: BLE001 - a loss or frames it cannot read: the general note
        owner = None
    if owner is None:
        return NO_BUNDLE
    name = type(owner).__name__
    return (f"no incident bundle: nothing of the step is kept outside a watch on a model: tensor_dap.watch({name}, "
            f"optimizer) keeps each step to replay ({name} holds the parameters this loss trains); tensor-dap run "
            f"--break-on-nan watches a model from its first call, model(x), and never sees a forward called as "
            f"model.forward(x)")


def _loss_birth(loss: Any, alone: bool) -> Any:
    """A non-finite loss still holding its autograd graph: the op of the loss computation that made it from finite
    values (``loss_graph``: ``exp`` overflowing in a hand-written softplus), placed at the line that checked the
    loss (the op's own line is not known), or None. ``alone``: no watch, so no model to place it after."""
    from ..debug.frames import user_line
    from .loss_graph import read

    birth = read(loss).birth
    if birth is not None and birth.phase != "input":  # (a batch's first use is read from the graph: no line)
        birth.line, birth.near = user_line(), "before"
        if alone:
            birth.note = ("read from the loss's autograd graph as backward() began (nothing of the step is re-run "
                          "without a watch on a model, so the op's own line is not known)")
    return birth


def _verdict(site: Site, value: float, *, above: float | None, below: float | None, nan: bool,
             spike: float | None) -> tuple[str | None, str]:
    """(kind, headline) when a condition holds, else (None, ""); folds ``value`` into the average."""
    if not math.isfinite(value):
        return ("nonfinite", f"loss is {value}") if nan else (None, "")
    if above is not None and value > above:
        return "above", f"loss {value:.6g} is above {above:.6g}"
    if below is not None and value < below:
        return "below", f"loss {value:.6g} is below {below:.6g}"
    average = site.average
    if spike is not None and average is not None and site.seen >= SPIKE_WARMUP and value > spike * average:
        return "spike", f"loss {value:.6g} spiked above {spike:g} × its running average {average:.6g}"
    site.average = value if average is None else SPIKE_DECAY * average + (1 - SPIKE_DECAY) * value
    site.seen += 1
    return None, ""
