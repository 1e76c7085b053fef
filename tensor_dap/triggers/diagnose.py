"""One line that says what probably went wrong and the usual fix, from where a NaN/Inf was born.

``diagnose``: pure rules over the finding (the op, its inputs, the phase) and the report's numbers (the largest
magnitude, the loss history, how the program clips its gradients): a fully masked softmax row, a log/sqrt/division of
zero, a float16 overflow, bad data, a diverging run. None when no rule applies: a guess that does not fit would send
the user the wrong way. ``diagnose_report``: of a report (a NaN/Inf learning rate first), with ``loss_tap``'s clipping.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..format import fmt_num
from ..libraries import FRAMEWORK, library_of
from . import ctc, finite, masked_rows
from .birth import Birth, input_tensors, op_at
from .fixes import DIAGNOSES
from .loss_graph import empty_mean

FP16_MAX = 65504.0
DIVERGED_ABS = 1e15  # float32 values this large in a model are a run going off, not data
RISE = 1.5  # a loss over a threshold within this factor of its lowest recent value did not jump there
UNCLIPPED = 10  # a clip by norm this many times above the largest norm the gradients had is no clipping

_SOFTMAX = {"softmax", "log_softmax", "_softmax", "_log_softmax", "scaled_dot_product_attention", "softmin"}
_LOG = {"log", "log2", "log10", "log_", "log2_", "log10_", "xlogy", "lgamma", "digamma", "log1p"}
_SQRT = {"sqrt", "rsqrt", "sqrt_", "rsqrt_", "pow", "pow_", "float_power"}
_DIV = {"div", "div_", "rdiv", "true_divide", "reciprocal", "reciprocal_", "floor_divide", "remainder", "fmod", "norm",
        "normalize"}
_WEIGHT_NORM = {"_weight_norm", "_weight_norm_interface"}  # nn.utils.parametrizations.weight_norm's one fused op
_ARC = {"acos", "asin", "atanh", "arccos", "arcsin", "arctanh"}  # defined on [-1, 1]; infinite gradients at ±1
_SUBTRACT = {"sub", "rsub", "add"}  # -inf - (-inf): a masked row minus its own max or logsumexp
_STD = {"std", "var", "std_mean", "var_mean"}  # NaN from finite values only where n - correction <= 0
_EXP = {"exp", "exp_", "exp2", "expm1", "sinh", "cosh"}
_NLL = {"cross_entropy", "nll_loss", "nll_loss2d", "nll_loss_nd"}
# matrices that lost rank: -inf from a log-determinant, Inf/NaN from an inverse, a solve, a determinant's gradient
_SINGULAR = {"linalg_slogdet", "_linalg_slogdet", "slogdet", "logdet", "linalg_det", "_linalg_det", "det", "linalg_inv",
             "linalg_inv_ex", "inverse", "linalg_solve", "_linalg_solve_ex", "cholesky_inverse", "linalg_pinv"}
_PRODUCTS = {"mul", "matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "einsum", "conv1d", "conv2d", "conv3d"}


def diagnose_report(report: Any, birth: Birth | None) -> str | None:
    """``diagnose`` of a report (its phase, kind, largest magnitude and loss history) and of the program's clipping,
    seen while ``backward()`` was listened to. That clipping is kept in the report (``clipping``), and a report that
    has it (a bundle's, replayed in another process, where no clipping was seen) is diagnosed with its own."""
    from .loss_tap import clip_norm_seen, clipping

    if report.clipping is None:
        report.clipping, report.clip_norm_seen = clipping(), clip_norm_seen()
    return nonfinite_rate(report.lr) or diagnose(
        birth, phase=report.phase, kind=report.kind, max_abs=report.max_abs, loss_history=report.loss_history,
        clipping=report.clipping, norm_seen=report.clip_norm_seen)


def nonfinite_rate(rates: list[float]) -> str | None:
    """The diagnosis where a parameter group's learning rate is itself NaN or Inf (a report's ``lr``): every update
    with it is non-finite, whatever the gradients were. None where every rate is finite."""
    bad = next((r for r in rates if not math.isfinite(r)), None)
    return DIAGNOSES["lr_nonfinite"].format(lr=fmt_num(bad)) if bad is not None else None


def diagnose(birth: Birth | None, *, phase: str | None, kind: str, max_abs: float | None,
             loss_history: list[float], clipping: str | None = None, norm_seen: float | None = None) -> str | None:
    """The likeliest cause and fix, or None. ``kind`` is the report's ("nonfinite", "above", "spike"...);
    ``clipping``: how the program clips its gradients ("norm 1"), if it does; ``norm_seen``: the largest gradient
    norm its clips by norm measured."""
    clipped = (clipping, norm_seen)
    if kind == "scaler":
        return DIAGNOSES["scaler"]
    if kind == "above" and not (max_abs is not None and max_abs >= DIVERGED_ABS):
        calm = _calm(loss_history)
        if calm is not None:
            return calm
    if kind in ("above", "spike"):
        return _divergence(max_abs, loss_history, clipped, force=True)
    if phase == "optimizer":  # an update overflowing is a divergence; one that used NaN gradients (after a
        return _divergence(max_abs, loss_history, clipped, force=False)  # stop was continued) is not: no guess
    if phase == "input":  # (no module: seen in the loss's graph, where it may be any tensor with no gradient)
        return DIAGNOSES["input_no_grad" if birth is not None and birth.module is None else "input"]
    if birth is None:
        return _divergence(max_abs, loss_history, clipped, force=phase == "loss" and _rising(loss_history))
    op = (birth.forward_op or birth.op) or ""  # a backward's forward op (a loss's gradient, read from its graph too)
    op = op.rstrip("_") if op not in ("_softmax", "_log_softmax") else op
    if op in _SOFTMAX and birth.kind == "nan" and masked_rows.softmax_input(birth):
        return DIAGNOSES["masked_softmax"]
    if op == "multi_head_attention_forward" and birth.kind == "nan" and masked_rows.all_keys(birth):
        return DIAGNOSES["masked_attention"]  # nn.MultiheadAttention: its softmax is inside, seen as one op
    if op in ctc.OPS:  # +Inf forward, NaN from its backward (a loss filtered afterwards): what the node saved
        args = list(birth.saved.items()) if birth.forward_op else birth.inputs
        return DIAGNOSES["ctc"].format(samples=ctc.explain(args))
    if birth.kind == "nan" and not birth.forward_op and (_empty_input(birth) or _by_a_count_of_zero(birth, op)):
        return DIAGNOSES["empty_mean"]
    if op in _NLL and birth.kind == "nan" and (index := _all_ignored(birth)) is not None:
        return DIAGNOSES["no_targets"].format(index=index)
    if _half_overflow(birth, op):
        return DIAGNOSES["fp16_backward" if birth.forward_op else "fp16"]
    if op in _WEIGHT_NORM and birth.kind == "nan":
        return DIAGNOSES["weight_norm"]
    if op in _ARC:
        return DIAGNOSES["arc"]
    if op in _SINGULAR:
        return DIAGNOSES["singular"]
    if op in _SUBTRACT and birth.kind == "nan" and not birth.forward_op and masked_rows.any_input(birth):
        return DIAGNOSES["masked_subtract"]
    if op in _STD and birth.kind == "nan" and not birth.forward_op:
        return DIAGNOSES["std_single"]
    for names, key in ((_LOG, "log"), (_SQRT, "sqrt"), (_DIV, "div")):
        if op in names or op.rstrip("_") in names:
            if key == "sqrt" and op.startswith("pow") and not _fractional_power(birth):
                break
            if key == "sqrt" and not birth.forward_op and birth.kind == "inf" and _zero_base(birth):
                return DIAGNOSES["negative_power"]  # from finite inputs: x ** -p or rsqrt of an exact 0
            if key == "sqrt" and not birth.forward_op and birth.kind == "nan":
                return DIAGNOSES["sqrt_forward"]  # a negative input itself, not the gradient at 0
            at_zero = "pow_zero" if birth.forward_op in ("pow", "float_power") else "sqrt_zero"
            if key == "sqrt" and birth.forward_op and (saved := _sqrt_saved(birth)) is None:  # values unknown: from
                # the graph's structure, a NaN in the forward can only have stayed out of the loss behind a where
                return DIAGNOSES[{None: "sqrt_either", True: "sqrt", False: at_zero}[birth.hidden]]
            if key == "sqrt" and birth.forward_op and _zeros_only(saved):
                return DIAGNOSES[at_zero]  # no negative input (no torch.where trap): an exact 0
            if key == "log" and (_made_by(birth, {"softmax", "_softmax", "softmin"})
                                 or not birth.made_by and _probabilities(birth)):
                return DIAGNOSES["log_softmax"]
            if key == "log" and _made_by(birth, {"sigmoid"}):
                return DIAGNOSES["log_sigmoid"]
            if key == "div" and (owner := _package_of(birth)) is not None:
                return DIAGNOSES["div_library"].format(owner=owner)
            return DIAGNOSES[key]
    diverged = _divergence(max_abs, loss_history, clipped, force=False)
    if diverged:
        return diverged
    if birth.kind == "inf" and op in _PRODUCTS:  # finite values multiplied past the dtype's largest: a run going off
        return _divergence(max_abs, loss_history, clipped, force=True)  # (half precision is told above)
    if birth.phase == "backward" and op.endswith(".apply"):  # a custom autograd.Function's node
        return DIAGNOSES["custom_backward"].format(function=op[:-6], what="NaN" if birth.kind == "nan" else "Inf",
                                                   at=f" with {op_at(birth.inside)}" if birth.inside else "")
    if op in _EXP:
        return DIAGNOSES["exp"]
    return None


def _package_of(birth: Birth) -> str | None:
    """The package whose code ran the op (its line is in that package's files), None for the program's own."""
    owner = library_of(birth.line.file) if birth.line is not None else None
    return owner if owner not in (None, *FRAMEWORK) else None


def _divergence(max_abs: float | None, history: list[float], clipped: tuple[str | None, float | None], *,
                force: bool) -> str | None:
    big = max_abs is not None and max_abs >= DIVERGED_ABS
    if not (force or big or _rising(history)):
        return None
    detail = []
    if big:
        detail.append(f"values up to {max_abs:.3g}")
    finite = [v for v in history if math.isfinite(v)]
    if len(finite) >= 2 and finite[0] > 0 and finite[-1] > 4 * finite[0]:
        detail.append(f"the loss went from {finite[0]:.4g} to {finite[-1]:.4g}")
    clipping, seen = clipped
    if not clipping:
        text = DIAGNOSES["divergence"]
    elif seen is not None and 0 < seen and UNCLIPPED * seen <= _norm_bound(clipping):
        suggest = 10 ** math.floor(math.log10(seen))  # a round norm they reach
        text = DIAGNOSES["divergence_unclipped"].format(clip=clipping, seen=seen, suggest=suggest)
    else:
        text = DIAGNOSES["divergence_clipped"].format(clip=clipping)
    return f"{text} ({'; '.join(detail)})" if detail else text


def _norm_bound(clipping: str) -> float:
    """The bound of a clipping by norm as ``loss_tap`` notes it ("norm 1e+09"); NaN otherwise (by value, or a norm
    given as a tensor)."""
    kind, _, bound = clipping.partition(" ")
    try:
        return float(bound) if kind == "norm" else math.nan
    except ValueError:
        return math.nan


def _calm(history: list[float]) -> str | None:
    """A loss over a threshold that it did not jump to: the first value compared, or one within RISE of the lowest
    before it (HF's 4.306, 4.321, 4.338 over a threshold of 4.33). None for a rise."""
    if len(history) == 1:
        return DIAGNOSES["above_at_start"]
    earlier = [v for v in history[:-1] if math.isfinite(v) and v > 0]
    last = history[-1]
    if earlier and math.isfinite(last) and last <= RISE * min(earlier):
        return DIAGNOSES["above_no_rise"].format(first=history[0], last=last, n=len(history))
    return None


def _rising(history: list[float]) -> bool:
    """The loss grew tenfold over the kept history, or went from finite to Inf: a run going off."""
    finite = [v for v in history if math.isfinite(v)]
    return len(finite) >= 2 and finite[0] > 0 and (finite[-1] > 10 * finite[0] or
                                                   (len(finite) < len(history) and finite[-1] > 2 * finite[0]))


def _half_overflow(birth: Birth, op: str) -> bool:
    """The op ran in float16 (its inputs are, or its output is: autocast casts float32 inputs inside the op) on
    finite inputs, and overflowed: it made an Inf, or its inputs exceed float16's range (a float32 batch past 65504
    cast by autocast). A log, sqrt or division of a zero or negative number is that, in any dtype."""
    output = birth.output if isinstance(birth.output, (tuple, list)) else (birth.output,)
    named = [*birth.inputs, *(("output", t) for t in output)]
    if not any(t.dtype == torch.float16 for t in input_tensors(named)) or not _finite_inputs(birth.inputs):
        return False
    inputs = [t for t in input_tensors(birth.inputs) if t.is_floating_point() and t.numel()]
    with torch.no_grad():
        if birth.kind != "inf" and not any(max(-float(low), float(high)) > FP16_MAX
                                           for low, high in (t.aminmax() for t in inputs)):
            return False
        powered = op.startswith("pow") and not _fractional_power(birth)  # x ** 2: no root, any sign
        if op in _LOG | _SQRT and not powered and inputs and finite.anywhere(inputs[0], lambda p: (p <= 0).any()):
            return False  # log(0), sqrt(-x): the rules below
        return not (op in _DIV and len(inputs) > 1 and finite.anywhere(inputs[-1], lambda p: (p == 0).any()))  # x / 0


def _finite_inputs(named: list[tuple[str, Any]]) -> bool:
    return all(finite.kind_of(t) is None for t in input_tensors(named) if t.is_floating_point())


def _all_ignored(birth: Birth) -> int | None:
    """The ignore_index, when every class-index target is it: the one the loss's graph saved (``loss_graph``), or,
    not known, a value outside the classes (cross_entropy raises for such a target unless it is the ignore_index);
    else None."""
    tensors = input_tensors(birth.inputs)
    if len(tensors) < 2 or tensors[0].dim() == 0:
        return None
    scores, target = tensors[0], tensors[1]
    if target.is_floating_point() or target.is_complex() or target.numel() == 0:
        return None
    classes = scores.shape[1] if scores.dim() > 1 else scores.shape[0]
    index = birth.saved.get("ignore_index")
    with torch.no_grad():
        if isinstance(index, int):
            return index if bool((target == index).all()) else None
        if not bool(((target < 0) | (target >= classes)).all()):
            return None
        return int(target.reshape(-1)[0])


def _made_by(birth: Birth, ops: set[str]) -> bool:
    """The op's input came out of one of ``ops``, directly or through ``1 - p`` (``log(1 - sigmoid(x))``)."""
    made = [op.rstrip("_") for op in birth.made_by]
    return bool(made) and (made[0] in ops or made[0] in ("rsub", "sub") and len(made) > 1 and made[1] in ops)


def _probabilities(birth: Birth) -> bool:
    """The log's input is a softmax's output: values in [0, 1] that add up to 1 along the last dimension (or the
    second, F.softmax(x, dim=1) of an image batch). The sums are taken over the first samples, as many as one bounded
    piece holds (a guess needs no more; a tensor whose one sample is larger is not guessed at)."""
    x = next(iter(input_tensors(birth.inputs)), None)
    if x is None or x.dim() == 0 or not x.is_floating_point() or not x.numel():
        return False
    with torch.no_grad():
        if finite.kind_of(x) is not None or float(x.min()) < 0 or float(x.max()) > 1:
            return False
        if x.dim() > 1:
            sample = x[0].numel()
            if sample > finite.SLICE_ELEMENTS:
                return False
            x = x[:max(1, finite.SLICE_ELEMENTS // max(1, sample))]
        dims = [-1] if x.dim() == 1 else [-1, 1]
        return any(bool(((x.sum(d, dtype=torch.float32) - 1).abs() < 1e-3).all()) for d in dims)


def _fractional_power(birth: Birth) -> bool:
    """pow with an exponent below 1 (x ** 0.5) behaves like sqrt at 0."""
    args = [t for _, t in birth.inputs]
    if len(args) < 2:
        return True  # the exponent is not known: like sqrt, the likelier story
    exponent = args[1]
    if isinstance(exponent, (int, float)):
        return exponent < 1
    return not isinstance(exponent, torch.Tensor) or bool((exponent < 1).any())


def _zero_base(birth: Birth) -> bool:
    """The op's first input (a power's base) is a tensor holding an exact 0."""
    base = birth.inputs[0][1] if birth.inputs else None
    return isinstance(base, torch.Tensor) and finite.anywhere(base, lambda p: (p == 0).any())


def _empty_input(birth: Birth) -> bool:
    """A mean, or a loss averaging, over no element (``loss_graph.empty_mean``: what made its NaN)."""
    x = next(iter(input_tensors(birth.inputs)), None)
    return empty_mean(birth.op or "", x, {"self_numel": x.numel() if x is not None else 0})


def _by_a_count_of_zero(birth: Birth, op: str) -> bool:
    """A sum divided by a count that is 0: one integer, as counted by ``mask.sum()`` (HF's ``loss /
    num_items_in_batch`` with every label -100), where 0/0 is the NaN; a norm of zeros (``g / g.norm()``) is not."""
    tensors = input_tensors(birth.inputs)
    return op in ("div", "true_divide") and len(tensors) == 2 and tensors[1].numel() == 1 and \
        not tensors[1].is_floating_point() and not tensors[1].is_complex() and bool(tensors[1].reshape(()) == 0)


def _sqrt_saved(birth: Birth) -> torch.Tensor | None:
    """What sqrt's backward node saved from its forward (``SqrtBackward0``: its result, NaN where the input was
    negative; ``PowBackward0``: its input); None when not known (a node read from a freed graph's structure)."""
    value = birth.saved.get("result" if birth.op == "SqrtBackward0" else "self")
    return value if isinstance(value, torch.Tensor) and value.is_floating_point() else None


def _zeros_only(value: torch.Tensor | None) -> bool:
    """sqrt's forward saw exact zeros and no negative number."""
    return value is not None and finite.anywhere(value, lambda p: (p == 0).any()) and \
        not finite.anywhere(value, lambda p: (p < 0).any() | p.isnan().any())
