"""Functions of a source file by dotted name: one walk serves ``--function`` and memory sites' names."""

import textwrap

from tensor_dap.profiling import memory_sites
from tensor_dap.profiling.source_defs import functions_of

SOURCE = textwrap.dedent('''
    class Net:
        def forward(self, x):
            def inner(y):
                return y
            return inner(x)

    try:
        import fast
    except ImportError:
        def fallback():
            return 0

    if __name__ == "__main__":
        def main():
            x = 1
            return x
        main()
''')


def test_functions_under_blocks_and_classes_are_found_by_dotted_name(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    lines = SOURCE.splitlines()
    found = {name: (first, last) for first, last, name in functions_of(str(path))}
    assert set(found) == {"Net.forward", "Net.forward.inner", "fallback", "main"}
    main_def = next(i for i, text in enumerate(lines, 1) if "def main" in text)
    assert found["main"] == (main_def, main_def + 2)  # up to its last line, not the call after it
    # a memory site's line inside main (under `if __name__ ...`) is named by main, not left unnamed
    assert memory_sites.function_at(str(path), main_def + 1) == "main"
    assert memory_sites.function_at(str(path), main_def + 3) is None  # the module's own line
    inner = next(i for i, text in enumerate(lines, 1) if "return y" in text)
    assert memory_sites.function_at(str(path), inner) == "Net.forward.inner"  # the innermost


def test_an_unreadable_file_has_no_functions(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(:\n")
    assert functions_of(str(bad)) == ()
    assert functions_of(str(tmp_path / "missing.py")) == ()
