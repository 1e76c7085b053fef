"""JSON with comments (VS Code's launch.json): parse it keeping each value's place in the text.

VS Code's files allow ``//`` and ``/* */`` comments and trailing commas, which ``json`` refuses.
Editing such a file must keep every byte the user wrote, so this parser returns, with each
value, where it starts and ends: an edit then inserts text at a known offset and touches
nothing else. No dependency: the file format is small.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None}


class JsoncError(ValueError):
    """The text is not JSON with comments; ``offset`` is where reading stopped."""

    def __init__(self, message: str, text: str, offset: int) -> None:
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        super().__init__(f"{message} at line {line}, column {column}")
        self.offset = offset


@dataclass
class Node:
    """A value and its span ``text[start:end]``; an object's children are its values, each with its ``key``."""

    kind: str  # object, array, string, number, literal
    start: int
    end: int
    value: Any = None
    children: list[Node] = field(default_factory=list)
    key: Optional[str] = None
    key_start: Optional[int] = None  # where an object member's key begins (the member's line starts there)

    def get(self, key: str) -> Optional[Node]:
        """The value of ``key`` in an object (the last one, as JSON readers do)."""
        found = [c for c in self.children if c.key == key] if self.kind == "object" else []
        return found[-1] if found else None


def parse(text: str) -> Node:
    """The root node of ``text``; JsoncError says where the text stops being JSON with comments."""
    parser = _Parser(text)
    i = parser.skip(0)
    if i >= len(text):
        raise JsoncError("empty document", text, i)
    node = parser.value(i)
    end = parser.skip(node.end)
    if end < len(text):
        raise JsoncError("unexpected text after the value", text, end)
    return node


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, message: str, at: int) -> JsoncError:
        return JsoncError(message, self.text, at)

    def skip(self, i: int) -> int:
        """Past whitespace and comments."""
        text, n = self.text, len(self.text)
        while i < n:
            ch = text[i]
            if ch in " \t\r\n\ufeff":
                i += 1
            elif text.startswith("//", i):
                nl = text.find("\n", i)
                i = n if nl < 0 else nl + 1
            elif text.startswith("/*", i):
                close = text.find("*/", i + 2)
                if close < 0:
                    raise self.fail("unterminated /* comment", i)
                i = close + 2
            else:
                break
        return i

    def value(self, i: int) -> Node:
        text = self.text
        if i >= len(text):
            raise self.fail("unexpected end of the document", i)
        ch = text[i]
        if ch == "{":
            return self.container(i, "object", "}")
        if ch == "[":
            return self.container(i, "array", "]")
        if ch == '"':
            return self.string(i)
        m = _NUMBER.match(text, i)
        if m:
            return Node("number", i, m.end(), json.loads(m.group(0)))
        for word, literal in _LITERALS.items():
            if text.startswith(word, i):
                return Node("literal", i, i + len(word), literal)
        raise self.fail(f"unexpected character {ch!r}", i)

    def string(self, i: int) -> Node:
        text, j = self.text, i + 1
        while j < len(text):
            ch = text[j]
            if ch == "\\":
                j += 2
                continue
            if ch == '"':
                try:
                    return Node("string", i, j + 1, json.loads(text[i:j + 1]))
                except ValueError:
                    raise self.fail("invalid string", i) from None
            if ch == "\n":
                break
            j += 1
        raise self.fail("unterminated string", i)

    def container(self, i: int, kind: str, close: str) -> Node:
        node = Node(kind, i, i, {} if kind == "object" else [])
        j = self.skip(i + 1)
        while True:
            if j >= len(self.text):
                raise self.fail(f"missing {close!r}", i)
            if self.text[j] == close:
                node.end = j + 1
                return node
            key = key_start = None
            if kind == "object":
                if self.text[j] != '"':
                    raise self.fail("expected a quoted property name", j)
                key_node = self.string(j)
                key, key_start = key_node.value, j
                j = self.skip(key_node.end)
                if j >= len(self.text) or self.text[j] != ":":
                    raise self.fail("expected ':' after the property name", j)
                j = self.skip(j + 1)
            child = self.value(j)
            child.key, child.key_start = key, key_start
            node.children.append(child)
            if kind == "object":
                node.value[key] = child.value
            else:
                node.value.append(child.value)
            j = self.skip(child.end)
            if j < len(self.text) and self.text[j] == ",":
                j = self.skip(j + 1)  # a trailing comma before the closing bracket is allowed
            elif j < len(self.text) and self.text[j] != close:
                raise self.fail(f"expected ',' or {close!r}", j)
