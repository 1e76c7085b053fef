"""Numbers, sizes, counts, shapes, dtype names and errors as short text: the one formatter every view uses.

Pure functions over plain values (no torch import), so the summary, the DAP views, the pdb
tables and the CLI all print a number, a shape or an exception the same way.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Callable, Optional

_DTYPES = {
    "float32": "", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
    "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2", "float8_e4m3fnuz": "f8e4m3uz",
    "float8_e5m2fnuz": "f8e5m2uz", "float8_e8m0fnu": "f8e8m0",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "bool": "bool", "complex32": "c32", "complex64": "c64", "complex128": "c128",
}


def short_dtype(dtype: str) -> str:
    """'torch.bfloat16' -> 'bf16'; float32 (the default) -> ''."""
    name = dtype.replace("torch.", "")
    return _DTYPES.get(name, name)


def dtype_name(dtype: str) -> str:
    """'torch.float32' -> 'f32': for tables and module lines, where the default dtype is named too."""
    return short_dtype(dtype) or "f32"


def fmt_num(v: Optional[float]) -> str:
    """3-4 significant digits; scientific for very large or very small magnitudes."""
    if v is None:
        return "?"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, complex):
        sign = "+" if v.imag >= 0 or math.isnan(v.imag) else "-"
        return f"{fmt_num(v.real)}{sign}{fmt_num(abs(v.imag))}j"
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "0"
    a = abs(v)
    text = f"{v:.4g}"
    if a >= 1e5 or a < 1e-3 or "e" in text:
        mant, exp = f"{v:.2e}".split("e")
        mant = mant.rstrip("0").rstrip(".")
        return f"{mant}e{int(exp)}"
    return text


def fmt_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(size)} B"
            return f"{size:.1f} {unit}" if size < 10 else f"{size:.0f} {unit}"
        size /= 1024
    return f"{n} B"


def fmt_count(n: Optional[int], present: bool, exact: bool = True) -> str:
    """A NaN/Inf count: exact (``3``), estimated from a sample (``≈1.2e4``), or when it was not counted,
    'yes' if one was seen, else '?'."""
    if n is None:
        return "yes" if present else "?"
    if exact:
        return str(n)
    return "≈" + (str(n) if n < 100_000 else fmt_num(float(n)))


def fmt_shape(shape: Any) -> str:
    if shape is None:
        return "[?]"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def parse_shape(text: str) -> tuple[int, ...]:
    """The dims of a shape as torch's messages write it inside brackets: ``"8, 1"`` -> (8, 1); ``""`` -> ()."""
    return tuple(int(d) for d in text.replace(" ", "").split(",") if d)


def shown_path(path: str) -> str:
    """A file as a user types it: relative to the working folder when it lies inside it, else as it is."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith(os.pardir) else relative


def short_path(name: str, width: int) -> str:
    """A dotted name cut to ``width`` characters in the middle, keeping its root and its last components:
    ``model…h.0.ln_1.weight``. Cut at the end, a layer's weight and bias read the same (``model.h.0.ln_1.…``).
    A name whose root alone fills half the width is cut at the end."""
    if len(name) <= width:
        return name
    cut = min((i for i in (name.find("."), name.find("[")) if i > 0), default=-1)
    head = name[:cut] if cut > 0 else ""
    if not head or len(head) > width // 2:
        return name[:width - 1] + "…"
    start = len(name) - (width - len(head) - 1)
    tail = name[start:]
    whole = tail.find(".")  # a tail cut inside a component starts at the next whole one
    if name[start - 1] != "." and 0 <= whole < len(tail) - 1:
        tail = tail[whole + 1:]
    return f"{head}…{tail}"


def _message_line(exc: BaseException) -> str:
    try:
        text = str(exc).strip()
    except Exception:  # noqa: BLE001 - a broken __str__ must not break the report of the error
        return ""
    return text.splitlines()[0] if text else ""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type name when the message is empty."""
    return _message_line(exc) or type(exc).__name__


