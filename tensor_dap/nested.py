"""Walk and map nested containers of tensors: the one walker every view and trigger uses.

Batches, checkpoints, frame locals and module outputs are dicts, lists, tuples, namedtuples
and dataclasses nested in each other, sometimes deeply, sometimes in a cycle (``weights_only``
checkpoints may hold a list that contains itself). The walk is iterative, visits each
container once, stops at a depth and node limit when asked, and never lets an odd user
container raise: so its cost is bounded whatever the input.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, Callable, Optional

from .kinds import is_packed_sequence, is_tensor

Expand = Callable[[Any, str, bool], Optional[Iterator[tuple[str, Any]]]]
MAX_DEPTH = 64  # no real batch or checkpoint nests deeper; a hostile file that does is cut, not walked


def children(value: Any, path: str = "", dotted: bool = False) -> Iterator[tuple[str, Any]] | None:
    """(child path, child) of a container we unfold, lazily; None for anything else.

    Paths read like Python (``x['key']``, ``x[0]``, ``x.field``), or with ``dotted`` like
    state_dict keys (``model.fc.weight``), as checkpoint users know them.
    """
    if is_tensor(value) or isinstance(value, (str, bytes)):
        return None
    if isinstance(value, Mapping):
        return _mapping_children(value, path, dotted)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return ((f"{path}.{f}", getattr(value, f, None)) for f in value._fields)
    if isinstance(value, (list, tuple)):
        return ((f"{path}[{i}]", v) for i, v in enumerate(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ((f"{path}.{f.name}", getattr(value, f.name, None)) for f in dataclasses.fields(value))
    return None


def _mapping_children(value: Mapping, path: str, dotted: bool) -> Iterator[tuple[str, Any]]:
    for i, (key, child) in enumerate(value.items()):
        if dotted:
            text = str(key) if type(key) in (str, int) else key_text(key, i)
            yield (f"{path}.{text}" if path else text), child
        else:
            yield f"{path}[{key_text(key, i)}]", child


KEY_CHARS = 40  # a mapping key longer than this is cut: a path must stay one short line
_PLAIN_KEYS = (str, bytes, int, float, bool, type(None))


def key_text(key: Any, index: int) -> str:
    """A mapping key as a path shows it: a plain key (or a tuple of them) as Python writes it, cut short;
    any other object as ``<#index Type>``, a tensor with its shape (``self.state[<#3 Parameter[32, 96]>]``,
    an optimizer's state): its repr may be many lines long, slow, or raise."""
    if type(key) in _PLAIN_KEYS or (type(key) is tuple and len(key) <= 8
                                                               and all(type(k) in _PLAIN_KEYS for k in key)):
        text = repr(key)
        return text if len(text) <= KEY_CHARS else text[:KEY_CHARS - 1] + "…"
    name = type(key).__name__
    if is_tensor(key):
        try:
            name += f"[{', '.join(str(n) for n in key.shape)}]"
        except Exception:  # noqa: BLE001 - a tensor subclass without a readable shape: its type alone
            pass
    return f"<#{index} {name}>"


def walk(value: Any, prefix: str = "", *, is_leaf: Callable[[Any], bool] = is_tensor,
         max_depth: int = MAX_DEPTH, limit: int | None = None, expand: Expand | None = None,
         keep_unexpanded: bool = False, dotted: bool = False) -> Iterator[tuple[str, Any]]:
    """(path, leaf) for every leaf inside ``value``, depth first, in container order.

    ``max_depth``: containers at this depth are not opened (the root is depth 0; paths grow with
    depth, so an unbounded depth would cost quadratic time on a hostile nesting).
    ``limit``: stop after visiting this many nodes. ``expand(node, path, dotted)`` opens a
    node (default: ``children``). ``keep_unexpanded`` also yields the nodes that are neither
    leaves nor opened (a container past ``max_depth``, a plain value).
    """
    expand = expand or children
    seen: set[int] = set()
    visited = 0
    stack: list[Iterator[tuple[str, Any]]] = [iter([(prefix, value)])]
    while stack:
        try:
            path, node = next(stack[-1])
        except StopIteration:
            stack.pop()
            continue
        except Exception:  # noqa: BLE001 - a user container whose iteration raises: skip the rest of it
            stack.pop()
            continue
        visited += 1
        if limit is not None and visited > limit:
            return
        try:
            leaf = is_leaf(node)
        except Exception:  # noqa: BLE001 - a predicate over an odd object: not a leaf
            leaf = False
        if leaf:
            yield path, node
            continue
        kids = None
        depth = len(stack) - 1
        if depth < max_depth and id(node) not in seen:
            try:
                kids = expand(node, path, dotted)
            except Exception:  # noqa: BLE001 - e.g. a dataclass whose fields cannot be read
                kids = None
        if kids is None:
            if keep_unexpanded:
                yield path, node
            continue
        seen.add(id(node))
        stack.append(kids)


def first_tensor(value: Any, max_depth: int = 3, limit: int = 1000) -> Any:
    """The first tensor inside ``value`` (or ``value`` itself) within a bounded look, else None."""
    return next((t for _, t in walk(value, max_depth=max_depth, limit=limit)), None)


def holds_tensor(value: Any, max_depth: int = 3, limit: int = 1000) -> bool:
    """True if ``value`` is a tensor or a container with one inside (a bounded look)."""
    return first_tensor(value, max_depth, limit) is not None


def map_tensors(obj: Any, fn: Callable[[Any], Any], _depth: int = 0) -> Any:
    """The same nested lists/tuples/namedtuples/dicts with ``fn`` applied to every tensor (other objects are kept
    as they are)."""
    if is_tensor(obj):
        return fn(obj)
    if _depth > MAX_DEPTH and isinstance(obj, (list, tuple, dict)):
        raise ValueError(f"containers nested more than {MAX_DEPTH} deep")
    if isinstance(obj, (list, tuple)):
        if hasattr(obj, "_fields"):
            return _namedtuple_mapped(obj, fn, _depth)
        return type(obj)(map_tensors(v, fn, _depth + 1) for v in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn, _depth + 1) for k, v in obj.items()}
    return obj


def _namedtuple_mapped(obj: Any, fn: Callable[[Any], Any], depth: int) -> Any:
    """A namedtuple (a batch of named fields, an RNN's ``PackedSequence``) rebuilt from its fields mapped, so its
    tensors are copied or moved with the rest; one whose class takes other arguments stays as it is. A
    PackedSequence keeps its ``batch_sizes`` as they are: torch holds them on the CPU whatever its data's device."""
    packed = is_packed_sequence(obj)
    fields = [v if packed and name == "batch_sizes" else map_tensors(v, fn, depth + 1)
              for name, v in zip(obj._fields, obj)]
    try:
        return type(obj)(*fields)
    except Exception:  # noqa: BLE001 - a class whose __new__ is not its fields: kept, unmapped
        return obj
