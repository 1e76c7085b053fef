"""What the training curves say: pure functions from logged values to findings.

Each check looks at plain numbers (step, value) that the monitor has already read back, so
they are cheap, deterministic and tested on their own. Thresholds are conservative: a
healthy run (loss falling with minibatch noise, then flattening) raises nothing.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from ..format import fmt_num
from ..probe.grads import EXPLODING, VANISHING

Series = Sequence[tuple[int, float]]  # (step, value), in step order


@dataclass(frozen=True)
class Finding:
    # nonfinite, diverging, not_decreasing, oscillating, overfitting, vanishing_/exploding_gradients, dead_relu
    kind: str
    step: int
    message: str


def nonfinite(step: int, values: Mapping[str, float]) -> Optional[Finding]:
    bad = [name for name, v in values.items() if not math.isfinite(v)]
    if not bad:
        return None
    return Finding("nonfinite", step, f"step {step}: {', '.join(bad)} is NaN/Inf (tensor_dap.watch(model, optimizer) "
                                      f"finds the first module and phase where it appears)")


def _finite(series: Series) -> list[tuple[int, float]]:
    return [(s, v) for s, v in series if math.isfinite(v)]


def not_decreasing(losses: Series, patience: int = 200) -> Optional[Finding]:
    """The loss after ``patience`` steps is no lower than where it started (median of the first and last tenth)."""
    values = _finite(losses)
    if len(values) < 20 or values[-1][0] - values[0][0] < patience:
        return None
    tenth = max(5, len(values) // 10)
    first = statistics.median(v for _, v in values[:tenth])
    last = statistics.median(v for _, v in values[-tenth:])
    if last < first - 0.01 * abs(first):
        return None
    return Finding("not_decreasing", values[-1][0],
                   f"loss has not decreased in {values[-1][0] - values[0][0]} steps ({fmt_num(first)} → "
                   f"{fmt_num(last)}): check the learning rate, that the optimizer holds the model's parameters, "
                   f"and that no parameter is frozen or detached by mistake")


def _moving_average(values: list[float], k: int) -> list[float]:
    return [statistics.fmean(values[i:i + k]) for i in range(len(values) - k + 1)]


def oscillating(losses: Series, window: int = 60, swing: float = 0.2, swings: int = 4) -> Optional[Finding]:
    """The smoothed loss keeps swinging up and down by more than ``swing`` of its level without coming down."""
    history = [v for _, v in _finite(losses)]
    values = history[-window:]
    if len(values) < window // 2:
        return None
    smooth = _moving_average(values, 5)
    level = statistics.median(smooth)
    start = statistics.median(history[:20])
    if level <= 0 or level < 0.01 * abs(start):  # a loss near zero jitters by large fractions of itself
        return None
    turns = [smooth[0]]
    direction = 0.0
    for prev, cur in zip(smooth, smooth[1:]):
        step = cur - prev
        if step == 0:
            continue  # a plateau does not end a swing
        if direction and (step > 0) != (direction > 0):
            turns.append(prev)
        direction = step
    turns.append(smooth[-1])
    big = sum(1 for a, b in zip(turns, turns[1:]) if abs(b - a) > swing * level)
    third = len(values) // 3
    falling = statistics.median(values[-third:]) < 0.8 * statistics.median(values[:third])
    if big < swings or falling:
        return None
    return Finding("oscillating", losses[-1][0],
                   f"loss is oscillating ({big} swings of more than {swing:.0%} around {fmt_num(level)} in the last "
                   f"{len(values)} steps): the learning rate may be too high")


def _at(series: list[tuple[int, float]], step: int) -> float:
    """The median of the values around ``step`` (the five closest; ``series`` is in step order)."""
    i = bisect.bisect_left(series, step, key=lambda sv: sv[0])
    near = series[max(0, i - 5):i + 5]
    closest = sorted(near, key=lambda sv: abs(sv[0] - step))[:5]
    return statistics.median(v for _, v in closest)


def overfitting(train: Series, val: Series, rise: float = 0.05) -> Optional[Finding]:
    """Validation loss rose ``rise`` above its best, on two checks in a row, while the train loss kept falling."""
    vals, trains = _finite(val), _finite(train)
    if len(vals) < 3 or len(trains) < 5:
        return None
    best_i = min(range(len(vals)), key=lambda i: vals[i][1])
    best_step, best = vals[best_i]
    after = vals[best_i + 1:]
    if len(after) < 2 or not all(v > best * (1 + rise) + 1e-12 for _, v in after[-2:]):
        return None
    last_step, last = vals[-1]
    train_then, train_now = _at(trains, best_step), _at(trains, last_step)
    if not train_now < train_then:
        return None
    return Finding("overfitting", last_step,
                   f"overfitting: val_loss rose {last / best - 1:.0%} since its best ({fmt_num(best)} at step "
                   f"{best_step}) while the train loss fell {1 - train_now / train_then:.0%}: stop early, or add "
                   f"data, augmentation or regularization")


DIVERGED = 100.0  # a loss this many times the lowest one so far (and ten times the first) has diverged
# ... and so has one that stays RISEN times its lowest so far (and 3 times the first) for STAYED values in a row:
# nanoGPT at lr 5 went from 4.5 to 40-170 and stayed there (cross-entropy seldom grows 100-fold)
RISEN, STAYED = 10.0, 10


def risen(loss: float, lowest: Optional[float], first: float) -> bool:
    """A finite loss ``RISEN`` times the lowest before it and three times the first: one is noise of an early run,
    ``STAYED`` in a row are not."""
    return (lowest is not None and lowest > 0 and math.isfinite(loss) and loss > RISEN * lowest
            and loss > 3 * abs(first))


def diverging(step: int, loss: float, lowest: Optional[float], first: float, risen_for: int = 0) -> Optional[Finding]:
    """A loss ``DIVERGED`` times the lowest finite loss before it and ten times the first loss (a converged
    loss near zero jumps by large factors of itself without diverging). Two losses are enough: a run that
    blows up does so in a few steps, often between two total gradient norms. Or one that has ``risen`` for
    ``risen_for`` values in a row, ``STAYED`` or more: blown up to a level it stays at."""
    if lowest is None or lowest <= 0 or not math.isfinite(loss):
        return None
    fix = "lower the learning rate, add warm-up, or clip gradients with torch.nn.utils.clip_grad_norm_"
    if loss > DIVERGED * lowest and loss > 10 * abs(first):
        return Finding("diverging", step, f"step {step}: the loss is diverging ({fmt_num(loss)}, {loss / lowest:.3g}× "
                                          f"its lowest so far): {fix}")
    if risen_for >= STAYED:
        return Finding("diverging", step, f"step {step}: the loss is diverging: above {RISEN:g}× its lowest so far "
                                          f"({fmt_num(lowest)}) for {risen_for} values in a row, now "
                                          f"{fmt_num(loss)}: {fix}")
    return None


def typical_norm(past: Sequence[float]) -> Optional[float]:
    """The median of the finite total gradient norms so far, ``past`` sorted; None below 20 of them."""
    n = len(past)
    if n < 20:
        return None
    return past[n // 2] if n % 2 else (past[n // 2 - 1] + past[n // 2]) / 2


def gradients(step: int, norms: Mapping[str, float], total: Optional[float] = None, typical: Optional[float] = None,
              vanishing: float = VANISHING, exploding: float = EXPLODING) -> list[Finding]:
    """Layers whose gradient norm is vanishing, and a total norm that explodes (absolutely, or against
    ``typical``, its median so far: ``typical_norm``)."""
    out = []
    small = [n for n, v in norms.items() if 0 < v < vanishing]
    if small:
        out.append(Finding("vanishing_gradients", step,
                           f"step {step}: vanishing gradients in {', '.join(small[:5])}"
                           f"{' …' if len(small) > 5 else ''} (norm < {fmt_num(vanishing)})"))
    if total is not None and math.isfinite(total):
        if total > exploding or (typical and total > 100 * typical):
            against = f", {total / typical:.0f}× its median" if typical else ""
            out.append(Finding("exploding_gradients", step,
                               f"step {step}: exploding gradients (total norm {fmt_num(total)}{against}): lower the "
                               f"learning rate or clip with torch.nn.utils.clip_grad_norm_"))
    return out


def dead_relus(step: int, fractions: Mapping[str, float], threshold: float = 0.5) -> list[Finding]:
    """ReLU layers where more than ``threshold`` of the units output zero for a whole batch."""
    dead = {n: f for n, f in fractions.items() if f > threshold}
    if not dead:
        return []
    worst = ", ".join(f"{n} {f:.0%}" for n, f in sorted(dead.items(), key=lambda kv: -kv[1])[:5])
    return [Finding("dead_relu", step, f"step {step}: dead ReLUs (units at zero for the whole batch): {worst}; "
                                       f"a lower learning rate, another init or LeakyReLU/GELU can revive them")]
