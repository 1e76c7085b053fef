"""``compare_state_dict``: would this checkpoint load into this model, and if not, why?

Keys are compared by name and shape only (no tensor data is read): missing, unexpected and
shape-mismatched keys, then the likely cause: a prefix added by a wrapper (``module.`` from
DataParallel/DDP, ``_orig_mod.`` from torch.compile, a parent model), a renamed layer (matched
by its parameters' shapes and its position), a transposed or resized weight, and what
``load_state_dict(strict=False)`` would silently skip.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..format import first_line, fmt_shape, plural
from ..kinds import is_module, is_tensor
from ..loading import load_saved
from .result import INFO, PROBLEM, WARNING, CheckResult, Finding, names, never_raises, result
from .state_dict_causes import Shapes, mismatch_note, prefix_fix, renames

COLUMNS = ("key", "status", "model_shape", "checkpoint_shape", "note")
_WRAPPERS = ("state_dict", "model_state_dict", "model", "module", "net", "network", "model_ema", "ema", "weights")


def _shapes(state: Mapping) -> Shapes:
    return {str(k): (tuple(int(d) for d in v.shape) if is_tensor(v) else None) for k, v in state.items()}


def _tensor_share(value: Any) -> float:
    if not isinstance(value, Mapping) or not value:
        return 0.0
    return sum(is_tensor(v) for v in value.values()) / len(value)


def _unwrap(checkpoint: Any) -> tuple[Mapping, str]:
    """The state dict inside a checkpoint: itself, or the first of the usual wrapper keys that holds one."""
    if _tensor_share(checkpoint) >= 0.5:
        return checkpoint, ""
    if isinstance(checkpoint, Mapping):
        for key in list(_WRAPPERS) + [k for k in checkpoint if k not in _WRAPPERS]:
            if key in checkpoint and _tensor_share(checkpoint[key]) >= 0.5:
                return checkpoint[key], str(key)
    raise ValueError("no state dict found in the checkpoint (a mapping of names to tensors, or one under "
                     f"{', '.join(repr(k) for k in _WRAPPERS[:4])} ...)")


def _load(path: Any) -> Any:
    return load_saved(path, mmap=True)  # mapped, not read: only shapes are needed


def _model_state(model: Any) -> Mapping:
    if is_module(model):
        return model.state_dict(keep_vars=True)
    if isinstance(model, Mapping):
        return model
    raise ValueError(f"expected an nn.Module or a state dict, got {type(model).__name__}")


def _tied(own: Mapping, missing: list[str], theirs: Shapes) -> dict[str, str]:
    """Missing keys whose tensor is the same object as a key the checkpoint has (tied embeddings)."""
    holder: dict[int, str] = {}
    for k, v in own.items():
        if k in theirs and is_tensor(v):
            holder.setdefault(id(v), k)
    return {k: holder[id(own[k])] for k in missing if is_tensor(own[k]) and id(own[k]) in holder}


def _square_neighbours(mine: Shapes, theirs: Shapes, transposed: list[str]) -> list[str]:
    """Square 2-d weights in the same blocks as transposed ones: their shape cannot tell, their layout is the same."""
    blocks = {k.rsplit(".", 2)[0] for k in transposed if k.count(".") >= 2}
    return [k for k, s in mine.items() if s is not None and len(s) == 2 and s[0] == s[1] and theirs.get(k) == s
            and k.endswith(".weight") and k.count(".") >= 2 and k.rsplit(".", 2)[0] in blocks]


def _listed(shape: tuple[int, ...] | None) -> list[int] | None:
    return None if shape is None else list(shape)


def _row(key: str, status: str, a: Shapes, b: Shapes, note: str = "") -> tuple:
    return (key, status, _listed(a.get(key)), _listed(b.get(key)), note)


@never_raises("state_dict")
def compare_state_dict(model: Any, checkpoint: Any) -> CheckResult:
    """Missing, unexpected and shape-mismatched keys between a model and a checkpoint, with the likely cause.

    ``model``: an nn.Module (or a state dict). ``checkpoint``: a state dict, a dict holding one under
    ``'state_dict'``, ``'model'``... , or a path to a file saved with ``torch.save`` (loaded with
    ``weights_only=True``). Reads names and shapes only; the model is not changed.
    """
    where = ""
    if isinstance(checkpoint, (str, os.PathLike)):
        where = f" ({os.fspath(checkpoint)})"
        try:
            checkpoint = _load(checkpoint)
        except Exception as exc:  # noqa: BLE001 - a missing, foreign or corrupt file is a finding
            return result("state_dict", f"cannot load{where}", [Finding(PROBLEM, os.fspath(checkpoint),
                                                                      f"cannot load: {first_line(exc)}")])
    try:
        state, inside = _unwrap(checkpoint)
        own = _model_state(model)
        mine = _shapes(own)
    except ValueError as exc:
        return result("state_dict", "nothing to compare", [Finding(PROBLEM, "", str(exc))])
    theirs = saved = _shapes(state)
    as_saved = sum(1 for k in mine if k in saved and mine[k] == saved[k])
    findings: list[Finding] = []
    if inside:
        others = [str(k) for k in checkpoint if k != inside]
        findings.append(Finding(INFO, f"checkpoint[{inside!r}]", "compared this state dict" +
                                (f" (the checkpoint also holds {names(others)})" if others else "")))
    rows: list[tuple] = []
    fix = prefix_fix(mine, theirs)
    if fix is not None:
        findings.append(fix.finding)
        rows += [(k, "prefix", _listed(mine[k]), _listed(saved[fix.theirs(k)]),
                  f"checkpoint key {fix.theirs(k)!r}") for k in fix.keys[:5]]
        theirs = fix.apply(theirs)
    missing = [k for k in mine if k not in theirs]
    tied = _tied(own, missing, theirs)
    if tied:
        findings.append(Finding(WARNING, names(list(tied)), "missing from the checkpoint, but tied to "
                                f"{names(list(dict.fromkeys(tied.values())))} (the same tensor), which is in it: "
                                "strict=False loads it through that key, strict=True raises",
                                "load with strict=False and check the result's missing_keys are only these"))
        rows += [_row(k, "tied", mine, theirs, f"same tensor as {v!r}") for k, v in tied.items()]
        missing = [k for k in missing if k not in tied]
    unexpected = [k for k in theirs if k not in mine]
    renamed, missing, unexpected = renames(mine, theirs, missing, unexpected)
    for f, pairs in renamed:
        findings.append(f)
        rows += [(new, "renamed?", _listed(mine[new]), _listed(theirs[old]), f"checkpoint key {old!r}")
                 for old, new in pairs]
    mismatched = [k for k in mine if k in theirs and mine[k] != theirs[k]]
    by_note: dict[tuple[str, str], list[str]] = {}
    tensor_keys = [k for k in mine if mine[k] is not None]
    after = {k: len(tensor_keys) - i - 1 for i, k in enumerate(tensor_keys)}
    for k in mismatched:
        note, advice = mismatch_note(k, mine, theirs, after.get(k, 0))
        by_note.setdefault((note, advice), []).append(k)
        rows.append(_row(k, "shape", mine, theirs, note))
    for (note, advice), keys in by_note.items():  # six transposed weights are one finding, not six
        k = keys[0]
        shapes = f"shape {fmt_shape(mine[k])} in the model, {fmt_shape(theirs[k])} in the checkpoint"
        findings.append(Finding(PROBLEM, names(keys, 3), f"{shapes}: {note}" if len(keys) == 1 else
                                f"{plural(len(keys), 'key')} with another shape ({k}: {shapes}): {note}", advice))
    transposed = [k for (note, _), keys in by_note.items() if note.startswith("transposed") for k in keys]
    hidden = _square_neighbours(mine, theirs, transposed)
    if hidden:
        findings.append(Finding(WARNING, names(hidden, 3), f"{plural(len(hidden), 'square weight')} beside the "
                                "transposed ones load without an error, and are probably transposed too",
                                "transpose them with the others (.t())"))
    findings += _skipped(missing, unexpected, mismatched or renamed)
    rows += [_row(k, "missing", mine, theirs) for k in missing] + [_row(k, "unexpected", mine, theirs)
                                                                   for k in unexpected]
    causes = [(len(fix.keys) if fix else 0, "behind a prefix"), (sum(len(p) for _, p in renamed), "renamed?"),
              (len(tied), "tied"), (len(missing), "missing"), (len(unexpected), "unexpected"),
              (len(mismatched), "with another shape")]
    summary = f"{as_saved:,} of {plural(len(mine), 'model key')} load as saved{where}" + "".join(
        f"; {n:,} {what}" for n, what in causes if n)
    facts = {"model_keys": len(mine), "checkpoint_keys": len(state), "matched": as_saved, "missing": missing[:1000],
             "unexpected": unexpected[:1000], "shape_mismatch": mismatched[:1000],
             "prefix": None if fix is None else {"strip": fix.strip, "add": fix.add},
             "renamed": [{"checkpoint": old, "model": new} for _, pairs in renamed for old, new in pairs][:1000]}
    return result("state_dict", summary, findings, columns=COLUMNS, rows=rows, facts=facts)


def _skipped(missing: list[str], unexpected: list[str], raises: Any) -> list[Finding]:
    """What load_state_dict would do: strict=True raises, strict=False leaves these silently as they are."""
    found = []
    if missing:
        batch_stats = [k for k in missing if k.endswith("num_batches_tracked")]
        real = [k for k in missing if k not in batch_stats]
        if real:
            owners = list(dict.fromkeys(k.rpartition(".")[0] or k for k in real))
            found.append(Finding(PROBLEM, names(owners), f"{plural(len(real), 'key')} missing from the checkpoint: "
                                 f"strict=False would leave them at their initial (random) values",
                                 "find where these layers come from, or initialize them on purpose"))
        if batch_stats:
            found.append(Finding(INFO, names(batch_stats), "BatchNorm's num_batches_tracked is missing (a checkpoint "
                                 "from an old torch): harmless unless momentum=None"))
    if unexpected:
        owners = list(dict.fromkeys(k.rpartition(".")[0] or k for k in unexpected))
        found.append(Finding(PROBLEM, names(owners),
                             f"{plural(len(unexpected), 'checkpoint key')} the model has no place for: "
                             "strict=False would ignore them", "a layer removed from the model, or a checkpoint "
                             "of another architecture or version?"))
    if raises:
        found.append(Finding(INFO, "", "strict=False does not help with renamed keys (they stay unloaded) or "
                             "shape mismatches (it still raises): fix the keys or drop those entries first"))
    return found
