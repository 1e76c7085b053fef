"""The one formatter: numbers, sizes, shapes and exceptions as short text."""

import torch

from tensor_dap.format import (PLAIN_ITEMS, dtype_name, first_line, fmt_count, fmt_shape, plain_repr, printable,
                               short_dtype, short_error, short_path)


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


def test_long_dotted_names_keep_their_root_and_last_components():
    """Cut at the end, a GPT layer's weight and bias both read 'model.transformer.h.0.ln_1.…'."""
    weight, bias = (short_path(f"model.transformer.h.0.ln_1.{leaf}", 28) for leaf in ("weight", "bias"))
    assert (weight, bias) == ("model…h.0.ln_1.weight", "model…h.0.ln_1.bias")
    for name in ("model.transformer.h.11.attn.c_attn.weight", "self.encoder.layers[11].self_attn.out_proj.weight",
                 "a.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "x" * 40 + ".y", "batch" + "[0]" * 20):
        short = short_path(name, 28)
        assert len(short) <= 28 and short.count("…") == 1, short
        assert short.startswith(name.split(".")[0][:5])  # the root variable stays readable
    assert short_path("self.encoder.layers[11].self_attn.out_proj.weight", 28) == "self…out_proj.weight"  # whole parts
    assert short_path("model.transformer.layers.ln_f.weight", 24) == "model…layers.ln_f.weight"  # cut at a dot: kept
    assert short_path("batch[0]", 28) == "batch[0]"  # short names are left alone
    long_root = "inputs_of_the_batch_with_a_name_long_enough_to_crowd_the_table"
    assert short_path(long_root, 28) == long_root[:27] + "…"  # a root filling the width is cut at its end


class Counted:
    """An object whose repr is user code: counts how often it ran."""
    calls = 0

    def __repr__(self):
        Counted.calls += 1
        return "<counted>"


def test_plain_values_are_written_as_python_writes_them():
    for value in (None, True, -3, 2.5, 1 + 2j, "a'b\n", b"x\x00", [1, "a", (2,)], (1,), (), {"b": 1, "a": [None]},
                  {3}, frozenset({4}), slice(1, None, 2)):
        assert plain_repr(value) == repr(value)
    assert plain_repr(set()) == "set()" and plain_repr(frozenset()) == "frozenset()"
    assert plain_repr(torch.Size([2, 3])) == "torch.Size([2, 3])" and plain_repr(torch.bfloat16) == "torch.bfloat16"
    assert plain_repr({"z": 1, "a": 2}) == "{'z': 1, 'a': 2}"  # insertion order: a dict is not sorted


def test_plain_repr_costs_what_the_line_shows_whatever_the_value():
    big = "y" * 50_000_000
    assert plain_repr(big, 20) == "'" + "y" * 18 + "…"
    assert plain_repr(10 ** 5000) == "<int of about 5001 digits>"  # (repr() itself refuses past 4300 digits)
    assert plain_repr(-(10 ** 70)) == repr(-(10 ** 70))  # short enough to write
    assert plain_repr(list(range(1000))) == repr(list(range(PLAIN_ITEMS)))[:-1] + ", …]"
    assert plain_repr([[[[[1]]]]]) == "[[[…]]]"
    Counted.calls = 0
    items = [1] * PLAIN_ITEMS + [Counted()] * 1000
    assert plain_repr(items, 10_000, other=repr).endswith(", …]") and Counted.calls == 0  # past the items written
    text = plain_repr([Counted()] * 1000, 30, other=repr)
    assert text.startswith("[<counted>, <counted>") and len(text) == 30 and Counted.calls < 10  # past the limit


def test_objects_are_named_by_the_caller_unless_an_other_writer_is_given():
    assert plain_repr(Counted()) is None and plain_repr([1, Counted()]) is None and plain_repr({"k": Counted()}) is None
    assert plain_repr({"k": Counted()}, other=lambda v: "<C>") == "{'k': <C>}"
    assert plain_repr([1], other=lambda v: 1 / 0) == "[1]"
    assert plain_repr([Counted()], other=lambda v: 1 / 0) is None  # the writer failed: never raises


def test_parse_shape_reads_torchs_bracketed_dims():
    from tensor_dap.format import parse_shape

    assert parse_shape("8, 1") == (8, 1) and parse_shape("8,1") == (8, 1)
    assert parse_shape("") == () and parse_shape("12") == (12,)
