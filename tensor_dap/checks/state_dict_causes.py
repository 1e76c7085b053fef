"""Why a checkpoint's keys do not match a model's: wrapper prefixes, renamed layers, resized or transposed weights.

Pure functions over ``{key: shape}`` maps, so they are tested without building models.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional

from ..format import plural
from .result import PROBLEM, Finding, names

Shapes = dict[str, Optional[tuple[int, ...]]]

_KNOWN = {
    "module.": "saved from a DataParallel/DistributedDataParallel wrapper",
    "_orig_mod.": "saved from a torch.compile'd model",
    "module._orig_mod.": "saved from a torch.compile'd model inside DDP",
    "_orig_mod.module.": "saved from a DDP model that was then compiled",
}


@dataclass(frozen=True)
class PrefixFix:
    """Checkpoint keys carry ``strip`` in front of the model's keys (or lack ``add``)."""

    strip: str
    add: str
    keys: tuple[str, ...]  # model keys that the fix matches

    def theirs(self, key: str) -> str:
        """The checkpoint's name for a model key."""
        return self.strip + key[len(self.add):]

    def apply(self, theirs: Shapes) -> Shapes:
        """The checkpoint's keys renamed as the model names them."""
        out: Shapes = {}
        for k, v in theirs.items():
            out[self.add + k[len(self.strip):] if k.startswith(self.strip) else k] = v
        return out

    @property
    def finding(self) -> Finding:
        n = plural(len(self.keys), "key")
        if self.strip:
            cause = _KNOWN.get(self.strip, f"saved from a model that holds yours as '{self.strip[:-1]}'")
            code = f"state = {{k.removeprefix({self.strip!r}): v for k, v in state.items()}}"
            return Finding(PROBLEM, self.strip, f"{n} match once the checkpoint's prefix {self.strip!r} is removed: "
                           f"{cause}", f"{code} before load_state_dict (or save model.module.state_dict())"
                           if self.strip.startswith("module.") else code + " before load_state_dict")
        where = self.add[:-1]
        return Finding(PROBLEM, self.add, f"{n} match once prefixed with {self.add!r}: the checkpoint holds only "
                       f"the '{where}' part of the model", f"model.{where}.load_state_dict(state)")


def _split_points(key: str) -> list[tuple[str, str]]:
    parts = key.split(".")
    return [(".".join(parts[:i]) + ".", ".".join(parts[i:])) for i in range(1, len(parts))]


def prefix_fix(mine: Shapes, theirs: Shapes) -> PrefixFix | None:
    """The one prefix that, stripped from (or added to) the checkpoint's keys, matches the most keys."""
    missing = {k for k in mine if k not in theirs}
    unexpected = {k for k in theirs if k not in mine}
    votes: Counter[tuple[str, str]] = Counter()
    for k in unexpected:
        for head, rest in _split_points(k):
            if rest in missing:
                votes[(head, "")] += 1
                break
    for k in missing:
        for head, rest in _split_points(k):
            if rest in unexpected:
                votes[("", head)] += 1
                break
    if not votes:
        return None
    (strip, add), _ = votes.most_common(1)[0]
    fix = PrefixFix(strip, add, ())
    renamed = fix.apply({k: v for k, v in theirs.items() if k in unexpected})
    keys = tuple(k for k in mine if k in missing and k in renamed)
    return PrefixFix(strip, add, keys) if keys else None


def _module(key: str) -> tuple[str, str]:
    owner, _, leaf = key.rpartition(".")
    return owner, leaf


def _signatures(keys: list[str], shapes: Shapes) -> dict[str, tuple]:
    """Module -> its (leaf name, shape) entries in order: what a layer looks like without its name."""
    out: dict[str, list] = {}
    for k in keys:
        owner, leaf = _module(k)
        out.setdefault(owner, []).append((leaf, shapes[k]))
    return {m: tuple(v) for m, v in out.items()}


def _segment_change(old: str, new: str) -> tuple[str, str] | None:
    a, b = old.split("."), new.split(".")
    if len(a) != len(b):
        return None
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    return diff[0] if len(diff) == 1 else None


def renames(mine: Shapes, theirs: Shapes, missing: list[str], unexpected: list[str]
            ) -> tuple[list[tuple[Finding, list[tuple[str, str]]]], list[str], list[str]]:
    """Unexpected checkpoint modules that look like missing model modules (same entries, same shapes), matched
    in order of position; renames of the same name segment are reported together. Returns the findings with
    their (checkpoint key, model key) pairs, and the keys still missing and unexpected."""
    gone = _signatures(missing, mine)
    extra = _signatures(unexpected, theirs)
    free: dict[tuple, list[str]] = {}  # signature -> checkpoint modules with it, in order of position
    for module, signature in extra.items():
        free.setdefault(signature, []).append(module)
    pairs: list[tuple[str, str]] = []  # (checkpoint module, model module)
    for module, signature in gone.items():
        if free.get(signature):
            pairs.append((free[signature].pop(0), module))
    groups: dict[tuple[str, str] | None, list[tuple[str, str]]] = {}
    for old, new in pairs:
        change = _segment_change(old, new)
        groups.setdefault(change, []).append((old, new))
    found = []
    matched_model, matched_ckpt = set(), set()
    for change, members in groups.items():
        keys = [(f"{old}.{leaf}" if old else leaf, f"{new}.{leaf}" if new else leaf)
                for old, new in members for leaf, _ in gone[new]]
        matched_ckpt.update(k for k, _ in keys)
        matched_model.update(k for _, k in keys)
        if change is not None and len(members) > 1:
            what = f"'{change[0]}' renamed to '{change[1]}' in {plural(len(members), 'module')} " \
                   f"({names([new for _, new in members], 3)})"
            advice = f"rename the checkpoint's '{change[0]}' segment to '{change[1]}' before loading"
            subject = change[1]
        else:
            what = "; ".join(f"checkpoint '{old}' looks like model '{new}'" for old, new in members[:5])
            advice = "rename these checkpoint keys (same parameters, same shapes, same position)"
            subject = names([new for _, new in members], 3)
        found.append((Finding(PROBLEM, subject, f"renamed layer? {what}", advice), keys))
    return (found, [k for k in missing if k not in matched_model], [k for k in unexpected if k not in matched_ckpt])


def mismatch_note(key: str, mine: Shapes, theirs: Shapes, tensors_after: int = 0) -> tuple[str, str]:
    """What a shape difference most likely means, and what to do. ``tensors_after``: how many of the model's
    tensors come after ``key`` (the last layer's rows are its classes or outputs)."""
    a, b = mine[key], theirs[key]
    if a is None or b is None:
        return "one side is not a tensor", ""
    if len(a) >= 2 and tuple(reversed(a)) == b:
        return "transposed (Conv1D-style weights, as in HF GPT-2, vs nn.Linear)", "load it with .t()"
    if len(a) == len(b):
        dims = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        if dims == [0]:
            what = "number of classes/outputs" if tensors_after <= 1 else "number of rows (vocabulary, channels)"
            return (f"a different {what}: {a[0]} here, {b[0]} in the checkpoint",
                    "drop this entry from the state dict and load the rest (then train or resize this layer)")
        return f"dim {', '.join(map(str, dims))} differs", "a different configuration (width, heads, kernel size)?"
    return f"{len(a)}-d here, {len(b)}-d in the checkpoint", "a different layer type under the same name?"
