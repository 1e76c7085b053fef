"""The one formatter: numbers, sizes, shapes and exceptions as short text."""

from tensor_dap.format import (dtype_name, first_line, fmt_count, fmt_shape, printable, short_dtype, short_error,
                               short_path)


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
