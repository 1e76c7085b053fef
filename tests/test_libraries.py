"""The one answer to "whose code is this file": the user's, Python's, torch's, tensor_dap's or a package's."""

import os
import runpy


import torch

import tensor_dap
from tensor_dap.libraries import is_framework, is_user_file, library_of


def test_owners():
    assert library_of(torch.__file__) == "torch"
    assert library_of(tensor_dap.__file__) == "tensor_dap"
    assert library_of(runpy.__file__) == "python" and library_of("<frozen runpy>") == "python"
    assert library_of("<stdin>") == "python"
    import rich

    assert library_of(rich.__file__) == "rich" and not is_framework(rich.__file__)  # visible, not the user's
    assert is_user_file(__file__) and not is_framework(__file__)


def test_the_demo_script_plays_a_users_program():
    demo = os.path.join(os.path.dirname(tensor_dap.__file__), "demo", "train.py")
    assert is_user_file(demo) and not is_framework(demo)


def test_a_symlink_is_judged_by_its_target(tmp_path):
    link = tmp_path / "torch_init.py"
    link.symlink_to(torch.__file__)
    assert library_of(str(link)) == "torch"


def test_a_console_script_launcher_is_its_packages_code(tmp_path):
    import sys
    import sysconfig

    scripts = sysconfig.get_paths()["scripts"]
    launcher = os.path.join(scripts, "tensor-dap")
    if os.path.isfile(launcher):  # the entry point pip wrote when tensor_dap was installed
        assert library_of(launcher) == "tensor_dap" and is_framework(launcher)
    own = tmp_path / "bin" / "tool"  # the same text outside the interpreter's scripts folder: the user's
    own.parent.mkdir()
    own.write_text("import sys\nfrom mytool.cli import main\nif __name__ == '__main__':\n    sys.exit(main())\n")
    assert is_user_file(str(own))
    assert library_of(os.path.join(os.path.dirname(sys.executable), "no-such-launcher")) is None


def test_packages_outside_this_interpreters_own_site_are_still_packages(tmp_path):
    """The user site (pip install --user), Debian's dist-packages, or a folder a .pth file or PYTHONPATH adds
    hold packages too: torch installed there is still torch, and the debugger hides it."""
    for folder in ("home/u/.local/lib/python3.11/site-packages", "usr/lib/python3/dist-packages"):
        functional = tmp_path / folder / "torch" / "nn" / "functional.py"
        functional.parent.mkdir(parents=True)
        functional.write_text("")
        assert library_of(str(functional)) == "torch" and is_framework(str(functional))
        plugin = tmp_path / folder / "accelerate.py"
        plugin.write_text("")
        assert library_of(str(plugin)) == "accelerate" and not is_user_file(str(plugin))
    mine = tmp_path / "project" / "train.py"  # the user's own code beside them
    mine.parent.mkdir()
    mine.write_text("")
    assert is_user_file(str(mine))


def test_torch_built_from_a_source_checkout_is_torch(tmp_path, monkeypatch):
    """Not under any packages folder: found by where the imported torch lives. (A module object standing
    in for torch: the real one cannot be moved out of site-packages here.)"""
    import sys
    import types

    checkout = tmp_path / "pytorch" / "torch"
    (checkout / "optim").mkdir(parents=True)
    (checkout / "optim" / "optimizer.py").write_text("")
    stand_in = types.ModuleType("torch")
    stand_in.__file__ = str(checkout / "__init__.py")
    monkeypatch.setitem(sys.modules, "torch", stand_in)
    assert library_of(str(checkout / "optim" / "optimizer.py")) == "torch"
    assert is_user_file(str(tmp_path / "pytorch" / "setup.py"))


def test_a_folder_pip_installed_into_with_target_holds_packages(tmp_path, monkeypatch):
    """``pip install --target deps tqdm`` then PYTHONPATH=deps: tqdm's frames were counted as the program's own in
    the profile's tables. Its .dist-info folders (as pip writes them: top_level.txt, or only a RECORD) name what
    the folder holds; the user's own files beside them stay the user's."""
    deps = tmp_path / "deps"
    for name, files in (("tqdm", {"top_level.txt": "tqdm\n"}),
                        ("einops", {"RECORD": "einops/__init__.py,sha256=x,10\neinops-0.8.dist-info/METADATA,,\n"
                                              "../../bin/einops,,\n"})):
        (deps / name).mkdir(parents=True)
        (deps / name / "std.py").write_text("")
        info = deps / f"{name}-1.0.dist-info"
        info.mkdir()
        for file, text in files.items():
            (info / file).write_text(text)
    (deps / "helpers.py").write_text("")  # the user's own module, kept in the same folder
    monkeypatch.syspath_prepend(str(deps))
    assert library_of(str(deps / "tqdm" / "std.py")) == "tqdm"
    assert library_of(str(deps / "einops" / "std.py")) == "einops"
    assert is_user_file(str(deps / "helpers.py"))
    plain = tmp_path / "project"  # a folder on sys.path with no .dist-info: the user's
    (plain / "tqdm").mkdir(parents=True)
    (plain / "tqdm" / "std.py").write_text("")
    monkeypatch.syspath_prepend(str(plain))
    assert is_user_file(str(plain / "tqdm" / "std.py"))