def short_error(exc: BaseException, limit: Optional[int] = 80) -> str:
    """``Type: first line of the message`` (cut to ``limit`` characters of it): an error in one short line."""
    text = _message_line(exc)
    if limit is not None and len(text) > limit:
        text = text[:limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# C0/C1 control characters (escape sequences retitle, clear or rewrite a terminal) and the bidi
# overrides that make text read differently from what it is; tab and newline are handled apart.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: Any, *, newlines: bool = False) -> str:
    """``text`` (from a file, a checkpoint key, a report) safe to print: control characters are shown
    escaped (``\\x1b``) instead of acting on the terminal. Newlines are kept only with ``newlines``."""
    text = str(text)
    if not newlines:
        text = text.replace("\n", "\\n").replace("\r", "\\r")
    return _UNSAFE.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


PLAIN_ITEMS = 16  # items of a container written before "…"
_PLAIN_DEPTH = 3  # containers nested deeper are written "…"
_BITS_PER_DIGIT = 3.3219


def plain_repr(value: Any, limit: int = 80, other: Optional[Callable[[Any], str]] = None) -> Optional[str]:
    """``value`` as Python writes it, cut to ``limit`` characters at a cost bounded by ``limit`` whatever its size:
    numbers, strings, bytes, None, slices, torch's Size/dtype/device and lists, tuples, dicts and sets of them (a
    300 MB string is cut before it is written, a dict is not sorted, an int too long to write is given by its
    length). Anything else is written by ``other`` (which may run the object's own ``__repr__``); without one the
    whole value is None, so the caller names its type. Never raises."""
    writer = _PlainWriter(limit, other)
    try:
        if not writer.write(value, 0):
            return None
    except Exception:  # noqa: BLE001 - a container changed while it was read, an ``other`` that failed
        return None
    text = "".join(writer.parts)
    return text if len(text) <= limit else text[:max(limit - 1, 0)] + "…"


class _PlainWriter:
    """Appends the pieces of one value's text until they pass the limit, then writes nothing more."""

    def __init__(self, limit: int, other: Optional[Callable[[Any], str]]) -> None:
        self.limit, self.other = limit, other
        self.parts: list[str] = []
        self.size = 0

    def put(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def write(self, v: Any, depth: int) -> bool:
        """False when ``v`` is not plain and there is no ``other``."""
        t = type(v)  # (type, not isinstance: no user ``__class__`` property runs)
        if v is None or t is bool:
            self.put(repr(v))
        elif issubclass(t, int):
            self.put(_int_text(v, self.limit))
        elif issubclass(t, float):
            self.put(float.__repr__(v))
        elif issubclass(t, complex):
            self.put(complex.__repr__(v))
        elif issubclass(t, str):
            self.put(str.__repr__(str.__getitem__(v, slice(0, self.limit))))
        elif issubclass(t, bytes):
            self.put(bytes.__repr__(bytes.__getitem__(v, slice(0, self.limit))))
        elif t is slice:
            return self._items("slice(", (v.start, v.stop, v.step), ")", depth)
        elif t.__module__ == "torch" and t.__name__ in ("Size", "dtype", "device"):
            self.put(repr(v))  # torch's own: short (a Size has a handful of ints)
        elif t in (list, tuple, set, frozenset, dict):
            return self._container(v, t, depth)
        elif self.other is not None:
            self.put(self.other(v))
        else:
            return False
        return True

    def _container(self, v: Any, t: type, depth: int) -> bool:
        if depth >= _PLAIN_DEPTH:
            self.put("…")
            return True
        if t is dict:
            return self._items("{", v.items(), "}", depth, pairs=True)
        if t is list:
            return self._items("[", v, "]", depth)
        if t is tuple:
            return self._items("(", v, ",)" if len(v) == 1 else ")", depth)
        if not v:
            self.put(f"{t.__name__}()")
            return True
        return self._items("{" if t is set else "frozenset({", v, "}" if t is set else "})", depth)

    def _items(self, open_: str, items: Any, close: str, depth: int, pairs: bool = False) -> bool:
        self.put(open_)
        for i, item in enumerate(items):
            if i:
                self.put(", ")
            if i >= PLAIN_ITEMS or self.size > self.limit:
                self.put("…")
                break
            if pairs:
                if not self.write(item[0], depth + 1):
                    return False
                self.put(": ")
                item = item[1]
            if not self.write(item, depth + 1):
                return False
        self.put(close)
        return True


def _int_text(v: int, limit: int) -> str:
    """An int as Python writes it, or by its number of digits where writing it would cost more than ``limit``
    characters (past 4300 digits Python refuses to)."""
    bits = int.bit_length(v)
    if bits <= limit * _BITS_PER_DIGIT + 4:
        return int.__repr__(v)
    return f"<int of about {int(bits / _BITS_PER_DIGIT) + 1} digits>"


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 row', '3 rows', '1,024 parameters'."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
