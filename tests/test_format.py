"""The one formatter: numbers, sizes, shapes and exceptions as short text."""

from tensor_dap.format import dtype_name, first_line, fmt_count, fmt_shape, printable, short_dtype, short_error


class Broken(Exception):
    def __str__(self):
        raise RuntimeError("cannot print me")


def test_error_lines():
    assert first_line(ValueError("bad value\nsecond line")) == "bad value"
    assert first_line(KeyError()) == "KeyError"
    assert short_error(ValueError("x" * 200)) == "ValueError: " + "x" * 77 + "..."
    assert short_error(ValueError("x" * 200), limit=None) == "ValueError: " + "x" * 200
    assert short_error(RuntimeError()) == "RuntimeError"
    assert short_error(Broken()) == "Broken" and first_line(Broken()) == "Broken"


def test_shapes_dtypes_counts():
    assert fmt_shape((2, None, 3)) == "[2, ?, 3]" and fmt_shape(None) == "[?]"
    assert short_dtype("torch.float32") == "" and dtype_name("torch.float32") == "f32"
    assert short_dtype("torch.bfloat16") == "bf16" and short_dtype("torch.weird") == "weird"
    assert fmt_count(3, True) == "3" and fmt_count(None, True) == "yes" and fmt_count(None, False) == "?"


def test_printable_defuses_terminal_escapes():
    hostile = "layer\x1b]0;pwned\x07\x1b[2J\u202eevil\r\nnext\ttab"
    safe = printable(hostile)
    assert "\x1b" not in safe and "\x07" not in safe and "\u202e" not in safe and "\n" not in safe
    assert safe == "layer\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil\\r\\nnext\ttab"
    assert printable("a\nb", newlines=True) == "a\nb"
    assert printable("model.fc[/bold].weight") == "model.fc[/bold].weight"  # markup is the renderer's job (Text)
    assert printable(3) == "3"
